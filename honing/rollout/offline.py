"""Offline generation: every task of a task set, n samples each, through the scheduler, stored.

    async with SandboxPool(config) as pool:
        written = await rollout(taskset, engine, pool, out=Path("runs/r1"), n=4,
                                agent=AgentConfig(sampling=SamplingParams(max_new_tokens=256)))

Each sample is one episode of the token-faithful agent loop in a fresh environment of the task's
domain, run by the async scheduler (priority slots, infrastructure retries, deadlines); each
finished group goes to the trajectory store at once, so a run that is stopped keeps what it
finished. `RUN/rollout.json` records what was run (task set and version, engine, sampling, n).

`rollout_ray` is the same with `backend: ray` (engine and sandbox workers as Ray actors,
`honing.rollout.ray`). Not covered here: training on the trajectories (the trainer).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from honing.config import SandboxConfig
from honing.envs import registry
from honing.envs.base import EnvConfig
from honing.records import Group, Trajectory
from honing.rollout.agent import AgentConfig, Gate, run_episode
from honing.rollout.engines import Dtype
from honing.rollout.engines.base import Engine
from honing.rollout.scheduler import Scheduler, SchedulerConfig
from honing.sandbox import SandboxPool
from honing.store import TrajectoryWriter
from honing.tasks.load import AnyTask, TaskSet

if TYPE_CHECKING:
    from honing.rollout.ray import RayConfig


async def rollout(
    taskset: TaskSet,
    engine: Engine,
    pool: SandboxPool,
    *,
    out: Path,
    n: int,
    agent: AgentConfig,
    env: EnvConfig | None = None,
    scheduler: SchedulerConfig | None = None,
    engine_name: str = "",
    on_group: Callable[[Group], None] | None = None,
) -> int:
    """Generate `n` trajectories per task into the store at `out` (engine and sandbox in this
    process); the number of trajectories in the store. `honing.eval.summary.summarize(out)` says
    how they did."""
    env_config = env or EnvConfig(max_steps=agent.max_turns)

    async def run(task: AnyTask, sample: int, gate: Gate) -> Trajectory:
        environment = registry.make_env(task.domain, pool, env_config)
        return await run_episode(task, environment, engine, agent, gate=gate, sample=sample)

    sched = Scheduler(run, _scheduler_config(scheduler, n, agent))
    return await _store(taskset, sched, out, n, agent, engine_name or engine.name, on_group)


async def rollout_ray(
    taskset: TaskSet,
    engine: str,
    sandbox: SandboxConfig,
    ray: RayConfig,
    *,
    out: Path,
    n: int,
    agent: AgentConfig,
    env: EnvConfig | None = None,
    scheduler: SchedulerConfig | None = None,
    dtype: Dtype = "auto",
    max_batch: int = 32,
    on_group: Callable[[Group], None] | None = None,
) -> int:
    """The same on Ray (`backend: ray`): the engine `make_engine(engine)` builds runs in engine
    actors, environments and their sandboxes in sandbox actors; both worker sets are the
    scheduler's elastic pools."""
    from honing.rollout.ray import EngineSpec, RayBackend

    spec = EngineSpec.named(engine, dtype=dtype, max_batch=max_batch)
    env_config = env or EnvConfig(max_steps=agent.max_turns)
    async with RayBackend(ray, spec, sandbox, env=env_config) as backend:
        sched = backend.scheduler(agent, _scheduler_config(scheduler, n, agent))
        return await _store(taskset, sched, out, n, agent, engine, on_group)


def _scheduler_config(
    config: SchedulerConfig | None, n: int, agent: AgentConfig
) -> SchedulerConfig:
    return (config or SchedulerConfig()).model_copy(
        update={"n": n, "episode_s": agent.deadlines.episode_s}
    )


async def _store(
    taskset: TaskSet,
    sched: Scheduler,
    out: Path,
    n: int,
    agent: AgentConfig,
    engine_name: str,
    on_group: Callable[[Group], None] | None,
) -> int:
    """Submit every task to `sched` and write each finished group to the store at `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "rollout.json").write_text(json.dumps({
        "tasks": taskset.name, "version": taskset.version, "task_count": len(taskset.tasks),
        "engine": engine_name, "n": n, "agent": agent.model_dump(mode="json"),
        "started_at": time.time(),
    }, indent=2))  # fmt: skip
    async with TrajectoryWriter(out) as writer, sched:

        async def submit_all() -> None:
            # Submitting awaits when the queue is full, so it runs beside the consumer below.
            for task in taskset.tasks:
                await sched.submit(task)
            sched.finish_submitting()

        submitter = asyncio.create_task(submit_all())
        try:
            async for group in sched.results():
                for trajectory in group.trajectories:
                    trajectory.dataset, trajectory.dataset_version = taskset.name, taskset.version
                await writer.add_group(group)
                if on_group is not None:
                    on_group(group)
            await submitter
        finally:
            submitter.cancel()
            await asyncio.gather(submitter, return_exceptions=True)
    return writer.offset
