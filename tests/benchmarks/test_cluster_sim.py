"""benchmarks/cluster_sim.py: an engine's batch-dependent step cost in virtual time, and a
small simulated cluster whose workers die mid-episode: every episode delivered once, played to
its end, nothing lost, and the last line in its format. No timing is asserted."""

from __future__ import annotations

import asyncio
from types import ModuleType

import pytest
from benchmark_scripts import load_benchmark

from honing.rollout import simclock


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("cluster_sim")


def test_a_decode_step_costs_base_plus_batch(bench: ModuleType) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        engine = bench.SimEngine("engine-0", bench.Meter())
        done: list[float] = []

        async def decode(tokens: int) -> None:
            await engine.decode(tokens)
            done.append(loop.time())

        await asyncio.gather(decode(10), decode(30))
        return done

    base, per_seq = 0.015, 0.00025
    # 10 steps at batch 2, then 20 more at batch 1
    assert simclock.run(main()) == pytest.approx(
        [10 * (base + 2 * per_seq), 10 * (base + 2 * per_seq) + 20 * (base + per_seq)]
    )


def test_workers_die_and_nothing_is_lost(bench: ModuleType) -> None:
    result = simclock.run(bench.simulate(200, 4, 64, death_rate=3.0, seed=0))
    assert result.engine_deaths >= 1 and result.sandbox_deaths >= 1
    assert result.retries_by_cause.get("generate WorkerLost", 0) > 0
    assert result.retries_by_cause.get("step WorkerLost", 0) > 0
    assert (result.lost, result.duplicates, result.wrong) == (0, 0, [])
    assert result.finished == result.submitted == 200
    assert 0 < result.engines_busy <= 1
    line = bench.last_line(result)
    match = bench.LAST_LINE.fullmatch(line)
    assert match is not None, line
    assert match.group(1) == "200" and match.group(5) == "0"
    assert bench.report(result)[-1] == line
