"""Sandbox workers on Ray: each actor hosts a SandboxPool and the environments of its episodes.

    async with RayEnvWorkers(SandboxConfig(pool_size=2), WorkerSetConfig(count=4)) as envs:
        env = envs.env()                     # a RemoteEnv: one episode, on one actor
        obs = await env.reset(task)          # placed on the least loaded actor (open episodes)
        result = await env.step(action); ...; await env.close()

Covered: `RemoteEnv` (the agent loop's `EnvLike`), an episode whose actor dies raising
`WorkerLost` so the scheduler runs it again elsewhere, and cells that die with their actor
(docs/scaling.md, "The modules in detail"). Not covered: the environments and sandbox
themselves (`honing.envs`, `honing.sandbox`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from honing.config import SandboxConfig
from honing.envs.base import Action, EnvConfig, Environment, Observation, StepResult
from honing.envs.registry import make_env
from honing.errors import HoningError, WorkerLost
from honing.rollout.ray.actors import ActorSet, Worker
from honing.rollout.ray.config import WorkerSetConfig
from honing.sandbox import SandboxPool
from honing.sandbox.pool import PoolUsage
from honing.tasks.load import AnyTask

log = logging.getLogger(__name__)


class EnvHost:
    """The actor: one sandbox pool, the environments of the episodes placed here."""

    def __init__(self, sandbox: SandboxConfig, env: EnvConfig | None) -> None:
        self._sandbox = sandbox
        self._env_config = env
        self._pool: SandboxPool | None = None
        self._envs: dict[str, Environment] = {}
        self._forever = asyncio.Event()

    async def start(self) -> int:
        self._pool = SandboxPool(self._sandbox)
        await self._pool.start()
        return self._sandbox.size

    async def reset(self, episode: str, task: AnyTask) -> Observation:
        if self._pool is None:
            raise HoningError("sandbox actor not started (call start first)")
        env = self._envs.get(episode)
        if env is None:
            env = self._envs[episode] = make_env(task.domain, self._pool, self._env_config)
        return await env.reset(task)

    async def step(self, episode: str, action: Action) -> StepResult:
        return await self._env(episode).step(action)

    async def reject(self, episode: str, detail: str) -> StepResult:
        return await self._env(episode).reject(detail)

    async def close(self, episode: str) -> None:
        env = self._envs.pop(episode, None)
        if env is not None:
            await env.close()

    async def episodes(self) -> int:
        return len(self._envs)

    async def usage(self) -> PoolUsage | None:
        return self._pool.usage() if self._pool is not None else None

    async def watch(self) -> None:
        await self._forever.wait()  # never set: returns only by the actor's death

    async def stop(self) -> None:
        for episode in list(self._envs):
            try:
                await self.close(episode)
            except HoningError as exc:
                log.warning("closing episode %s: %s", episode, exc)
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _env(self, episode: str) -> Environment:
        try:
            return self._envs[episode]
        except KeyError:
            raise HoningError(f"no episode {episode!r} here: call reset(task) first") from None


class RayEnvWorkers:
    """A supervised, elastic set of sandbox actors; `env()` makes one episode's RemoteEnv.
    Use as `async with RayEnvWorkers(...) as envs:` (Ray must be connected)."""

    def __init__(
        self,
        sandbox: SandboxConfig | None = None,
        config: WorkerSetConfig | None = None,
        *,
        env: EnvConfig | None = None,
    ) -> None:
        sandbox = sandbox or SandboxConfig()
        self.workers = ActorSet("sandbox", EnvHost, (sandbox, env), config or WorkerSetConfig())

    async def __aenter__(self) -> RayEnvWorkers:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        await self.workers.start()

    async def close(self) -> None:
        await self.workers.close()

    def env(self) -> RemoteEnv:
        """A fresh environment for one episode (placed on an actor at `reset`)."""
        return RemoteEnv(self.workers)

    async def usage(self) -> dict[str, PoolUsage]:
        """Each serving actor's sandbox pool counters, by worker id; an actor that does not
        answer (dying) is left out. `usage_since(later, earlier)` is the use between two."""

        async def one(worker: Worker) -> tuple[str, PoolUsage | None]:
            try:
                return worker.id, await self.workers.call(worker, "usage")
            except (WorkerLost, HoningError):
                return worker.id, None

        found = await asyncio.gather(*(one(w) for w in self.workers.ready_workers()))
        return {worker: usage for worker, usage in found if usage is not None}

    # -- the ElasticWorkers protocol -------------------------------------------------------
    @property
    def size(self) -> int:
        return self.workers.size

    async def resize(self, n: int) -> None:
        await self.workers.resize(n)


class RemoteEnv:
    """One episode's environment on a sandbox actor (the agent loop's EnvLike)."""

    def __init__(self, workers: ActorSet) -> None:
        self.episode = uuid.uuid4().hex
        self._workers = workers
        self._worker: Worker | None = None
        self._done = False
        self._lost: WorkerLost | None = None

    @property
    def done(self) -> bool:
        return self._done

    @property
    def worker_id(self) -> str | None:
        """The actor this episode runs on (None before reset)."""
        return self._worker.id if self._worker is not None else None

    async def reset(self, task: AnyTask) -> Observation:
        if self._worker is None:
            self._worker = await self._workers.acquire(load=1)
        observation: Observation = await self._call("reset", task)
        self._done = False
        return observation

    async def step(self, action: Action) -> StepResult:
        result: StepResult = await self._call("step", action)
        self._done = result.done
        return result

    async def reject(self, detail: str) -> StepResult:
        result: StepResult = await self._call("reject", detail)
        self._done = result.done
        return result

    async def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        try:
            if self._lost is None:  # runs to its end in the actor even if we are cancelled
                await self._workers.call(worker, "close", self.episode, cancel_remote=False)
        except WorkerLost:
            pass  # the episode died with its actor
        finally:
            self._workers.release(worker, load=1)

    async def _call(self, method: str, *args: object) -> Any:
        if self._lost is not None:
            raise self._lost
        if self._worker is None:
            raise HoningError("call reset(task) first")
        try:
            return await self._workers.call(self._worker, method, self.episode, *args)
        except WorkerLost as exc:
            self._lost = exc
            raise


def usage_since(later: dict[str, PoolUsage], earlier: dict[str, PoolUsage]) -> PoolUsage:
    """The sandbox actors' use between two `RayEnvWorkers.usage()` snapshots, as one pool's, over
    the actors present in both (an actor started or lost in between is left out, so no work is
    counted twice or as negative; with none in both, the cells of every actor now)."""
    both = [(later[w], earlier[w]) for w in later if w in earlier]
    deltas = [now.since(then) for now, then in both]
    return PoolUsage(
        cells=sum(now.cells for now, _ in both) if both else sum(u.cells for u in later.values()),
        busy=sum(u.busy for u in later.values()),
        runs=sum(d.runs for d in deltas),
        busy_s=sum(d.busy_s for d in deltas),
        wait_s=sum(d.wait_s for d in deltas),
        at=max((u.at for u in later.values()), default=0.0),
        interval_s=max((d.interval_s for d in deltas), default=0.0),
        enforcement=next((u.enforcement for u in later.values()), None),
    )
