"""benchmarks/async_vs_sync.py: its last lines (each names its mode), its busy meter, and tiny
runs of both modes end to end (the real one on a random 2-layer Llama) whose last line has the
format. No timing is asserted."""

from __future__ import annotations

import asyncio
import re
from types import ModuleType

import pytest
from benchmark_scripts import load_benchmark

REAL = re.compile(
    r"async_vs_sync \(real: hf engine, tiny\): sync [\d.]+ traj/s; honing [\d.]+ traj/s; "
    r"speedup [\d.]+x; engine busy \d+% vs \d+%; mean decode batch [\d.]+ vs [\d.]+ of 4"
)
SIMULATED = re.compile(
    r"async_vs_sync \(simulated: scripted engine\): sync [\d.]+ traj/s; honing [\d.]+ traj/s; "
    r"speedup [\d.]+x; engine busy \d+%"
)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("async_vs_sync")


def test_the_real_last_line(bench: ModuleType) -> None:
    # 16 episodes in 4 s and in 2 s; 600 tokens in 100 and 60 decode steps; busy 3 s and 2 s
    sync = bench.Side("sync", 4.0, 16, 600, 100, 3.0)
    ours = bench.Side("honing", 2.0, 16, 600, 60, 2.0)
    assert bench.real_last_line("tiny", sync, ours, 16) == (
        "async_vs_sync (real: hf engine, tiny): sync 4.00 traj/s; honing 8.00 traj/s; "
        "speedup 2.0x; engine busy 75% vs 100%; mean decode batch 6.0 vs 10.0 of 16"
    )


def test_the_busy_meter_counts_the_union_of_generations(bench: ModuleType) -> None:
    now = [0.0]
    meter = bench.BusyMeter(clock=lambda: now[0])

    async def scenario() -> None:
        async with meter.generating():  # 0 → 10
            now[0] = 5.0
            async with meter.generating():  # 5 → 15, overlapping the first
                now[0] = 10.0
            now[0] = 15.0
        now[0] = 30.0  # idle from 15 to 30
        async with meter.generating():  # 30 → 35
            now[0] = 35.0

    asyncio.run(scenario())
    assert meter.busy_s == (15 - 0) + (35 - 30)  # the union: not the sum, not the idle gap


def test_plans_are_seeded_and_within_their_ranges(bench: ModuleType) -> None:
    plans = bench.make_plans(50, 3, (16, 128), 0.06)
    assert plans == bench.make_plans(50, 3, (16, 128), 0.06)
    assert all(1 <= len(p.tokens) == len(p.env_s) <= bench.MAX_TURNS for p in plans)
    assert all(16 <= t <= 128 for p in plans for t in p.tokens)


@pytest.mark.timeout(300)
def test_a_tiny_real_run_prints_its_line(
    bench: ModuleType, smol_dir: object, capsys: pytest.CaptureFixture[str]
) -> None:
    bench.main(["--episodes", "8", "--slots", "4", "--env-slots", "4", "--min-tokens", "2",
                "--max-tokens", "4", "--env-median-ms", "1"])  # fmt: skip
    lines = capsys.readouterr().out.strip().splitlines()
    assert REAL.fullmatch(lines[-1]), lines[-1]
    assert [line.split(":")[0] for line in lines[-3:-1]] == ["sync", "honing"]


def test_a_tiny_simulated_run_says_it_is_simulated(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    bench.main(["--mode", "simulated", "--episodes", "16", "--slots", "4", "--per-token-ms",
                "0.01"])  # fmt: skip
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert SIMULATED.fullmatch(last), last
