"""benchmarks/overlap.py: its last line and mean staleness (pure), and a tiny run end to end (a
`honing serve` subprocess, two trainings of 2 updates through engine.url) whose last line has
the format. No timing is asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from types import ModuleType

import pytest
from benchmark_scripts import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("overlap")


def test_the_last_line_and_the_mean_staleness(bench: ModuleType) -> None:
    assert bench.last_line(100.0, 150.0, 0.5) == (
        "overlap: alternating 100.0 episodes/min; overlapped 150.0 episodes/min; speedup 1.5x; "
        "mean staleness 0.50"
    )
    # 4 trajectories at lag 0, then 4 at lag 1 and 2 at lag 0: (4 * 1) / 10
    records = [{"staleness": {"0": 4}}, {"staleness": {"0": 2, "1": 4}}]
    assert bench.mean_staleness(records) == pytest.approx(4 / 10)


@pytest.mark.timeout(300)
def test_a_tiny_run_prints_the_line(smol_dir: object) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "overlap.py"), "--steps", "2", "--hidden", "32",
         "--layers", "1", "--n", "2", "--groups", "1", "--max-new-tokens", "4"],
        capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"overlap: alternating \d+\.\d episodes/min; overlapped \d+\.\d episodes/min; "
        r"speedup \d+\.\dx; mean staleness \d\.\d\d",
        last,
    ), last
