"""Shared records that cross layer boundaries.

Only plain, typed records live here (no behaviour beyond small derived properties): the sandbox
contract — `ExecRequest` in, `ExecResult` out, `ExecStatus` for what happened. The other records
that cross layers live beside it at the bottom: episodes in `honing.records`, tasks in
`honing.tasks.schema`, actions and observations in `honing.envs.base`.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from honing.risk import RiskEvent


class ExecStatus(enum.StrEnum):
    """What happened to one execution. Only `sandbox_error` blames honing; the rest the program."""

    OK = "ok"
    ERROR = "error"  # the program exited non-zero or raised
    TIMEOUT = "timeout"  # wall-clock or CPU-time limit
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"  # stdout or stderr went past the byte limit
    KILLED = "killed"  # ended by a signal that is not one of the limits above
    SANDBOX_ERROR = "sandbox_error"  # the sandbox failed; the program's fate is unknown


@dataclass(slots=True)
class ExecRequest:
    """One Python program to run in a fresh sandboxed process.

    `files` are written into the workspace before the run (paths relative to it). `output_files`
    lists glob patterns, relative to the workspace, whose files are returned in the result.
    `workspace` is the id of a persistent workspace from `SandboxPool.workspace()`; without it the
    run gets a fresh empty workspace that is deleted afterwards. A `None` limit takes the pool's
    default from `SandboxConfig`.
    """

    code: str
    argv: list[str] = field(default_factory=list)
    stdin: str = ""
    files: dict[str, str | bytes] = field(default_factory=dict)
    output_files: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workspace: str | None = None
    timeout_s: float | None = None
    cpu_s: float | None = None
    memory_mb: int | None = None
    max_procs: int | None = None
    max_output_bytes: int | None = None
    max_file_mb: int | None = None
    filename: str = "main.py"


@dataclass(slots=True)
class ExecResult:
    """The outcome of one execution. `signal` is set when a signal ended the program.

    `memory_enforcement` says how the memory limit was enforced: "cgroup_v1" or "cgroup_v2" (a
    memory cgroup of the cell: the limit counts everything the job's processes map and touch
    together) or "rlimit_as" (the address-space limit of each process: a fallback where no cgroup
    can be used, under which a job of N processes may use N times the limit; "none" when nothing
    ran). `seccomp` says whether the job ran under the sandbox's syscall filter. `error` explains
    a `sandbox_error` or a limit hit. `risks` are the risky actions the job's processes took, as
    the sandbox's audit saw them (`honing.risk`, source "sandbox").
    """

    status: ExecStatus
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_memory_mb: float = 0.0
    memory_enforcement: str = "none"
    seccomp: bool = False
    files: dict[str, bytes] = field(default_factory=dict)
    error: str = ""
    risks: list[RiskEvent] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status is ExecStatus.OK

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: status as its string value, output files as latin-1-safe text."""
        d = asdict(self)
        d["status"] = self.status.value
        d["files"] = {k: v.decode("utf-8", errors="replace") for k, v in self.files.items()}
        d["risks"] = [e.to_json_dict() for e in self.risks]
        return d
