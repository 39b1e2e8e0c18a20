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
Covered: libgomp on Linux. Not covered: Intel's libiomp5 and macOS (no-ops), load that starts
after the call (the next call adapts), pools of other threads.
"""

from __future__ import annotations

import ctypes
import os
import threading
from functools import cache

OMP_PAUSE_SOFT = 1  # OpenMP 5.0 omp_pause_soft: threads stop, state may be kept
PRESSURE_LIMIT = 10.0  # percent of time some thread waited for a core: busy above
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


def balance_pool(threads: int) -> str:
    """Spin or sleep (see the module docstring), for a decode thread of `threads` threads;
    which was chosen: "spin", "sleep", or "unknown" (nothing done). The cores count as busy when
    threads waited for a core over more than PRESSURE_LIMIT% of the last ~10 s (CPU pressure, which
    a blip does not move), else, where there is no such figure, when other processes' runnable
    threads leave fewer idle cores than `threads` now."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cpus is None or _libgomp() is None:
        return "unknown"
    pressure = cpu_pressure()
    if pressure is not None:
        busy = pressure > PRESSURE_LIMIT
    else:
        others = others_running()
        if others is None:
            return "unknown"
        busy = cpus - others < threads
    if not busy:
        release_idle_pool()
        return "spin"
    if getattr(_released, "pool", False):  # else it holds the pool it had (or never needed one)
        hold_pool()
        _released.pool = False
    return "sleep"
