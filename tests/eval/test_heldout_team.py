"""Held-out evaluation during `honing train` with a `team:`: the held-out sets are played by the
team (what the run trains), a single agent's otherwise; the team's figures reach the sinks and
every role's episodes the event log. Real math tasks in the sandbox, a scripted engine."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from team_script import call

from honing.observe.events import EventLog, read_events, use
from honing.rollout.engines.base import Prompt
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.sandbox import SandboxPool
from honing.trainer.heldout import Forgetting, HeldOut
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import EvalPoint, RunDir

SUM = re.compile(r"What is (\d+) \+ (\d+)\?")
TEAM = {"roles": [{"kind": "executor"}, {"kind": "validator"}], "max_rounds": 1}


@dataclass
class State:
    step: int = 0
    evals: list[EvalPoint] = field(default_factory=list)
    forgetting: list[Forgetting] = field(default_factory=list)


class Sink:
    def __init__(self) -> None:
        self.scalars: dict[str, float] = {}

    def log(
        self, step: int, scalars: Mapping[str, float], histograms: Mapping[str, Sequence[float]]
    ) -> None:
        self.scalars.update(scalars)

    def close(self) -> None:
        pass


def engine(model: Path) -> ScriptedEngine:
    """The executor answers every sum right; the validator accepts the sums that start with 5
    and rejects the others (wrongly: they are right too)."""
    tokenizer = load_tokenizer(model)

    def respond(prompt: Prompt, _: int) -> str:
        text = tokenizer.decode(prompt.token_ids or [])
        a, b = SUM.findall(text)[-1]
        if "You are the validator" in text:
            return "ACCEPT" if a == "5" else "REJECT: check it again"
        return call("answer", value=str(int(a) + int(b)))

    return ScriptedEngine(respond, tokenizer=tokenizer)


@pytest.fixture
def run_config(
    tmp_path: Path,
    tiny_model_dir: Path,
    math_tasks: Callable[[Path, int], Path],
    tiny_run_config: Callable[..., dict[str, Any]],
) -> Callable[..., TrainConfig]:
    """Trains on the first 4 sums, holds out the 5th and 6th (5 + 10, 6 + 12)."""
    tasks = math_tasks(tmp_path, 6)

    def make(**settings: Any) -> TrainConfig:
        agent = {"max_turns": 2, "max_new_tokens": 64}
        out = str(tmp_path / "run")
        raw = tiny_run_config("heldout", tiny_model_dir, tasks, out=out, agent=agent, **settings)
        return TrainConfig.model_validate(raw)

    return make


async def evaluate(config: TrainConfig, pool: SandboxPool, model: Path) -> tuple[EvalPoint, Sink]:
    run = RunDir(config.out)
    run.path.mkdir(parents=True, exist_ok=True)
    sink = Sink()
    with EventLog(run.path / "events.jsonl") as log, use(log):
        heldout = HeldOut(config, run, pool, sinks=[sink])
        [point] = await heldout.evaluate(engine(model), "before", State())
    return point, sink


async def test_a_teams_heldout_sets_are_played_by_the_team(
    pool: SandboxPool, tiny_model_dir: Path, run_config: Callable[..., TrainConfig]
) -> None:
    config = run_config(team=TEAM)
    point, sink = await evaluate(config, pool, tiny_model_dir)
    # 5 + 10 accepted; 6 + 12 rejected once (max_rounds 1): the team did not submit it.
    assert (point.passed, point.total, point.infra_failed) == (1, 2, 0)
    assert point.outcomes == {"m5#0": True, "m6#0": False}
    s = sink.scalars
    assert s["eval/m/success"] == 1 / 2
    assert s["eval/m/team/precision"] == 1 / 1  # its one accept was right
    assert s["eval/m/team/recall"] == 1 / 2  # of two right answers, it accepted one
    assert s["eval/m/team/verdict_accuracy"] == 1 / 2
    assert s["eval/m/team/reviews"] == 2.0
    episodes = [e for e in read_events(config.out / "events.jsonl") if e.kind == "episode"]
    assert Counter(e.data["role"] for e in episodes) == {"executor": 2, "validator": 2}


async def test_without_a_team_a_single_agent_plays_them(
    pool: SandboxPool, tiny_model_dir: Path, run_config: Callable[..., TrainConfig]
) -> None:
    config = run_config()
    point, sink = await evaluate(config, pool, tiny_model_dir)
    assert (point.passed, point.total) == (2, 2)  # nobody rejects a right answer
    assert not any("/team/" in name for name in sink.scalars)
    episodes = [e for e in read_events(config.out / "events.jsonl") if e.kind == "episode"]
    assert [e.data["role"] for e in episodes] == ["", ""]
