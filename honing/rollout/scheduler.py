"""The async scheduler: many episodes in flight over engine and env slots, groups out.

    async with Scheduler(run, SchedulerConfig(n=8, engine_slots=64, env_slots=32)) as sched:
        for task in tasks:
            await sched.submit(task, priority=0)      # awaits while the pending queue is full
        sched.finish_submitting()
        async for group in sched.results():           # each group exactly once, as it completes
            ...

Covered: groups of `n` delivered exactly once, priority, backpressure, retries of infrastructure
failures only, a deadline guard per attempt (so a retried trajectory may take longer than
`episode_s` in all), staleness, admission control (docs/rollout.md, "The modules in detail").
Not covered: building envs and engines (the runner's job), weight updates (the trainer's),
episode-internal deadlines (the agent loop's), sizing worker pools (`elastic`, ticked from here).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from heapq import heappop, heappush
from typing import Literal

from pydantic import Field

from honing.config import StrictModel
from honing.errors import DeadlineExceeded, EngineError, HoningError, SandboxError, WorkerLost
from honing.records import Ending, Group, Retry, Trajectory
from honing.rollout.agent import Gate, InfraFailure
from honing.rollout.elastic import ElasticPool, ElasticWorkers, Scaling
from honing.rollout.slots import PrioritySlots
from honing.tasks.load import AnyTask

log = logging.getLogger(__name__)

EpisodeRunner = Callable[[AnyTask, int, Gate], Awaitable[Trajectory]]
"""(task, sample index, gate) -> one finished trajectory; builds a fresh env per call."""


class SchedulerClosed(HoningError):
    """The scheduler is closed (or failed): nothing more can be submitted."""


class RunnerError(HoningError):
    """The episode runner raised something that is neither a trajectory nor an infrastructure
    failure: a bug in the runner, agent loop or environment. The cause is chained."""


class SchedulerConfig(StrictModel):
    """Concurrency, queues, retries, deadlines, staleness and elasticity of the scheduler."""

    n: int = Field(8, ge=1, description="Samples per task (the group size), unless submit says.")
    max_in_flight: int = Field(
        256, ge=1, description="Trajectories started and not yet final (backoffs included)."
    )
    engine_slots: int = Field(
        32, ge=1, description="Concurrent engine.generate calls (without elastic engine workers)."
    )
    env_slots: int = Field(
        32, ge=1, description="Concurrent env reset/step/close calls (without elastic env workers)."
    )
    max_pending_groups: int = Field(
        1024, ge=1, description="Groups waiting to start; `submit` awaits while this many wait."
    )
    max_ready_groups: int = Field(
        64,
        ge=1,
        description="Finished groups not yet taken from results(); at this many, no new group "
        "starts (generation does not run ahead of a lagging consumer).",
    )
    retries: int = Field(3, ge=0, description="Retries per trajectory for infrastructure failures.")
    backoff_s: float = Field(
        1.0, ge=0, description="Delay before the first retry; doubles each time."
    )
    backoff_max_s: float = Field(30.0, ge=0, description="Longest delay between retries.")
    episode_s: float = Field(
        3600.0,
        gt=0,
        description="The episode deadline (the agent's deadlines.episode_s): the guard fires at "
        "episode_s + guard_grace_s.",
    )
    guard_grace_s: float = Field(
        5.0,
        ge=0,
        description="Grace past episode_s before the scheduler cancels an attempt itself, so "
        "that the agent loop's own deadline (a TIMEOUT trajectory with its turns) normally wins.",
    )
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="Most policy versions a trajectory may lag when it finishes; beyond, it is "
        "re-issued. None: unbounded.",
    )
    groups_per_version: int | None = Field(
        None,
        ge=1,
        description="Groups the trainer consumes per policy update; with max_staleness it bounds "
        "how many groups may start ahead of the trainer (AReaL's rule; see the module doc).",
    )
    stale_reissues: int = Field(
        2, ge=0, description="Re-issues of a stale trajectory before it is delivered as STALE."
    )
    engine_scaling: Scaling = Field(
        default_factory=Scaling, description="Elastic engine workers (when given)."
    )
    env_scaling: Scaling = Field(
        default_factory=Scaling, description="Elastic env/sandbox workers (when given)."
    )
    tick_s: float = Field(
        0.1, gt=0, description="How often admission (a new policy version) and scaling are checked."
    )
    shutdown_grace_s: float = Field(
        5.0, gt=0, description="How long shutdown waits for cancelled attempts to end."
    )
    on_runner_error: Literal["raise", "deliver"] = Field(
        "raise",
        description="A runner exception that is not an infrastructure failure (a bug): 'raise' "
        "it from results(); 'deliver' the trajectory flagged INFRA_ERROR (stage 'runner').",
    )


class MetricsHooks:
    """Callbacks for metrics; subclass and override what you need (all are no-ops here).

    Generation, env and queue time per episode are on the trajectory (`generation_s`, `env_s`,
    `queue_s`); throughput is `stats.throughput` or the rate of `on_group` calls."""

    def on_episode(self, trajectory: Trajectory, staleness: int) -> None:
        """A trajectory was delivered (any ending); staleness in policy versions."""

    def on_group(self, group: Group, seconds: float) -> None:
        """A group was delivered, `seconds` after it was submitted."""

    def on_queue_wait(self, pool: str, seconds: float) -> None:
        """An episode waited `seconds` for an `engine` or `env` slot (only when it had to)."""

    def on_retry(self, task_id: str, retry: Retry) -> None:
        """An attempt failed for an infrastructure reason (or was stale) and starts again."""

    def on_stale(self, task_id: str, staleness: int) -> None:
        """A trajectory finished `staleness` versions behind, past max_staleness."""

    def on_scale(self, pool: str, old: int, new: int) -> None:
        """An elastic pool was resized from `old` to `new` workers."""


NO_HOOKS = MetricsHooks()


@dataclass
class SchedulerStats:
    """Counters since start, and gauges as of the read."""

    groups_submitted: int = 0
    groups_delivered: int = 0
    episodes_started: int = 0  # attempts started: first tries, retries and stale re-issues
    episodes_finished: int = 0  # trajectories delivered
    retries: int = 0
    retries_by_cause: dict[str, int] = field(default_factory=dict)  # "stage ExceptionType"
    infra_errors: int = 0  # delivered as INFRA_ERROR (budget spent)
    guard_timeouts: int = 0  # attempts cancelled by the episode deadline guard
    stale_drops: int = 0  # finished trajectories re-issued (or delivered STALE) for staleness
    max_staleness_seen: int = 0
    admission_holds: int = 0  # times a ready group was held back by admission control
    in_flight: int = 0
    peak_in_flight: int = 0
    pending_groups: int = 0  # queue depth: groups waiting to start
    ready_groups: int = 0  # finished, not yet consumed
    engine_waiting: int = 0  # episodes queued for an engine slot
    env_waiting: int = 0
    engine_slots: int = 0
    env_slots: int = 0
    engine_workers: int | None = None
    env_workers: int | None = None
    scale_events: int = 0
    elapsed_s: float = 0.0

    @property
    def throughput(self) -> float:
        """Trajectories delivered per second since start."""
        return self.episodes_finished / self.elapsed_s if self.elapsed_s > 0 else 0.0


# -- internals --------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Group:
    id: str
    task: AnyTask
    n: int
    rank: int  # -priority: lower is served first
    seq: int  # age
    submitted: float
    trajectories: list[Trajectory | None]
    remaining: int


@dataclass(slots=True, eq=False)
class _Live:
    group: _Group
    sample: int
    started: float = 0.0
    attempt: int = 0
    infra_retries: int = 0
    reissues: int = 0
    retries: list[Retry] = field(default_factory=list)
    task: asyncio.Future[Trajectory] | None = None
    gate: _AttemptGate | None = None
    timer: asyncio.TimerHandle | None = None


class _Hold:
    """One slot taken by one attempt; releasing is idempotent (the guard may release first)."""

    __slots__ = ("gate", "held", "slots")

    def __init__(self, gate: _AttemptGate, slots: PrioritySlots) -> None:
        self.gate = gate
        self.slots = slots
        self.held = False

    async def __aenter__(self) -> None:
        gate = self.gate
        if gate.closed:
            raise asyncio.CancelledError("the attempt was abandoned (deadline guard or shutdown)")
        slots = self.slots
        if not slots.try_acquire():
            t0 = time.perf_counter()
            await slots.wait(gate.rank, gate.age)
            if gate.closed:  # abandoned while queued, and the runner ignored the cancellation
                slots.release()
                raise asyncio.CancelledError("the attempt was abandoned")
            gate.hooks.on_queue_wait(slots.name, time.perf_counter() - t0)
        self.held = True
        gate.holds.append(self)

    async def __aexit__(self, *exc: object) -> None:
        if self.held:
            self.held = False
            self.gate.holds.remove(self)
            self.slots.release()

    def force_release(self) -> None:
        if self.held:
            self.held = False
            self.slots.release()


class _AttemptGate:
    """The `Gate` one attempt gets: the scheduler's slots, ranked by the attempt's group."""

    __slots__ = ("age", "closed", "engine_slots", "env_slots", "holds", "hooks", "rank")

    def __init__(
        self, engine: PrioritySlots, env: PrioritySlots, rank: int, age: int, hooks: MetricsHooks
    ) -> None:
        self.engine_slots = engine
        self.env_slots = env
        self.rank = rank
        self.age = age
        self.hooks = hooks
        self.holds: list[_Hold] = []
        self.closed = False

    def engine(self) -> _Hold:
        return _Hold(self, self.engine_slots)

    def env(self) -> _Hold:
        return _Hold(self, self.env_slots)

    def close(self) -> None:
        """No more slots for this attempt; the ones it holds go back now."""
        self.closed = True
        for hold in self.holds:
            hold.force_release()
        self.holds.clear()


_INFRA_TYPES = (EngineError, WorkerLost, SandboxError)


class Scheduler:
    """Runs groups of episodes concurrently; see the module docstring for the guarantees."""

    def __init__(
        self,
        run: EpisodeRunner,
        config: SchedulerConfig | None = None,
        *,
        hooks: MetricsHooks | None = None,
        version: Callable[[], int] = lambda: 0,
        engine_workers: ElasticWorkers | None = None,
        env_workers: ElasticWorkers | None = None,
    ) -> None:
        self.config = cfg = config or SchedulerConfig()
        self._run = run
        self._hooks = hooks or NO_HOOKS
        self._version = version
        self._engine = PrioritySlots("engine", cfg.engine_slots)
        self._env = PrioritySlots("env", cfg.env_slots)
        self._pools = [
            ElasticPool(name, workers, scaling, slots, self._scaled)
            for name, workers, scaling, slots in (
                ("engine", engine_workers, cfg.engine_scaling, self._engine),
                ("env", env_workers, cfg.env_scaling, self._env),
            )
            if workers is not None
        ]
        self._stats = SchedulerStats()
        self._prefix = uuid.uuid4().hex[:8]
        self._seq = 0
        self._pending: list[tuple[int, int, _Group]] = []  # (rank, seq, group)
        self._submit_waiters: deque[asyncio.Future[None]] = deque()
        self._ready: deque[Group] = deque()
        self._result_waiters: list[asyncio.Future[None]] = []
        self._live: set[_Live] = set()
        self._zombies: set[asyncio.Future[Trajectory]] = set()
        self._in_flight = 0
        self._groups_started = 0
        self._version0 = 0
        self._sealed = False
        self._state: Literal["new", "running", "closed"] = "new"
        self._failure: BaseException | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._started_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    async def __aenter__(self) -> Scheduler:
        if self._state != "new":
            raise SchedulerClosed("a Scheduler can be entered once; create a new one")
        self._loop = asyncio.get_running_loop()
        self._state = "running"
        self._started_at = time.perf_counter()
        self._version0 = self._version()
        for pool in self._pools:
            await pool.start()
        self._ticker = self._loop.create_task(self._tick_loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Cancel everything in flight and wait for it; submitters and consumers are woken."""
        if self._state == "closed":
            return
        self._state = "closed"
        pending: list[asyncio.Future[object]] = []
        if self._ticker is not None:
            self._ticker.cancel()
            pending.append(self._ticker)  # type: ignore[arg-type]
        for pool in self._pools:
            resizing = pool.cancel()
            if resizing is not None:
                pending.append(resizing)  # type: ignore[arg-type]
        for ep in self._live:
            if ep.timer is not None:
                ep.timer.cancel()
            if ep.gate is not None:
                ep.gate.close()
            if ep.task is not None:
                ep.task.cancel()
                pending.append(ep.task)  # type: ignore[arg-type]
        for zombie in self._zombies:
            zombie.cancel()
            pending.append(zombie)  # type: ignore[arg-type]
        self._wake_all()
        deadline = time.monotonic() + self.config.shutdown_grace_s
        left = {p for p in pending if not p.done()}
        while left:
            _, left = await asyncio.wait(left, timeout=0.1)
            if not left:
                break
            if time.monotonic() > deadline:
                log.error(
                    "scheduler shutdown: %d episode task(s) ignore cancellation and still run",
                    len(left),
                )
                break
            for task in left:  # a runner that swallowed one cancellation gets another
                task.cancel()
        for p in pending:
            if p.done() and not p.cancelled():
                p.exception()  # retrieved: nobody else will
        self._live.clear()
        self._zombies.clear()

    def _check_open(self) -> None:
        if self._failure is not None:
            raise SchedulerClosed("the scheduler stopped on a runner error") from self._failure
        if self._state != "running":
            raise SchedulerClosed(
                "the scheduler is not running: use `async with Scheduler(...) as sched`"
            )

    # -- submitting and consuming ------------------------------------------------------------
    async def submit(self, task: AnyTask, *, n: int | None = None, priority: int = 0) -> str:
        """Queue a group of `n` samples of `task` (default `config.n`); returns the group id.
        Higher `priority` is served first. Awaits while `max_pending_groups` groups wait."""
        self._check_open()
        if self._sealed:
            raise SchedulerClosed("finish_submitting() was called: no more submissions")
        n = self.config.n if n is None else n
        if n < 1:
            raise ValueError(f"a group needs n >= 1 samples, got {n}")
        while len(self._pending) >= self.config.max_pending_groups:
            assert self._loop is not None
            fut = self._loop.create_future()
            self._submit_waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                with contextlib.suppress(ValueError):
                    self._submit_waiters.remove(fut)
                raise
            self._check_open()
        self._seq += 1
        group = _Group(
            id=f"{self._prefix}-{self._seq}",
            task=task,
            n=n,
            rank=-priority,
            seq=self._seq,
            submitted=time.perf_counter(),
            trajectories=[None] * n,
            remaining=n,
        )
        heappush(self._pending, (group.rank, group.seq, group))
        self._stats.groups_submitted += 1
        self._dispatch()
        return group.id

    def finish_submitting(self) -> None:
        """No more submissions: `results()` ends once everything submitted is delivered."""
        self._sealed = True
        self._wake_results()

    async def results(self) -> AsyncIterator[Group]:
        """Finished groups as they complete, each exactly once. Ends when the scheduler closes,
        or after `finish_submitting()` once everything is delivered. Raises `RunnerError` if a
        runner failed with a bug (with `on_runner_error="raise"`)."""
        while True:
            if self._ready:
                group = self._ready.popleft()
                self._dispatch()  # a consumed group may let a new one start
                yield group
                continue
            if self._failure is not None:
                raise self._failure
            if self._state == "closed":
                return
            if self._sealed and not self._pending and not self._in_flight:
                return
            assert self._loop is not None
            fut = self._loop.create_future()
            self._result_waiters.append(fut)
            await fut

    async def run_all(self, tasks: Iterable[AnyTask], *, n: int | None = None) -> list[Group]:
        """Submit every task and return its groups in task order (does not seal the scheduler)."""
        tasks = list(tasks)
        if not tasks:
            return []
        ids: list[str] = []

        async def feed() -> None:
            for task in tasks:
                ids.append(await self.submit(task, n=n))

        feeder = asyncio.get_running_loop().create_task(feed())
        got: dict[str, Group] = {}
        try:
            async for group in self.results():
                got[group.group_id] = group
                if len(got) == len(tasks):
                    break
            await feeder
        finally:
            if not feeder.done():
                feeder.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await feeder
        missing = [i for i in ids if i not in got]
        if missing or len(ids) != len(tasks):
            raise SchedulerClosed(f"the scheduler closed before {len(missing)} group(s) finished")
        return [got[i] for i in ids]

    @property
    def stats(self) -> SchedulerStats:
        s = dataclasses.replace(self._stats, retries_by_cause=dict(self._stats.retries_by_cause))
        s.in_flight = self._in_flight
        s.pending_groups = len(self._pending)
        s.ready_groups = len(self._ready)
        s.engine_waiting = self._engine.waiting
        s.env_waiting = self._env.waiting
        s.engine_slots = self._engine.capacity
        s.env_slots = self._env.capacity
        for pool in self._pools:
            if pool.name == "engine":
                s.engine_workers = pool.size
            else:
                s.env_workers = pool.size
        if self._started_at:
            s.elapsed_s = time.perf_counter() - self._started_at
        return s

    # -- starting work -----------------------------------------------------------------------
    def _admitted(self) -> bool:
        cfg = self.config
        if len(self._ready) >= cfg.max_ready_groups:
            return False
        if cfg.max_staleness is not None and cfg.groups_per_version is not None:
            ahead = self._version() - self._version0 + cfg.max_staleness + 1
            if self._groups_started >= ahead * cfg.groups_per_version:
                return False
        return True

    def _dispatch(self) -> None:
        if self._state != "running" or self._failure is not None:
            return
        pending = self._pending
        limit = self.config.max_in_flight
        started = 0
        while pending:
            group = pending[0][2]
            if self._in_flight + group.n > limit and self._in_flight > 0:
                break
            if not self._admitted():
                self._stats.admission_holds += 1
                break
            heappop(pending)
            self._groups_started += 1
            started += 1
            now = time.perf_counter()
            for sample in range(group.n):
                ep = _Live(group, sample, started=now)
                self._live.add(ep)
                self._in_flight += 1
                self._start(ep)
        if self._in_flight > self._stats.peak_in_flight:
            self._stats.peak_in_flight = self._in_flight
        while started and self._submit_waiters:
            fut = self._submit_waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                started -= 1

    def _start(self, ep: _Live) -> None:
        if self._state != "running" or self._failure is not None:
            return
        assert self._loop is not None
        ep.timer = None
        ep.attempt += 1
        group = ep.group
        gate = _AttemptGate(self._engine, self._env, group.rank, group.seq, self._hooks)
        ep.gate = gate
        task = self._loop.create_task(self._attempt(group.task, ep.sample, gate))
        ep.task = task
        cfg = self.config
        ep.timer = self._loop.call_later(cfg.episode_s + cfg.guard_grace_s, self._guard, ep, task)
        task.add_done_callback(partial(self._attempt_done, ep))
        self._stats.episodes_started += 1

    async def _attempt(self, task: AnyTask, sample: int, gate: _AttemptGate) -> Trajectory:
        return await self._run(task, sample, gate)

    # -- an attempt ends ---------------------------------------------------------------------
    def _attempt_done(self, ep: _Live, task: asyncio.Future[Trajectory]) -> None:
        if ep.task is not task:  # abandoned by the guard: a late finisher, already delivered
            self._zombies.discard(task)
            if not task.cancelled():
                task.exception()
            return
        ep.task = None
        if ep.timer is not None:
            ep.timer.cancel()
            ep.timer = None
        assert ep.gate is not None
        ep.gate.close()
        if self._state != "running":
            if not task.cancelled():
                task.exception()
            return
        if task.cancelled():
            self._infra(ep, "episode", "CancelledError: the attempt was cancelled from outside")
            return
        exc = task.exception()
        if exc is None:
            self._finished(ep, task.result())
        elif isinstance(exc, InfraFailure):
            self._infra(ep, exc.stage, exc.cause, exc.trajectory)
        elif isinstance(exc, DeadlineExceeded):
            self._infra(ep, exc.stage, f"DeadlineExceeded: {exc}")
        elif isinstance(exc, _INFRA_TYPES):
            self._infra(ep, "episode", f"{type(exc).__name__}: {exc}")
        else:
            self._runner_error(ep, exc)

    def _infra(self, ep: _Live, stage: str, cause: str, partial: Trajectory | None = None) -> None:
        cfg = self.config
        at = time.perf_counter() - ep.started
        if ep.infra_retries >= cfg.retries:
            spent = f"retry budget of {cfg.retries} spent; " if cfg.retries else ""
            self._stats.infra_errors += 1
            failure, detail = f"infra:{stage}", f"{spent}{cause}"
            if partial is None:  # the last attempt's partial episode, when the runner gave one
                partial = self._flagged(ep, Ending.INFRA_ERROR, failure, detail)
            else:
                partial.ending, partial.failure, partial.detail = (
                    Ending.INFRA_ERROR,
                    failure,
                    detail,
                )
            self._deliver(ep, partial, 0)
            return
        retry = Retry(attempt=ep.attempt, stage=stage, cause=cause, at_s=at)
        self._record_retry(ep, retry)
        delay = min(cfg.backoff_s * 2**ep.infra_retries, cfg.backoff_max_s)
        ep.infra_retries += 1
        assert self._loop is not None
        ep.timer = self._loop.call_later(delay, self._start, ep)

    def _record_retry(self, ep: _Live, retry: Retry) -> None:
        ep.retries.append(retry)
        stats = self._stats
        stats.retries += 1
        kind = f"{retry.stage} {retry.cause.split(':', 1)[0]}"
        stats.retries_by_cause[kind] = stats.retries_by_cause.get(kind, 0) + 1
        self._hooks.on_retry(ep.group.task.id, retry)

    def _runner_error(self, ep: _Live, exc: BaseException) -> None:
        cause = f"{type(exc).__name__}: {exc}"
        if self.config.on_runner_error == "deliver":
            log.error("episode runner failed on %s: %s", ep.group.task.id, cause, exc_info=exc)
            self._deliver(ep, self._flagged(ep, Ending.INFRA_ERROR, "infra:runner", cause), 0)
            return
        if self._failure is None:
            err = RunnerError(
                f"the episode runner raised {cause} on task {ep.group.task.id!r} (sample "
                f"{ep.sample}); that is a bug in the runner, agent loop or environment, not an "
                f"infrastructure failure. Set on_runner_error='deliver' to flag and continue."
            )
            err.__cause__ = exc
            self._failure = err
        self._wake_all()

    def _guard(self, ep: _Live, task: asyncio.Future[Trajectory]) -> None:
        if ep.task is not task:
            return
        ep.task = None
        ep.timer = None
        assert ep.gate is not None
        ep.gate.close()  # its slots are free now, whatever the runner does next
        task.cancel()
        self._zombies.add(task)
        self._stats.guard_timeouts += 1
        limit = self.config.episode_s + self.config.guard_grace_s
        detail = (
            f"scheduler guard: attempt {ep.attempt} ran past episode_s + guard_grace_s "
            f"({limit:g}s); it was cancelled and its slots released"
        )
        self._deliver(ep, self._flagged(ep, Ending.TIMEOUT, "episode_deadline", detail), 0)

    def _finished(self, ep: _Live, traj: Trajectory) -> None:
        cfg = self.config
        staleness = self._version() - traj.policy_version if traj.policy_version >= 0 else 0
        if staleness > self._stats.max_staleness_seen:
            self._stats.max_staleness_seen = staleness
        if cfg.max_staleness is not None and staleness > cfg.max_staleness:
            self._stats.stale_drops += 1
            self._hooks.on_stale(ep.group.task.id, staleness)
            cause = (
                f"stale: policy version {traj.policy_version} is {staleness} behind "
                f"(max_staleness {cfg.max_staleness})"
            )
            if ep.reissues < cfg.stale_reissues:
                ep.reissues += 1
                retry = Retry(ep.attempt, "stale", cause, time.perf_counter() - ep.started)
                self._record_retry(ep, retry)
                self._start(ep)
                return
            traj.ending = Ending.STALE
            traj.failure = "stale"
            traj.detail = f"{cause}; re-issued {ep.reissues} time(s) already"
        self._deliver(ep, traj, staleness)

    def _flagged(self, ep: _Live, ending: Ending, failure: str, detail: str) -> Trajectory:
        task = ep.group.task
        return Trajectory(
            task_id=task.id,
            domain=task.domain,
            tags=list(task.tags),
            ending=ending,
            failure=failure,
            detail=detail,
            total_s=time.perf_counter() - ep.started,
            started_at=time.time() - (time.perf_counter() - ep.started),
        )

    def _deliver(self, ep: _Live, traj: Trajectory, staleness: int) -> None:
        group = ep.group
        if group.trajectories[ep.sample] is not None:  # cannot happen; loud if it ever does
            raise RuntimeError(f"sample {ep.sample} of group {group.id} delivered twice")
        traj.sample = ep.sample
        traj.group_id = group.id
        if not traj.id:
            traj.id = f"{group.id}/{ep.sample}"
        if ep.retries:
            traj.retries[:0] = ep.retries
        group.trajectories[ep.sample] = traj
        group.remaining -= 1
        self._live.discard(ep)
        self._in_flight -= 1
        self._stats.episodes_finished += 1
        self._hooks.on_episode(traj, staleness)
        if group.remaining == 0:
            done = Group(group.task.id, group.id, [t for t in group.trajectories if t is not None])
            self._ready.append(done)
            self._stats.groups_delivered += 1
            self._hooks.on_group(done, time.perf_counter() - group.submitted)
            self._wake_results()
        self._dispatch()

    # -- waking ------------------------------------------------------------------------------
    def _wake_results(self) -> None:
        waiters, self._result_waiters = self._result_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _wake_all(self) -> None:
        self._wake_results()
        while self._submit_waiters:
            fut = self._submit_waiters.popleft()
            if not fut.done():
                fut.set_result(None)

    # -- the tick: admission and scaling ------------------------------------------------------
    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_s)
            self._dispatch()
            if self._sealed and not self._pending and not self._in_flight:
                self._wake_results()
            now = time.monotonic()
            for pool in self._pools:
                pool.tick(now)

    def _scaled(self, pool: str, old: int, new: int) -> None:
        self._stats.scale_events += 1
        self._hooks.on_scale(pool, old, new)
