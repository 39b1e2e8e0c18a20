"""Risk in the closed loop: a planted risky action is detected, costed apart from the reward,
stored, logged and reported, and priced in training (penalty, constrained with its multiplier);
exploration moves each task's temperature and the learner scores each episode at its own.

The `dare` domain is declared here: every task can be solved two ways, `work` (safe) or
`shortcut` (the same outcome, with a high-severity risk event the environment detects).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from honing.domains import play_references
from honing.envs.base import (
    Action,
    CallOutcome,
    Environment,
    FailureReason,
    StepOutput,
    ToolCall,
    tool_schema,
)
from honing.records import Trajectory
from honing.risk import RiskKind, Severity, event, register_kind
from honing.rollout.engines.base import Prompt
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.store import read_trajectories
from honing.tasks import domains
from honing.tasks.domains import Domain
from honing.tasks.load import AnyTask
from honing.tasks.schema import TaskBase
from honing.trainer.checkpoint import latest_checkpoint
from honing.trainer.loop import train
from honing.trainer.run_config import TrainConfig

register_kind(RiskKind("dare_shortcut", Severity.HIGH, "dare", "took the shortcut"))


class DareTask(TaskBase):
    domain: Literal["dare"] = "dare"
    goal: int


class DareEnv(Environment):
    domain = "dare"

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [tool_schema(name, f"{name} to the goal", {"goal": {"type": "integer"}}, ["goal"])
                for name in ("work", "shortcut")]  # fmt: skip

    async def _reset(self, task: AnyTask) -> None:
        assert isinstance(task, DareTask)

    async def _step(self, action: Action) -> StepOutput:
        assert isinstance(self.task, DareTask)
        goal = self.task.goal

        async def call(c: ToolCall) -> CallOutcome:
            if c.name not in ("work", "shortcut"):
                return CallOutcome(False, f"unknown tool {c.name!r}", FailureReason.UNKNOWN_TOOL)
            self.done = True
            risks = [event("dare_shortcut", f"goal {goal}")] if c.name == "shortcut" else []
            right = c.arguments.get("goal") == goal
            return CallOutcome(right, "reached" if right else "missed",
                               None if right else FailureReason.CHECKER_REJECTED,
                               {self.OUTCOME: float(right)}, risks=risks)  # fmt: skip

        return await self.run_calls(action.tool_calls, call)

    def reference_actions(self, task: AnyTask) -> list[Action]:
        assert isinstance(task, DareTask)
        work = ToolCall(id="w", name="work", arguments={"goal": task.goal})
        return [Action(tool_calls=[work])]


def generate(n: int, seed: int, phrasings: str) -> list[DareTask]:
    goals = [seed * 100 + i for i in range(n)]
    return [DareTask(id=f"dare/{seed}/{i}", goal=g, prompt=f"Reach goal {g}.", reference="work")
            for i, g in enumerate(goals)]  # fmt: skip


@pytest.fixture
def dare() -> Iterator[Domain]:
    domain = domains.register(Domain(name="dare", task=DareTask, env=DareEnv,
                                     check=play_references(DareEnv),
                                     generators={"dare": generate}))  # fmt: skip
    try:
        yield domain
    finally:
        domains.unregister("dare")


GOAL = re.compile(r"Reach goal (\d+)\.")


def engine(model: Path, *, fail_even: bool = False) -> ScriptedEngine:
    """Even seeds take the shortcut, odd ones work; both reach the goal (`fail_even`: not when
    the goal is even)."""
    tokenizer = load_tokenizer(model)

    def respond(prompt: Prompt, seed: int) -> str:
        goal = int(GOAL.findall(tokenizer.decode(prompt.token_ids or []))[-1])
        name = "shortcut" if seed % 2 == 0 else "work"
        if fail_even and goal % 2 == 0:
            goal += 1
        return f'<tool_call>{{"name": "{name}", "arguments": {{"goal": {goal}}}}}</tool_call>'

    return ScriptedEngine(respond, tokenizer=tokenizer, by_seed=True)


def config(tmp_path: Path, model: Path, name: str, **extra: Any) -> TrainConfig:
    raw: dict[str, Any] = {
        "model": str(model),
        "out": str(tmp_path / name),
        "seed": 3,
        "train": {"dare": {"tasks": "synthetic-dare", "count": 8, "seed": 1}},
        "heldout": {},
        "steps": 2,
        "groups_per_step": 2,
        "n": 4,
        "learner": {"lr": 1e-3, "micro_batch_tokens": 2048},
        "agent": {"max_turns": 1, "max_new_tokens": 32, "system_prompt": ""},
        "eval": {"before": False},
        "sandbox": {"pool_size": 1, "timeout_s": 20.0},
    }
    raw.update(extra)
    return TrainConfig.model_validate(raw)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_planted_risky_action_is_detected_costed_and_stored_apart_from_the_reward(
    dare: Domain, tmp_path: Path, tiny_model_dir: Path
) -> None:
    cfg = config(tmp_path, tiny_model_dir, "off")
    asyncio.run(train(cfg, engine=engine(tiny_model_dir)))
    stored = read_trajectories(tmp_path / "off")
    assert len(stored) == 2 * 2 * 4 and all(t.success for t in stored)
    risky = [t for t in stored if t.risk > 0]
    assert 0 < len(risky) < len(stored)
    for t in stored:
        took = json.dumps([turn.tool_calls for turn in t.turns])
        assert (t.risk > 0) == ("shortcut" in took)
        assert t.reward == 1.0  # the cost never enters the environment's reward
    [step] = [turn for turn in risky[0].turns if turn.role == "tool"]
    assert step.risk == 1.0
    [seen] = step.risks
    assert (seen.name, seen.severity, seen.source) == ("dare_shortcut", Severity.HIGH, "dare")
    assert seen.detail.startswith("goal ")

    updates = lines(tmp_path / "off" / "metrics.jsonl")
    rate = len(risky) / len(stored)
    for u in updates:
        assert u["risk"]["weight"] == 0.0 and "multiplier" not in u["risk"]
        assert 0 < u["risk"]["rate"] < 1
    assert sum(u["risk"]["rate"] for u in updates) / 2 == pytest.approx(rate)
    # off: every group's outcomes are equal, so no group can teach anything
    assert all(u["learner"]["dropped_groups"] == 2 for u in updates)
    episodes = [e for e in lines(tmp_path / "off" / "events.jsonl") if e["kind"] == "episode"]
    assert sum(e["risk"] > 0 for e in episodes) == len(risky)
    assert {r["name"] for e in episodes for r in e["risks"]} == {"dare_shortcut"}


def test_a_penalty_turns_the_risk_into_a_learning_signal(
    dare: Domain, tmp_path: Path, tiny_model_dir: Path
) -> None:
    cfg = config(tmp_path, tiny_model_dir, "penalty", risk={"mode": "penalty", "weight": 0.5},
                 steps=1)  # fmt: skip
    asyncio.run(train(cfg, engine=engine(tiny_model_dir)))
    updates = lines(tmp_path / "penalty" / "metrics.jsonl")
    for u in updates:
        assert u["risk"]["weight"] == 0.5
        # groups that mix both paths now differ in reward: they are kept and trained on
        assert u["learner"]["dropped_groups"] < 2 and u["learner"]["stepped"]
        assert u["learner"]["advantage_abs_mean"] > 0


def test_the_constrained_mode_moves_its_multiplier_by_the_cost_over_budget(
    dare: Domain, tmp_path: Path, tiny_model_dir: Path
) -> None:
    risk = {"mode": "constrained", "weight": 0.2, "budget": 0.1, "multiplier_lr": 2.0}
    cfg = config(tmp_path, tiny_model_dir, "constrained", risk=risk, checkpoint={"every": 1})
    asyncio.run(train(cfg, engine=engine(tiny_model_dir)))
    updates = lines(tmp_path / "constrained" / "metrics.jsonl")
    multiplier = 0.2
    for u in updates:  # each update trains at the multiplier, then takes its dual step
        assert u["risk"]["weight"] == pytest.approx(multiplier)
        multiplier = min(max(multiplier + 2.0 * (u["risk"]["cost"] - 0.1), 0.0), 5.0)
        assert u["risk"]["multiplier"] == pytest.approx(multiplier)
    assert multiplier > 0.2  # half the episodes are risky: far over a 10% budget
    checkpoint = latest_checkpoint(tmp_path / "constrained")
    assert checkpoint is not None
    saved = json.loads((checkpoint / "state.json").read_text())
    assert saved["risk_multiplier"] == pytest.approx(multiplier)  # a resumed run continues it


def well_formed(trajectory: Trajectory) -> bool:
    return not any(turn.failure in ("malformed_action", "unknown_tool")
                   for turn in trajectory.turns if turn.role == "tool")  # fmt: skip


def test_exploration_heats_unsolved_tasks_and_cools_risky_ones(
    dare: Domain, tmp_path: Path, tiny_model_dir: Path
) -> None:
    explore = {"enabled": True, "boost": 0.5, "caution": 0.5, "rarely": 0.25}
    risk = {"mode": "penalty", "explore": explore}
    cfg = config(tmp_path, tiny_model_dir, "explore", risk=risk, groups_per_step=4,
                 train={"dare": {"tasks": "synthetic-dare", "count": 4, "seed": 1}})  # fmt: skip
    asyncio.run(train(cfg, engine=engine(tiny_model_dir, fail_even=True)))
    stored = read_trajectories(tmp_path / "explore")
    assert len(stored) == 2 * 4 * 4
    updates_played = [stored[k * 16 : (k + 1) * 16] for k in range(2)]  # the store's order
    assert {t.temperature for t in updates_played[0]} == {1.0}  # no history yet
    heated = cooled = 0
    for k in (1,):
        for t in updates_played[k]:
            past = [p for u in updates_played[:k] for p in u if p.task_id == t.task_id]
            solved = sum(p.success for p in past) / len(past)
            risky = sum(p.risk > 0 for p in past) / len(past)
            formed = sum(well_formed(p) for p in past) / len(past)
            rare = solved < 0.25 and formed >= 0.5  # min_well_formed's default
            hot = 1.0 + 0.5 * (0.25 - solved) / 0.25 if rare else 1.0
            assert t.temperature == pytest.approx(hot * (1 - 0.5 * risky))
            heated += solved == 0 and t.temperature > 1.0
            cooled += solved == 1 and risky > 0 and t.temperature < 1.0
    assert heated and cooled  # never-solved tasks ran hotter, risky solved ones cooler
    updates = lines(tmp_path / "explore" / "metrics.jsonl")
    assert all(u["learner"]["stepped"] for u in updates)  # trained on rows of both temperatures
