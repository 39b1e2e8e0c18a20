"""Choose how the decode thread's OpenMP workers wait, from the caller's thread, per call.

    balance_pool(threads)   # from the thread that calls the engine, before it waits on it

libgomp (torch's OpenMP on Linux) gives every thread that runs a parallel op its own pool of
workers. While the process holds no more workers than CPUs they spin between parallel regions;
beyond that all of them sleep on a futex instead and each op pays a wake-up. Measured on a
2-core host, SmolLM2-135M bf16, batch 32: a decode step in the engine's thread took 37 ms
spinning, 75 ms sleeping (the main thread's idle pool, left by loading the model, is enough to
tip it), but spinning collapses when other processes want the cores (184 ms against 66 ms
sleeping under another process's test run), as any torch program's does. So per call: when
enough cores are idle, free the caller's idle pool (`omp_pause_resource_all`), and the decode
thread's workers spin; when not, make sure the caller holds one, and they sleep. "Enough idle":
Linux's CPU pressure over the last ~10 s, else a look at other processes' runnable threads.
Load that starts during a long call is met by the decode thread itself: `Ballast` is a thread
that holds a pool while the cores are busy (so the workers sleep) and frees it when they are
idle again, re-judged about once a second (`Ballast.tick`, from the decode loop).

    ballast = Ballast(threads)    # in the engine
    ballast.tick()                # in the decode loop, before each step: cheap, rate-limited
    ballast.close()

Covered: libgomp on Linux. Not covered: Intel's libiomp5 and macOS (no-ops), pools of threads
other than the caller's and the ballast's.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from functools import cache

OMP_PAUSE_SOFT = 1  # OpenMP 5.0 omp_pause_soft: threads stop, state may be kept
PRESSURE_LIMIT = 10.0  # percent of time some thread waited for a core: busy above
TICK_SECONDS = 1.0  # how often the decode loop re-judges the load (PSI's avg10 moves in ~1 s)
_released = threading.local()  # .pool: this thread's pool was freed by release_idle_pool


@cache
def _libgomp() -> ctypes.CDLL | None:
    """The libgomp this process has loaded (torch's own copy), or None."""
    import torch  # noqa: F401  (loads torch's libgomp)

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libgomp" in line and "/" in line}
    except OSError:  # not Linux
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0))
            lib.omp_pause_resource_all.argtypes = [ctypes.c_int]
            lib.omp_pause_resource_all.restype = ctypes.c_int
            return lib
        except (OSError, AttributeError):  # gone, or a libgomp older than OpenMP 5.0
            continue
    return None


def others_running(samples: int = 3) -> int | None:
    """Threads of other processes runnable right now (Linux), or None where unknown: the least
    of a few looks, since this process's own threads change state between the two reads."""
    counts = []
    for _ in range(samples):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
            ours = 0
            for tid in os.listdir("/proc/self/task"):
                try:
                    with open(f"/proc/self/task/{tid}/stat") as f:
                        ours += f.read().rsplit(")", 1)[1].split()[0] == "R"
                except OSError:  # the thread ended meanwhile
                    continue
        except (OSError, ValueError, IndexError):
            return None
        counts.append(max(running - ours, 0))
    return min(counts)


def release_idle_pool() -> bool:
    """Free the OpenMP workers of the calling thread (which must not be inside a parallel
    region); True when libgomp did."""
    lib = _libgomp()
    done = lib is not None and lib.omp_pause_resource_all(OMP_PAUSE_SOFT) == 0
    _released.pool = done
    return done


def hold_pool() -> None:
    """Give the calling thread a pool of workers (one parallel op builds it, if it has none)."""
    import torch

    torch.ones(1 << 18).sum()  # above torch's grain size: runs on all threads


def cpu_pressure() -> float | None:
    """Linux's CPU pressure (PSI): the share of the last ~10 s in which some runnable thread
    waited for a core, in percent; None where the kernel does not report it."""
    try:
        with open("/proc/pressure/cpu") as f:
            some = f.readline().split()
        return float(some[1].removeprefix("avg10="))
    except (OSError, ValueError, IndexError):
        return None


def cores_busy(threads: int) -> bool | None:
    """Whether a decode thread of `threads` threads would compete for the cores: threads waited
    for a core over more than PRESSURE_LIMIT% of the last ~10 s (CPU pressure, which a blip does
    not move), else, where there is no such figure, other processes' runnable threads leave
    fewer idle cores than `threads` now. None where unknown (not Linux, no libgomp)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cpus is None or _libgomp() is None:
        return None
    pressure = cpu_pressure()
    if pressure is not None:
        return pressure > PRESSURE_LIMIT
    others = others_running()
    if others is None:
        return None
    return cpus - others < threads


def balance_pool(threads: int) -> str:
    """Spin or sleep (see the module docstring), for a decode thread of `threads` threads;
    which was chosen: "spin", "sleep", or "unknown" (nothing done), by `cores_busy`."""
    busy = cores_busy(threads)
    if busy is None:
        return "unknown"
    if not busy:
        release_idle_pool()
        return "spin"
    if getattr(_released, "pool", False):  # else it holds the pool it had (or never needed one)
        hold_pool()
        _released.pool = False
    return "sleep"


class Ballast:
    """A thread that holds an idle OpenMP pool while the cores are busy, so that every worker
    of the process sleeps between parallel ops instead of spinning against other processes, and
    frees it when they are idle again. Its work happens on its own thread (a pool belongs to the
    thread that ran the op); `tick` only reads the load and hands the verdict over."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.holding = False  # what the ballast thread last did
        self._want = False
        self._next = 0.0  # perf_counter of the next tick that looks at the load
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="omp-ballast", daemon=True)
        self._thread.start()

    def tick(self) -> None:
        """Re-judge the load when TICK_SECONDS have passed since the last look (else return at
        once); the ballast thread follows the verdict."""
        now = time.perf_counter()
        if now < self._next:
            return
        self._next = now + TICK_SECONDS
        busy = cores_busy(self.threads)
        if busy is not None:
            self.hold(busy)

    def hold(self, busy: bool) -> None:
        """Hold a pool (True) or free it (False), on the ballast thread, soon."""
        with self._cond:
            if busy != self._want:
                self._want = busy
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        # No torch.set_num_threads here: torch gives a new thread its own thread count at the
        # first parallel op, and calling it from a second thread slowed every later decode step
        # of the engine's thread by ~12% (34 -> 38.5 ms, SmolLM2-135M bf16, batch 32).
        while True:
            with self._cond:
                while not self._closed and self._want == self.holding:
                    self._cond.wait()
                want = self._want and not self._closed
            if want:
                hold_pool()
            else:
                release_idle_pool()
            self.holding = want
            if self._closed:
                return
