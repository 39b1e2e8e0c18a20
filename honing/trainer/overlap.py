"""Overlapped generation and training (`async: {max_staleness: K}`): the batches of the next K
updates are played while the learner trains on this one.

    async with Ahead(sched, k) as ahead:
        await ahead.submit(Batch(step, drawn, cursors_before))   # its groups start playing
        batch, groups = await ahead.take(step)                    # its groups, in drawn order
        ahead.replay_cursors(cursors)     # what a checkpoint saves: in-flight batches redrawn

Covered: submitting a batch's groups to a shared `Scheduler`, collecting them by group id from
the one `results()` stream (several batches in flight at once), the step each episode belongs to
(its seed), and the cursors to resume from. Not covered: drawing tasks, training and syncing
(`honing.trainer.loop`), the staleness bound itself (the loop keeps at most K + 1 batches in
flight; the learner's decoupled correction handles the stale tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from honing.records import Group
from honing.rollout.scheduler import Scheduler, SchedulerClosed
from honing.tasks.load import AnyTask


@dataclass
class Batch:
    """One update's tasks: `drawn` (source, task) pairs for update `step`, and the mixer's
    cursors as they were before they were drawn (what a checkpoint saves to redraw them)."""

    step: int
    drawn: list[tuple[str, AnyTask]]
    cursors: dict[str, tuple[int, int]]
    futures: list[asyncio.Future[Group]] = field(default_factory=list)


class Ahead:
    """Batches in flight on one scheduler, oldest first; see the module docstring."""

    def __init__(self, sched: Scheduler, max_staleness: int) -> None:
        self.sched = sched
        self.max_staleness = max_staleness
        self.batches: list[Batch] = []
        self.next_step = 0  # the step of the next batch to submit
        self._step_of: dict[int, int] = {}  # id(submitted task copy) -> its update
        self._waiting: dict[str, asyncio.Future[Group]] = {}
        self._collector: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Ahead:
        self._collector = asyncio.get_running_loop().create_task(self._collect())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._collector is not None:
            self._collector.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._collector
        for future in self._waiting.values():
            future.cancel()

    async def submit(self, batch: Batch) -> None:
        """Start playing `batch`'s groups (each task submitted as a copy of its own, so that an
        episode knows its update even when one task is drawn by two batches in flight)."""
        loop = asyncio.get_running_loop()
        if self._collector is None or self._collector.done():
            raise SchedulerClosed("no batch can start: the scheduler's results have ended")
        for _, task in batch.drawn:
            copy = task.model_copy()
            self._step_of[id(copy)] = batch.step
            group_id = await self.sched.submit(copy)
            future: asyncio.Future[Group] = loop.create_future()
            self._waiting[group_id] = future
            batch.futures.append(future)
        self.batches.append(batch)
        self.next_step = batch.step + 1

    async def take(self, step: int) -> tuple[Batch, list[Group]]:
        """The oldest batch (it must be update `step`'s) and its groups in drawn order, once all
        are played."""
        if not self.batches or self.batches[0].step != step:
            held = [b.step for b in self.batches]
            raise RuntimeError(f"update {step}: its batch is not the oldest in flight ({held})")
        batch = self.batches[0]
        groups = [await future for future in batch.futures]
        self.batches.pop(0)
        # its copies are done with: their ids may be reused by later objects
        self._step_of = {k: v for k, v in self._step_of.items() if v != step}
        return batch, groups

    def step_of(self, task: AnyTask, default: int) -> int:
        """The update that `task` (a submitted copy) is played for; `default` for any other."""
        return self._step_of.get(id(task), default)

    def replay_cursors(self, current: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        """The cursors to save in a checkpoint: those before the oldest batch in flight (a
        resume draws and plays it again), or `current` when none is."""
        return dict(self.batches[0].cursors) if self.batches else dict(current)

    async def _collect(self) -> None:
        try:
            async for group in self.sched.results():
                future = self._waiting.pop(group.group_id, None)
                if future is not None and not future.done():
                    future.set_result(group)
            error: BaseException = SchedulerClosed("the scheduler closed with batches in flight")
        except Exception as exc:  # a runner bug (RunnerError): every waiting batch fails with it
            error = exc
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        self._waiting.clear()
