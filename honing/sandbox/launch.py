"""The command line that starts one cell: bubblewrap's mount and namespace plan, or none.

The filesystem a cell sees (all read-only except /workspace and /tmp):

    /usr, /bin, /lib*, /sbin      the system's programs and shared libraries (as on the host)
    /etc/ld.so.cache              so the dynamic loader finds libraries (nothing else from /etc)
    <python prefix>               the interpreter, its stdlib and libpython, at its host path
    /opt/honing/zygote.py         the warm interpreter's server (its source, for tracebacks)
    /opt/honing/zygote.pyc        the same, compiled: what the cell runs
    /opt/honing/riskaudit.py(c)   the risk audit the zygote loads beside it (source, compiled)
    /opt/honing/runtime           the packages of a named runtime, when one is used
    /workspace                    this cell's workspace (read-write, emptied after each job)
    /tmp, /dev/shm                private tmpfs of fixed size each, emptied after each job
    /proc, /dev                   the cell's own pid namespace; a minimal read-only /dev
"""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from honing.errors import SandboxUnavailable

ZYGOTE = Path(__file__).with_name("zygote.py")
RISKAUDIT = Path(__file__).with_name("riskaudit.py")
INSIDE_RISKAUDIT = "/opt/honing/riskaudit.py"
INSIDE_ZYGOTE = "/opt/honing/zygote.py"
INSIDE_COMPILED = "/opt/honing/zygote.pyc"
INSIDE_RUNTIME = "/opt/honing/runtime"
INSIDE_WORKSPACE = "/workspace"
INSIDE_TMP = "/tmp"
INSIDE_SHM = "/dev/shm"
SANDBOX_UID = 1000
INSTALL_HINT = (
    "bubblewrap (bwrap) is needed to isolate executions and was not found on PATH. Install it: "
    "`sudo apt-get install bubblewrap` (Debian/Ubuntu), `sudo dnf install bubblewrap` (Fedora), "
    "`sudo pacman -S bubblewrap` (Arch) — `make setup` does this on Debian when run as root. "
    "For development on a system without it, `isolation: none` runs code WITHOUT isolation."
)


def interpreter() -> Path:
    """The real interpreter binary (never a venv link or a pyenv shim: shims cost ~80 ms)."""
    base = (
        Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    )
    return Path(os.path.realpath(base if base.exists() else sys.executable))


def clean_env() -> dict[str, str]:
    """The whole environment a job sees (plus what its request adds): no host variable leaks."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": INSIDE_WORKSPACE,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }


@dataclass(frozen=True)
class Launcher:
    """Builds the argv of a cell for one isolation mode."""

    isolation: str  # "bwrap" or "none"
    tmp_mb: int
    runtime_dir: Path | None = None
    preload: tuple[str, ...] = ()  # modules the zygote imports once, so every job finds them warm
    warm: str = ""  # code the zygote runs once after them: the module `honing_warm`
    compiled: Path | None = None  # the zygote's bytecode (`compile_zygote`); else its source runs

    def check(self) -> None:
        if self.isolation == "bwrap" and shutil.which("bwrap") is None:
            raise SandboxUnavailable(INSTALL_HINT)

    def argv(self, workspace: Path, tmp: Path) -> list[str]:
        python = str(interpreter())
        if self.isolation == "none":
            runtime = str(self.runtime_dir) if self.runtime_dir else ""
            spec = self._spec(str(workspace), str(tmp), runtime or None, [])
            return [python, "-I", "-S", "-B", str(self.compiled or ZYGOTE), spec]
        args = [
            shutil.which("bwrap") or "bwrap",
            "--unshare-all",  # ipc, pid, net (loopback only), uts, cgroup
            "--unshare-user",  # explicit: as root, --unshare-all alone keeps the host user ns
            "--die-with-parent",
            "--new-session",
            "--as-pid-1",
            "--cap-drop", "ALL",
            "--disable-userns",
            "--uid", str(SANDBOX_UID),
            "--gid", str(SANDBOX_UID),
            "--hostname", "sandbox",
        ]  # fmt: skip
        args += _system_mounts()
        prefix = os.path.realpath(sys.base_prefix)
        if not prefix.startswith("/usr/"):
            args += ["--ro-bind", prefix, prefix]
        args += ["--ro-bind", str(ZYGOTE), INSIDE_ZYGOTE]
        args += ["--ro-bind", str(RISKAUDIT), INSIDE_RISKAUDIT]
        if self.compiled is not None:
            args += ["--ro-bind", str(self.compiled), INSIDE_COMPILED]
            audit = self.compiled.with_name("riskaudit.pyc")
            args += ["--ro-bind", str(audit), INSIDE_RISKAUDIT + "c"]
        runtime = ""
        if self.runtime_dir is not None:
            args += ["--ro-bind", str(self.runtime_dir), INSIDE_RUNTIME]
            runtime = INSIDE_RUNTIME
        args += [
            "--proc", "/proc",
            "--dev", "/dev",
            "--size", str(self.tmp_mb * 1024 * 1024), "--tmpfs", INSIDE_SHM,
            "--remount-ro", "/dev",  # device nodes still work; no files left in /dev
            "--size", str(self.tmp_mb * 1024 * 1024), "--tmpfs", INSIDE_TMP,
            "--bind", str(workspace), INSIDE_WORKSPACE,
            "--chdir", INSIDE_WORKSPACE,
            "--clearenv",
        ]  # fmt: skip
        for key, value in clean_env().items():
            args += ["--setenv", key, value]
        spec = self._spec(INSIDE_WORKSPACE, INSIDE_TMP, runtime or None, [INSIDE_SHM])
        zygote = INSIDE_ZYGOTE if self.compiled is None else INSIDE_COMPILED
        args += ["--", python, "-I", "-S", "-B", zygote, spec]
        return args

    def _spec(self, workspace: str, tmp: str, runtime: str | None, scratch: list[str]) -> str:
        return json.dumps({"workspace": workspace, "tmp": tmp, "runtime": runtime,
                           "scratch": scratch, "preload": list(self.preload),
                           "warm": self.warm})  # fmt: skip


def compile_zygote(directory: Path, isolation: str) -> Path:
    """The zygote compiled for the cells' interpreter (this one's version), as `directory`/
    zygote.pyc. A cell that runs its source instead compiles it at start and keeps ~2 MB of the
    parser's memory, which every fork then copies: ~0.2 ms more per job in the zygote and as
    much in the child."""
    target = directory / "zygote.pyc"
    shown = INSIDE_ZYGOTE if isolation == "bwrap" else str(ZYGOTE)  # where its source is seen
    py_compile.compile(str(ZYGOTE), cfile=str(target), dfile=shown, doraise=True, optimize=0)
    audit = INSIDE_RISKAUDIT if isolation == "bwrap" else str(RISKAUDIT)
    py_compile.compile(str(RISKAUDIT), cfile=str(directory / "riskaudit.pyc"), dfile=audit,
                       doraise=True, optimize=0)  # fmt: skip
    return target


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    if Path("/etc/ld.so.cache").exists():
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return args
