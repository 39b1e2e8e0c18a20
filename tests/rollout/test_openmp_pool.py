"""`balance_pool`: with idle cores the caller's OpenMP workers are freed (libgomp on Linux) so the
decode thread's spin; under load (CPU pressure, else runnable threads of other processes) the
caller holds a pool again so they sleep. Torch computes the same either way."""

from __future__ import annotations

import os
from collections.abc import Iterator
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
