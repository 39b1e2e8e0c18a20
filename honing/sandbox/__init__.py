"""Isolated, fast execution of untrusted Python: `SandboxPool`, `ExecRequest`, `ExecResult`.

Threat model
------------
Covered — a program run here, however hostile, cannot:
  * reach the network: its network namespace has only loopback, and the host's loopback is not it;
  * see or change the host's files: it sees the system's libraries and the interpreter read-only,
    its own workspace and a private /tmp; home directories, /root, the project, run directories
    and other executions' workspaces are not mounted;
  * see or signal host processes: its pid namespace holds only its cell, and the cell's pid 1 (the
    zygote) ignores every signal a job can send it;
  * learn the host's environment variables: the environment is a fixed allow-list;
  * outlive its execution: when it ends, times out or hits a limit, every process of the cell but
    the zygote is SIGKILLed — children and daemonised grandchildren included;
  * exhaust the host: wall time, CPU time, memory (a cgroup v1 or v2, else RLIMIT_AS per process
    with a warning — see `SandboxPool.enforcement`), processes, output bytes, file size and /tmp
    size are limited;
  * gain privileges: all capabilities are dropped, no_new_privs is set, and it cannot create user
    namespaces;
  * reach rarely needed kernel interfaces (x86_64): a seccomp filter refuses ptrace, bpf,
    io_uring, userfaultfd, perf_event_open, keyrings, process_vm_* and System V IPC (whose
    objects would outlive the job; elsewhere they are removed after each job). Without it the
    pool warns; `SandboxConfig.require` makes a missing cgroup or filter refuse to start.

Not covered:
  * kernel exploits: the boundary is the Linux kernel's namespaces, not a VM (use gVisor or a VM
    for adversaries with kernel 0-days);
  * CPU-cache side channels and timing between cells; /proc of the cell shows the cell's own
    processes (the zygote's command line included, which holds no secret);
  * disk space of the workspace beyond the per-file size limit;
  * `isolation: none`, which exists for development only and isolates nothing;
  * when honing itself runs as root, the sandbox's user is root *outside* its user namespace
    (with no capability, and seeing only read-only system files, its workspace and /tmp): a
    kernel bug that breaks the namespace would then yield root. Run honing as an ordinary user
    where you can.

Speed: each cell is one long-lived bubblewrap sandbox whose pid 1 is a warm interpreter (the
zygote) that forks one child per job, so a run costs a fork, not a process or sandbox start.
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
