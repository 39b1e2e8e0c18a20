"""Evaluating a model: the same three tiers, with an inference engine acting through the agent loop.

    engine = make_engine("model:~/runs/x/export")     # or "openai:http://host:8000/v1"
    async with SandboxPool(config) as pool:
        report = await evaluate_engine(taskset, engine, pool, name="model:…", k=4)

Each episode is played by the rollout layer's token-faithful agent loop (`run_episode`), exactly
as in training, and every step it takes is recorded as an eval `Step`, so the report is computed by
the same pure functions as for the scripted policies. An episode whose infrastructure failed (the
engine or the sandbox) is recorded as such and counted apart, never as the model's failure; an
episode the model left unfinished (token budget, no action) counts as stopped.

Not covered: retries (an evaluation reports infrastructure failures instead of hiding them) and
storing the trajectories (`honing rollout` does that).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from honing.envs import registry
from honing.envs.base import Action, EnvConfig, Observation, StepResult
from honing.errors import ConfigError
from honing.eval.metrics import Episode, Step
from honing.eval.runner import EvalReport, check_domains, report
from honing.records import Ending, Trajectory
from honing.rollout.agent import AgentConfig, InfraFailure, run_episode
from honing.rollout.engines.base import Engine
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask, TaskSet


async def play(
    task: AnyTask,
    sample: int,
    engine: Engine,
    pool: SandboxPool,
    config: EnvConfig,
    agent: AgentConfig,
    on_trajectory: Callable[[Trajectory], None] | None = None,
) -> Episode:
    """One episode of `task` played by `engine`, every step recorded. `on_trajectory` receives
    the agent loop's trajectory (timings included; an infrastructure failure's partial one is
    flagged `Ending.INFRA_ERROR`, `failure="infra:<stage>"`, as the scheduler does)."""
    env = registry.make_env(task.domain, pool, config)
    steps: list[Step] = []

    def record(observation: Observation, action: Action, result: StepResult) -> None:
        steps.append(Step(observation, action, result))

    tags = tuple(task.tags)
    try:
        trajectory = await run_episode(task, env, engine, agent, sample=sample, on_step=record)
    except InfraFailure as exc:
        error = f"{exc.stage}: {exc.cause}"
        if on_trajectory is not None and exc.trajectory is not None:
            partial = exc.trajectory
            partial.ending, partial.failure = Ending.INFRA_ERROR, f"infra:{exc.stage}"
            partial.detail = exc.cause
            on_trajectory(partial)
        return Episode(task.id, task.domain, tags, sample, tuple(steps), error=error)
    if on_trajectory is not None:
        on_trajectory(trajectory)
    stopped = trajectory.ending in (Ending.STOPPED, Ending.CONTEXT_LIMIT, Ending.TIMEOUT)
    return Episode(task.id, task.domain, tags, sample, tuple(steps), stopped=stopped)


async def evaluate_engine(
    taskset: TaskSet,
    engine: Engine,
    pool: SandboxPool,
    *,
    name: str,
    k: int = 1,
    config: EnvConfig | None = None,
    agent: AgentConfig,
    concurrency: int = 32,
    on_episode: Callable[[Episode], None] | None = None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
) -> EvalReport:
    """`k` episodes of every task played by `engine`; the report of the three tiers.
    `on_episode` / `on_trajectory`: called as each episode ends, with its eval record / the agent
    loop's trajectory (timings, tokens; for logging, see `play`)."""
    if k < 1:
        raise ConfigError(f"k must be at least 1, not {k}")
    check_domains(taskset.tasks)
    env_config = config or EnvConfig()
    limit = asyncio.Semaphore(concurrency)
    started = time.monotonic()

    async def one(task: AnyTask, sample: int) -> Episode:
        async with limit:
            episode = await play(task, sample, engine, pool, env_config, agent, on_trajectory)
        if on_episode is not None:
            on_episode(episode)
        return episode

    jobs = [asyncio.ensure_future(one(t, s)) for t in taskset.tasks for s in range(k)]
    try:
        episodes = list(await asyncio.gather(*jobs))
    except BaseException:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise
    return report(
        episodes,
        policy=name,
        taskset=taskset,
        samples=k,
        max_steps=env_config.max_steps,
        elapsed_s=time.monotonic() - started,
    )
