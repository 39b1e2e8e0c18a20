"""The scheduler driving the real agent loop on the real math environment (sandboxed), with the
scripted engine: infrastructure failures raised by the agent loop are retried and recorded, and
the policy versions the engine stamps reach the scheduler's staleness check."""

from __future__ import annotations

import json

import pytest

from honing.envs.base import EnvConfig
from honing.envs.registry import make_env
from honing.records import Ending, Trajectory
from honing.rollout.agent import AgentConfig, Gate, run_episode
from honing.rollout.engines.base import Prompt, SamplingParams, WeightUpdate
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.scheduler import EpisodeRunner, Scheduler, SchedulerConfig
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask, load_tasks

ANSWER = json.dumps({"name": "answer", "arguments": {"value": "29842"}})
AGENT = AgentConfig(sampling=SamplingParams(max_new_tokens=64), max_turns=2)
# One pool (and one warm answer checker beside it) for the whole module.
pytestmark = pytest.mark.asyncio(loop_scope="module")


def product() -> AnyTask:
    [task] = [t for t in load_tasks("examples-math").tasks if t.id == "example-math/product"]
    return task  # What is 347 × 86? → 29842


def runner(engine: ScriptedEngine, pool: SandboxPool) -> EpisodeRunner:
    async def run(task: AnyTask, sample: int, gate: Gate) -> Trajectory:
        env = make_env("math", pool, EnvConfig(max_steps=2))
        return await run_episode(task, env, engine, AGENT, gate=gate, sample=sample)

    return run


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool


async def test_engine_failures_in_the_agent_loop_are_retried_and_recorded(
    pool: SandboxPool,
) -> None:
    def fail(prompt: Prompt, index: int) -> bool:
        return index in (0, 2)  # two generate calls fail: two episodes need a second attempt

    engine = ScriptedEngine([ANSWER], fail_on=fail)
    cfg = SchedulerConfig(n=4, engine_slots=2, env_slots=2, backoff_s=0.0)
    async with Scheduler(runner(engine, pool), cfg) as sched:
        [group] = await sched.run_all([product()])
        stats = sched.stats
    assert all(t.ending is Ending.DONE and t.success for t in group.trajectories)
    retried = [t for t in group.trajectories if t.retries]
    assert len(retried) == 2
    for t in retried:
        [retry] = t.retries
        assert retry.stage == "generate" and retry.cause.startswith("EngineError: scripted failure")
    assert stats.retries == 2 and stats.retries_by_cause == {"generate EngineError": 2}
    assert stats.episodes_started == 6 and stats.episodes_finished == 4


async def test_versions_stamped_by_the_engine_drive_the_staleness_check(
    pool: SandboxPool,
) -> None:
    engine = ScriptedEngine([ANSWER], version=0)
    trainer_version = 5  # the trainer is ahead of the engine's weights: everything is stale

    cfg = SchedulerConfig(n=2, max_staleness=2, stale_reissues=1, backoff_s=0.0)
    async with Scheduler(runner(engine, pool), cfg, version=lambda: trainer_version) as sched:
        [stale] = await sched.run_all([product()])
        await engine.update_weights(WeightUpdate(version=4))  # within 2 versions of 5
        [fresh] = await sched.run_all([product()])
        stats = sched.stats
    assert [t.ending for t in stale.trajectories] == [Ending.STALE, Ending.STALE]
    assert all(t.policy_version == 0 and len(t.retries) == 1 for t in stale.trajectories)
    assert all(t.ending is Ending.DONE and t.policy_version == 4 for t in fresh.trajectories)
    assert stats.stale_drops == 4 and stats.max_staleness_seen == 5
