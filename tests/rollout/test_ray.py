"""The Ray backend on a real local Ray cluster (started once for this file): engine and sandbox
actors, their client-side proxies, supervision after `ray.kill`, and a rollout through the
scheduler that survives losing an engine actor and a sandbox actor mid-run."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import pytest

ray = pytest.importorskip("ray")

from honing.config import SandboxConfig  # noqa: E402
from honing.envs.base import Action  # noqa: E402
from honing.errors import WorkerLost  # noqa: E402
from honing.rollout.engines.base import Prompt, SamplingParams, WeightUpdate  # noqa: E402
from honing.rollout.engines.scripted import LatencyModel  # noqa: E402
from honing.rollout.ray import (  # noqa: E402
    EngineSpec,
    RayConfig,
    RayEngine,
    RayEnvWorkers,
    WorkerSetConfig,
    connect,
)
from honing.tasks.builtin import examples  # noqa: E402
from honing.tasks.schema import MathTask  # noqa: E402

# Functions defined here run inside the actors: ship them by value (workers cannot import tests).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

ENGINE = WorkerSetConfig(count=2, num_cpus=0.5, start_timeout_s=120)
SANDBOX = WorkerSetConfig(count=2, num_cpus=0.5, resources={"sandbox": 1}, start_timeout_s=120)


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    connect(RayConfig(num_cpus=6, resources={"sandbox": 4}))
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def math_tasks() -> list[MathTask]:
    tasks = [t for t in examples("math").tasks if isinstance(t, MathTask)]
    assert len(tasks) >= 4
    return tasks


def slow_spec(per_token_s: float = 0.05) -> EngineSpec:
    return EngineSpec.scripted(
        ["The answer is \\boxed{4}."], latency=LatencyModel(per_token_s=per_token_s)
    )


async def test_engine_actor_death_raises_worker_lost_and_is_replaced() -> None:
    sampling = SamplingParams(max_new_tokens=64)
    async with RayEngine(slow_spec(0.2), WorkerSetConfig(count=1, num_cpus=0.5)) as engine:
        assert engine.name == "ray:scripted" and not engine.accepts_tokens
        [gen] = await engine.generate([Prompt(messages=[{"role": "user", "content": "2+2?"}])],
                                      sampling)  # fmt: skip
        assert "\\boxed{4}" in gen.text
        await engine.update_weights(WeightUpdate(version=3))
        assert engine.version == 3

        call = asyncio.create_task(
            engine.generate([Prompt(messages=[{"role": "user", "content": "2+2?"}])], sampling)
        )
        while engine.workers.ready_workers()[0].load == 0:
            await asyncio.sleep(0.01)
        [first] = engine.workers.ready_workers()
        ray.kill(first.handle)
        with pytest.raises(WorkerLost, match="died"):
            await call

        await asyncio.wait_for(engine.workers.wait_alive(), 60)
        [second] = engine.workers.ready_workers()
        assert second is not first and engine.workers.replaced == 1
        [gen] = await engine.generate([Prompt(messages=[{"role": "user", "content": "?"}])],
                                      sampling)  # fmt: skip
        assert set(gen.versions) == {3}  # the replacement was brought up to the latest weights


async def test_remote_env_runs_an_episode_and_loses_its_actor(math_tasks: list[MathTask]) -> None:
    task = math_tasks[0]
    sandbox = SandboxConfig(pool_size=1)
    async with RayEnvWorkers(sandbox, SANDBOX) as envs:
        assert envs.size == 2 and envs.workers.alive == 2
        env = envs.env()
        await env.reset(task)
        result = await env.step(Action(content=f"\\boxed{{{task.answer}}}"))
        assert result.done and env.done and result.components["outcome"] == 1.0
        await env.close()
        assert all(w.load == 0 for w in envs.workers.ready_workers())

        # two episodes spread over the two actors; kill one actor mid-episode
        a, b = envs.env(), envs.env()
        await a.reset(task)
        await b.reset(task)
        assert a.worker_id != b.worker_id
        victim = next(w for w in envs.workers.ready_workers() if w.id == a.worker_id)
        ray.kill(victim.handle)
        with pytest.raises(WorkerLost):
            await a.step(Action(content="\\boxed{1}"))
        with pytest.raises(WorkerLost):  # the episode stays lost
            await a.reject("nonsense")
        await a.close()
        result = await b.step(Action(content="\\boxed{1}"))  # the other episode carries on
        assert result.done and result.components["outcome"] == 0.0
        await b.close()
        await asyncio.wait_for(envs.workers.wait_alive(), 60)
        assert envs.workers.alive == 2 and victim not in envs.workers.ready_workers()


async def test_resize_grows_and_drains() -> None:
    async with RayEngine(slow_spec(0.0), WorkerSetConfig(count=1, num_cpus=0.5)) as engine:
        await engine.resize(2)
        assert engine.size == 2 and engine.workers.alive == 2
        await engine.resize(1)
        assert engine.size == 1 and engine.workers.alive == 1
        [gen] = await engine.generate([Prompt(messages=[{"role": "user", "content": "?"}])],
                                      SamplingParams())  # fmt: skip
        assert gen.text
