"""The sandbox pool's utilisation counters (`SandboxPool.usage`), as the trainer samples them."""

from __future__ import annotations

import asyncio

from honing.sandbox import ExecRequest, SandboxPool


async def test_usage_counts_runs_busy_and_waiting_time_between_snapshots(
    pool: SandboxPool,
) -> None:
    before = pool.usage()
    assert before.cells == 2 and before.busy == 0
    sleep = ExecRequest(code="import time; time.sleep(0.3)")
    results = await asyncio.gather(*(pool.run(sleep) for _ in range(4)))  # 4 jobs, 2 cells
    assert all(r.status.value == "ok" for r in results)
    used = pool.usage().since(before)
    assert used.runs == 4 and used.busy == 0
    assert used.busy_s >= 4 * 0.3  # each job held its cell at least as long as it slept
    # two of them waited for a cell to come free: each nearly as long as a job sleeps (they
    # asked a moment after the first two took the cells; 0.591 s of 0.6 was seen under load)
    assert used.wait_s >= 2 * 0.25
    assert used.busy_fraction is not None and 0.0 < used.busy_fraction <= 1.0
    assert used.queued is not None and used.queued > 0
    assert before.busy_fraction is None  # a single snapshot has no interval
