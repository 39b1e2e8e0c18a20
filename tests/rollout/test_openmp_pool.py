"""`balance_pool`: with idle cores the caller's OpenMP workers are freed (libgomp on Linux) so the
decode thread's spin; under load (CPU pressure, else runnable threads of other processes) the
caller holds a pool again so they sleep; the ballast thread does the same from the decode loop.
Torch computes the same either way."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from honing.rollout.engines import openmp


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.fixture
def two_threads() -> Iterator[None]:
    if not Path("/proc/self/maps").exists() or openmp._libgomp() is None:
        pytest.skip("libgomp on Linux only")
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(old)


def test_idle_cores_free_the_callers_workers_and_load_brings_them_back(
    two_threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = torch.randn(400_000), torch.randn(400_000)
    expected = a + b  # a parallel op: this thread's pool holds a worker
    with_pool = threads()
    monkeypatch.setattr(openmp, "cpu_pressure", lambda: 0.0)
    assert openmp.balance_pool(2) == "spin"
    assert threads() == with_pool - 1
    monkeypatch.setattr(openmp, "cpu_pressure", lambda: 60.0)  # threads waiting for cores
    assert openmp.balance_pool(2) == "sleep"
    assert threads() == with_pool
    monkeypatch.setattr(openmp, "cpu_pressure", lambda: None)  # no PSI: count runnable threads
    monkeypatch.setattr(openmp, "others_running", lambda *_: 0)
    assert openmp.balance_pool(2) == "spin"
    monkeypatch.setattr(openmp, "others_running", lambda *_: 64)
    assert openmp.balance_pool(2) == "sleep"
    torch.testing.assert_close(a + b, expected, rtol=0, atol=0)


def test_the_load_figures_parse_where_linux_has_them() -> None:
    if Path("/proc/loadavg").exists():
        others = openmp.others_running()
        assert others is not None and others >= 0
    if Path("/proc/pressure/cpu").exists():
        pressure = openmp.cpu_pressure()
        assert pressure is not None and 0.0 <= pressure <= 100.0


def wait_for(predicate: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_ballast_holds_a_pool_while_the_cores_are_busy_and_frees_it_after(
    two_threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ballast = openmp.Ballast(2)
    try:
        base = threads()  # the ballast thread itself, holding nothing yet
        monkeypatch.setattr(openmp, "cpu_pressure", lambda: 60.0)
        ballast.tick()
        assert wait_for(lambda: ballast.holding)
        assert threads() == base + 1  # its pool's worker: every worker of the process sleeps
        monkeypatch.setattr(openmp, "cpu_pressure", lambda: 0.0)
        ballast.tick()  # within TICK_SECONDS of the last look: the load is not read again
        assert ballast.holding
        ballast._next = 0.0
        ballast.tick()
        assert wait_for(lambda: not ballast.holding)
        assert wait_for(lambda: threads() == base)
    finally:
        ballast.close()
    assert not ballast._thread.is_alive()


def test_the_ballast_leaves_torchs_thread_settings_alone(
    two_threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch.set_num_threads also turns MKL's dynamic threading off for the whole process, which
    made every later decode step's attention ~2x slower; the ballast's pool takes torch's thread
    count without it."""
    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    monkeypatch.setattr(openmp, "cpu_pressure", lambda: 60.0)
    ballast = openmp.Ballast(2)
    try:
        base = threads()
        ballast.tick()
        assert wait_for(lambda: ballast.holding)
        assert threads() == base + 1  # a pool of torch's 2 threads: one worker besides itself
    finally:
        ballast.close()
    assert calls == []
