"""The pool: many concurrent jobs, crashed cells, lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import textwrap
import time
from collections.abc import Callable

import pytest

from honing.errors import SandboxError
from honing.sandbox import ExecRequest, ExecStatus, SandboxPool
from honing.sandbox.cell import Cell


async def test_200_mixed_jobs_are_all_reported_correctly(make_config) -> None:
    requests: list[ExecRequest] = []
    expected: list[tuple[ExecStatus, str]] = []
    for i in range(200):
        kind = i % 20
        if kind < 14:
            requests.append(
                ExecRequest(code=f"import sys; print(sys.argv[1], {i} * 2)", argv=[str(i)])
            )
            expected.append((ExecStatus.OK, f"{i} {i * 2}\n"))
        elif kind < 17:
            requests.append(ExecRequest(code=f"print('before {i}'); raise SystemExit({kind})"))
            expected.append((ExecStatus.ERROR, f"before {i}\n"))
        elif kind < 19:
            requests.append(
                ExecRequest(code="x = bytearray(256 << 20)\nprint('allocated')", memory_mb=32)
            )
            expected.append((ExecStatus.MEMORY_LIMIT, ""))
        else:
            requests.append(
                ExecRequest(code=f"print('sleeping {i}', flush=True)\nimport time; time.sleep(60)",
                            timeout_s=1)
            )  # fmt: skip
            expected.append((ExecStatus.TIMEOUT, f"sleeping {i}\n"))
    async with SandboxPool(make_config(pool_size=4)) as pool:
        results = await pool.run_many(requests, concurrency=64)  # more in flight than cells
        assert len(pool._cells) == 4  # no cell was lost on the way
    assert len(results) == 200
    for i, (result, (status, stdout)) in enumerate(zip(results, expected, strict=True)):
        assert result.status is status, (i, result)
        assert result.stdout == stdout, (i, result)
    errors = [r for r, (s, _) in zip(results, expected, strict=True) if s is ExecStatus.ERROR]
    assert {r.exit_code for r in errors} == {14, 15, 16}
    assert sum(r.status is ExecStatus.OK for r in results) == 140


async def _wait_for(predicate, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def test_crashed_cell_fails_only_its_job_and_loses_no_queued_work(
    pool: SandboxPool, token: str
) -> None:
    marker = f"started-{token}"
    victim = ExecRequest(
        code=f"open({marker!r}, 'w').close()\nimport time; time.sleep(60)", timeout_s=120
    )
    neighbour = ExecRequest(code="import time; time.sleep(1); print('neighbour')")
    queued = [ExecRequest(code=f"print({i})") for i in range(8)]
    batch = asyncio.ensure_future(pool.run_many([victim, neighbour, *queued], concurrency=10))

    def victim_cell() -> Cell | None:
        for cell in pool._cells.values():
            if (cell.workspace / marker).exists():
                return cell
        return None

    await _wait_for(lambda: victim_cell() is not None)
    cell = victim_cell()
    assert cell is not None and cell._proc is not None
    os.kill(cell._proc.pid, signal.SIGKILL)  # the cell dies from outside, mid-job
    results = await asyncio.wait_for(batch, 60)

    assert results[0].status is ExecStatus.SANDBOX_ERROR, results[0]  # not the program's error
    assert results[0].error
    assert results[1].status is ExecStatus.OK and results[1].stdout == "neighbour\n"
    assert [r.stdout for r in results[2:]] == [f"{i}\n" for i in range(8)]
    assert all(r.status is ExecStatus.OK for r in results[2:])
    after = await pool.run_many([ExecRequest(code=f"print({i})") for i in range(6)])
    assert [r.stdout for r in after] == [f"{i}\n" for i in range(6)]
    assert len(pool._cells) == 2
    assert cell.name not in pool._cells
    assert all(c.alive for c in pool._cells.values())


async def test_a_cell_that_died_while_idle_fails_no_job(pool: SandboxPool) -> None:
    cell = next(iter(pool._cells.values()))
    assert cell._proc is not None
    os.kill(cell._proc.pid, signal.SIGKILL)
    await _wait_for(lambda: not cell.alive)
    # The dead cell still sits in the idle queue; no job has run on it.
    results = await pool.run_many([ExecRequest(code=f"print({i})") for i in range(4)])
    assert [r.status for r in results] == [ExecStatus.OK] * 4, [r.error for r in results]
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]


async def test_both_cells_crash_and_the_pool_recovers(pool: SandboxPool, token: str) -> None:
    marker = f"started-{token}"
    victim = ExecRequest(code=f"open({marker!r}, 'w').close()\nimport time; time.sleep(60)")
    batch = asyncio.ensure_future(
        pool.run_many([victim, victim, *[ExecRequest(code="print('q')")] * 4], concurrency=6)
    )
    started = lambda: [c for c in pool._cells.values() if (c.workspace / marker).exists()]  # noqa: E731
    await _wait_for(lambda: len(started()) == 2)
    for cell in started():
        assert cell._proc is not None
        os.kill(cell._proc.pid, signal.SIGKILL)
    results = await asyncio.wait_for(batch, 60)
    assert [r.status for r in results[:2]] == [ExecStatus.SANDBOX_ERROR] * 2
    assert [r.stdout for r in results[2:]] == ["q\n"] * 4


async def test_jobs_on_one_workspace_run_one_at_a_time(pool: SandboxPool) -> None:
    ws = pool.workspace()
    ws.write("log.txt", "")
    program = (
        "import time\nwith open('log.txt', 'a') as f:\n    f.write('start\\n')\n"
        "time.sleep(0.05)\nwith open('log.txt', 'a') as f:\n    f.write('end\\n')\n"
    )
    results = await pool.run_many([ExecRequest(code=program, workspace=ws.id)] * 6, concurrency=6)
    assert all(r.status is ExecStatus.OK for r in results)
    log = (ws.path / "log.txt").read_text()
    assert log == "start\nend\n" * 6  # no lost update, no interleaving


async def test_unknown_workspace_is_an_error(pool: SandboxPool) -> None:
    with pytest.raises(KeyError, match="no workspace"):
        await pool.run(ExecRequest(code="pass", workspace="does-not-exist"))


async def test_lifecycle(make_config) -> None:
    pool = SandboxPool(make_config())
    with pytest.raises(SandboxError):
        await pool.run(ExecRequest(code="pass"))  # not started
    with pytest.raises(SandboxError):
        _ = pool.root
    async with pool:
        root = pool.root
        cells = list(pool._cells.values())
        assert root.is_dir() and len(cells) == 2
        assert (await pool.run(ExecRequest(code="print(1)"))).stdout == "1\n"
        with pytest.raises(SandboxError):
            await pool.start()  # only once
    assert not root.exists()  # workspaces and cells are cleaned up
    assert not any(c.alive for c in cells)
    for c in cells:
        if c.cgroup is not None:
            assert not c.cgroup.memory.exists()
    with pytest.raises(SandboxError):
        await pool.run(ExecRequest(code="pass"))  # closed
    await pool.close()  # idempotent


async def test_pool_root_from_config(make_config, tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with SandboxPool(make_config(pool_size=1, root=tmp_path / "pools")) as pool:
        assert pool.root.parent == tmp_path / "pools"
        assert (await pool.run(ExecRequest(code="print('x')"))).stdout == "x\n"
    assert list((tmp_path / "pools").iterdir()) == []


async def test_a_cancelled_run_does_not_leak_its_reply_into_the_next(pool1: SandboxPool) -> None:
    slow = ExecRequest(code="import time; time.sleep(30); print('stale')", timeout_s=60)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(pool1.run(slow), 0.5)
    # The only cell was busy with the cancelled job: the next run gets its own reply, not the
    # cancelled one's.
    result = await pool1.run(ExecRequest(code="print('fresh')"))
    assert result.status is ExecStatus.OK, result
    assert result.stdout == "fresh\n"


async def test_a_cancelled_run_stops_its_program_and_its_cell_is_reused(
    pool1: SandboxPool, token: str, sleep_token: str, host_pids_with: Callable[[str], list[int]]
) -> None:
    [cell] = pool1._cells.values()
    marker = f"started-{token}"
    program = textwrap.dedent(
        f"""
        import subprocess, time
        subprocess.Popen(["sleep", "{sleep_token}"])  # a process besides the program's
        open("/tmp/litter", "w").close()
        open({marker!r}, "w").close()
        time.sleep(60)
        """
    )
    for _ in range(3):
        run = asyncio.ensure_future(pool1.run(ExecRequest(code=program, timeout_s=120)))
        await _wait_for(lambda: (cell.workspace / marker).exists())
        started = time.monotonic()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        listing = "import os; print(os.listdir('.'), os.listdir('/tmp'))"
        after = await pool1.run(ExecRequest(code=listing))
        assert after.stdout == "[] []\n", after  # nothing of the cancelled job is left
        assert time.monotonic() - started < 10  # stopped, not waited out
        assert host_pids_with(sleep_token) == []
    assert list(pool1._cells.values()) == [cell]  # the same cell all along: no replacement


async def test_a_cancel_that_comes_as_the_program_ends_stops_nothing_else(
    pool1: SandboxPool,
) -> None:
    # The cancel may reach the cell after the job has ended: the next jobs must run untouched.
    for delay in (0.0, 0.001, 0.005, 0.02, 0.05):
        run = asyncio.ensure_future(pool1.run(ExecRequest(code="print('quick')")))
        await asyncio.sleep(delay)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        results = await pool1.run_many([ExecRequest(code=f"print({i})") for i in range(3)])
        assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"], results
    assert len(pool1._cells) == 1


async def test_a_cancelled_run_on_a_workspace_gives_its_files_back(pool1: SandboxPool) -> None:
    ws = pool1.workspace()
    ws.write("state.txt", "kept")
    program = "open('started', 'w').close()\nimport time\ntime.sleep(60)"
    run = asyncio.ensure_future(pool1.run(ExecRequest(code=program, workspace=ws.id)))
    await _wait_for(lambda: any((c.workspace / "started").exists() for c in pool1._cells.values()))
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert ws.read("state.txt") == b"kept"
    result = await pool1.run(ExecRequest(code="print(open('state.txt').read())", workspace=ws.id))
    assert result.stdout == "kept\n", result


async def test_a_replaced_cell_leaves_no_cgroup_fd_or_directory_behind(
    pool1: SandboxPool, token: str
) -> None:
    groups = pool1._cgroups
    if groups is None or not groups.available:
        pytest.skip("needs the memory cgroup")

    def cell_groups() -> set[tuple[str, str]]:
        parents = {"memory": groups.memory, "pids": groups.pids}
        return {(k, c.name) for k, p in parents.items() if p for c in p.iterdir() if c.is_dir()}

    assert (await pool1.run(ExecRequest(code="pass"))).ok  # the cell has opened what a job needs
    [old] = pool1._cells.values()
    groups_before, fds_before = cell_groups(), len(os.listdir("/proc/self/fd"))
    marker = f"started-{token}"
    victim = ExecRequest(code=f"open({marker!r}, 'w').close()\nimport time; time.sleep(60)")
    run = asyncio.ensure_future(pool1.run(victim))
    await _wait_for(lambda: (old.workspace / marker).exists())
    assert old._proc is not None
    os.kill(old._proc.pid, signal.SIGKILL)  # the cell dies mid-job: it is replaced
    assert (await run).status is ExecStatus.SANDBOX_ERROR
    # The only cell is the replacement, which starts once the old one is closed.
    assert (await pool1.run(ExecRequest(code="print('new')"))).stdout == "new\n"
    [new] = pool1._cells.values()
    assert new is not old
    assert cell_groups() == {(kind, new.name) for kind, _ in groups_before}
    assert len(os.listdir("/proc/self/fd")) == fds_before
    assert not old.directory.exists()
