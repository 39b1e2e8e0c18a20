"""A model through the one evaluator: `EnginePlayer` (a scripted engine through the agent loop)
on real math tasks in the sandbox: successes, trajectories heard, infrastructure failures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from honing.eval import PolicyPlayer, ReferencePolicy, evaluate
from honing.eval.model import EnginePlayer
from honing.records import Ending, Trajectory
from honing.rollout.agent import AgentConfig
from honing.rollout.engines.base import SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.sandbox import SandboxPool
from honing.tasks import TaskSet
from honing.tasks.load import load_tasks

AGENT = AgentConfig(sampling=SamplingParams(max_new_tokens=128), max_turns=3)


def call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture
def product() -> TaskSet:
    [task] = [t for t in load_tasks("examples-math").tasks if t.id == "example-math/product"]
    return TaskSet("product", [task], total=1)  # What is 347 × 86? → 29842


async def test_an_engine_plays_every_episode(
    tiny_model_dir: Path, pool: SandboxPool, product: TaskSet
) -> None:
    engine = ScriptedEngine(
        [call("answer", value="29842")], tokenizer=load_tokenizer(tiny_model_dir)
    )
    heard: list[Trajectory] = []
    player = EnginePlayer(engine, AGENT, name="scripted:answer", on_trajectory=heard.append)
    episodes: list[Any] = []
    report = await evaluate(product, player, pool, k=2, on_episode=episodes.append)
    e2e = report.end_to_end
    assert (e2e.passed, e2e.total, e2e.infra_failed) == (2, 2, 0)
    assert report.policy == "scripted:answer" and report.samples == 2
    assert sorted(e.sample for e in episodes) == [0, 1] and all(len(e.steps) == 1 for e in episodes)
    assert len(heard) == 2 and all(t.success for t in heard)


async def test_an_engine_failure_is_counted_apart_and_its_partial_trajectory_heard(
    tiny_model_dir: Path, pool: SandboxPool, product: TaskSet
) -> None:
    engine = ScriptedEngine([call("calculator", expression="347*86")],
                            tokenizer=load_tokenizer(tiny_model_dir),
                            fail_on=lambda _p, i: i == 1)  # fmt: skip
    heard: list[Trajectory] = []
    player = EnginePlayer(engine, AGENT, name="flaky", on_trajectory=heard.append)
    report = await evaluate(product, player, pool)
    e2e = report.end_to_end
    assert (e2e.passed, e2e.total, e2e.infra_failed) == (0, 0, 1)
    assert report.single_step.steps == 1  # the step before the failure is recorded
    [partial] = heard
    assert partial.ending is Ending.INFRA_ERROR and partial.failure == "infra:generate"


async def test_default_concurrency_is_the_players(tiny_model_dir: Path, pool: SandboxPool) -> None:
    engine = ScriptedEngine(["x"], tokenizer=load_tokenizer(tiny_model_dir))
    assert EnginePlayer(engine, AGENT, name="m").default_concurrency(pool) == 32
    scripted = PolicyPlayer(ReferencePolicy())
    assert scripted.default_concurrency(pool) == 2 * pool.config.size
    assert scripted.name == "reference"
