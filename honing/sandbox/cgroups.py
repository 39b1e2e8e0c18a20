"""Memory and process-count limits for a cell through cgroups: v1 controllers or a v2 subtree.

`PoolCgroups()` tries, in order (`HIERARCHIES`):
  * v1: a group `honing-<pid>-<random>` under this process's own memory and pids groups;
  * v2: the same under this process's own group, when that group is writable and has the memory
    controller (as root, or in a delegated scope: `systemd-run --user --scope -p Delegate=yes`).
    A v2 group that holds processes cannot give controllers to its children, so when honing is
    alone in its group it first moves itself into the leaf `honing-supervisor` (once; only on
    v2, only when the group does not already delegate, never with other processes in the group).
Each cell gets a child group; its launcher joins it before bubblewrap starts, so the whole cell
is accounted there. Where neither works, `version` is None, `why` says what was missing and the
pool falls back to RLIMIT_AS (see `SandboxPool.enforcement`).

Not covered: v2 threaded subtrees; a v2 group shared with processes honing did not start.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)
CGROUP_ROOT = Path("/sys/fs/cgroup")
SUPERVISOR = "honing-supervisor"  # v2: the leaf honing moves itself into to delegate
HIERARCHIES: tuple[Literal["v1", "v2"], ...] = ("v1", "v2")  # tried in this order
DELEGATE_HINT = (
    "run honing as root, or in a delegated cgroup v2 scope: "
    "`systemd-run --user --scope -p Delegate=yes honing ...`"
)
_v2_lock = threading.Lock()  # the move into the supervisor leaf happens once per process


def _own_v1_path(controller: str) -> Path | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            mount = CGROUP_ROOT / controller
            if (mount / "cgroup.procs").exists():
                return mount / path.lstrip("/")
    return None


def own_v2_group(proc_cgroup: str, mountinfo: str) -> Path | None:
    """This process's v2 group as a directory, from the texts of /proc/self/cgroup and
    /proc/self/mountinfo; None without a mounted cgroup2 hierarchy that holds it."""
    path = next((ln[3:] for ln in proc_cgroup.splitlines() if ln.startswith("0::")), None)
    for line in mountinfo.splitlines():
        fields, sep, fs = line.partition(" - ")
        parts = fields.split()
        if not sep or len(parts) < 5 or fs.split()[:1] != ["cgroup2"] or path is None:
            continue
        root, point = _unescape(parts[3]), Path(_unescape(parts[4]))
        if root != "/":  # a mount of a subtree: the group must lie inside it
            if path != root and not path.startswith(root.rstrip("/") + "/"):
                continue
            path = path[len(root) :]
        return point / path.lstrip("/")
    return None


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


class CellCgroup:
    """The memory (and, where available, pids) group of one cell.

    Its control files are opened once and read/written with pread/pwrite: these calls sit on the
    path of every execution.
    """

    version: Literal["v1", "v2"] = "v1"
    LIMIT = "memory.limit_in_bytes"
    USAGE = "memory.usage_in_bytes"
    PEAK = "memory.max_usage_in_bytes"

    def __init__(self, memory: Path, pids: Path | None) -> None:
        self.memory = memory
        self.pids = pids
        self._fds: dict[str, int] = {}

    def _fd(self, name: str, writable: bool = False) -> int:
        fd = self._fds.get(name)
        if fd is None:
            fd = os.open(self.memory / name, os.O_RDWR if writable else os.O_RDONLY)
            self._fds[name] = fd
        return fd

    def _read(self, name: str) -> str:
        return os.pread(self._fd(name), 4096, 0).decode()

    def _write(self, name: str, value: int | str) -> None:
        os.pwrite(self._fd(name, writable=True), str(value).encode(), 0)

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in dict.fromkeys((self.memory, self.pids)) if d]

    def set_memory_limit(self, nbytes: int) -> None:
        self._write(self.LIMIT, nbytes)

    def reset_peak(self) -> None:
        self._write(self.PEAK, 0)

    def usage(self) -> int:
        return int(self._read(self.USAGE))

    def peak(self) -> int | None:
        """Peak memory since the last `reset_peak` (None where the kernel cannot tell)."""
        return int(self._read(self.PEAK))

    def oom_kills(self) -> int:
        """OOM kills in this group so far (falls back to the limit-hit counter on old kernels)."""
        for line in self._read("memory.oom_control").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return int(self._read("memory.failcnt"))

    def set_max_procs(self, n: int) -> None:
        if self.pids is not None:
            (self.pids / "pids.max").write_text(str(n))

    def remove(self) -> bool:
        """Close the control files and remove the groups. False while a group still holds a
        process (the kernel lets go of a killed cell's processes a little after it is killed):
        call again later."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        removed = True
        for d in dict.fromkeys((self.memory, self.pids)):
            if d is None:
                continue
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                removed = False
        return removed


class CellCgroupV2(CellCgroup):
    """A cell's v2 group: one directory with memory.* (and pids.* when delegated) files.

    memory.peak is reset per open file on Linux ≥ 6.12 (a write resets what reads through the
    same descriptor see); on older kernels `peak()` is None and the pool reports the job's
    max RSS instead.
    """

    version: Literal["v1", "v2"] = "v2"
    LIMIT = "memory.max"
    USAGE = "memory.current"
    PEAK = "memory.peak"

    def __init__(self, group: Path, pids: bool) -> None:
        super().__init__(group, group if pids else None)
        self._peak_resets = (group / self.PEAK).exists()
        with contextlib.suppress(OSError):  # RAM only, as v1's memory.limit_in_bytes: no swap
            (group / "memory.swap.max").write_text("0")

    def reset_peak(self) -> None:
        if self._peak_resets:
            try:
                self._write(self.PEAK, "reset")
            except OSError:  # before Linux 6.12 memory.peak is read-only
                self._peak_resets = False

    def peak(self) -> int | None:
        if not self._peak_resets:
            return None
        return int(os.pread(self._fd(self.PEAK, writable=True), 4096, 0))  # the fd reset wrote

    def oom_kills(self) -> int:
        for line in self._read("memory.events").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0


def _remove_stale(parent: Path) -> None:
    """Remove groups left by honing processes that died without closing their pool."""
    for group in parent.glob("honing-*-*"):
        pid = group.name.split("-")[1]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        for d in [*(c for c in group.iterdir() if c.is_dir()), group]:
            with contextlib.suppress(OSError):
                d.rmdir()  # fails, harmlessly, while a process is still inside


def _enable(group: Path, controllers: Sequence[str]) -> None:
    if set(controllers) - _words(group / "cgroup.subtree_control"):
        (group / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in controllers))


def v2_base() -> tuple[Path | None, str]:
    """The v2 group whose children may get the memory (and pids) controller, moving this
    process into a leaf of its own group when that is what it takes; else None and why not."""
    try:
        own = own_v2_group(
            Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text()
        )
    except OSError as exc:
        return None, f"cgroup v2: cannot read this process's group: {exc.strerror}"
    if own is None:
        return None, "cgroup v2: no cgroup2 hierarchy holds this process"
    with _v2_lock:
        if own.name == SUPERVISOR and "memory" in _words(own.parent / "cgroup.subtree_control"):
            return own.parent, ""  # done before, by this process or a honing process above it
        available = _words(own / "cgroup.controllers")
        if "memory" not in available:
            offered = ", ".join(sorted(available)) or "none"
            return None, (
                f"cgroup v2: this process's group {own} has no memory controller "
                f"(controllers: {offered})"
            )
        if not os.access(own / "cgroup.subtree_control", os.W_OK):
            return None, (
                f"cgroup v2: this process's group {own} is not writable by uid {os.getuid()} "
                "(not a delegated group)"
            )
        wanted = [c for c in ("memory", "pids") if c in available]
        try:
            _enable(own, wanted)
            return own, ""
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return None, f"cgroup v2: cannot enable {' '.join(wanted)} in {own}: {exc.strerror}"
        # EBUSY: "no internal processes" — the group's processes must first move to a leaf
        procs = {int(p) for p in _words(own / "cgroup.procs") if p.isdigit()}
        others = sorted(procs - {os.getpid()})
        if others:
            shown = ", ".join(map(str, others[:5])) + (" …" if len(others) > 5 else "")
            return None, (
                f"cgroup v2: {own} also holds processes honing did not start (pids {shown}), "
                "so it cannot delegate controllers; start honing alone in its group"
            )
        leaf = own / SUPERVISOR
        try:
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(os.getpid()))
        except OSError as exc:
            return None, f"cgroup v2: cannot move honing into {leaf}: {exc.strerror}"
        try:
            _enable(own, wanted)
        except OSError as exc:
            with contextlib.suppress(OSError):  # back where it was
                (own / "cgroup.procs").write_text(str(os.getpid()))
                leaf.rmdir()
            return None, f"cgroup v2: cannot enable {' '.join(wanted)} in {own}: {exc.strerror}"
        log.info("cgroup v2: moved honing (pid %d) into %s to delegate %s", os.getpid(), leaf,
                 " and ".join(wanted))  # fmt: skip
        return own, ""


class PoolCgroups:
    """The pool's parent groups. `version` is "v1", "v2" or None (no memory controller could
    be used: `why` says what each hierarchy lacked); `pids` whether a pids controller caps each
    cell's processes."""

    def __init__(self) -> None:
        self.version: Literal["v1", "v2"] | None = None
        self.memory: Path | None = None
        self.pids: Path | None = None
        self.why: list[str] = []
        name = f"honing-{os.getpid()}-{secrets.token_hex(3)}"
        for hierarchy in HIERARCHIES:
            opened = self._open_v1(name) if hierarchy == "v1" else self._open_v2(name)
            if opened:
                self.version = hierarchy
                self.why.clear()
                return

    def _open_v1(self, name: str) -> bool:
        mem, pids = _own_v1_path("memory"), _own_v1_path("pids")
        for parent in (mem, pids):
            if parent is not None:
                _remove_stale(parent)
        if mem is None:
            self.why.append("cgroup v1: no memory controller is mounted")
            return False
        try:
            (mem / name).mkdir()
        except OSError as exc:
            self.why.append(
                f"cgroup v1: cannot create a group in {mem} as uid {os.getuid()}: {exc.strerror}"
            )
            return False
        self.memory = mem / name
        if pids is not None:
            with contextlib.suppress(OSError):
                (pids / name).mkdir()
                self.pids = pids / name
        return True

    def _open_v2(self, name: str) -> bool:
        base, why = v2_base()
        if base is None:
            self.why.append(why)
            return False
        _remove_stale(base)
        group = base / name
        controllers = [
            c for c in ("memory", "pids") if c in _words(base / "cgroup.subtree_control")
        ]
        try:
            group.mkdir()
            _enable(group, controllers)
        except OSError as exc:
            with contextlib.suppress(OSError):
                group.rmdir()
            self.why.append(f"cgroup v2: cannot set up {group}: {exc.strerror}")
            return False
        self.memory = group
        self.pids = group if "pids" in controllers else None
        return True

    @property
    def available(self) -> bool:
        return self.memory is not None

    def cell(self, name: str) -> CellCgroup | None:
        if self.memory is None:
            return None
        try:
            (self.memory / name).mkdir(exist_ok=True)
            if self.version == "v2":
                return CellCgroupV2(self.memory / name, pids=self.pids is not None)
            pids = None
            if self.pids is not None:
                (self.pids / name).mkdir(exist_ok=True)
                pids = self.pids / name
        except OSError:
            return None
        return CellCgroup(self.memory / name, pids)

    def remove(self) -> None:
        for d in dict.fromkeys((self.memory, self.pids)):
            if d is None:
                continue
            for child in d.iterdir():
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                d.rmdir()
