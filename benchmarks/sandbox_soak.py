"""Soak: one `SandboxPool` under a mixed, partly hostile load for minutes; does the host hold up?

What is measured
----------------
One pool (the default `SandboxConfig`: bubblewrap cells, two per CPU) runs programs without a
break for `--minutes`, from `--concurrency` workers (default 4 per cell, so a cell never waits
for the host). Each worker takes the next kind from a shuffled deck that holds the kinds in
these proportions (per 1,000 programs), like RL rollouts: mostly quick programs that pass or
fail, and a steady share of the nasty kinds:

    ok 693       prints a computed value (sums, a function checked by asserts, stdin, json/re)
    error 150    raises, fails an assert, exits non-zero, a syntax error, infinite recursion
    files 30     input files in, an output file back (`output_files`)
    litter 30    finds /tmp, /dev/shm and /workspace empty, then leaves files, a FIFO, a link
                 and an unreadable directory in each
    threads 20   leaves 8 daemon threads running
    procs 15     leaves a `sleep` child and a double-forked daemon behind
    output 15    writes past the 1 MB stream cap (stdout or stderr, at once or in a loop)
    memory 15    a memory bomb (64 MiB limit): growing, one huge block, or in a child process
    workspace 5  a persistent workspace: write, run, snapshot, run, restore, drop (2 executions)
    timeout 10   a busy loop or a sleep past a 0.2 s limit
    killed 10    a program that ends by a signal (SIGSEGV, SIGABRT)
    forkbomb 5   forks until the process limit (8) refuses, then every process waits (0.2 s limit)
    cancelled 2  the caller cancels the run once the program runs: the program is stopped

Every execution's outcome is checked against its kind (ok: status ok and the exact output;
timeout: status timeout; memory bomb: memory_limit; ...). A `sandbox_error` status or an
exception from the pool is an *infra error*; any other unexpected outcome is a *wrong outcome*;
both are printed with their kind. Before the measured window, every kind runs once and then the
mix runs for `--warmup` seconds.

Host resources are sampled with the pool at rest (after warm-up, and after the load has drained;
each time every cell is up and has run a job, and the smallest of three samples 0.2 s apart is
kept) and every `--every` seconds during the run: open fds of this process and of its
descendants and the processes in its cells' cgroups (the cells), the number of those processes,
their RSS, the disk use of the pool's directory (cell and persistent workspaces) and the cells'
cgroups. The last line compares end with start:

    soak: N execs in M min; X exec/s; fds +a; procs +b; rss +c MB; tmp +d MB; infra errors e

Goal on 2 cores: >= 200 exec/s for 10 minutes with a = b = d = 0, c <= 20 MB and e = 0.

On a shared machine exec/s depends on the neighbours, so the CPU time per execution is printed
too (this process, the zygotes, the programs; replaced cells included) with the rate the
machine's cores would allow at that cost. A cell whose program sleeps, waits out its time limit
or leaves processes for the zygote to wait on holds no core: with two cells per core (the
default) the other cells use it; `--cells` sets another pool size.

Measured (2-core AMD EPYC, quiet, the default pool of 4 cells, 10 min), the last lines:

    CPU per exec: this process 0.75 ms; cells 7.14 ms, of which the programs 5.09 ms and the
      zygotes (fork, supervise, clean up) 2.05 ms; CPU used 1.92 of 2 cores; all 2 cores would
      allow 253 exec/s
    soak: 145924 execs in 10 min; 243.1 exec/s; fds +0; procs +0; rss +5.2 MB; tmp +0.0 MB;
      infra errors 0

The goal is met and nothing leaked (no cell was replaced: cancelled runs get theirs back). The
code before, 1 minute back to back on the same quiet machine: 165 exec/s at 8.98 ms of CPU per
exec (2 cells); now 188 exec/s at 7.73 ms with 2 cells and 234 at 8.22 ms with 4 (1.48 → 1.92
cores busy). Where it came from: a traceback formats only the frames it prints (unbounded
recursion: ~45 → ~8 ms a program), streams follow the reply's JSON line raw (1 MB: ~10 ms
less), a cancelled run's program is stopped instead of its cell replaced (~100 ms of CPU a new
cell), cells run the zygote compiled (~1.7 MB less heap copied at every fork), and two cells per
core fill the time programs spend asleep or waiting out a limit.

Usage: python benchmarks/sandbox_soak.py [--minutes 10] [--every 30] [--warmup 10] [--cells N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import signal
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from honing.config import SandboxConfig
from honing.sandbox import ExecRequest, ExecResult, ExecStatus, SandboxPool

MiB = 1024 * 1024
NASTY_TIMEOUT_S = 0.2  # the limit of the programs meant to time out (timeout, fork bomb)
BOMB_MEMORY_MB = 64
PRINTED_PROBLEMS = 20  # per category; past it they are only counted
CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_POLL_S = 0.1


def log(message: str) -> None:
    print(message, flush=True)


def code(src: str) -> str:
    return textwrap.dedent(src).lstrip("\n")


class WrongOutcome(Exception):
    """The program's outcome is not what its kind must give."""


class InfraError(Exception):
    """The sandbox failed (a `sandbox_error` status)."""


# -- the kinds of program -----------------------------------------------------------------------
Check = Callable[[ExecResult], str | None]  # None when the result is right, else what is wrong
Exec = Callable[[ExecRequest, Check], Awaitable[ExecResult]]


def expect(status: ExecStatus, stdout: str | None = None, **fields: object) -> Check:
    """A check: this status, this exact stdout (when given) and these `ExecResult` fields."""

    def check(result: ExecResult) -> str | None:
        if result.status is not status:
            return f"status {result.status.value}, expected {status.value}"
        if stdout is not None and result.stdout != stdout:
            return f"stdout {result.stdout[:200]!r}, expected {stdout[:200]!r}"
        for name, value in fields.items():
            if getattr(result, name) != value:
                return f"{name} {getattr(result, name)!r}, expected {value!r}"
        return None

    return check


def with_stderr(check: Check, needle: str) -> Check:
    def both(result: ExecResult) -> str | None:
        problem = check(result)
        if problem is None and needle not in result.stderr:
            return f"stderr lacks {needle!r}: {result.stderr[-300:]!r}"
        return problem

    return both


CHECKED_FUNCTION = code(
    """
    def evens_sorted(xs):
        return sorted(x for x in xs if x % 2 == 0)

    assert evens_sorted({xs}) == {evens}
    assert evens_sorted([]) == []
    print("passed", {n})
    """
)
SUM_FILE = code(
    """
    import os
    os.makedirs("out")
    numbers = [int(x) for x in open("data/in.txt").read().split()]
    with open("out/result.txt", "w") as f:
        f.write(str(sum(numbers)))
    """
)


async def kind_ok(run: Exec, pool: SandboxPool, n: int) -> None:
    variant = n % 4
    if variant == 0:
        k = 1000 + n % 5000
        await run(
            ExecRequest(code=f"print(sum(i * i for i in range({k})))"),
            expect(ExecStatus.OK, f"{(k - 1) * k * (2 * k - 1) // 6}\n"),  # the sum of squares
        )
    elif variant == 1:
        xs = [(n * 7 + i * 13) % 101 for i in range(8)]
        evens = sorted(x for x in xs if x % 2 == 0)
        program = CHECKED_FUNCTION.format(xs=xs, evens=evens, n=n)
        await run(ExecRequest(code=program), expect(ExecStatus.OK, f"passed {n}\n"))
    elif variant == 2:
        data = "".join(f"line {i}\n" for i in range(n % 50))
        program = "import sys\ndata = sys.stdin.read()\nprint(len(data), data.count('\\n'))"
        await run(
            ExecRequest(code=program, stdin=data),
            expect(ExecStatus.OK, f"{len(data)} {data.count(chr(10))}\n"),
        )
    else:
        text = f"a{n} b{n * 3} c{n % 17}"
        program = f"import json, re\nprint(json.dumps(sorted(re.findall(r'\\d+', {text!r}))))"
        found = sorted([str(n), str(n * 3), str(n % 17)])
        await run(ExecRequest(code=program), expect(ExecStatus.OK, f"{found}\n".replace("'", '"')))


async def kind_error(run: Exec, pool: SandboxPool, n: int) -> None:
    variant = n % 5
    if variant == 0:
        check = with_stderr(expect(ExecStatus.ERROR, "", exit_code=1), f"ValueError: bad {n}")
        await run(ExecRequest(code=f"raise ValueError('bad {n}')"), check)
    elif variant == 1:
        check = with_stderr(expect(ExecStatus.ERROR, exit_code=1), "AssertionError: off by one")
        await run(ExecRequest(code=f"assert {n} == {n + 1}, 'off by one'"), check)
    elif variant == 2:
        status = 2 + n % 100
        program = f"import sys\nprint('partial')\nsys.exit({status})"
        await run(
            ExecRequest(code=program), expect(ExecStatus.ERROR, "partial\n", exit_code=status)
        )
    elif variant == 3:
        check = with_stderr(expect(ExecStatus.ERROR, "", exit_code=1), "SyntaxError")
        await run(ExecRequest(code=f"def f{n}(:\n    pass\n"), check)
    else:
        check = with_stderr(expect(ExecStatus.ERROR, "", exit_code=1), "RecursionError")
        await run(ExecRequest(code="def f(n):\n    return f(n + 1)\n\nf(0)\n"), check)


async def kind_files(run: Exec, pool: SandboxPool, n: int) -> None:
    lines = [f"{i * n}" for i in range(20)]
    request = ExecRequest(
        code=SUM_FILE, files={"data/in.txt": "\n".join(lines)}, output_files=["out/*.txt"]
    )

    def check(result: ExecResult) -> str | None:
        problem = expect(ExecStatus.OK, "")(result)
        if problem is None and result.files != {"out/result.txt": str(sum(range(20)) * n).encode()}:
            return f"output files {result.files!r}"
        return problem

    await run(request, check)


LITTER = code(
    """
    import os
    places = ("/tmp", "/dev/shm", "/workspace")
    print("left:", [p for p in places if os.listdir(p)])
    for p in places:
        os.makedirs(p + "/litter/deep")
        with open(p + "/litter/deep/blob", "wb") as f:
            f.write(b"x" * (256 << 10))
        os.symlink("/etc", p + "/litter/link")
        os.mkfifo(p + "/fifo")
        os.chmod(p + "/litter", 0)
    """
)


async def kind_litter(run: Exec, pool: SandboxPool, n: int) -> None:
    await run(ExecRequest(code=LITTER), expect(ExecStatus.OK, "left: []\n"))


THREADS = code(
    """
    import threading, time

    def idle():
        while True:
            time.sleep(0.01)

    for _ in range(8):
        threading.Thread(target=idle, daemon=True).start()
    print("threads", threading.active_count())
    """
)


async def kind_threads(run: Exec, pool: SandboxPool, n: int) -> None:
    await run(ExecRequest(code=THREADS), expect(ExecStatus.OK, "threads 9\n"))


LEFT_BEHIND = code(
    """
    import os, subprocess, time
    child = subprocess.Popen(["sleep", "600"])
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    print("left behind", child.pid > 0)
    """
)


async def kind_procs(run: Exec, pool: SandboxPool, n: int) -> None:
    await run(ExecRequest(code=LEFT_BEHIND), expect(ExecStatus.OK, "left behind True\n"))


async def kind_output(run: Exec, pool: SandboxPool, n: int) -> None:
    cap = pool.config.max_output_bytes
    variant = n % 3
    if variant == 0:
        program = f"import sys\nsys.stdout.write('x' * {3 * cap})"
        check = expect(ExecStatus.OUTPUT_LIMIT, "x" * cap, stdout_truncated=True)
    elif variant == 1:
        program = "while True:\n    print('spam' * 25)"
        check = expect(ExecStatus.OUTPUT_LIMIT, stdout_truncated=True)
    else:
        program = f"import sys\nprint('before', flush=True)\nsys.stderr.write('e' * {2 * cap})"
        check = expect(
            ExecStatus.OUTPUT_LIMIT, "before\n", stderr_truncated=True, stdout_truncated=False
        )

    def full(result: ExecResult) -> str | None:
        problem = check(result)
        kept = max(len(result.stdout.encode()), len(result.stderr.encode()))
        if problem is None and kept != cap:
            return f"kept {kept} bytes of output, expected the cap of {cap}"
        return problem

    await run(ExecRequest(code=program, timeout_s=10), full)


MEMORY_BOMBS = (
    "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n",
    "x = bytearray(1 << 30)\nprint('allocated')\n",
    code(
        """
        import os
        pid = os.fork()
        if pid == 0:
            chunks = []
            while True:
                chunks.append(bytearray(8 << 20))
        os.waitpid(pid, 0)
        print("the child is gone")
        """
    ),
)


async def kind_memory(run: Exec, pool: SandboxPool, n: int) -> None:
    program = MEMORY_BOMBS[n % len(MEMORY_BOMBS)]
    request = ExecRequest(code=program, memory_mb=BOMB_MEMORY_MB, timeout_s=10)
    await run(request, expect(ExecStatus.MEMORY_LIMIT))


async def kind_workspace(run: Exec, pool: SandboxPool, n: int) -> None:
    ws = pool.workspace()
    try:
        ws.write("state.txt", f"{n}\n")
        step = "s = open('state.txt').read()\nopen('state.txt', 'w').write(s + 'step\\n')\nprint(s)"
        await run(ExecRequest(code=step, workspace=ws.id), expect(ExecStatus.OK, f"{n}\n\n"))
        snapshot = ws.snapshot()
        spoil = "import os\nopen('state.txt', 'w').write('spoilt')\nos.mkdir('junk')"
        await run(ExecRequest(code=spoil, workspace=ws.id), expect(ExecStatus.OK, ""))
        ws.restore(snapshot)
        if ws.files() != {"state.txt": f"{n}\nstep\n".encode()}:
            raise WrongOutcome(f"restored workspace holds {ws.files()!r}")
    finally:
        pool.drop_workspace(ws.id)


async def kind_timeout(run: Exec, pool: SandboxPool, n: int) -> None:
    program = "while True:\n    pass" if n % 2 == 0 else "import time\ntime.sleep(60)"
    request = ExecRequest(code=program, timeout_s=NASTY_TIMEOUT_S)
    await run(request, expect(ExecStatus.TIMEOUT))


async def kind_killed(run: Exec, pool: SandboxPool, n: int) -> None:
    if n % 2 == 0:
        program, sig = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", signal.SIGSEGV
    else:
        program, sig = "import os\nos.abort()", signal.SIGABRT
    await run(ExecRequest(code=program), expect(ExecStatus.KILLED, signal=int(sig)))


FORK_BOMB = code(
    """
    import os, time
    while True:
        try:
            os.fork()
        except OSError:
            print("refused", flush=True)
            time.sleep(60)
    """
)


async def kind_forkbomb(run: Exec, pool: SandboxPool, n: int) -> None:
    def check(result: ExecResult) -> str | None:
        problem = expect(ExecStatus.TIMEOUT)(result)
        if problem is None and "refused" not in result.stdout:
            return "the process limit never refused a fork"
        return problem

    # A process limit of 8 (not the default 32) is reached within the time limit even when the
    # machine is busy: forking is what the bomb spends its time on.
    request = ExecRequest(code=FORK_BOMB, timeout_s=NASTY_TIMEOUT_S, max_procs=8)
    await run(request, check)


async def kind_cancelled(run: Exec, pool: SandboxPool, n: int) -> None:
    """The caller gives up on a running program (a deadline above the sandbox's): the pool stops
    it and takes its cell back. The program marks its start with a file in its workspace, which
    the host sees (cells keep their workspaces in the pool's directory)."""
    marker = f"started-{os.getpid()}-{n}"
    request = ExecRequest(code=f"open({marker!r}, 'w').close()\nimport time\ntime.sleep(60)")
    task = asyncio.ensure_future(run(request, expect(ExecStatus.TIMEOUT)))
    cells = pool.root / "cells"
    while not any(os.path.exists(f"{cell.path}/workspace/{marker}") for cell in os.scandir(cells)):
        if task.done():
            task.result()  # raises what the run raised
            raise WrongOutcome("the program ended before it could be cancelled")
        await asyncio.sleep(0.02)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
        raise WrongOutcome("the run was not cancelled")


Kind = Callable[[Exec, SandboxPool, int], Awaitable[None]]
MIX: dict[str, tuple[int, Kind]] = {  # per 1,000 programs (a workspace one runs 2 executions)
    "ok": (693, kind_ok),
    "error": (150, kind_error),
    "files": (30, kind_files),
    "litter": (30, kind_litter),
    "threads": (20, kind_threads),
    "procs": (15, kind_procs),
    "output": (15, kind_output),
    "memory": (15, kind_memory),
    "workspace": (5, kind_workspace),
    "timeout": (10, kind_timeout),
    "killed": (10, kind_killed),
    "forkbomb": (5, kind_forkbomb),
    "cancelled": (2, kind_cancelled),
}


def deck(seed: int) -> Iterator[str]:
    """The kinds in MIX's proportions, each round of 1,000 shuffled anew, endlessly."""
    rng = random.Random(seed)
    cards = [name for name, (weight, _) in MIX.items() for _ in range(weight)]
    while True:
        rng.shuffle(cards)
        yield from cards


# -- host resources ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    fds: int  # open fds of this process and its descendants
    procs: int  # descendants of this process and processes in its cells' cgroups
    rss_bytes: int  # RSS of this process and its descendants
    tmp_bytes: int  # disk use of the pool's directory
    cgroups: int = 0  # the cells' cgroups (memory and pids) in this process's pool groups
    cells: frozenset[int] = frozenset()  # pids of the cells' zygotes

    def minus(self, earlier: Sample) -> Sample:
        return Sample(
            self.fds - earlier.fds,
            self.procs - earlier.procs,
            self.rss_bytes - earlier.rss_bytes,
            self.tmp_bytes - earlier.tmp_bytes,
            self.cgroups - earlier.cgroups,
        )


def children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):  # it ended meanwhile
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(child) for child in f.read().split()]
    return found


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        below = children(todo.pop())
        found += below
        todo += below
    return found


def is_zygote(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"python" in argv[0] and any(arg.endswith((b"zygote.py", b"zygote.pyc")) for arg in argv)


def disk_use(directory: Path) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def cell_cgroups() -> tuple[int, set[int]]:
    """The cells' groups below this process's pool groups (`honing-<pid>-*`, cgroup v1), and
    the processes in them (which finds a cell process that outlived its parent, too)."""
    groups, pids = 0, set[int]()
    with open("/proc/self/cgroup") as f:
        lines = f.read().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in set(controllers.split(",")) & {"memory", "pids"}:
            mine = CGROUP_ROOT / controller / path.lstrip("/")
            for group in mine.glob(f"honing-{os.getpid()}-*/*/"):
                groups += 1
                with contextlib.suppress(OSError):  # removed meanwhile
                    pids.update(int(pid) for pid in (group / "cgroup.procs").read_text().split())
    return groups, pids


def sample(directory: Path) -> Sample:
    me = os.getpid()
    groups, in_groups = cell_cgroups()
    pids = set(descendants(me)) | in_groups
    fds = rss = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in [me, *pids]:
        with contextlib.suppress(OSError, IndexError, ValueError):  # it ended meanwhile
            fds += len(os.listdir(f"/proc/{pid}/fd"))
            with open(f"/proc/{pid}/statm") as f:
                rss += int(f.read().split()[1]) * page
    cells = frozenset(pid for pid in pids if is_zygote(pid))
    return Sample(fds, len(pids), rss, disk_use(directory), groups, cells)


# Which cell runs a program: each cell's /tmp is a tmpfs of its own, with its own device number.
WHICH_CELL = "import os, time\nprint(os.stat('/tmp').st_dev)\ntime.sleep(0.05)"


async def settle(pool: SandboxPool) -> None:
    """Bring the pool to rest as it was at the start: every cell up (a replacement may still be
    starting) and each having run a job (a cell opens some of its files at its first job)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        results = await pool.run_many([ExecRequest(code=WHICH_CELL)] * pool.size)
        if len({r.stdout for r in results if r.ok}) == pool.size:
            return
        await asyncio.sleep(0.1)
    log("soak: the pool did not come to rest in 30 s; sampling it anyway")


async def idle_sample(pool: SandboxPool) -> Sample:
    """The pool at rest: the smallest of three samples 0.2 s apart (a leak shows in all three,
    a process still being reaped in one)."""
    await settle(pool)
    samples = []
    for _ in range(3):
        await asyncio.sleep(0.2)
        samples.append(sample(pool.root))
    return Sample(
        min(s.fds for s in samples),
        min(s.procs for s in samples),
        min(s.rss_bytes for s in samples),
        min(s.tmp_bytes for s in samples),
        min(s.cgroups for s in samples),
        samples[-1].cells,
    )


def resources(now: Sample, start: Sample) -> str:
    d = now.minus(start)
    return (
        f"fds {now.fds} ({d.fds:+d}); procs {now.procs} ({d.procs:+d}); "
        f"rss {now.rss_bytes / MiB:.1f} MB ({d.rss_bytes / MiB:+.1f}); "
        f"tmp {now.tmp_bytes / MiB:.1f} MB ({d.tmp_bytes / MiB:+.1f}); "
        f"cgroups {now.cgroups} ({d.cgroups:+d})"
    )


class CpuMeter:
    """CPU seconds of the cells, with the jobs their zygotes reaped, replaced cells included.

    A cell's processes are read every `CPU_POLL_S` (a few small /proc files) and their last
    totals kept, so a killed cell's time is not lost with it (but for its last fraction of a
    poll). `seconds` counts from the meter's start; jobs are counted once reaped.
    """

    def __init__(self) -> None:
        self._ticks: dict[tuple[int, bytes], int] = {}  # (pid, start time): last total
        self._base = 0
        self._task: asyncio.Task[None] | None = None

    def poll(self) -> None:
        for cell in children(os.getpid()):  # bubblewrap
            for pid in [cell, *children(cell)]:  # and its zygote (pid 1 of the cell)
                with contextlib.suppress(OSError, IndexError, ValueError):
                    with open(f"/proc/{pid}/stat", "rb") as f:
                        fields = f.read().rsplit(b")", 1)[1].split()
                    # utime, stime, cutime, cstime (fields 14-17) and starttime (22)
                    self._ticks[pid, fields[19]] = sum(int(x) for x in fields[11:15])

    @property
    def seconds(self) -> float:
        return (sum(self._ticks.values()) - self._base) / os.sysconf("SC_CLK_TCK")

    async def _run(self) -> None:
        while True:
            self.poll()
            await asyncio.sleep(CPU_POLL_S)

    def start(self) -> None:
        self.poll()
        self._base = sum(self._ticks.values())
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.poll()


def system_used_mb() -> float:
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


# -- the load ------------------------------------------------------------------------------------
@dataclass
class Tally:
    execs: Counter[str] = field(default_factory=Counter)
    wrong: Counter[str] = field(default_factory=Counter)
    infra: Counter[str] = field(default_factory=Counter)
    wall_s: dict[str, float] = field(default_factory=dict)  # the programs' own wall time
    cpu_s: dict[str, float] = field(default_factory=dict)  # and CPU time (with their children)

    @property
    def total(self) -> int:
        return sum(self.execs.values())


class Soak:
    def __init__(self, pool: SandboxPool, seed: int) -> None:
        self.pool = pool
        self.tally = Tally()
        self.deck = deck(seed)
        self.serial = itertools.count()

    async def one(self, name: str) -> None:
        """Run one program of kind `name`, counting its executions and any problem."""

        async def run(request: ExecRequest, check: Check) -> ExecResult:
            self.tally.execs[name] += 1
            result = await self.pool.run(request)
            self.tally.wall_s[name] = self.tally.wall_s.get(name, 0.0) + result.wall_s
            self.tally.cpu_s[name] = self.tally.cpu_s.get(name, 0.0) + result.cpu_s
            if result.status is ExecStatus.SANDBOX_ERROR:
                raise InfraError(result.error)
            problem = check(result)
            if problem is not None:
                raise WrongOutcome(problem)
            return result

        try:
            await MIX[name][1](run, self.pool, next(self.serial))
        except WrongOutcome as exc:
            self.tally.wrong[name] += 1
            if sum(self.tally.wrong.values()) <= PRINTED_PROBLEMS:
                log(f"wrong outcome ({name}): {exc}")
        except Exception as exc:  # anything else the pool raised is its failure, not the program's
            self.tally.infra[name] += 1
            if sum(self.tally.infra.values()) <= PRINTED_PROBLEMS:
                log(f"infra error ({name}): {type(exc).__name__}: {exc}")

    async def load(self, seconds: float, workers: int) -> None:
        """Run the mix from `workers` workers until `seconds` have passed, then drain."""
        stop = time.monotonic() + seconds

        async def worker() -> None:
            while time.monotonic() < stop:
                await self.one(next(self.deck))

        await asyncio.gather(*(worker() for _ in range(workers)))


async def soak(args: argparse.Namespace) -> tuple[int, float, Sample, Tally]:
    config = SandboxConfig(pool_size=args.cells)
    workers = args.concurrency or 4 * config.size
    log(
        f"soak: {config.size} cells (isolation {config.isolation}), {workers} workers, "
        f"{args.minutes:g} min; {os.cpu_count()} CPUs; load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    async with SandboxPool(config) as pool:
        runner = Soak(pool, args.seed)
        log(f"soak: pool ready ({pool.memory_enforcement} memory limits); warming up...")
        await asyncio.gather(*(runner.one(name) for name in MIX))  # every kind once
        await runner.load(args.warmup, workers)
        warm = runner.tally
        if warm.wrong or warm.infra:
            log(f"soak: warm-up problems: wrong {dict(warm.wrong)}; infra {dict(warm.infra)}")
        start = await idle_sample(pool)
        log(f"start ({warm.total} warm-up execs): {resources(start, start)}")
        runner.tally = Tally()
        cpu, host_cpu = CpuMeter(), time.process_time()
        cpu.start()

        began = time.monotonic()
        measured = asyncio.ensure_future(runner.load(args.minutes * 60, workers))
        last_t, last_n = began, 0
        while not measured.done():
            await asyncio.wait([measured], timeout=args.every)
            if measured.done():
                break
            now, n, t = time.monotonic(), runner.tally.total, runner.tally
            log(
                f"[{now - began:6.0f} s] {n} execs; {n / (now - began):.0f} exec/s "
                f"(last {now - last_t:.0f} s: {(n - last_n) / (now - last_t):.0f}); "
                f"{resources(sample(pool.root), start)}; system used {system_used_mb():.0f} MB; "
                f"wrong {sum(t.wrong.values())}; infra {sum(t.infra.values())}"
            )
            last_t, last_n = now, n
        await measured
        elapsed = time.monotonic() - began
        cpu.stop()
        host_cpu = time.process_time() - host_cpu
        end = await idle_sample(pool)
        log(f"end: {resources(end, start)}")
        log(f"cells now: {len(end.cells)}, {len(end.cells - start.cells)} started during the run")
    log(cpu_report(host_cpu, cpu.seconds, runner.tally, elapsed))
    return runner.tally.total, elapsed, end.minus(start), runner.tally


def cpu_report(host_s: float, cells_s: float, tally: Tally, elapsed_s: float) -> str:
    """Where the CPU went, per execution, and the rate it allows on this machine's cores: on a
    shared machine the exec/s measured depends on the neighbours, the CPU per exec much less.
    This process's share includes the benchmark's own work (building and checking programs)."""
    n = max(tally.total, 1)
    host, cells = host_s / n * 1000, cells_s / n * 1000
    programs = sum(tally.cpu_s.values()) / n * 1000
    cores = len(os.sched_getaffinity(0))
    return (
        f"CPU per exec: this process {host:.2f} ms; cells {cells:.2f} ms, of which the programs "
        f"{programs:.2f} ms and the zygotes (fork, supervise, clean up) {cells - programs:.2f} ms; "
        f"CPU used {(host_s + cells_s) / elapsed_s:.2f} of {cores} cores; "
        f"all {cores} cores would allow {cores * 1000 / (host + cells):.0f} exec/s"
    )


def last_line(execs: int, minutes: float, elapsed_s: float, delta: Sample, infra: int) -> str:
    return (
        f"soak: {execs} execs in {minutes:g} min; {execs / elapsed_s:.1f} exec/s; "
        f"fds {delta.fds:+d}; procs {delta.procs:+d}; rss {delta.rss_bytes / MiB:+.1f} MB; "
        f"tmp {delta.tmp_bytes / MiB:+.1f} MB; infra errors {infra}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=10.0, help="measured run (default 10)")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between progress lines")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds of mix before start")
    parser.add_argument("--cells", type=int, default=None, help="pool size (default: 2 per CPU)")
    parser.add_argument("--concurrency", type=int, default=None, help="default: 4 per cell")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.every <= 0 or args.warmup < 0:
        parser.error("--minutes and --every must be positive, --warmup not negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    execs, elapsed, delta, tally = asyncio.run(soak(args))
    busy = sum(tally.wall_s.values()) or 1.0
    for name in MIX:
        n, wall = tally.execs[name], tally.wall_s.get(name, 0.0)
        log(
            f"  {name:9s} {n:7d} execs; wrong {tally.wrong[name]}; infra {tally.infra[name]}; "
            f"program wall {wall / max(n, 1) * 1000:6.1f} ms each ({wall / busy:4.0%} of all), "
            f"CPU {tally.cpu_s.get(name, 0.0) / max(n, 1) * 1000:6.1f} ms"
        )
    wrong, infra = sum(tally.wrong.values()), sum(tally.infra.values())
    log(f"wrong outcomes {wrong} {dict(tally.wrong)}; infra errors {infra} {dict(tally.infra)}")
    log(last_line(execs, args.minutes, elapsed, delta, infra))
    return 0 if wrong == infra == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
