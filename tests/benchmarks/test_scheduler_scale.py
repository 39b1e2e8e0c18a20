"""benchmarks/scheduler_scale.py: a tiny run delivers every episode and prints its last line.
No timing is asserted."""

from __future__ import annotations

import re

import pytest
from benchmark_scripts import load_benchmark

LAST_LINE = re.compile(
    r"scheduler_scale: (\d+) episodes; (\d+) steps; [\d.]+ us/step; peak RSS \d+ MB"
)


def test_a_tiny_run_prints_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    load_benchmark("scheduler_scale").main(["--episodes", "64", "--steps", "3"])
    lines = capsys.readouterr().out.strip().splitlines()
    match = LAST_LINE.fullmatch(lines[-1])
    assert match, lines[-1]
    assert (match[1], match[2]) == ("64", str(64 * 3))
    assert "64 delivered; groups 8;" in lines[-3]  # the honing line: every episode delivered
