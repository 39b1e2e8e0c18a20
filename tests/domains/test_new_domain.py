"""A domain declared here, outside honing, in one registration: it gets loading (files and its
generator's `synthetic-count`), the quality filter (the default check playing the environment's
reference actions), evaluation, rollout and training, with no other file touched."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from honing.config import SandboxConfig
from honing.domains import play_references
from honing.envs.base import (
    Action,
    CallOutcome,
    Environment,
    FailureReason,
    StepInfo,
    ToolCall,
    ToolResult,
)
from honing.eval.policies import make_policy
from honing.rollout.agent import AgentConfig
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.rollout.offline import rollout
from honing.sandbox import ExecRequest, SandboxPool
from honing.store import read_trajectories
from honing.tasks import domains, load_tasks, verify_references
from honing.tasks.domains import Domain
from honing.tasks.load import AnyTask
from honing.tasks.schema import TaskBase
from honing.trainer.loop import train
from honing.trainer.run_config import TrainConfig


class CountTask(TaskBase):
    """How many times a letter occurs in a word."""

    domain: Literal["count"] = "count"
    word: str
    letter: str
    answer: int


ANSWER = {
    "type": "function",
    "function": {
        "name": "answer",
        "description": "Submit the count.",
        "parameters": {
            "type": "object",
            "properties": {"value": {"type": "integer"}},
            "required": ["value"],
        },
    },
}


class CountEnv(Environment):
    """Counts in the sandbox (a real program run), then judges the submitted answer."""

    domain = "count"

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [ANSWER]

    async def _reset(self, task: AnyTask) -> None:
        assert isinstance(task, CountTask)
        program = f"print({task.word!r}.count({task.letter!r}))"
        result = await self.pool.run(ExecRequest(code=program))
        self.truth = int(result.stdout.strip())  # the sandbox's count, not the task's claim

    async def _step(self, action: Action) -> tuple[dict[str, float], list[ToolResult], StepInfo]:
        async def call(c: ToolCall) -> CallOutcome:
            if c.name != "answer":
                return CallOutcome(False, f"unknown tool {c.name!r}", FailureReason.UNKNOWN_TOOL)
            self.done = True
            right = c.arguments.get("value") == self.truth
            return CallOutcome(right, "correct" if right else "wrong",
                               None if right else FailureReason.CHECKER_REJECTED,
                               {self.OUTCOME: float(right)})  # fmt: skip

        return await self.run_calls(action.tool_calls, call)

    def reference_actions(self, task: AnyTask) -> list[Action]:
        value = json.loads(task.reference or "null")
        return [Action(tool_calls=[ToolCall(id="a", name="answer", arguments={"value": value})])]


def generate(n: int, seed: int, phrasings: str) -> list[CountTask]:
    rng = random.Random(f"count/{seed}")
    out = []
    for i in range(n):
        word = "".join(rng.choice("abc") for _ in range(6 + i % 4))
        letter = rng.choice("abc")
        count = word.count(letter)
        out.append(CountTask(id=f"count/{seed}/{i}", word=word, letter=letter, answer=count,
                             prompt=f"How many times does {letter!r} occur in {word!r}?",
                             reference=str(count)))  # fmt: skip
    return out


@pytest.fixture
def count_domain() -> Iterator[Domain]:
    check = play_references(CountEnv)
    domain = domains.register(
        Domain(
            name="count", task=CountTask, env=CountEnv, check=check, generators={"count": generate}
        )
    )
    try:
        yield domain
    finally:
        domains.unregister("count")


def rows_file(path: Path) -> Path:
    good = [t.model_dump(mode="json") for t in generate(6, 1, "train")]
    planted = CountTask(id="count/bad", prompt="How many times does 'a' occur in 'banana'?",
                        word="banana", letter="a", answer=3, reference="4")  # fmt: skip
    bad_reference = planted.model_dump(mode="json")
    unknown_field = {**good[1], "id": "count/odd", "colour": "red"}
    rows = [*good, bad_reference, unknown_field]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_domain_registered_outside_honing_loads_filters_and_evaluates(
    count_domain: Domain, tmp_path: Path
) -> None:
    taskset = load_tasks(str(rows_file(tmp_path / "count.jsonl")))
    assert all(isinstance(t, CountTask) for t in taskset.tasks)
    assert [(q.task_id, q.field) for q in taskset.quarantined] == [("count/odd", "colour")]
    assert len(load_tasks("synthetic-count").tasks) == 64  # its generator's built-in set

    async def go() -> None:
        async with SandboxPool(SandboxConfig(pool_size=2)) as pool:
            found = await verify_references(taskset.tasks, pool, taskset.origins)
            assert [q.task_id for q in found.failed] == ["count/bad"]
            assert "does not solve" in found.failed[0].reason
            assert len(found.passed) == 6 and found.unverified == []

            from honing.eval.runner import evaluate

            good = taskset.shard(0, 1)
            good.tasks = [t for t in good.tasks if t.id != "count/bad"]
            solved = await evaluate(good, make_policy("reference"), pool)
            assert solved.end_to_end.success_rate == 1.0
            assert solved.by_domain["count"].end_to_end.total == 6
            none = await evaluate(good, make_policy("noop"), pool)
            assert none.end_to_end.success_rate == 0.0

    asyncio.run(go())


QUESTION = re.compile(r"does '(\w)' occur in '(\w+)'")


def scripted(model: Path) -> ScriptedEngine:
    """Answers right for two seeds of three, so that groups differ."""
    tokenizer = load_tokenizer(model)

    def respond(prompt: Prompt, seed: int) -> str:
        letter, word = QUESTION.findall(tokenizer.decode(prompt.token_ids or []))[-1]
        value = word.count(letter) + (1 if seed % 3 == 0 else 0)
        return f'<tool_call>{{"name": "answer", "arguments": {{"value": {value}}}}}</tool_call>'

    return ScriptedEngine(respond, tokenizer=tokenizer, by_seed=True)


def test_a_domain_registered_outside_honing_rolls_out_and_trains(
    count_domain: Domain, tmp_path: Path, tiny_model_dir: Path
) -> None:
    tasks = load_tasks("synthetic-count")
    agent = AgentConfig(sampling=SamplingParams(max_new_tokens=32, seed=1), max_turns=2)

    async def play() -> None:
        async with SandboxPool(SandboxConfig(pool_size=2)) as pool:
            await rollout(tasks.shard(0, 8), scripted(tiny_model_dir), pool, out=tmp_path / "r",
                          n=2, agent=agent)  # fmt: skip

    asyncio.run(play())
    stored = read_trajectories(tmp_path / "r")
    assert stored and {t.domain for t in stored} == {"count"}
    assert any(t.success for t in stored) and not all(t.success for t in stored)

    config = TrainConfig.model_validate({
        "model": str(tiny_model_dir),
        "out": str(tmp_path / "run"),
        "seed": 3,
        "deterministic": True,
        "train": {"count": {"tasks": "synthetic-count", "count": 16, "seed": 1}},
        "heldout": {"count": {"tasks": "synthetic-count", "count": 4, "seed": 2}},
        "steps": 2,
        "groups_per_step": 2,
        "n": 2,
        "learner": {"lr": 1e-3, "micro_batch_tokens": 2048},
        "agent": {"max_turns": 2, "max_new_tokens": 32, "system_prompt": ""},
        "sandbox": {"pool_size": 2, "timeout_s": 20.0},
    })  # fmt: skip
    result = asyncio.run(train(config, engine=scripted(tiny_model_dir)))
    assert result.steps == 2
    assert set(result.after) == {"count"} and result.after["count"].total == 4
    trained = read_trajectories(tmp_path / "run")
    assert len(trained) == 2 * 2 * 2 and {t.domain for t in trained} == {"count"}
