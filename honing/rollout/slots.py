"""Priority-aware slot semaphores: the scheduler's engine slots and env slots.

    slots = PrioritySlots("engine", capacity=32)
    if not slots.try_acquire():              # a free slot and nobody waiting: taken, no allocation
        await slots.wait(rank, age)          # else queue; the lowest (rank, age) is served first
    try: ...
    finally: slots.release()

A released slot goes straight to the best waiter, so a newcomer never overtakes a queued
episode; cancelled waiters and `resize` are handled (docs/rollout.md, "The modules in detail").
Not covered here: which rank and age an episode has (the scheduler's `(−priority, group seq)`),
and the per-episode bookkeeping that releases an abandoned episode's slots (`scheduler._Hold`).
"""

from __future__ import annotations

import asyncio
from heapq import heappop, heappush


class PrioritySlots:
    """A counting semaphore whose waiters are served by (rank, age), lowest first."""

    __slots__ = ("_counter", "_heap", "capacity", "in_use", "name", "waiting")

    def __init__(self, name: str, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"{name} slots: capacity must be >= 0, got {capacity}")
        self.name = name
        self.capacity = capacity
        self.in_use = 0
        self.waiting = 0  # waiters still queued (cancelled ones excluded)
        self._heap: list[tuple[int, int, int, asyncio.Future[None]]] = []
        self._counter = 0  # tie-break among equal (rank, age): first come, first served

    def try_acquire(self) -> bool:
        """Take a slot if one is free and nobody is queued; never blocks, never allocates."""
        if self.in_use < self.capacity and not self._heap:
            self.in_use += 1
            return True
        return False

    async def wait(self, rank: int, age: int) -> None:
        """Queue for a slot; returns holding it. Call after `try_acquire` said no."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._counter += 1
        heappush(self._heap, (rank, age, self._counter, fut))
        self.waiting += 1
        self._wake()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # the slot was handed over as we were cancelled
                self.release()
            else:  # still queued: its entry is skipped when it reaches the top
                fut.cancel()
                self.waiting -= 1
            raise

    def release(self) -> None:
        """Give a slot back (to the best waiter, if any)."""
        self.in_use -= 1
        if self._heap:
            self._wake()

    def resize(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"{self.name} slots: capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._wake()

    def _wake(self) -> None:
        heap = self._heap
        while heap and self.in_use < self.capacity:
            fut = heappop(heap)[3]
            if fut.done():  # a cancelled waiter
                continue
            self.in_use += 1
            self.waiting -= 1
            fut.set_result(None)
