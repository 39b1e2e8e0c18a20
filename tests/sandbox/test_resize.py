"""SandboxPool.resize: growing starts cells, shrinking closes idle cells at once and busy cells
only after their run, so the scheduler can use the pool as elastic env workers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from honing.sandbox import ExecRequest, ExecStatus, SandboxConfig, SandboxPool


async def _until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


async def test_grow_then_shrink_idle_cells(make_config: Callable[..., SandboxConfig]) -> None:
    async with SandboxPool(make_config(pool_size=1)) as pool:
        await pool.resize(3)
        assert pool.size == 3 and len(pool._cells) == 3 and pool._idle.qsize() == 3
        results = await pool.run_many([ExecRequest(code=f"print({i})") for i in range(6)])
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]
        cells = list(pool._cells.values())
        await pool.resize(1)
        assert pool.size == 1 and len(pool._cells) == 1 and pool._idle.qsize() == 1
        assert sum(c.alive for c in cells) == 1  # the two that left are closed
        result = await pool.run(ExecRequest(code="print('still here')"))
        assert result.status is ExecStatus.OK and result.stdout == "still here\n"
        with pytest.raises(ValueError, match="at least one cell"):
            await pool.resize(0)


async def test_shrinking_lets_busy_cells_finish_their_run(
    make_config: Callable[..., SandboxConfig],
) -> None:
    async with SandboxPool(make_config(pool_size=2)) as pool:
        slow = ExecRequest(code="import time; time.sleep(1.0); print('done')")
        runs = [asyncio.ensure_future(pool.run(slow)) for _ in range(2)]
        await _until(lambda: pool._idle.qsize() == 0)  # both cells are busy
        await pool.resize(1)
        assert pool.size == 1 and len(pool._cells) == 2  # nobody was interrupted
        results = await asyncio.gather(*runs)
        assert [(r.status, r.stdout) for r in results] == [(ExecStatus.OK, "done\n")] * 2
        assert len(pool._cells) == 1 and pool._idle.qsize() == 1


async def test_growing_during_a_pending_shrink_keeps_the_busy_cells(
    make_config: Callable[..., SandboxConfig],
) -> None:
    async with SandboxPool(make_config(pool_size=2)) as pool:
        slow = ExecRequest(code="import time; time.sleep(0.5); print('done')")
        runs = [asyncio.ensure_future(pool.run(slow)) for _ in range(2)]
        await _until(lambda: pool._idle.qsize() == 0)
        started = pool._counter
        await pool.resize(1)
        await pool.resize(2)  # the busy cell due to leave simply stays
        assert pool._counter == started  # no new cell was started for it
        await asyncio.gather(*runs)
        assert pool.size == 2 and len(pool._cells) == 2 and pool._idle.qsize() == 2
