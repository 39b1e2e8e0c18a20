"""`SandboxPool`: a warm pool of cells with an async API, and persistent workspaces.

    async with SandboxPool(SandboxConfig()) as pool:
        result = await pool.run(ExecRequest(code="print(1)"))
        results = await pool.run_many(requests, concurrency=8)
        ws = pool.workspace()                       # persistent across runs
        ws.write("sol.py", "...")
        await pool.run(ExecRequest(code=..., workspace=ws.id))
        snap = ws.snapshot(); ...; ws.restore(snap)
        await pool.resize(8)                        # grow or shrink; busy cells finish first
        before = pool.usage(); ...; pool.usage().since(before).busy_fraction   # utilisation

`pool.enforcement` says how limits hold (docs/sandbox.md, "Enforcement"). Crashed cells are
replaced without losing queued runs; sandbox failures are never program errors ("API").
A live pool holds a lock on `OWNER_LOCK` in its directory; at start, `sweep_stale_roots`
removes the directories whose lock nobody holds (pools killed without closing).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import logging
import os
import signal
import stat
import tempfile
import time
import uuid
import warnings
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

from honing.config import SandboxConfig
from honing.errors import CellCrashed, SandboxError, SandboxUnavailable, WorkspaceBusy
from honing.risk import event
from honing.sandbox import fs
from honing.sandbox.cell import Cell
from honing.sandbox.cgroups import DELEGATE_HINT, PoolCgroups
from honing.sandbox.launch import Launcher, compile_zygote
from honing.sandbox.runtime import RuntimeStore
from honing.types import ExecRequest, ExecResult, ExecStatus

log = logging.getLogger(__name__)
MiB = 1024 * 1024
HARD_DEADLINE_GRACE_S = 5.0  # the host's backstop past a job's own timeout
REPLACE_ATTEMPTS = 3
NO_ISOLATION_WARNING = (
    "honing sandbox: isolation is 'none' — programs run as YOUR user with access to your files "
    "and network. Use this for development only; set sandbox.isolation: bwrap for real runs."
)
_warned: set[str] = set()  # enforcement warnings already logged by this process
LEGACY_ROOT_MAX_AGE_S = 24 * 3600  # a root without a lock file (older honing) goes this old
_MKDTEMP_SUFFIX = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")  # tempfile's name characters
OWNER_LOCK = ".owner.lock"  # in a pool's root: flock()ed by the live pool (`_lock_root`)
_held_locks: dict[int, tuple[int, int]] = {}  # this process's owner locks: fd -> (st_dev, st_ino)


def _close_inherited_locks() -> None:
    # A child forked without exec (a fork-started worker) shares the pool's open file
    # description, and with it the lock: it would keep a killed pool's root for its whole life.
    # Closing its copy leaves the parent's lock as it is (LOCK_UN would release it for both).
    for fd in _held_locks:
        with contextlib.suppress(OSError):
            os.close(fd)
    _held_locks.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


def _lock_root(root: Path) -> int:
    """Hold `root`'s owner lock until `_unlock_root`; returns its fd.

    The lock is a flock() on an open file description: the kernel keeps it for every process
    whatever its pid namespace, and drops it when the holder dies, SIGKILL included. The file is
    created and locked under another name, then renamed to `OWNER_LOCK`: a sweeper never sees it
    unlocked while the pool lives, and until the rename it sees a fresh root without a lock
    file, which it keeps. The fd is O_CLOEXEC, and cells are started with close_fds: none of
    them holds it."""
    staging = root / f"{OWNER_LOCK}.new"
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(staging, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(staging, root / OWNER_LOCK)
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    _held_locks[fd] = (st.st_dev, st.st_ino)
    return fd


def _unlock_root(fd: int) -> None:
    del _held_locks[fd]
    os.close(fd)


def sweep_stale_roots(parent: Path, prefix: str) -> int:
    """Remove the pool directories in `parent` left by pools that were never closed (a process
    killed by SIGKILL or the OOM killer); returns how many were removed.

    A root `{prefix}{pid}-{random}` with an `OWNER_LOCK` file is removed when nobody holds the
    lock; the pid in its name is not trusted, since pids are per pid namespace. A root of older
    honing has no lock file: `{prefix}{pid}-{random}` is removed once its mtime is
    `LEGACY_ROOT_MAX_AGE_S` (24 hours) old and no process `pid` exists here, `{prefix}{random}`
    once it is that old. Only directories owned by this uid are touched, never through a
    symlink. Another process may sweep the same directory at once: what it removed first, or
    holds locked while removing, is skipped.
    """
    removed = 0
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(prefix)]
    except OSError:
        return 0
    for entry in entries:
        with contextlib.suppress(OSError):
            if _remove_if_stale(entry, entry.name[len(prefix) :]):
                removed += 1
    if removed:
        log.info("removed %d pool directories in %s left by dead processes", removed, parent)
    return removed


def _remove_if_stale(entry: os.DirEntry[str], rest: str) -> bool:
    st = entry.stat(follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    pid, dash, suffix = rest.partition("-")
    if dash and not (pid.isascii() and pid.isdigit() and suffix):
        return False
    if not dash and not (len(rest) == 8 and set(rest) <= _MKDTEMP_SUFFIX):
        return False
    with contextlib.ExitStack() as opened:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        root = os.open(entry.path, flags | os.O_DIRECTORY)
        opened.callback(os.close, root)
        try:
            lock = os.open(OWNER_LOCK, flags | os.O_NONBLOCK, dir_fd=root)
        except FileNotFoundError:  # older honing, or a pool between mkdtemp and `_lock_root`
            if time.time() - st.st_mtime <= LEGACY_ROOT_MAX_AGE_S:
                return False
            if dash and (not Path("/proc/self").exists() or Path(f"/proc/{pid}").exists()):
                return False  # perhaps alive: a pid alone never proves a root dead
        else:
            opened.callback(os.close, lock)
            lock_st = os.fstat(lock)
            if not stat.S_ISREG(lock_st.st_mode):
                return False
            # This process's own pool: where flock() is emulated by POSIX locks (NFS), a lock
            # would not conflict with one of its own process.
            if (lock_st.st_dev, lock_st.st_ino) in _held_locks.values():
                return False
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a live pool holds it
        fs.wipe(Path(entry.path))  # held locked, so that no other sweeper starts on it
        os.rmdir(entry.path)
    return True


class PoolState(Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class Workspace:
    """A directory that persists across runs, with snapshots to roll back to.

    While a run uses it, its files are inside the cell: reading, writing, snapshotting or
    restoring it then raises `WorkspaceBusy` instead of acting on an empty directory.
    """

    def __init__(self, pool_root: Path, workspace_id: str) -> None:
        self.id = workspace_id
        self.path = pool_root / "workspaces" / workspace_id
        self._snapshots = pool_root / "snapshots" / workspace_id
        self.path.mkdir(parents=True)
        self.lock = asyncio.Lock()

    def _idle_path(self) -> Path:
        if self.lock.locked():
            raise WorkspaceBusy(f"workspace {self.id} is in use by a run: await the run first")
        return self.path

    def write(self, relpath: str, content: str | bytes) -> None:
        fs.write_files(self._idle_path(), {relpath: content})

    def read(self, relpath: str) -> bytes:
        """The bytes of a regular file in the workspace (never through a symlink)."""
        return fs.read_file(self._idle_path(), relpath)

    def files(self) -> dict[str, bytes]:
        """Every regular file in the workspace, by relative path."""
        return fs.read_files(self._idle_path(), ["*"], max_bytes=1 << 40)

    def snapshot(self) -> str:
        """Copy the current contents aside; returns the id to `restore` later."""
        snapshot_id = uuid.uuid4().hex[:12]
        fs.copy_tree(self._idle_path(), self._snapshots / snapshot_id)
        return snapshot_id

    def restore(self, snapshot_id: str) -> None:
        """Make the contents exactly those of snapshot `snapshot_id` (snapshots are kept)."""
        path = self._idle_path()
        source = self._snapshots / snapshot_id
        if not source.is_dir():
            raise KeyError(f"workspace {self.id} has no snapshot {snapshot_id!r}")
        fs.wipe(path)
        fs.copy_tree(source, path)


@dataclass(frozen=True)
class Enforcement:
    """How a started pool's limits are enforced. `memory`: "cgroup_v1", "cgroup_v2" or
    "rlimit_as" (per process: the fallback); `pids_cgroup`: a pids cgroup caps each job's
    processes (else RLIMIT_NPROC only); `seccomp`: jobs run under the syscall filter; `missing`:
    why a protection is absent, one sentence each."""

    memory: str
    pids_cgroup: bool
    seccomp: bool
    isolation: str = "bwrap"
    missing: tuple[str, ...] = ()
    memory_mb: int = 512  # the pool's defaults, for the fallback's arithmetic
    max_procs: int = 32

    @property
    def cgroup(self) -> bool:
        """Memory and processes are both limited by a cgroup (what `require.cgroup` asks)."""
        return self.memory != "rlimit_as" and self.pids_cgroup

    def describe(self) -> str:
        """One line: "memory and processes: cgroup v1; seccomp: on", or what falls short."""
        memory = {"cgroup_v1": "cgroup v1", "cgroup_v2": "cgroup v2"}.get(self.memory)
        if memory is not None and self.pids_cgroup:
            text = f"memory and processes: {memory}"
        else:
            memory = memory or (
                f"RLIMIT_AS per process (fallback: a job of {self.max_procs} processes may use "
                f"{self.max_procs} × {self.memory_mb} MiB)"
            )
            text = f"memory: {memory}; processes: RLIMIT_NPROC only (no pids cgroup)"
        text += f"; seccomp: {'on' if self.seccomp else 'off'}"
        return text if self.isolation == "bwrap" else f"isolation: none (unsafe); {text}"

    def to_json_dict(self) -> dict[str, Any]:
        """The fields and `description` (the `sandbox_start` event of a run)."""
        return {"memory": self.memory, "pids_cgroup": self.pids_cgroup, "seccomp": self.seccomp,
                "isolation": self.isolation, "missing": list(self.missing),
                "description": self.describe()}  # fmt: skip


@dataclass(frozen=True)
class PoolUsage:
    """Counters of a pool and its siblings at one moment; `later.since(earlier)` is the use
    between two snapshots (then `runs`, `busy_s` and `wait_s` are differences). `enforcement`:
    how the pool's limits are enforced (see `Enforcement`)."""

    cells: int  # cells kept
    busy: int  # cells running a job now
    runs: int  # jobs run
    busy_s: float  # cell-seconds spent running jobs
    wait_s: float  # job-seconds spent waiting for an idle cell
    at: float  # time.monotonic() of the snapshot
    interval_s: float = 0.0  # since(): the seconds between the snapshots
    enforcement: Enforcement | None = None  # None before the pool started

    def since(self, earlier: PoolUsage) -> PoolUsage:
        return PoolUsage(
            cells=self.cells, busy=self.busy, runs=self.runs - earlier.runs,
            busy_s=self.busy_s - earlier.busy_s, wait_s=self.wait_s - earlier.wait_s,
            at=self.at, interval_s=self.at - earlier.at, enforcement=self.enforcement,
        )  # fmt: skip

    @property
    def busy_fraction(self) -> float | None:
        """Share of the cells' time spent running jobs over the interval (since() only)."""
        if self.interval_s <= 0 or self.cells <= 0:
            return None
        return min(1.0, max(0.0, self.busy_s / (self.cells * self.interval_s)))

    @property
    def queued(self) -> float | None:
        """Mean number of jobs waiting for a cell over the interval (since() only)."""
        return self.wait_s / self.interval_s if self.interval_s > 0 else None


class SandboxPool:
    """A pool of warm, isolated cells. Use as `async with SandboxPool(...) as pool:`."""

    def __init__(self, config: SandboxConfig | None = None, runtimes: RuntimeStore | None = None):
        self.config = config or SandboxConfig()
        self.state = PoolState.NEW
        self._runtimes = runtimes or RuntimeStore()
        self._root: Path | None = None
        self._owns_root = False
        self._owner_lock: int | None = None  # the fd of the root's OWNER_LOCK, held till close
        self._cgroups: PoolCgroups | None = None
        self._enforcement: Enforcement | None = None
        self._launcher: Launcher | None = None
        self._idle: asyncio.Queue[Cell | None] = asyncio.Queue()
        self._cells: dict[str, Cell] = {}
        self._workspaces: dict[str, Workspace] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._broken: str | None = None
        self._counter = 0
        self._target = self.config.size  # cells kept: the last resize's n
        self._excess = 0  # busy cells to retire when their run ends (a shrink in progress)
        self._siblings: dict[tuple[str, tuple[str, ...], str], SandboxPool] = {}
        self._sibling_lock = asyncio.Lock()
        # utilisation counters (`usage()`): finished runs, and the start of each running/waiting
        self._jobs = itertools.count()
        self._runs = 0
        self._busy_s = 0.0
        self._wait_s = 0.0
        self._running: dict[int, float] = {}
        self._waiting: dict[int, float] = {}

    # -- lifecycle -------------------------------------------------------------------------
    async def __aenter__(self) -> SandboxPool:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def memory_enforcement(self) -> str:
        """The memory mechanism: cgroup_v1, cgroup_v2 or rlimit_as (as in `ExecResult`)."""
        if self._cgroups is not None and self._cgroups.version is not None:
            return f"cgroup_{self._cgroups.version}"
        return "rlimit_as"

    @property
    def enforcement(self) -> Enforcement:
        """How this pool's limits are enforced (known once it has started)."""
        if self._enforcement is None:
            raise SandboxError("the pool is not started: its enforcement is known from its start")
        return self._enforcement

    @property
    def root(self) -> Path:
        if self._root is None:
            raise SandboxError("the pool is not started: use `async with SandboxPool(...)`")
        return self._root

    async def start(self) -> None:
        if self.state is not PoolState.NEW:
            raise SandboxError(f"a pool can be started once; this one is {self.state.value}")
        cfg = self.config
        runtime_dir = self._runtimes.resolve(cfg.runtime) if cfg.runtime else None
        self._launcher = Launcher(cfg.isolation, cfg.tmp_mb, runtime_dir, tuple(cfg.preload),
                                  cfg.warm)  # fmt: skip
        self._launcher.check()
        if cfg.isolation == "none":
            warnings.warn(NO_ISOLATION_WARNING, stacklevel=2)
            log.warning(NO_ISOLATION_WARNING)
        if cfg.root is not None:
            cfg.root.mkdir(parents=True, exist_ok=True)
            parent, prefix = cfg.root, "pool-"
        else:
            parent, prefix = Path(tempfile.gettempdir()), "honing-sandbox-"
        sweep_stale_roots(parent, prefix)
        self._root = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
        self._owns_root = True
        self._cgroups = PoolCgroups() if cfg.isolation == "bwrap" else None
        self.state = PoolState.RUNNING
        try:
            self._owner_lock = _lock_root(self._root)
            self._check_cgroup_requirement()
            compiled = compile_zygote(self._root, cfg.isolation)
            self._launcher = replace(self._launcher, compiled=compiled)
            cells = await asyncio.gather(*(self._new_cell() for _ in range(cfg.size)))
            self._enforcement = self._enforcement_of(cells)
            self._check_seccomp_requirement(cells)
        except BaseException:
            await self.close()
            raise
        self._warn_if_weakened()
        for cell in cells:
            self._idle.put_nowait(cell)

    def _enforcement_of(self, cells: list[Cell]) -> Enforcement:
        cfg, cgroups = self.config, self._cgroups
        missing: list[str] = []
        if cgroups is None:
            missing.append("no cgroup: isolation is 'none'")
        elif cgroups.version is None:
            missing.append("no cgroup: " + "; ".join(cgroups.why))
        elif cgroups.pids is None:
            missing.append(f"no pids cgroup: the pids controller is not available beside "
                           f"cgroup {cgroups.version}'s memory controller")  # fmt: skip
        seccomp = bool(cells) and all(c.seccomp for c in cells)
        if not seccomp:
            why = next((c.seccomp_error for c in cells if not c.seccomp), "no cell started")
            missing.append(f"no seccomp filter: {why}")
        return Enforcement(
            memory=self.memory_enforcement,
            pids_cgroup=cgroups is not None and cgroups.pids is not None,
            seccomp=seccomp,
            isolation=cfg.isolation,
            missing=tuple(missing),
            memory_mb=cfg.memory_mb,
            max_procs=cfg.max_procs,
        )

    def _check_cgroup_requirement(self) -> None:
        cgroups = self._cgroups
        if not self.config.require.cgroup or (cgroups is not None and cgroups.pids is not None):
            return
        if cgroups is None:
            why = "isolation is 'none', whose cells run without cgroups (use isolation: bwrap)"
        elif cgroups.version is None:
            why = "; ".join(cgroups.why)
        else:
            why = f"cgroup {cgroups.version} has a memory controller for honing but no pids one"
        raise SandboxUnavailable(
            f"sandbox.require.cgroup is set, but no cgroup can limit this pool's memory and "
            f"processes: {why}. To get one, {DELEGATE_HINT} (see docs/sandbox.md, "
            "'Enforcement'); or drop the requirement to run with RLIMIT_AS per process."
        )

    def _check_seccomp_requirement(self, cells: list[Cell]) -> None:
        if not self.config.require.seccomp or self.enforcement.seccomp:
            return
        why = next((c.seccomp_error for c in cells if not c.seccomp), "no cell started")
        raise SandboxUnavailable(
            f"sandbox.require.seccomp is set, but the syscall filter is off: {why}. It needs "
            "isolation: bwrap on an x86_64 Linux kernel with seccomp filters "
            "(CONFIG_SECCOMP_FILTER); or drop the requirement to run without it."
        )

    def _warn_if_weakened(self) -> None:
        """A warning (once per process) for each protection the pool runs without."""
        e = self.enforcement
        if e.isolation != "bwrap":
            return  # NO_ISOLATION_WARNING said it all
        messages = []
        if e.memory == "rlimit_as":
            messages.append(
                f"honing sandbox: no memory cgroup — memory is limited per process by RLIMIT_AS, "
                f"so a job of {e.max_procs} processes may use {e.max_procs} × {e.memory_mb} MiB, "
                f"and there is no pids cgroup. Why: {'; '.join(self._cgroups_why())}. To get "
                f"cgroup limits, {DELEGATE_HINT} (docs/sandbox.md, 'Enforcement'); "
                "sandbox.require.cgroup: true refuses to start without them."
            )
        elif not e.pids_cgroup:
            messages.append(
                "honing sandbox: no pids cgroup — a job's processes are limited by RLIMIT_NPROC "
                f"only. To get one, {DELEGATE_HINT}."
            )
        if not e.seccomp:
            why = next((m for m in e.missing if m.startswith("no seccomp")), "")
            messages.append(
                f"honing sandbox: {why} — jobs may call ptrace, bpf, io_uring, userfaultfd, "
                "perf_event_open and keyrings; sandbox.require.seccomp: true refuses to start "
                "without the filter."
            )
        for message in messages:
            if message not in _warned:
                _warned.add(message)
                log.warning("%s", message)

    def _cgroups_why(self) -> list[str]:
        return self._cgroups.why if self._cgroups is not None else []

    async def close(self) -> None:
        if self.state is PoolState.CLOSED:
            return
        self.state = PoolState.CLOSED
        await asyncio.gather(*(p.close() for p in self._siblings.values()), return_exceptions=True)
        self._siblings.clear()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self._cells.values()), return_exceptions=True)
        self._cells.clear()
        if self._cgroups is not None:
            self._cgroups.remove()
        if self._root is not None and self._owns_root:
            with contextlib.suppress(OSError):
                fs.wipe(self._root)
                self._root.rmdir()
        if self._owner_lock is not None:  # released last: a sweeper never races this removal
            _unlock_root(self._owner_lock)
            self._owner_lock = None

    @property
    def size(self) -> int:
        """The number of cells the pool keeps (the `n` of the last `resize`)."""
        return self._target

    async def resize(self, n: int) -> None:
        """Grow or shrink to `n` cells (makes the pool an elastic worker set for the scheduler).
        Growing starts new cells; shrinking closes idle cells at once, and busy cells when their
        run ends (a cell that crashes meanwhile is not replaced), so no run is interrupted."""
        if n < 1:
            raise ValueError(f"a sandbox pool needs at least one cell, got resize({n})")
        if self.state is not PoolState.RUNNING:
            raise SandboxError(f"the pool is {self.state.value}; resize a running pool")
        delta, self._target = n - self._target, n
        if delta < 0:
            self._excess -= delta
            leaving: list[Cell] = []
            while self._excess and not self._idle.empty():
                cell = self._idle.get_nowait()
                if cell is None:  # the broken-pool marker stays for the runs to see
                    self._idle.put_nowait(None)
                    break
                self._excess -= 1
                self._cells.pop(cell.name, None)
                leaving.append(cell)
            await asyncio.gather(*(self._replace_cell(c, replace=False) for c in leaving))
            return
        kept = min(self._excess, delta)  # cells still due to leave simply stay
        self._excess -= kept
        started = await asyncio.gather(
            *(self._new_cell() for _ in range(delta - kept)), return_exceptions=True
        )
        errors = [r for r in started if isinstance(r, BaseException)]
        for new in started:
            if isinstance(new, Cell):
                self._give_back(new)
        if errors:
            self._target -= len(errors)
            raise errors[0]

    def _give_back(self, cell: Cell) -> None:
        """A cell whose run ended goes back to idle, or leaves if a shrink is pending."""
        if self._excess:
            self._excess -= 1
            self._cells.pop(cell.name, None)
            self._in_background(self._replace_cell(cell, replace=False))
        else:
            self._idle.put_nowait(cell)

    async def _new_cell(self) -> Cell:
        assert self._launcher is not None
        self._counter += 1
        name = f"cell-{self._counter}"
        cgroup = self._cgroups.cell(name) if self._cgroups is not None else None
        if cgroup is None and self._cgroups is not None and self._cgroups.available:
            if self.config.require.cgroup:
                raise SandboxUnavailable(f"sandbox cell {name}: could not create its cgroup "
                                         "(sandbox.require.cgroup is set)")  # fmt: skip
            log.warning(
                "sandbox cell %s: could not create its cgroup; it limits memory with RLIMIT_AS "
                "per process (see its results' memory_enforcement)",
                name,
            )
        cell = Cell(name, self.root / "cells" / name, self._launcher, cgroup)
        self._cells[name] = cell
        try:
            await cell.start()
            if self._enforcement is not None and self._enforcement.seccomp and not cell.seccomp:
                raise SandboxUnavailable(
                    f"sandbox cell {name} started without the syscall filter the pool had: "
                    f"{cell.seccomp_error}"
                )
        except BaseException:
            self._cells.pop(name, None)
            await cell.close()
            raise
        return cell

    async def sibling(
        self, runtime: str, preload: list[str], size: int = 1, warm: str = ""
    ) -> SandboxPool:
        """A pool like this one but with another runtime (and warm modules, and `warm` code: see
        `SandboxConfig.warm`), started on first use, shared by every caller asking for the same,
        and closed with this pool. Environments use it to run checkers that need packages
        (DuckDB, math-verify) beside plain programs."""
        key = (runtime, tuple(preload), warm)
        async with self._sibling_lock:
            pool = self._siblings.get(key)
            if pool is None:
                update = {"runtime": runtime, "preload": preload, "pool_size": size, "warm": warm}
                pool = SandboxPool(self.config.model_copy(update=update), self._runtimes)
                await pool.start()
                self._siblings[key] = pool
        return pool

    # -- workspaces ------------------------------------------------------------------------
    def workspace(self) -> Workspace:
        """A new persistent workspace; pass its `id` as `ExecRequest.workspace`."""
        ws = Workspace(self.root, uuid.uuid4().hex[:12])
        self._workspaces[ws.id] = ws
        return ws

    def drop_workspace(self, workspace_id: str) -> None:
        """Delete a workspace and its snapshots; it must not be in use by a run."""
        ws = self.get_workspace(workspace_id)
        path = ws._idle_path()
        del self._workspaces[workspace_id]
        for directory in (path, ws._snapshots):
            if directory.exists():
                fs.wipe(directory)
                directory.rmdir()

    def get_workspace(self, workspace_id: str) -> Workspace:
        try:
            return self._workspaces[workspace_id]
        except KeyError:
            raise KeyError(f"no workspace {workspace_id!r} in this pool") from None

    # -- running ---------------------------------------------------------------------------
    async def run_many(
        self, requests: Iterable[ExecRequest], concurrency: int | None = None
    ) -> list[ExecResult]:
        """Run all requests, at most `concurrency` at once (default: the pool size), in order."""
        limit = asyncio.Semaphore(concurrency or self.config.size)

        async def one(req: ExecRequest) -> ExecResult:
            async with limit:
                return await self.run(req)

        return list(await asyncio.gather(*(one(r) for r in requests)))

    async def run(self, request: ExecRequest) -> ExecResult:
        """Run one request. A malformed request (a file path outside the workspace, an unknown
        workspace) raises ValueError/KeyError before any cell is used."""
        if self.state is not PoolState.RUNNING:
            raise SandboxError(f"the pool is {self.state.value}; start it with `async with`")
        for relpath in request.files:
            fs.check_relpath(relpath)
        ws = self.get_workspace(request.workspace) if request.workspace else None
        if ws is not None:
            async with ws.lock:
                return await self._run_on_cell(request, ws)
        return await self._run_on_cell(request, None)

    def usage(self) -> PoolUsage:
        """Counters now, this pool's and its siblings' together (see `PoolUsage`)."""
        now = time.monotonic()
        pools = [self, *self._siblings.values()]
        return PoolUsage(
            cells=sum(p._target for p in pools),
            busy=sum(len(p._running) for p in pools),
            runs=sum(p._runs for p in pools),
            busy_s=sum(p._busy_s + sum(now - t for t in p._running.values()) for p in pools),
            wait_s=sum(p._wait_s + sum(now - t for t in p._waiting.values()) for p in pools),
            at=now,
            enforcement=self._enforcement,
        )

    async def _run_on_cell(self, request: ExecRequest, ws: Workspace | None) -> ExecResult:
        key = next(self._jobs)
        self._waiting[key] = time.monotonic()
        try:
            while True:
                cell = await self._idle.get()
                if cell is None:  # the pool could not replace crashed cells
                    self._idle.put_nowait(None)
                    return ExecResult(
                        ExecStatus.SANDBOX_ERROR, error=f"sandbox pool broken: {self._broken}"
                    )
                if cell.alive:
                    break
                self._replace(cell)  # it died while idle: blame no job, take the next cell
        finally:
            self._wait_s += time.monotonic() - self._waiting.pop(key)
        healthy = False  # unless the run ends normally: a cancelled run leaves the cell busy
        self._running[key] = time.monotonic()
        try:
            result, healthy = await self._execute(cell, request, ws)
            return result
        except ValueError:
            healthy = True  # refused before the cell ran anything
            raise
        finally:
            self._busy_s += time.monotonic() - self._running.pop(key)
            self._runs += 1
            if healthy and cell.alive:
                self._give_back(cell)
            elif cell.aborting:
                self._in_background(self._take_back(cell))
            else:
                self._replace(cell)

    async def _take_back(self, cell: Cell) -> None:
        """The cell of a cancelled run, once its zygote has stopped the job and said so, is
        idle again: a cancellation costs a kill, not a new cell."""
        try:
            await cell.finish_aborted()
            fs.wipe(cell.workspace)
        except (CellCrashed, OSError):
            self._replace(cell)
            return
        self._give_back(cell)

    async def _execute(
        self, cell: Cell, req: ExecRequest, ws: Workspace | None
    ) -> tuple[ExecResult, bool]:
        cfg = self.config
        timeout = req.timeout_s if req.timeout_s is not None else cfg.timeout_s
        memory = (req.memory_mb if req.memory_mb is not None else cfg.memory_mb) * MiB
        use_cgroup = cell.cgroup is not None
        max_procs = req.max_procs or cfg.max_procs
        job: dict[str, Any] = {
            "code": req.code,
            "filename": req.filename,
            "argv": req.argv,
            "stdin": req.stdin,
            "env": req.env,
            "timeout_s": timeout,
            # By default one second past the wall clock, so that a busy single process always
            # meets the wall-clock limit first; the CPU limit catches multi-threaded burners.
            "cpu_s": req.cpu_s or cfg.cpu_s or timeout + 1.0,
            "memory_bytes": memory,
            "rlimit_as": not use_cgroup,  # without a cgroup, the address-space limit
            "max_procs": max_procs,
            "max_output_bytes": req.max_output_bytes or cfg.max_output_bytes,
            "max_file_bytes": (req.max_file_mb or cfg.max_file_mb) * MiB,
        }
        try:
            if ws is not None:
                fs.move_entries(ws.path, cell.workspace)
            fs.write_files(cell.workspace, req.files)
        except ValueError:  # a path that would leave the workspace: the request's fault
            self._return_workspace(cell, ws)
            raise
        except OSError as exc:
            self._return_workspace(cell, ws)
            return ExecResult(ExecStatus.SANDBOX_ERROR, error=f"workspace setup: {exc}"), True
        oom_before = cell.oom_kills
        try:
            cell.set_limits(memory, max_procs)
            reply = await cell.execute(job, timeout + HARD_DEADLINE_GRACE_S)
        except asyncio.CancelledError:
            # The zygote stops the job and the cell comes back once it has said so; a run on a
            # persistent workspace loses its cell at once instead, so that the workspace's files
            # are back before its lock lets the next run in.
            if ws is not None or not cell.abort(timeout + HARD_DEADLINE_GRACE_S):
                cell.kill_now()
                self._return_workspace(cell, ws)
            raise
        except (CellCrashed, OSError) as exc:
            oom = cell.cgroup is not None and _safe_oom_kills(cell) > oom_before
            self._return_workspace(cell, ws)
            if oom:
                error = f"memory limit of {memory // MiB} MiB exceeded; the cell was lost: {exc}"
                return ExecResult(
                    ExecStatus.MEMORY_LIMIT,
                    memory_enforcement=_memory_enforcement(cell),
                    seccomp=cell.seccomp,
                    error=error,
                    risks=[event("memory_blowup", error)],
                ), False
            return ExecResult(ExecStatus.SANDBOX_ERROR, error=str(exc)), False
        files = fs.read_files(cell.workspace, req.output_files, job["max_file_bytes"])
        self._return_workspace(cell, ws)
        result = self._classify(cell, reply, job, oom_before)
        result.files = files
        return result, True

    def _return_workspace(self, cell: Cell, ws: Workspace | None) -> None:
        if ws is not None:
            fs.wipe(ws.path)
            fs.move_entries(cell.workspace, ws.path)
        fs.wipe(cell.workspace)

    def _classify(
        self, cell: Cell, reply: dict[str, Any], job: dict[str, Any], oom_before: int
    ) -> ExecResult:
        result = ExecResult(
            status=ExecStatus.OK,
            exit_code=reply["exit_code"],
            signal=reply["signal"],
            stdout=reply["stdout"],
            stderr=reply["stderr"],
            stdout_truncated=reply["stdout_truncated"],
            stderr_truncated=reply["stderr_truncated"],
            wall_s=reply["wall_s"],
            cpu_s=reply["cpu_s"],
            memory_enforcement=_memory_enforcement(cell),
            seccomp=cell.seccomp,
            risks=reply["risks"],
        )
        memory = int(job["memory_bytes"])
        oom = False
        if cell.cgroup is not None:
            peak = cell.cgroup.peak()
            if peak is not None:
                result.peak_memory_mb = max(0, peak - cell.baseline_bytes) / MiB
            else:  # a v2 kernel before 6.12: no per-job peak, the job's largest process instead
                result.peak_memory_mb = reply["maxrss_kb"] / 1024
            cell.oom_kills = cell.cgroup.oom_kills()
            oom = cell.oom_kills > oom_before
        else:
            result.peak_memory_mb = reply["maxrss_kb"] / 1024
            oom = result.exit_code not in (0, None) and "MemoryError" in result.stderr[-2000:]
        sig = result.signal
        if reply["limit"] == "output_limit":
            result.status = ExecStatus.OUTPUT_LIMIT
            result.error = "output past the byte limit; the program was stopped"
        elif reply["limit"] == "timeout":
            result.status = ExecStatus.TIMEOUT
            result.error = "wall-clock limit reached"
        elif oom:
            result.status = ExecStatus.MEMORY_LIMIT
            result.error = f"memory limit of {memory // MiB} MiB exceeded"
            result.risks.append(event("memory_blowup", result.error))
        elif sig == signal.SIGXCPU or (sig == signal.SIGKILL and result.cpu_s >= job["cpu_s"]):
            # SIGXCPU at the soft limit; SIGKILL at the hard one when SIGXCPU was ignored
            result.status = ExecStatus.TIMEOUT
            result.error = "CPU-time limit reached"
        elif sig is not None:
            result.status = ExecStatus.KILLED
            result.error = f"killed by signal {signal.Signals(sig).name}"
        elif result.exit_code != 0:
            result.status = ExecStatus.ERROR
        return result

    def _replace(self, cell: Cell) -> None:
        self._cells.pop(cell.name, None)
        replace = not self._excess  # during a shrink, a lost cell is one fewer to retire
        if not replace:
            self._excess -= 1
        self._in_background(self._replace_cell(cell, replace))

    def _in_background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _replace_cell(self, dead: Cell, replace: bool = True) -> None:
        await dead.close()
        with contextlib.suppress(OSError):
            fs.wipe(dead.directory)
            dead.directory.rmdir()
        if not replace:
            return
        last: Exception | None = None
        for attempt in range(REPLACE_ATTEMPTS):
            if self.state is not PoolState.RUNNING:
                return
            try:
                cell = await self._new_cell()
            except SandboxUnavailable as exc:
                last = exc
                await asyncio.sleep(0.5 * 2**attempt)
                continue
            self._give_back(cell)
            return
        self._broken = f"could not replace a crashed cell: {last}"
        log.error("sandbox pool: %s", self._broken)
        self._idle.put_nowait(None)


def _memory_enforcement(cell: Cell) -> str:
    return f"cgroup_{cell.cgroup.version}" if cell.cgroup is not None else "rlimit_as"


def _safe_oom_kills(cell: Cell) -> int:
    try:
        return cell.cgroup.oom_kills() if cell.cgroup is not None else 0
    except OSError:
        return 0
