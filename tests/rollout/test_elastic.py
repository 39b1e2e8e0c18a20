"""One elastic pool on its own, ticked by hand: how far it grows, its cooldown, its shrinking,
and a failed resize. The scheduler driving two pools is tested in test_scheduler.py."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from honing.rollout.elastic import ElasticPool, Scaling
from honing.rollout.slots import PrioritySlots


class FakeWorkers:
    def __init__(self, size: int, *, fail: bool = False) -> None:
        self._size = size
        self.fail = fail

    @property
    def size(self) -> int:
        return self._size

    async def resize(self, n: int) -> None:
        await asyncio.sleep(0)
        if self.fail:
            raise RuntimeError("no room on the cluster")
        self._size = n


async def spin(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_pool_grows_for_its_whole_queue_and_shrinks_by_one_after_cooldown() -> None:
    workers = FakeWorkers(9)  # above max_workers: start() clamps it
    slots = PrioritySlots("engine", 0)
    scaled: list[tuple[str, int, int]] = []
    scaling = Scaling(min_workers=1, max_workers=6, slots_per_worker=2, cooldown_s=10.0)
    pool = ElasticPool("engine", workers, scaling, slots, lambda *e: scaled.append(e))
    await pool.start()
    assert workers.size == 6 and slots.capacity == 6 * 2
    await workers.resize(1)
    slots.resize(2)
    assert slots.try_acquire() and slots.try_acquire()
    waiters = [asyncio.create_task(slots.wait(0, i)) for i in range(5)]
    await spin()
    assert slots.waiting == 5

    pool.tick(time.monotonic())
    await spin()
    assert workers.size == 1 + 3  # ceil(5 waiting / 2 slots per worker) more
    assert slots.capacity == 4 * 2 and slots.waiting == 0
    assert scaled == [("engine", 1, 4)]

    await asyncio.gather(*waiters)
    for _ in range(7):
        slots.release()
    now = time.monotonic()
    pool.tick(now)  # idle from now on, but inside the cooldown
    await spin()
    assert workers.size == 4
    pool.tick(now + 10.0)
    await spin()
    assert workers.size == 3 and slots.capacity == 3 * 2
    assert scaled == [("engine", 1, 4), ("engine", 4, 3)]


async def test_a_failed_resize_keeps_the_pool_as_it_is_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    workers = FakeWorkers(1, fail=True)
    slots = PrioritySlots("env", 0)
    scaled: list[tuple[str, int, int]] = []
    scaling = Scaling(min_workers=1, max_workers=4, slots_per_worker=1, cooldown_s=0.0)
    pool = ElasticPool("env", workers, scaling, slots, lambda *e: scaled.append(e))
    await pool.start()
    assert slots.try_acquire()
    waiter = asyncio.create_task(slots.wait(0, 0))
    await spin()
    with caplog.at_level(logging.WARNING, logger="honing.rollout.elastic"):
        pool.tick(time.monotonic())
        await spin()
    assert workers.size == 1 and slots.capacity == 1 and scaled == []
    assert "resizing env workers 1 -> 2 failed: no room on the cluster" in caplog.text
    assert pool.cancel() is None  # nothing left in flight
    waiter.cancel()


def test_min_workers_above_max_workers_is_an_error_that_names_the_pool() -> None:
    scaling = Scaling(min_workers=3, max_workers=2)
    with pytest.raises(ValueError, match="env_scaling: min_workers 3 > max_workers 2"):
        ElasticPool("env", FakeWorkers(2), scaling, PrioritySlots("env", 0), lambda *e: None)
