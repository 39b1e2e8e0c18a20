"""The Ray backend on a real local Ray cluster (started once for this file): engine and sandbox
actors, their client-side proxies, supervision after `ray.kill`, and a rollout through the
scheduler that survives losing an engine actor and a sandbox actor mid-run."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from honing.config import SandboxConfig  # noqa: E402
from honing.domains.tools.task import ToolsTask  # noqa: E402
from honing.envs.base import Action, ToolCall  # noqa: E402
from honing.errors import EngineError, HoningError, WorkerLost  # noqa: E402
from honing.records import Ending, Group  # noqa: E402
from honing.rollout.agent import AgentConfig  # noqa: E402
from honing.rollout.elastic import Scaling  # noqa: E402
from honing.rollout.engines.base import Prompt, SamplingParams, WeightUpdate  # noqa: E402
from honing.rollout.engines.scripted import LatencyModel, ScriptedEngine  # noqa: E402
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
from honing.rollout.scheduler import SchedulerConfig  # noqa: E402
from honing.tasks.load import load_tasks  # noqa: E402

# Functions defined here run inside the actors: ship them by value (workers cannot import tests).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

ENGINE = WorkerSetConfig(count=2, num_cpus=0.5, start_timeout_s=120)
SANDBOX = WorkerSetConfig(count=2, num_cpus=0.5, resources={"sandbox": 1}, start_timeout_s=120)


@pytest.fixture(scope="module", autouse=True)
def ray_cluster() -> Iterator[None]:
    connect(RayConfig(num_cpus=6, resources={"sandbox": 4}))
    yield
    ray.shutdown()


class LightTokenizer:
    """SmolLM2's tokenizer through the `tokenizers` library alone: what the scripted engine needs
    (encode, decode, eos) without importing transformers and torch in the actor (seconds each)."""

    def __init__(self, model_dir: str) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        self.eos_token_id = self._tok.token_to_id("<|im_end|>")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=skip_special_tokens))


def token_engine(model_dir: str) -> ScriptedEngine:
    return ScriptedEngine(["The answer is \\boxed{4}."], tokenizer=LightTokenizer(model_dir))


async def test_token_engine_sends_its_tokenizer_to_the_driver(smol_dir: Path) -> None:
    spec = EngineSpec.from_factory(partial(token_engine, str(smol_dir)), "scripted")
    async with RayEngine(spec, WorkerSetConfig(count=1, num_cpus=0.5)) as engine:
        assert engine.name == "ray:scripted" and engine.accepts_tokens
        tokenizer = engine.tokenizer  # rendering happens here; only token ids travel
        assert isinstance(tokenizer, LightTokenizer)
        [gen] = await engine.generate([Prompt(token_ids=tokenizer.encode("2+2?"))],
                                      SamplingParams())  # fmt: skip
        assert gen.token_ids[-1] == tokenizer.eos_token_id
        assert "\\boxed{4}" in tokenizer.decode(gen.token_ids, skip_special_tokens=True)


def hangs(prompt: Prompt, index: int) -> bool:
    return "hang" in json.dumps(prompt.messages)


def fails(prompt: Prompt, index: int) -> bool:
    return "fail" in json.dumps(prompt.messages)


def slow_engine() -> ScriptedEngine:
    return ScriptedEngine(["The answer is \\boxed{4}."], latency=LatencyModel(per_token_s=0.2),
                          hang_on=hangs, fail_on=fails)  # fmt: skip


async def test_engine_actor_death_raises_worker_lost_and_is_replaced() -> None:
    prompt = Prompt(messages=[{"role": "user", "content": "2+2?"}])
    sampling = SamplingParams(max_new_tokens=64)
    async with RayEngine(EngineSpec.from_factory(slow_engine, "scripted"),
                         WorkerSetConfig(count=1, num_cpus=0.5)) as engine:  # fmt: skip
        assert not engine.accepts_tokens and engine.tokenizer is None
        [gen] = await engine.generate([prompt], sampling)
        assert "\\boxed{4}" in gen.text

        # the engine's own failure comes back as itself; the actor stays
        with pytest.raises(EngineError):
            await engine.generate([Prompt(messages=[{"role": "user", "content": "fail"}])],
                                  sampling)  # fmt: skip
        assert engine.workers.alive == 1 and engine.workers.replaced == 0

        # a call cancelled here (a deadline) is cancelled in the actor too
        hung = Prompt(messages=[{"role": "user", "content": "hang"}])
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(engine.generate([hung], sampling), 0.5)
        [only] = engine.workers.ready_workers()
        assert only.load == 0
        async with asyncio.timeout(30):
            while await only.handle.in_flight.remote():
                await asyncio.sleep(0.05)
        await engine.update_weights(WeightUpdate(version=3))
        assert engine.version == 3

        call = asyncio.create_task(engine.generate([prompt], sampling))
        while engine.workers.ready_workers()[0].load == 0:
            await asyncio.sleep(0.01)
        [first] = engine.workers.ready_workers()
        ray.kill(first.handle)
        with pytest.raises(WorkerLost, match="died"):
            await call

        await asyncio.wait_for(engine.workers.wait_alive(), 60)
        [second] = engine.workers.ready_workers()
        assert second is not first and engine.workers.replaced == 1
        [gen] = await engine.generate([prompt], sampling)
        assert set(gen.versions) == {3}  # the replacement was brought up to the latest weights

        # elastic: grow (returns once the new actor serves, at the latest weights), then drain
        await engine.resize(2)
        assert engine.size == 2 and engine.workers.alive == 2
        third = next(w for w in engine.workers.ready_workers() if w is not second)
        assert await third.handle.version.remote() == 3
        await engine.resize(1)
        assert engine.size == 1 and engine.workers.alive == 1
        [gen] = await engine.generate([prompt], sampling)
        assert gen.text

        # growth the cluster has no room for: the set stays as it is, and keeps serving
        engine.workers.config = WorkerSetConfig(num_cpus=0.5, resources={"sandbox": 5},
                                                start_timeout_s=1)  # fmt: skip
        await engine.resize(2)
        assert engine.size == 1 and engine.workers.alive == 1
        [gen] = await engine.generate([prompt], sampling)
        assert gen.text


async def test_unplaceable_workers_fail_with_their_resource_request() -> None:
    config = WorkerSetConfig(count=1, num_cpus=0.5, resources={"gpu-node": 1}, start_timeout_s=1)
    with pytest.raises(HoningError, match="gpu-node=1"):
        async with RayEngine(EngineSpec.scripted(["hi"]), config):
            pass


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


class Solver:
    """The scripted policy of the rollout test, run inside the engine actors (a chat engine: it
    sees the messages): first a calculator call (a real sandbox execution), then the answer."""

    MARK = "1111+2222"

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def __call__(self, prompt: Prompt, index: int) -> str:
        text = json.dumps(prompt.messages)
        if "3333" not in text:  # no calculator result yet
            return json.dumps({"name": "calculator", "arguments": {"expression": self.MARK}})
        [answer] = [a for question, a in self.answers.items() if json.dumps(question)[1:-1] in text]
        return json.dumps({"name": "answer", "arguments": {"value": answer}})


def calculator_tasks() -> list[ToolsTask]:
    return [
        t
        for t in load_tasks("examples-tools").tasks
        if isinstance(t, ToolsTask)
        and t.answer is not None
        and "calculator" not in t.forbidden_tools
        and any(f["name"] == "calculator" for f in t.functions)
    ]


async def test_rollout_survives_killed_engine_and_sandbox_actors() -> None:
    tasks = calculator_tasks()
    assert len(tasks) >= 2
    n = 3
    solver = Solver({t.prompt: t.answer or "" for t in tasks})
    spec = EngineSpec.scripted(solver, latency=LatencyModel(per_token_s=0.05))
    config = RayConfig(engine=ENGINE, env=SANDBOX)
    fixed = Scaling(min_workers=2, max_workers=2, slots_per_worker=8)
    scheduling = SchedulerConfig(n=n, retries=3, backoff_s=0.05, engine_scaling=fixed,
                                 env_scaling=fixed)  # fmt: skip
    agent = AgentConfig(sampling=SamplingParams(max_new_tokens=64), max_turns=4)

    async with RayBackend(config, spec, SandboxConfig(pool_size=1)) as backend:
        engine, envs = backend.engine.workers, backend.envs.workers

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
        ids = [t.id for g in groups for t in g.trajectories]
        assert len(set(ids)) == len(ids) == n * len(tasks)
        for group in groups:
            assert sorted(t.sample for t in group.trajectories) == list(range(n))
            for trajectory in group.trajectories:
                assert trajectory.ending is Ending.DONE and trajectory.success, trajectory.detail
                assert any(
                    "3333" in turn.text for turn in trajectory.turns if turn.role != "assistant"
                )

        # the kills cost retries, recorded with their cause, on both kinds of worker
        retries = [r for g in groups for t in g.trajectories for r in t.retries]
        assert all("WorkerLost" in r.cause for r in retries)
        assert any(r.stage == "generate" for r in retries)
        assert any(r.stage in ("setup", "step", "scoring") for r in retries)

        # and both pools recovered their size
        await asyncio.wait_for(asyncio.gather(engine.wait_alive(), envs.wait_alive()), 60)
        assert engine.alive == engine.size == 2 and engine.replaced >= 1
        assert envs.alive == envs.size == 2 and envs.replaced >= 1
