"""Isolated, fast execution of untrusted Python: `SandboxPool`, `ExecRequest`, `ExecResult`.

Each cell is one long-lived bubblewrap sandbox whose pid 1 is a warm interpreter (the zygote)
that forks one child per job, so a run costs a fork, not a process or sandbox start. A program
run here cannot reach the network, the host's files, processes or environment, outlive its run,
exhaust the host or gain privileges; kernel exploits, side channels, workspace disk quota and
`isolation: none` are not covered (docs/sandbox.md, "Threat model"). This package re-exports the
public API; the pool, cells, cgroups, launch and runtimes live in its submodules, and
docs/sandbox.md describes limits ("Limits", "Enforcement") and program semantics.
"""

from honing.config import SandboxConfig
from honing.sandbox.pool import Enforcement, PoolUsage, SandboxPool, Workspace
from honing.sandbox.runtime import RuntimeStore
from honing.types import ExecRequest, ExecResult, ExecStatus

__all__ = [
    "Enforcement",
    "ExecRequest",
    "ExecResult",
    "ExecStatus",
    "PoolUsage",
    "RuntimeStore",
    "SandboxConfig",
    "SandboxPool",
    "Workspace",
]
