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
semantics and multi-node use: docs/scaling.md. The settings (`config`) import without Ray, so a
run config can hold them; every other name here imports Ray (the `ray` extra) when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from honing.rollout.ray.config import RayConfig, WorkerSetConfig, connect

if TYPE_CHECKING:
    from honing.rollout.ray.actors import ActorSet, Worker, WorkerState
    from honing.rollout.ray.backend import RayBackend
    from honing.rollout.ray.engine import EngineHost, EngineInfo, EngineSpec, RayEngine
    from honing.rollout.ray.env import EnvHost, RayEnvWorkers, RemoteEnv

_LAZY = {
    "ActorSet": "actors",
    "Worker": "actors",
    "WorkerState": "actors",
    "RayBackend": "backend",
    "EngineHost": "engine",
    "EngineInfo": "engine",
    "EngineSpec": "engine",
    "RayEngine": "engine",
    "EnvHost": "env",
    "RayEnvWorkers": "env",
    "RemoteEnv": "env",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


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
