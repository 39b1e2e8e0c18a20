"""The virtual clock: sleeps cost no wall time and end at their virtual instants, in order;
timeouts fire at their virtual deadline; real I/O (a thread's result) still arrives."""

from __future__ import annotations

import asyncio
import time

import pytest

from honing.rollout import simclock


def test_an_hour_of_sleeping_takes_no_wall_time() -> None:
    async def main() -> tuple[float, float, int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, simclock.VirtualClockLoop)
        t0 = loop.time()
        await asyncio.sleep(3600)
        return t0, loop.time(), loop.jumps

    wall = time.perf_counter()
    t0, t1, jumps = simclock.run(main(), start=100.0)
    assert time.perf_counter() - wall < 1.0
    assert t0 == 100.0
    assert t1 == pytest.approx(3700.0)
    assert jumps == 1


def test_timers_end_in_virtual_order_and_overlap() -> None:
    async def main() -> tuple[list[tuple[str, float]], float]:
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, float]] = []

        async def sleeper(name: str, seconds: float) -> None:
            await asyncio.sleep(seconds)
            seen.append((name, loop.time()))

        await asyncio.gather(sleeper("c", 3.0), sleeper("a", 1.0), sleeper("b", 2.0))
        return seen, loop.time()

    seen, end = simclock.run(main())
    assert [name for name, _ in seen] == ["a", "b", "c"]
    assert [at for _, at in seen] == pytest.approx([1.0, 2.0, 3.0])
    assert end == pytest.approx(3.0)  # concurrent: 3 s in all, not 1 + 2 + 3


def test_a_timeout_fires_at_its_virtual_deadline() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(5.0):
                await asyncio.sleep(60.0)
        return loop.time()

    assert simclock.run(main()) == pytest.approx(5.0)


def test_a_thread_result_still_arrives() -> None:
    async def main() -> int:
        return await asyncio.to_thread(lambda: 6 * 7)

    assert simclock.run(main()) == 42
