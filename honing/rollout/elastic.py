"""Elastic pools: a set of workers whose size follows the queue for the slots they provide.

    pool = ElasticPool("env", workers, scaling, slots, on_scale=callback)
    await pool.start()       # clamp the workers to [min, max]; slots = size * slots_per_worker
    pool.tick(now)           # grow with the queue or shrink when idle; one resize at a time
    resizing = pool.cancel() # shutdown: the resize in flight (if any), cancelled, to await

The rule (docs/rollout.md, "Elastic pools"): grow when the episodes waiting for a slot would fill
`grow_ratio` of a worker's slots, by enough workers for the whole queue; shrink one worker at a
time once nobody has queued and a whole worker's slots have been free for `cooldown_s`; at least
`cooldown_s` between changes. A failed resize is logged and leaves the pool as it is.
Not covered: the slots themselves (`honing.rollout.slots`), what a worker is (sandbox cells, Ray
actors in `honing.rollout.ray`), and when to tick and what to count (the scheduler).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

from pydantic import Field

from honing.config import StrictModel
from honing.rollout.slots import PrioritySlots

log = logging.getLogger(__name__)


class ElasticWorkers(Protocol):
    """Something whose worker count can change: sandbox cells, Ray actors, engine replicas."""

    @property
    def size(self) -> int:
        """The number of workers (the target of the last `resize`)."""
        ...

    async def resize(self, n: int) -> None:
        """Grow or shrink to `n` workers; busy workers being removed finish their call first."""
        ...


class Scaling(StrictModel):
    """How one elastic pool follows its queue (used only when its workers are given)."""

    min_workers: int = Field(1, ge=1, description="Never fewer workers than this.")
    max_workers: int = Field(8, ge=1, description="Never more workers than this.")
    slots_per_worker: int = Field(8, ge=1, description="Slots each worker adds to the gate.")
    grow_ratio: float = Field(
        0.5,
        gt=0,
        description="Grow when the episodes waiting for a slot would fill this fraction of a "
        "new worker's slots; adds enough workers for the whole queue at once.",
    )
    cooldown_s: float = Field(
        5.0,
        ge=0,
        description="Seconds between two changes; also how long it must stay idle to shrink.",
    )


class ElasticPool:
    """One set of `ElasticWorkers` and the slots it provides, resized by `tick`."""

    def __init__(
        self,
        name: str,
        workers: ElasticWorkers,
        scaling: Scaling,
        slots: PrioritySlots,
        on_scale: Callable[[str, int, int], None],
    ) -> None:
        if scaling.min_workers > scaling.max_workers:
            raise ValueError(
                f"{name}_scaling: min_workers {scaling.min_workers} > max_workers "
                f"{scaling.max_workers}"
            )
        self.name = name
        self.workers = workers
        self.scaling = scaling
        self.slots = slots
        self._on_scale = on_scale  # (name, old, new), after each successful resize
        self._last_change = -math.inf
        self._idle_since: float | None = None
        self._resizing: asyncio.Task[None] | None = None

    @property
    def size(self) -> int:
        return self.workers.size

    async def start(self) -> None:
        """Bring the workers within [min_workers, max_workers] and size the slots to them."""
        sc = self.scaling
        size = self.workers.size
        if not sc.min_workers <= size <= sc.max_workers:
            await self.workers.resize(min(max(size, sc.min_workers), sc.max_workers))
        self.slots.resize(self.workers.size * sc.slots_per_worker)

    def tick(self, now: float) -> None:
        """Start a resize if the queue (or its absence) calls for one; `now` is monotonic."""
        if self._resizing is not None:
            return
        sc = self.scaling
        slots = self.slots
        size = self.workers.size
        waiting = slots.waiting
        if waiting:
            self._idle_since = None
        elif slots.capacity - slots.in_use >= sc.slots_per_worker:
            if self._idle_since is None:
                self._idle_since = now
        else:
            self._idle_since = None
        if now - self._last_change < sc.cooldown_s:
            return
        target = size
        if waiting >= sc.grow_ratio * sc.slots_per_worker and size < sc.max_workers:
            target = min(sc.max_workers, size + max(1, math.ceil(waiting / sc.slots_per_worker)))
        elif (
            self._idle_since is not None
            and now - self._idle_since >= sc.cooldown_s
            and size > sc.min_workers
        ):
            target = size - 1
        if target == size:
            return
        self._last_change = now
        self._idle_since = None
        self._resizing = asyncio.get_running_loop().create_task(self._resize(size, target))

    def cancel(self) -> asyncio.Task[None] | None:
        """Cancel the resize in flight and return it (for the caller to await), if any."""
        task = self._resizing
        if task is not None:
            task.cancel()
        return task

    async def _resize(self, old: int, new: int) -> None:
        per = self.scaling.slots_per_worker
        try:
            if new < old:
                self.slots.resize(new * per)  # no new work lands on the leaving worker
            await self.workers.resize(new)
            self._on_scale(self.name, old, new)
        except Exception as exc:  # a failed resize keeps the pool as it is, and says so
            log.warning(
                "scheduler: resizing %s workers %d -> %d failed: %s", self.name, old, new, exc
            )
        finally:
            self.slots.resize(self.workers.size * per)
            self._last_change = time.monotonic()
            self._resizing = None
