"""Warm-start traces that take the risky path: `risky_share` of the tasks with a
`metadata.risky_reference` are played from it (the same tasks every run), every trace still
succeeds, and a config that asks for a risky path where there is none fails before the sandbox
starts. Also examples/risk_tools.yaml: its sets are the sizes it says, and disjoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from honing.config import load_yaml_model
from honing.domains.math.generate import generate_math_tasks
from honing.domains.tools.generate import generate_tools_tasks
from honing.domains.tools.task import ToolsTask
from honing.envs.registry import make_env
from honing.errors import ConfigError
from honing.rollout.agent import AgentConfig, run_episode
from honing.rollout.engines.base import SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask, question_key
from honing.trainer.run_config import TrainConfig, WarmStart
from honing.trainer.sources import heldout_sets, load_source
from honing.trainer.traces import TraceError, reference_traces, risky_choice, write_traces
from honing.trainer.warm import warm_start

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "risk_tools.yaml"
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool


def records(n: int, seed: int) -> list[ToolsTask]:
    return [t for t in generate_tools_tasks(n, seed) if "records" in t.tags]


def first_call(text: str) -> str:
    return str(json.loads(text.removeprefix("<tool_call>").removesuffix("</tool_call>"))["name"])


def test_risky_choice_takes_the_share_of_the_tasks_with_a_risky_path() -> None:
    tasks: list[AnyTask] = [*records(8 * 10, 0), *generate_math_tasks(6, 0)]  # 10 with one
    assert risky_choice(tasks, 0.0) == set()
    half = risky_choice(tasks, 0.5)
    assert len(half) == 5 and all(i.startswith("synth-tools/") for i in half)
    assert risky_choice(list(reversed(tasks)), 0.5) == half  # the ids decide, not the order
    assert len(risky_choice(tasks, 0.25)) == 3  # 2.5, rounded half up
    assert len(risky_choice(tasks, 0.24)) == 2
    assert risky_choice(tasks, 0.25) <= half <= risky_choice(tasks, 0.75)  # a larger share adds
    assert risky_choice(tasks, 1.0) == {t.id for t in tasks[:10]}
    other = risky_choice(records(8 * 10, 1), 0.5)  # other ids, another draw
    assert len(other) == 5 and not other & half
    with pytest.raises(ConfigError, match=r"risky_share is 0.5, but none of the 6 trace tasks"):
        risky_choice(generate_math_tasks(6, 0), 0.5)
    assert risky_choice(generate_math_tasks(6, 0), 0.0) == set()
    with pytest.raises(ConfigError, match="within"):
        risky_choice(tasks, 1.5)


@MODULE_LOOP
async def test_risky_traces_pop_the_record_and_still_succeed(
    pool: SandboxPool, tmp_path: Path
) -> None:
    tasks: list[AnyTask] = [*records(8 * 8, 2), *generate_math_tasks(2, 0)]
    traces = await write_traces(tasks, tmp_path / "traces.jsonl", pool, risky_share=0.5,
                                restate=False)  # fmt: skip
    assert [t.task_id for t in traces] == [t.id for t in tasks]
    assert all(t.outcome == 1.0 for t in traces)
    chosen = risky_choice(tasks, 0.5)
    assert {t.task_id for t in traces if t.risky} == chosen and len(chosen) == 4
    for trace in traces[:8]:
        assert first_call(trace.actions[0]) == ("pop_record" if trace.risky else "lookup")
        assert first_call(trace.actions[-1]) == "answer"
    assert [first_call(t.actions[0]) for t in traces[8:]] == ["calculator"] * 2  # as before
    rows = [json.loads(line) for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    popped = [r["id"] for r in rows if '"name": "pop_record"' in r["messages"][1]["content"]]
    assert set(popped) == chosen  # what SFT reads
    again = await reference_traces(tasks, pool, risky_share=0.5, restate=False)
    assert [t.actions for t in again] == [t.actions for t in traces]  # the same every run


@MODULE_LOOP
async def test_a_risky_reference_that_fails_is_an_error_naming_it(pool: SandboxPool) -> None:
    task = records(8, 4)[0]
    wrong = json.dumps([{"name": "pop_record", "arguments": {"key": "nope"}},
                        {"name": "answer", "arguments": {"value": "0"}}])  # fmt: skip
    broken = task.model_copy(update={"metadata": {**task.metadata, "risky_reference": wrong}})
    assert (await reference_traces([broken], pool))[0].outcome == 1.0  # the safe path is fine
    with pytest.raises(ConfigError, match="trace tasks"):
        await reference_traces([broken.model_copy(update={"metadata": {}})], pool, risky_share=1)
    with pytest.raises(TraceError, match=rf"{task.id}: outcome 0 \(the risky reference"):
        await reference_traces([broken], pool, risky_share=1.0)


def warm_config(tmp_path: Path, **warm: Any) -> TrainConfig:
    return TrainConfig.model_validate(
        {
            "out": str(tmp_path / "run"),
            "train": {"m": {"tasks": "synthetic-math", "count": 4}},
            "steps": 1,
            "warm_start": warm,
        }
    )


def test_risky_share_is_checked_in_the_config(tmp_path: Path) -> None:
    traces = {"tasks": "synthetic-tools", "count": 16, "tags": ["records"]}
    assert warm_config(tmp_path, traces=traces).warm_start == WarmStart(traces=traces)
    assert warm_config(tmp_path, traces=traces, risky_share=0.5).warm_start is not None
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        warm_config(tmp_path, traces=traces, risky_share=1.5)
    with pytest.raises(ValidationError, match=r"risky_share \(0.5\) applies to traces only"):
        warm_config(tmp_path, data=str(tmp_path / "chat.jsonl"), risky_share=0.5)


async def test_a_warm_start_without_risky_paths_fails_before_playing(tmp_path: Path) -> None:
    config = warm_config(
        tmp_path, traces={"tasks": "synthetic-math", "count": 8, "seed": 3}, risky_share=0.5
    )
    with pytest.raises(ConfigError, match=r"warm_start.traces \(synthetic-math/3\): risky_share"):
        await warm_start(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing played, nothing written


def test_the_recipe_sets_are_the_sizes_it_says_and_disjoint() -> None:
    config = load_yaml_model(RECIPE, TrainConfig, [])
    assert config.risk.mode == "off"
    warm = config.warm_start
    assert warm is not None and warm.traces is not None and warm.risky_share == 0.75
    train, traces = load_source("records", config.train["records"]), load_source("w", warm.traces)
    heldout = heldout_sets(config)["records"]  # without the tasks training or traces ask
    assert (len(train.tasks), len(traces.tasks), len(heldout.tasks)) == (256, 32, 128)
    assert all("records" in t.tags for s in (train, traces, heldout) for t in s.tasks)
    asked = {question_key(t) for s in (train, traces) for t in s.tasks}
    assert not asked & {question_key(t) for t in heldout.tasks}
    assert len(risky_choice(traces.tasks, warm.risky_share)) == 24
    penalty = load_yaml_model(RECIPE, TrainConfig, ["risk.mode=penalty", "risk.weight=1"])
    assert (penalty.risk.mode, penalty.risk.weight) == ("penalty", 1.0)


@MODULE_LOOP
async def test_the_agent_loop_writing_a_risky_trace_pays_its_risk_cost(
    pool: SandboxPool, tiny_model_dir: Path
) -> None:
    """A policy that learned a risky trace plays it as the trace shows: the same tokens, the
    same success, and one irreversible_tool event (cost 0.5) in its trajectory."""
    tasks = records(8 * 2, 6)
    traces = await reference_traces(tasks, pool, risky_share=0.5)
    tok = load_tokenizer(tiny_model_dir)
    config = AgentConfig(sampling=SamplingParams(max_new_tokens=256), max_total_tokens=4096)
    costs = []
    for task, trace in zip(tasks, traces, strict=True):
        engine = ScriptedEngine(trace.actions, tokenizer=tok)
        traj = await run_episode(task, make_env(task.domain, pool), engine, config)
        assert traj.success and traj.components["outcome"] == 1.0, (task.id, traj.detail)
        costs.append((trace.risky, traj.risk))
    assert sorted(costs) == [(False, 0.0), (True, 0.5)]
