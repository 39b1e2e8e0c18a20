"""One cell: a long-lived sandbox process holding a warm zygote, and the host's handle on it.

A cell runs one job at a time. The host writes a job line to the zygote's stdin and reads the
result line from its stdout; anything the cell prints on stderr goes to `cell.log` beside its
workspace, so a crash can be explained. A cell that dies, answers garbage or does not answer by
the job's hard deadline is killed (bubblewrap takes its whole pid namespace with it) and reported
as `CellCrashed`; the pool then replaces it. The risk events the zygote's audit reports with a
job become `honing.risk` events here (`risk_events`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from honing.errors import CellCrashed, SandboxUnavailable
from honing.risk import RiskEvent, event
from honing.sandbox.cgroups import CellCgroup
from honing.sandbox.launch import Launcher, clean_env

log = logging.getLogger(__name__)
START_TIMEOUT_S = 30.0
CGROUP_RELEASE_S = 5.0  # how long a closed cell's processes may take to leave its cgroup
CELL_PROCESSES = 2  # bubblewrap's monitor and the zygote, counted in the cell's pids cgroup
# The longest JSON line a cell may send (a job's streams follow its line as raw bytes).
READER_LIMIT = 1 << 20
# Joins the cell's cgroups before bubblewrap starts, so nothing of the cell runs outside them.
JOIN_CGROUPS = 'for f in $HONING_CGROUP_PROCS; do echo $$ > "$f" || exit 97; done; exec "$@"'


def risk_events(found: list[dict[str, str]]) -> list[RiskEvent]:
    """The risk events of a job's reply ({"kind", "detail"} each, as the zygote's audit saw
    them) as `RiskEvent`s; KeyError for a kind honing.risk does not know."""
    return [event(e["kind"], e["detail"]) for e in found]


class Cell:
    def __init__(
        self, name: str, directory: Path, launcher: Launcher, cgroup: CellCgroup | None
    ) -> None:
        self.name = name
        self.directory = directory
        self.workspace = directory / "workspace"
        self.tmp = directory / "tmp"
        self.launcher = launcher
        self.cgroup = cgroup
        self.baseline_bytes = 0
        self.oom_kills = 0  # the cgroup's OOM-kill count after the last job
        self.seccomp = False  # whether the zygote installed the syscall filter jobs inherit
        self.seccomp_error = ""  # why it did not, as the zygote said
        self._proc: asyncio.subprocess.Process | None = None
        self._memory_limit: int | None = None
        self._max_procs: int | None = None
        self._header: tuple[dict[str, Any], list[int]] | None = None  # a reply read in part
        self._abort_deadline_s: float | None = None  # set by abort() until finish_aborted()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> None:
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        argv = self.launcher.argv(self.workspace, self.tmp)
        env = clean_env()
        if self.cgroup is not None:
            env["HONING_CGROUP_PROCS"] = " ".join(str(p) for p in self.cgroup.procs_files)
            argv = ["/bin/sh", "-c", JOIN_CGROUPS, "sh", *argv]
        with open(self.directory / "cell.log", "ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                env=env,
                limit=READER_LIMIT,
            )
        try:
            ready = await self._read_reply(START_TIMEOUT_S)
        except CellCrashed as exc:
            raise SandboxUnavailable(
                f"sandbox cell {self.name} failed to start: {exc}. If bubblewrap reports "
                "'No permissions to create new namespace', enable unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu 24.04+ "
                "kernel.apparmor_restrict_unprivileged_userns=0)."
            ) from exc
        if not ready.get("ready"):
            await self.kill()
            raise SandboxUnavailable(f"sandbox cell {self.name} sent {ready!r} instead of ready")
        self.seccomp = bool(ready.get("seccomp"))
        self.seccomp_error = "" if self.seccomp else str(ready.get("seccomp_error") or "unknown")
        if self.cgroup is not None:
            self.baseline_bytes = self.cgroup.usage()
            self.oom_kills = self.cgroup.oom_kills()

    async def execute(self, job: dict[str, Any], deadline_s: float) -> dict[str, Any]:
        """Run one job; `deadline_s` is the hard backstop past the job's own timeout."""
        proc = self._proc
        if proc is None or proc.stdin is None or not self.alive:
            raise CellCrashed(f"cell {self.name} is not running")
        try:
            proc.stdin.write(json.dumps(job).encode() + b"\n")
            await proc.stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            await self.kill()
            raise CellCrashed(f"cell {self.name} stopped reading jobs: {exc}") from exc
        result = await self._read_reply(deadline_s)
        if "internal_error" in result:
            await self.kill()
            raise CellCrashed(f"cell {self.name} zygote failed: {result['internal_error']}")
        try:
            result["risks"] = risk_events(result.get("risks", []))
        except (KeyError, TypeError) as exc:
            await self.kill()
            raise CellCrashed(f"cell {self.name} sent malformed risk events: {exc}") from exc
        return result

    def abort(self, deadline_s: float) -> bool:
        """Ask the zygote to stop the job it runs (whose run was cancelled), without waiting;
        `finish_aborted` then takes its reply. False when the cell cannot be asked."""
        proc = self._proc
        if proc is None or proc.stdin is None or not self.alive:
            return False
        try:
            proc.stdin.write(b"\n")
        except (ConnectionError, RuntimeError):
            return False
        self._abort_deadline_s = deadline_s
        return True

    @property
    def aborting(self) -> bool:
        """A job was aborted and its reply not yet taken (`finish_aborted`)."""
        return self._abort_deadline_s is not None

    async def finish_aborted(self) -> None:
        """Wait for the aborted job's reply (the zygote has killed its processes by then) and
        drop it; the cell is then ready for the next job. CellCrashed if it never comes."""
        assert self._abort_deadline_s is not None, "abort() first"
        await self._read_reply(self._abort_deadline_s)
        self._abort_deadline_s = None

    def set_limits(self, job_bytes: int, job_procs: int) -> None:
        """Point the cell's cgroup limits at one job (written only when they change)."""
        if self.cgroup is None:
            return
        limit = self.baseline_bytes + job_bytes
        if limit != self._memory_limit:
            self.cgroup.set_memory_limit(limit)
            self._memory_limit = limit
        procs = job_procs + CELL_PROCESSES
        if procs != self._max_procs:
            self.cgroup.set_max_procs(procs)
            self._max_procs = procs
        self.cgroup.reset_peak()

    async def _read_reply(self, timeout_s: float) -> dict[str, Any]:
        """The zygote's next reply: its JSON line, and the raw streams that follow it decoded
        into "stdout" and "stderr" (with errors="replace", as python's own would show them).
        A read cancelled between the line and the streams resumes at the streams."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        line = b""
        try:
            async with asyncio.timeout(timeout_s):  # no extra task per job, unlike wait_for
                if self._header is None:
                    line = await proc.stdout.readline()
                    if not line:
                        raise EOFError
                    reply = json.loads(line)
                    if not isinstance(reply, dict):
                        raise ValueError("not a JSON object")
                    sizes = [reply.pop("stdout_bytes", 0), reply.pop("stderr_bytes", 0)]
                    if not all(type(n) is int and n >= 0 for n in sizes):
                        raise ValueError(f"stream sizes {sizes!r}")
                    self._header = reply, sizes
                reply, sizes = self._header
                streams = await proc.stdout.readexactly(sum(sizes))
                self._header = None
        except TimeoutError:
            await self.kill()
            raise CellCrashed(f"cell {self.name} did not answer within {timeout_s:.1f}s") from None
        except (EOFError, asyncio.IncompleteReadError):
            await self.kill()
            raise CellCrashed(f"cell {self.name} exited ({self.log_tail()})") from None
        except ValueError as exc:  # JSONDecodeError is one
            await self.kill()
            what = f"a malformed reply: {line[:200]!r}" if line else f"an oversized reply: {exc}"
            raise CellCrashed(f"cell {self.name} sent {what}") from exc
        reply["stdout"] = streams[: sizes[0]].decode("utf-8", errors="replace")
        reply["stderr"] = streams[sizes[0] :].decode("utf-8", errors="replace")
        return reply

    def log_tail(self, n: int = 800) -> str:
        try:
            data = (self.directory / "cell.log").read_bytes()[-n:]
        except OSError:
            return "no log"
        text = data.decode(errors="replace").strip()
        return text or f"exit status {self._proc.returncode if self._proc else None}"

    def kill_now(self) -> None:
        """SIGKILL the cell without waiting (bubblewrap takes its namespace down with it)."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    async def kill(self) -> None:
        """SIGKILL the cell and reap it."""
        self.kill_now()
        if self._proc is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._proc.wait(), 10)

    async def close(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None and proc.stdin is not None:
            proc.stdin.close()  # the zygote exits on EOF
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 2)
        await self.kill()
        if self.cgroup is not None:
            await self._remove_cgroup()

    async def _remove_cgroup(self) -> None:
        """Remove the cell's groups once they are empty. The cell's processes die with its pid
        namespace, shortly after bubblewrap; a group removed too early would stay behind, one
        per replaced cell, for as long as the pool runs."""
        assert self.cgroup is not None
        deadline = time.monotonic() + CGROUP_RELEASE_S
        while not self.cgroup.remove():
            if time.monotonic() > deadline:
                log.warning(
                    "sandbox cell %s: its cgroup still holds processes %.0f s after the cell "
                    "was killed; the pool removes it when it closes",
                    self.name,
                    CGROUP_RELEASE_S,
                )
                return
            await asyncio.sleep(0.005)
