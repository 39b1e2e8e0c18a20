"""`backend: ray` in one object: connect, start both worker sets, hand the scheduler its runner.

    async with RayBackend(RayConfig(...), EngineSpec.hf(...), SandboxConfig(...)) as backend:
        async with backend.scheduler(agent_config, SchedulerConfig(n=8)) as scheduler:
            groups = await scheduler.run_all(tasks)

The scheduler is the same one the local backend uses: it sees an Engine (`RayEngine`), an
episode runner that makes one `RemoteEnv` per attempt, and both worker sets as `ElasticWorkers`
(its `engine_scaling` / `env_scaling` grow and shrink them). Not covered: what a run does with
the groups (the trainer, the store).
"""

from __future__ import annotations

import asyncio

from honing.config import SandboxConfig
from honing.envs.base import EnvConfig
from honing.records import Trajectory
from honing.rollout.agent import AgentConfig, Gate, run_episode
from honing.rollout.ray.config import RayConfig, connect
from honing.rollout.ray.engine import EngineSpec, RayEngine
from honing.rollout.ray.env import RayEnvWorkers
from honing.rollout.scheduler import EpisodeRunner, MetricsHooks, Scheduler, SchedulerConfig
from honing.tasks.load import AnyTask


class RayBackend:
    """Engine and sandbox workers on a Ray cluster; see the module docstring."""

    def __init__(
        self,
        config: RayConfig,
        engine: EngineSpec,
        sandbox: SandboxConfig | None = None,
        *,
        env: EnvConfig | None = None,
    ) -> None:
        self.config = config
        self.engine = RayEngine(engine, config.engine)
        self.envs = RayEnvWorkers(sandbox, config.env, env=env)

    async def __aenter__(self) -> RayBackend:
        await asyncio.to_thread(connect, self.config)
        try:
            await asyncio.gather(self.engine.start(), self.envs.start())
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await asyncio.gather(self.engine.close(), self.envs.close())

    def runner(self, agent: AgentConfig) -> EpisodeRunner:
        """One episode per call: a fresh RemoteEnv (on the least loaded sandbox actor) and the
        RayEngine, under the scheduler's gate."""

        async def run(task: AnyTask, sample: int, gate: Gate) -> Trajectory:
            return await run_episode(task, self.envs.env(), self.engine, agent, gate=gate,
                                     sample=sample)  # fmt: skip

        return run

    def scheduler(
        self, agent: AgentConfig, config: SchedulerConfig, *, hooks: MetricsHooks | None = None
    ) -> Scheduler:
        """The scheduler over this backend: its runner, the engine's policy version, and both
        worker sets as elastic pools."""
        return Scheduler(
            self.runner(agent),
            config,
            hooks=hooks,
            version=lambda: self.engine.version,
            engine_workers=self.engine,
            env_workers=self.envs,
        )
