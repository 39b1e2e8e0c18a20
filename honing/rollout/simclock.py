"""A virtual clock for asyncio: when nothing is ready to run, time jumps to the next timer.

    result = simclock.run(main())          # asyncio.run, but every sleep is free
    loop = VirtualClockLoop(start=0.0)     # or the loop itself; loop.time() is virtual

Covered: everything scheduled on the loop's clock — `asyncio.sleep`, `call_later`/`call_at`,
`asyncio.timeout`, `wait_for` — runs in simulated time, in the order a real loop would run it,
at the CPU cost of its callbacks only (benchmarks/cluster_sim.py drives the real scheduler and
agent loop this way). Real file descriptors are still polled, without waiting, before each jump.
Not covered: the wall clocks (`time.monotonic`, `perf_counter`, `time.time`), so code that
measures with them measures wall time; threads and subprocesses are not waited for while a timer
is pending (the clock may jump past them); with no timer pending the loop blocks on real I/O.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Clock:
    __slots__ = ("jumps", "now")

    def __init__(self, start: float) -> None:
        self.now = start
        self.jumps = 0  # times the loop would have slept


class _JumpingSelector(selectors.DefaultSelector):
    """Polls real file descriptors without waiting; where the loop would wait `timeout` for its
    next timer and nothing is readable, moves the clock on by `timeout` instead."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0:  # ready callbacks, or no timer at all: really wait
            return super().select(timeout)
        events = super().select(0)
        if not events:
            self._clock.now += timeout
            self._clock.jumps += 1
        return events


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop whose `time()` is virtual; see the module docstring."""

    def __init__(self, start: float = 0.0) -> None:
        self._clock = _Clock(start)
        super().__init__(_JumpingSelector(self._clock))

    def time(self) -> float:
        return self._clock.now

    @property
    def jumps(self) -> int:
        """How many times the clock jumped ahead (each a sleep a real loop would have taken)."""
        return self._clock.jumps


def run(main: Coroutine[Any, Any, T], *, start: float = 0.0, debug: bool | None = None) -> T:
    """`asyncio.run(main)` on a `VirtualClockLoop` whose clock starts at `start`."""
    with asyncio.Runner(debug=debug, loop_factory=lambda: VirtualClockLoop(start)) as runner:
        return runner.run(main)
