"""The Ray backend on a real local Ray cluster (started once for this file): engine and sandbox
actors, their client-side proxies, supervision after `ray.kill`, and a rollout through the
scheduler that survives losing an engine actor and a sandbox actor mid-run."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from honing.config import SandboxConfig  # noqa: E402
from honing.envs.base import Action, ToolCall  # noqa: E402
from honing.errors import WorkerLost  # noqa: E402
from honing.rollout.agent import AgentConfig  # noqa: E402
from honing.rollout.engines.base import Prompt, SamplingParams, WeightUpdate  # noqa: E402
from honing.rollout.engines.scripted import LatencyModel  # noqa: E402
from honing.rollout.ray import (  # noqa: E402
    ActorSet,
    EngineSpec,
    RayBackend,
    RayConfig,
    RayEngine,
    RayEnvWorkers,
    WorkerSetConfig,
    connect,
)
from honing.rollout.scheduler import Scaling, SchedulerConfig  # noqa: E402
from honing.store.records import Ending, Group  # noqa: E402
from honing.tasks.builtin import examples  # noqa: E402
from honing.tasks.schema import ToolsTask  # noqa: E402

# Functions defined here run inside the actors: ship them by value (workers cannot import tests).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

ENGINE = WorkerSetConfig(count=2, num_cpus=0.5, start_timeout_s=120)
SANDBOX = WorkerSetConfig(count=2, num_cpus=0.5, resources={"sandbox": 1}, start_timeout_s=120)


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    connect(RayConfig(num_cpus=6, resources={"sandbox": 4}))
    yield
    ray.shutdown()


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


def calculator(expression: str) -> Action:
    return Action(
        tool_calls=[ToolCall(id="c", name="calculator", arguments={"expression": expression})]
    )


def answer(value: str) -> Action:
    return Action(tool_calls=[ToolCall(id="a", name="answer", arguments={"value": value})])


async def test_remote_env_runs_an_episode_and_loses_its_actor() -> None:
    task = calculator_tasks()[0]
    assert task.answer is not None
    async with RayEnvWorkers(SandboxConfig(pool_size=1), SANDBOX) as envs:
        assert envs.size == 2 and envs.workers.alive == 2
        env = envs.env()
        await env.reset(task)
        result = await env.step(calculator("1111+2222"))  # runs in the actor's sandbox
        assert "3333" in result.observation.tool_results[0].content and not env.done
        result = await env.step(answer(task.answer))
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
            await a.step(calculator("1+1"))
        with pytest.raises(WorkerLost):  # the episode stays lost
            await a.reject("nonsense")
        await a.close()
        result = await b.step(answer("-1"))  # the other episode carries on
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


class Solver:
    """The scripted policy of the rollout test, run inside the engine actors: first a calculator
    call (a real sandbox execution), then the task's answer. It reads the rendered prompt with
    the model's tokenizer (loaded once per actor) to know the task and the turn."""

    MARK = "1111+2222"

    def __init__(self, tokenizer_dir: str, answers: dict[str, str]) -> None:
        self.tokenizer_dir = tokenizer_dir
        self.answers = answers
        self._tokenizer: object | None = None

    def __call__(self, prompt: Prompt, index: int) -> str:
        from honing.rollout.models import load_tokenizer

        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_dir)
        text = self._tokenizer.decode(prompt.token_ids or [])  # type: ignore[attr-defined]
        if self.MARK not in text:
            call = {"name": "calculator", "arguments": {"expression": self.MARK}}
        else:
            [answer] = [a for question, a in self.answers.items() if question in text]
            call = {"name": "answer", "arguments": {"value": answer}}
        return f"<tool_call>{json.dumps(call)}</tool_call>"


def calculator_tasks() -> list[ToolsTask]:
    return [
        t
        for t in examples("tools").tasks
        if isinstance(t, ToolsTask)
        and t.answer is not None
        and "calculator" not in t.forbidden_tools
        and any(f["name"] == "calculator" for f in t.functions)
    ]


async def test_rollout_survives_killed_engine_and_sandbox_actors(smol_dir: Path) -> None:
    tasks = calculator_tasks()
    assert len(tasks) >= 2
    n = 3
    solver = Solver(str(smol_dir), {t.prompt: t.answer or "" for t in tasks})
    spec = EngineSpec.scripted(solver, tokenizer=smol_dir,
                               latency=LatencyModel(per_token_s=0.03))  # fmt: skip
    config = RayConfig(engine=ENGINE, env=SANDBOX)
    fixed = Scaling(min_workers=2, max_workers=2, slots_per_worker=8)
    scheduling = SchedulerConfig(n=n, retries=3, backoff_s=0.05, engine_scaling=fixed,
                                 env_scaling=fixed)  # fmt: skip
    agent = AgentConfig(sampling=SamplingParams(max_new_tokens=64), max_turns=4)

    async with RayBackend(config, spec, SandboxConfig(pool_size=1)) as backend:
        engine, envs = backend.engine.workers, backend.envs.workers
        assert backend.engine.accepts_tokens and backend.engine.tokenizer is not None

        async def kill_busiest(workers: ActorSet) -> None:
            while not any(w.load for w in workers.ready_workers()):
                await asyncio.sleep(0.01)
            victim = max(workers.ready_workers(), key=lambda w: w.load)
            ray.kill(victim.handle)

        groups: list[Group] = []
        async with backend.scheduler(agent, scheduling) as scheduler:
            killers = [asyncio.create_task(kill_busiest(engine)),
                       asyncio.create_task(kill_busiest(envs))]  # fmt: skip
            for task in tasks:
                await scheduler.submit(task)
            scheduler.finish_submitting()
            async for group in scheduler.results():
                groups.append(group)
            await asyncio.gather(*killers)

        # every task's group, exactly once, with n complete trajectories
        assert sorted(g.task_id for g in groups) == sorted(t.id for t in tasks)
        for group in groups:
            assert sorted(t.sample for t in group.trajectories) == list(range(n))
            for trajectory in group.trajectories:
                assert trajectory.ending is Ending.DONE and trajectory.success, trajectory.detail
                assert any(
                    "3333" in turn.text for turn in trajectory.turns if turn.role != "assistant"
                )
                assert trajectory.model_tokens > 0  # token-faithful: the engine's own tokens

        # the kills cost retries, recorded with their cause, on both kinds of worker
        retries = [r for g in groups for t in g.trajectories for r in t.retries]
        assert all("WorkerLost" in r.cause for r in retries)
        assert any(r.stage == "generate" for r in retries)
        assert any(r.stage in ("setup", "step", "scoring") for r in retries)

        # and both pools recovered their size
        await asyncio.wait_for(asyncio.gather(engine.wait_alive(), envs.wait_alive()), 60)
        assert engine.alive == engine.size == 2 and engine.replaced >= 1
        assert envs.alive == envs.size == 2 and envs.replaced >= 1
