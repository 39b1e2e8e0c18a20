"""The engine player: a model plays each episode through the rollout agent loop.

    engine = make_engine("model:~/runs/x/export")     # or "openai:http://host:8000/v1"
    async with SandboxPool(config) as pool:
        report = await evaluate(taskset, EnginePlayer(engine, agent, name="model:…"), pool, k=4)

Each episode is played by the rollout layer's token-faithful agent loop (`run_episode`), exactly
as in training, and every step it takes is recorded as an eval `Step`, so the report is computed by
the same pure functions as for the scripted policies. An episode whose infrastructure failed (the
engine or the sandbox) is recorded as such and counted apart, never as the model's failure; an
episode the model left unfinished (token budget, no action) counts as stopped.
Not covered: retries (an evaluation reports infrastructure failures instead of hiding them) and
storing the trajectories (`honing rollout` does that).
"""

from __future__ import annotations

from collections.abc import Callable

from honing.envs import registry
from honing.envs.base import Action, EnvConfig, Observation, StepResult
from honing.eval.metrics import Episode, Step
from honing.records import Ending, Trajectory
from honing.rollout.agent import AgentConfig, InfraFailure, run_episode
from honing.rollout.engines.base import Engine
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask


class EnginePlayer:
    """`engine` acting through the agent loop with `agent`. `on_trajectory` receives each
    episode's agent-loop trajectory (timings and tokens included; an infrastructure failure's
    partial one flagged `Ending.INFRA_ERROR`, `failure="infra:<stage>"`, as the scheduler does)."""

    CONCURRENCY = 32  # episodes at once by default: the engine decodes them together

    def __init__(
        self,
        engine: Engine,
        agent: AgentConfig,
        *,
        name: str,
        on_trajectory: Callable[[Trajectory], None] | None = None,
    ) -> None:
        self.engine, self.agent, self.name = engine, agent, name
        self.on_trajectory = on_trajectory

    def default_concurrency(self, pool: SandboxPool) -> int:
        return self.CONCURRENCY

    async def play(
        self, task: AnyTask, sample: int, pool: SandboxPool, config: EnvConfig
    ) -> Episode:
        """One episode of `task` played by the engine, every step recorded."""
        env = registry.make_env(task.domain, pool, config)
        steps: list[Step] = []

        def record(observation: Observation, action: Action, result: StepResult) -> None:
            steps.append(Step(observation, action, result))

        tags, on_trajectory = tuple(task.tags), self.on_trajectory
        try:
            trajectory = await run_episode(
                task, env, self.engine, self.agent, sample=sample, on_step=record
            )
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
