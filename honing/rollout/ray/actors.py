"""A supervised, elastic set of Ray actors of one kind, driven from asyncio.

    workers = ActorSet("engine", EngineHost, (spec,), config)   # config: WorkerSetConfig
    await workers.start()                        # `count` actors, each placed and started
    worker = await workers.acquire(load=1)       # the least loaded live actor
    try: result = await workers.call(worker, "generate", prompts, sampling)
    finally: workers.release(worker, load=1)
    await workers.resize(4); await workers.close()

Covered: non-blocking calls whose errors come back as themselves, dead actors replaced (their
calls fail with `WorkerLost`), and resizing (docs/scaling.md, "The modules in detail"). The
hosted class must define `async start()`, `async watch()` (never returns) and `async stop()`.
Not covered: what the actors host (`engine.py`, `env.py` beside this one).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError, RayTaskError

from honing.errors import HoningError, WorkerLost
from honing.rollout.ray.config import WorkerSetConfig

log = logging.getLogger(__name__)

STOP_GRACE_S = 5.0  # how long a retiring actor may take to release what it holds
MAX_START_FAILURES = 3  # consecutive failed starts after which the set stops replacing


class WorkerState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"  # takes no new work; stopped once its load is 0
    DEAD = "dead"


@dataclass(eq=False)
class Worker:
    """One actor of a set, as the driver sees it."""

    id: str
    handle: Any  # ray.actor.ActorHandle
    state: WorkerState = WorkerState.STARTING
    load: int = 0  # in-flight prompts (engines) or open episodes (sandboxes)
    info: Any = None  # what the actor's start() returned
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class ActorSet:
    """See the module docstring. `on_ready(worker)` runs after an actor started and before it
    takes work (engines bring a replacement's weights up to date there)."""

    def __init__(
        self,
        kind: str,
        host: type,
        args: Sequence[Any],
        config: WorkerSetConfig,
        *,
        on_ready: Callable[[Worker], Awaitable[None]] | None = None,
    ) -> None:
        self.kind = kind
        self.config = config
        self._remote_class: Any = ray.remote(host)
        self._args = tuple(args)
        self._on_ready = on_ready
        self._target = config.count
        self._workers: list[Worker] = []
        self._changed = asyncio.Event()  # set whenever a worker becomes ready or the set breaks
        self._background: set[asyncio.Task[None]] = set()
        self._prefix = f"honing-{kind}-{uuid.uuid4().hex[:6]}"
        self._ids = itertools.count()
        self._start_failures = 0
        self._broken: str | None = None  # set after MAX_START_FAILURES failed starts in a row
        self._last_failure = ""
        self._closed = False
        self.replaced = 0  # actors started to replace dead ones

    # -- the ElasticWorkers protocol -------------------------------------------------------
    @property
    def size(self) -> int:
        """The number of actors the set keeps (starting or serving)."""
        return self._target

    async def resize(self, n: int) -> None:
        """Grow to `n` actors (draining ones are taken back first; returns once the new ones
        serve, or could not be placed) or shrink (drains the least loaded; each stops once
        idle). A set that keeps failing to start does not grow."""
        if n < 0:
            raise ValueError(f"a worker set cannot have {n} actors")
        if self._closed:
            raise HoningError(f"the {self.kind} worker set is closed")
        active = self._active()
        if n > len(active) and self._broken:
            log.warning("%s: not growing to %d", self._broken, n)
            return
        self._target = n
        for worker in [w for w in self._workers if w.state is WorkerState.DRAINING]:
            if len(active) >= n:
                break
            worker.state = WorkerState.READY  # still running: take it back
            active.append(worker)
        for _ in range(n - len(active)):
            self._spawn()
        for worker in sorted(active, key=lambda w: (w.state is WorkerState.READY, w.load))[
            : max(len(active) - n, 0)
        ]:
            self._drain(worker)
        self._changed.set()
        with contextlib.suppress(HoningError):  # broken meanwhile: serve with what is there
            await self.wait_alive(n)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start `config.count` actors; raises (naming the resource request) if they cannot."""
        self._check_open()
        try:
            for _ in range(self._target):
                self._spawn()
            await self.wait_alive()
            if self.alive < self.config.count:
                raise HoningError(f"{self.kind} workers: {self._last_failure}")
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop every actor (each may release what it holds for a few seconds), then kill."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._background):
            task.cancel()
        workers = [w for w in self._workers if w.state is not WorkerState.DEAD]
        await asyncio.gather(*(self._stop(w) for w in workers), return_exceptions=True)
        self._workers.clear()
        self._changed.set()

    @property
    def alive(self) -> int:
        """Actors serving now (neither starting, draining nor dead)."""
        return sum(1 for w in self._workers if w.state is WorkerState.READY)

    def ready_workers(self) -> list[Worker]:
        return [w for w in self._workers if w.state is WorkerState.READY]

    async def wait_alive(self, n: int | None = None) -> None:
        """Wait until `n` actors (default and at most: `size`) serve; raises if the set broke
        (its actors keep failing to start)."""
        while self.alive < min(self._target if n is None else n, self._target):
            self._check_open()
            self._changed.clear()
            await self._changed.wait()

    # -- calls -------------------------------------------------------------------------------
    async def acquire(self, load: int = 1) -> Worker:
        """The least loaded serving actor, with `load` added; waits while none serves (a
        replacement starting). Pair with `release`."""
        while True:
            ready = self.ready_workers()
            if not ready or self._closed:
                self._check_open()  # broken (no replacement comes) or closed: raise
            if ready:
                worker = min(ready, key=lambda w: w.load)
                worker.load += load
                return worker
            self._changed.clear()
            await self._changed.wait()

    def release(self, worker: Worker, load: int = 1) -> None:
        worker.load -= load
        if worker.state is WorkerState.DRAINING and worker.load <= 0:
            self._spawn_task(self._retire(worker))

    async def call(
        self, worker: Worker, method: str, *args: Any, cancel_remote: bool = True
    ) -> Any:
        """`await worker.<method>(*args)` in the actor. A dead actor raises WorkerLost (and is
        replaced); an error raised by the method is raised as itself. Cancelling the call
        cancels the actor's task too, unless `cancel_remote` is False (a cleanup that must run)."""
        if worker.state is WorkerState.DEAD:
            raise WorkerLost(f"{self.kind} worker {worker.id} is gone; retry on another")
        try:
            ref = getattr(worker.handle, method).remote(*args)
        except RayError as exc:
            self._lost(worker, exc)
            raise WorkerLost(f"{self.kind} worker {worker.id} is gone: {_brief(exc)}") from None
        try:
            return await ref
        except asyncio.CancelledError:
            if cancel_remote:
                ray.cancel(ref)  # a deadline here frees the remote side as well
            raise
        except RayTaskError as exc:  # the method raised: the actor itself is fine
            cause = exc.cause
            if isinstance(cause, Exception) and not isinstance(cause, RayError):
                raise cause from None
            raise HoningError(
                f"{self.kind} worker {worker.id}: {method} raised {_brief(exc)}"
            ) from None
        except RayError as exc:  # RayActorError (died, unreachable), worker crashes, lost objects
            self._lost(worker, exc)
            raise WorkerLost(
                f"{self.kind} worker {worker.id} died during {method}: {_brief(exc)}"
            ) from None

    # -- supervision -------------------------------------------------------------------------
    def _active(self) -> list[Worker]:
        return [w for w in self._workers if w.state in (WorkerState.STARTING, WorkerState.READY)]

    def _spawn(self) -> Worker:
        worker_id = f"{self._prefix}-{next(self._ids)}"
        options = self.config.actor_options(worker_id)
        handle = self._remote_class.options(**options).remote(*self._args)
        worker = Worker(id=worker_id, handle=handle)
        self._workers.append(worker)
        task = self._spawn_task(self._bring_up(worker))
        worker.tasks.add(task)
        return worker

    async def _bring_up(self, worker: Worker) -> None:
        timeout = self.config.start_timeout_s
        try:
            worker.info = await asyncio.wait_for(worker.handle.start.remote(), timeout)
            if self._on_ready is not None:
                await self._on_ready(worker)
        except Exception as exc:
            if worker.state is WorkerState.DEAD:
                return
            unplaced = isinstance(exc, TimeoutError | GetTimeoutError)
            reason = (
                f"not started within {timeout:g}s: no node offers {self._request()} (see "
                "`ray status`), or starting takes longer (raise start_timeout_s)"
                if unplaced
                else _brief(exc)
            )
            self._last_failure = reason
            log.warning("%s worker %s failed to start: %s", self.kind, worker.id, reason)
            if unplaced:  # the cluster has no room: the set stays smaller, nothing is broken
                self._target = max(self._target - 1, 0)
                log.warning("%s workers: size lowered to %d", self.kind, self._target)
            else:
                self._start_failures += 1
                if self._start_failures >= MAX_START_FAILURES:
                    self._broken = f"{self.kind} workers fail to start: {reason}"
                    log.error("%s; no more replacements", self._broken)
            self._lost(worker, exc)
            return
        if worker.state is not WorkerState.STARTING:  # drained or lost meanwhile
            return
        self._start_failures = 0
        worker.state = WorkerState.READY
        worker.tasks.add(self._spawn_task(self._watch(worker)))
        self._changed.set()

    async def _watch(self, worker: Worker) -> None:
        try:
            await worker.handle.watch.remote()
        except RayError as exc:
            self._lost(worker, exc)

    def _lost(self, worker: Worker, exc: BaseException, *, replace: bool = True) -> None:
        if worker.state is WorkerState.DEAD:
            return
        was_draining = worker.state is WorkerState.DRAINING
        worker.state = WorkerState.DEAD
        log.warning("%s worker %s lost: %s", self.kind, worker.id, _brief(exc))
        self._forget(worker)
        _kill(worker.handle)
        if replace and not was_draining and not self._closed and not self._broken:
            while len(self._active()) < self._target:
                self.replaced += 1
                self._spawn()
        self._changed.set()

    def _drain(self, worker: Worker) -> None:
        if worker.state is WorkerState.STARTING:
            worker.state = WorkerState.DEAD
            self._forget(worker)
            _kill(worker.handle)
            return
        worker.state = WorkerState.DRAINING
        if worker.load <= 0:
            self._spawn_task(self._retire(worker))

    async def _retire(self, worker: Worker) -> None:
        if worker.state is not WorkerState.DRAINING:  # taken back by a resize, or gone
            return
        worker.state = WorkerState.DEAD
        self._forget(worker)
        await self._stop(worker)

    async def _stop(self, worker: Worker) -> None:
        worker.state = WorkerState.DEAD
        for task in worker.tasks:
            task.cancel()
        try:
            await asyncio.wait_for(worker.handle.stop.remote(), STOP_GRACE_S)
        except (TimeoutError, RayError) as exc:
            log.debug("%s worker %s did not stop cleanly: %s", self.kind, worker.id, exc)
        _kill(worker.handle)

    def _forget(self, worker: Worker) -> None:
        if worker in self._workers:
            self._workers.remove(worker)

    def _spawn_task(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _check_open(self) -> None:
        if self._closed:
            raise HoningError(f"the {self.kind} worker set is closed")
        if self._broken:
            raise HoningError(self._broken)

    def _request(self) -> str:
        c = self.config
        parts = [f"num_cpus={c.num_cpus:g}"]
        if c.num_gpus:
            parts.append(f"num_gpus={c.num_gpus:g}")
        parts += [f"{k}={v:g}" for k, v in c.resources.items()]
        return ", ".join(parts)


def _kill(handle: Any) -> None:
    try:
        ray.kill(handle, no_restart=True)
    except (RayError, ValueError) as exc:  # already gone
        log.debug("ray.kill: %s", exc)


def _brief(exc: BaseException) -> str:
    """The first line of an exception, with its type (Ray's messages run for pages)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
