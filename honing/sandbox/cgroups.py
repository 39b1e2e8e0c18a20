"""Memory and process-count limits for a cell through cgroup v1 controllers.

Each pool makes one group `honing-<pid>-<random>` under *this process's own* memory and pids
cgroups (read from /proc/self/cgroup), and one child group per cell. Nothing is ever moved out of
its cgroup: a cell's launcher joins its group before it starts bubblewrap, so the whole cell —
bubblewrap, the zygote and every job process — is accounted there.

Not covered: cgroup v2 (a v2 group that holds processes cannot delegate controllers to children,
so limits there need a systemd delegation we do not assume) — where no v1 memory controller can be
used the pool falls back to RLIMIT_AS and says so in every `ExecResult.memory_enforcement`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


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


class CellCgroup:
    """The memory (and, where available, pids) group of one cell.

    Its control files are opened once and read/written with pread/pwrite: these calls sit on the
    path of every execution.
    """

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

    def _write(self, name: str, value: int) -> None:
        os.pwrite(self._fd(name, writable=True), str(value).encode(), 0)

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in (self.memory, self.pids) if d is not None]

    def set_memory_limit(self, nbytes: int) -> None:
        self._write("memory.limit_in_bytes", nbytes)

    def reset_peak(self) -> None:
        self._write("memory.max_usage_in_bytes", 0)

    def usage(self) -> int:
        return int(self._read("memory.usage_in_bytes"))

    def peak(self) -> int:
        return int(self._read("memory.max_usage_in_bytes"))

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
        for d in (self.memory, self.pids):
            if d is None:
                continue
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                removed = False
        return removed


def _remove_stale(parent: Path) -> None:
    """Remove groups left by honing processes that died without closing their pool."""
    for group in parent.glob("honing-*-*"):
        pid = group.name.split("-")[1]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        for d in [*(c for c in group.iterdir() if c.is_dir()), group]:
            with contextlib.suppress(OSError):
                d.rmdir()  # fails, harmlessly, while a process is still inside


class PoolCgroups:
    """The pool's parent groups; `available` is False where no memory controller can be used."""

    def __init__(self) -> None:
        self.memory: Path | None = None
        self.pids: Path | None = None
        name = f"honing-{os.getpid()}-{secrets.token_hex(3)}"
        mem = _own_v1_path("memory")
        for parent in (mem, _own_v1_path("pids")):
            if parent is not None:
                _remove_stale(parent)
        if mem is not None:
            with contextlib.suppress(OSError):
                (mem / name).mkdir()
                self.memory = mem / name
        pids = _own_v1_path("pids")
        if pids is not None and self.memory is not None:
            with contextlib.suppress(OSError):
                (pids / name).mkdir()
                self.pids = pids / name

    @property
    def available(self) -> bool:
        return self.memory is not None

    def cell(self, name: str) -> CellCgroup | None:
        if self.memory is None:
            return None
        try:
            (self.memory / name).mkdir(exist_ok=True)
            pids = None
            if self.pids is not None:
                (self.pids / name).mkdir(exist_ok=True)
                pids = self.pids / name
        except OSError:
            return None
        return CellCgroup(self.memory / name, pids)

    def remove(self) -> None:
        for d in (self.memory, self.pids):
            if d is None:
                continue
            for child in d.iterdir():
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                d.rmdir()
