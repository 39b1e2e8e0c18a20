"""`backend: ray`: engine and sandbox workers as supervised Ray actors, driven by the scheduler.

    connect(RayConfig(...))                          # join or start a Ray cluster
    engine = RayEngine(EngineSpec.scripted(...), config.engine)     # an Engine
    envs = RayEnvWorkers(SandboxConfig(...), config.env)            # envs.env() -> RemoteEnv
    Scheduler(run, ..., engine_workers=engine, env_workers=envs)    # both are ElasticWorkers
    async with RayBackend(config, spec, SandboxConfig()) as backend:   # all of the above
        async with backend.scheduler(agent_config, SchedulerConfig()) as scheduler: ...

Layout: `config` (RayConfig, WorkerSetConfig, connect), `actors` (the supervised, elastic actor
set both kinds share), `engine` (EngineSpec, EngineHost, RayEngine), `env` (EnvHost,
RayEnvWorkers, RemoteEnv), `backend` (RayBackend: the lot, wired to the scheduler). Failure
semantics and multi-node use: docs/scaling.md. Importing this package imports Ray (the `ray`
extra); nothing else in honing does.
"""

from honing.rollout.ray.actors import ActorSet, Worker, WorkerState
from honing.rollout.ray.backend import RayBackend
from honing.rollout.ray.config import RayConfig, WorkerSetConfig, connect
from honing.rollout.ray.engine import EngineHost, EngineInfo, EngineSpec, RayEngine
from honing.rollout.ray.env import EnvHost, RayEnvWorkers, RemoteEnv

__all__ = [
    "ActorSet",
    "EngineHost",
    "EngineInfo",
    "EngineSpec",
    "EnvHost",
    "RayBackend",
    "RayConfig",
    "RayEngine",
    "RayEnvWorkers",
    "RemoteEnv",
    "Worker",
    "WorkerSetConfig",
    "WorkerState",
    "connect",
]
