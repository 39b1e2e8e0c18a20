"""Offline generation: every task of a task set, n samples each, through the scheduler, stored.

    async with SandboxPool(config) as pool:
        summary = await rollout(taskset, engine, pool, out=Path("runs/r1"), n=4,
                                agent=AgentConfig(sampling=SamplingParams(max_new_tokens=256)))

Each sample is one episode of the token-faithful agent loop in a fresh environment of the task's
domain, run by the async scheduler (priority slots, infrastructure retries, deadlines); each
finished group goes to the trajectory store at once, so a run that is stopped keeps what it
finished. `RUN/rollout.json` records what was run (task set and version, engine, sampling, n).

Not covered here: training on the trajectories (the trainer) and Ray workers (the same scheduler
with `honing.rollout.ray`'s engine and env workers).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

from honing.envs import registry
from honing.envs.base import EnvConfig
from honing.rollout.agent import AgentConfig, Gate, run_episode
from honing.rollout.engines.base import Engine
from honing.rollout.scheduler import Scheduler, SchedulerConfig
from honing.sandbox import SandboxPool
from honing.store import RolloutSummary, TrajectoryWriter, summarize
from honing.store.records import Group, Trajectory
from honing.tasks.load import AnyTask, TaskSet


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
) -> RolloutSummary:
    """Generate `n` trajectories per task into the store at `out`; the summary of what was run."""
    env_config = env or EnvConfig(max_steps=agent.max_turns)
    config = (scheduler or SchedulerConfig()).model_copy(
        update={"n": n, "episode_s": agent.deadlines.episode_s}
    )

    async def run(task: AnyTask, sample: int, gate: Gate) -> Trajectory:
        environment = registry.make_env(task.domain, pool, env_config)
        trajectory = await run_episode(task, environment, engine, agent, gate=gate, sample=sample)
        trajectory.dataset, trajectory.dataset_version = taskset.name, taskset.version
        return trajectory

    out.mkdir(parents=True, exist_ok=True)
    (out / "rollout.json").write_text(json.dumps({
        "tasks": taskset.name, "version": taskset.version, "task_count": len(taskset.tasks),
        "engine": engine_name or engine.name, "n": n, "agent": agent.model_dump(mode="json"),
        "started_at": time.time(),
    }, indent=2))  # fmt: skip
    async with TrajectoryWriter(out) as writer, Scheduler(run, config) as sched:

        async def submit_all() -> None:
            # Submitting awaits when the queue is full, so it runs beside the consumer below.
            for task in taskset.tasks:
                await sched.submit(task)
            sched.finish_submitting()

        submitter = asyncio.create_task(submit_all())
        try:
            async for group in sched.results():
                await writer.add_group(group)
                if on_group is not None:
                    on_group(group)
            await submitter
        finally:
            submitter.cancel()
            await asyncio.gather(submitter, return_exceptions=True)
    return summarize(out)
