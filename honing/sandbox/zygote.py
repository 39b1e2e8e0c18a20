"""The warm interpreter inside a sandbox cell: reads jobs, forks one child per job, reports.

This file runs *inside* the cell (`python -I -S -B zygote.py ...`) and so uses only the standard
library and never imports honing. It speaks one JSON object per line with the host (a job in; a
ready line, then per job a result line followed by the raw stdout and stderr out) and, as the
cell's pid 1, ends every process of a job when it ends: docs/sandbox.md, "The zygote: protocol
and pid 1". A job runs as `python -E FILE` would and finalises as Py_FinalizeEx does, except
that only `__main__`'s objects are finalised (`_Program`, `_exec_main`, `_finalize`;
docs/sandbox.md, "How a program runs"). Each job's processes carry an audit hook that reports
their risky actions (writes outside the workspace, network, secrets...) on a pipe of the job's,
read into its result (`riskaudit.py`, loaded from beside this file; docs/sandbox.md, "Risk
audit"). The host side of the protocol is `honing.sandbox.cell`; the limits a job gets are
chosen by the pool, not here.
"""

from __future__ import annotations

import _signal
import builtins
import contextlib
import ctypes
import errno
import gc
import importlib
import io
import itertools
import json
import linecache
import mmap
import os
import resource
import select
import signal
import site
import sys
import time
import traceback
import types
from typing import Any


def _load_riskaudit() -> types.ModuleType:
    """The risk audit's module (riskaudit.py, or its compiled riskaudit.pyc, beside this file),
    kept in sys.modules as `honing_riskaudit` (this file runs as a script and imports no
    package)."""
    from importlib.machinery import SourceFileLoader, SourcelessFileLoader

    here = os.path.dirname(os.path.abspath(__file__))
    compiled, source = os.path.join(here, "riskaudit.pyc"), os.path.join(here, "riskaudit.py")
    loader = (SourcelessFileLoader("honing_riskaudit", compiled) if os.path.exists(compiled)
              else SourceFileLoader("honing_riskaudit", source))  # fmt: skip
    module = types.ModuleType("honing_riskaudit")
    module.__file__ = loader.path
    loader.exec_module(module)
    sys.modules["honing_riskaudit"] = module
    return module


riskaudit = _load_riskaudit()
RISK_FD = riskaudit.RISK_FD
RISK_KINDS, RISK_ONCE = riskaudit.RISK_KINDS, riskaudit.RISK_ONCE
RISK_PER_KIND, RISK_TOTAL = riskaudit.RISK_PER_KIND, riskaudit.RISK_TOTAL
RISK_DETAIL, RISK_READ_MAX = riskaudit.RISK_DETAIL, riskaudit.RISK_READ_MAX
PROCESS_EXPLOSION = riskaudit.PROCESS_EXPLOSION
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
READ_CHUNK = 65536
GC_EVERY = 256
WARM_MODULE = "honing_warm"  # what the pool's `warm` code defines, for jobs to import
COMPILE_IN_PARENT_MAX = 256 * 1024  # characters

# Imported once here so that forked jobs find them warm (HumanEval-style programs use these).
PREIMPORT = (
    "typing", "re", "math", "collections", "itertools", "functools", "string", "heapq", "bisect",
    "random", "hashlib", "copy", "operator",
    "ast",  # traceback imports it (3.11+) for every uncaught exception: ~4 ms a failing job
)  # fmt: skip
# Heavier modules (unittest, decimal, statistics…) cost more in fork time than they save.


def _prctl(option: int, arg: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)


def _wipe(path: str) -> None:
    """Empty a directory, including entries the job made unreadable (same owner: chmod works)."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)
                _wipe(entry.path)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


IPC_RMID = 0
SYSV_IPC = ("shm", "sem", "msg")


def _remove_sysv_ipc() -> None:
    """Remove every System V IPC object of the cell's IPC namespace (a job may leave some)."""
    for kind in SYSV_IPC:
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        if not rows:
            continue
        libc = ctypes.CDLL(None, use_errno=True)
        for row in rows:
            ident = int(row.split()[1])
            if kind == "shm":
                libc.shmctl(ident, IPC_RMID, None)
            elif kind == "sem":
                libc.semctl(ident, 0, IPC_RMID)
            else:
                libc.msgctl(ident, IPC_RMID, None)


# seccomp: syscalls every job is refused (EPERM). System V IPC objects would outlive a job in the
# cell's IPC namespace; the rest are kernel interfaces a program never needs and exploits like.
# x86_64 numbers (asm/unistd_64.h); elsewhere no filter is installed and leftover IPC objects are
# removed after each job instead.
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
DENIED_X86_64 = {
    29: "shmget", 64: "semget", 68: "msgget", 101: "ptrace", 248: "add_key",
    249: "request_key", 250: "keyctl", 298: "perf_event_open", 310: "process_vm_readv",
    311: "process_vm_writev", 321: "bpf", 323: "userfaultfd", 425: "io_uring_setup",
    426: "io_uring_enter", 427: "io_uring_register",
}  # fmt: skip
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_RET_K = 0x06


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [
        ("len", ctypes.c_ushort),
        ("filter", ctypes.POINTER(_SockFilter)),
    ]


def seccomp_program(denied: dict[int, str]) -> list[tuple[int, int, int, int]]:
    """The classic-BPF filter: foreign ABIs get ENOSYS, `denied` and x32 calls EPERM."""
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    checks = [(BPF_JGE_K, X32_SYSCALL_BIT), *((BPF_JEQ_K, nr) for nr in sorted(denied))]
    to_deny = len(checks) + 1  # past the checks and the ALLOW
    program = [
        (BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
        (BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    for i, (code, k) in enumerate(checks):
        program.append((code, to_deny - i - 1, 0, k))
    program += [(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW), (BPF_RET_K, 0, 0, deny)]
    return program


def _install_seccomp() -> str:
    """Install the filter on this process (jobs inherit it): "" when done, else why not."""
    machine = os.uname().machine
    if machine != "x86_64":
        return f"the syscall filter exists for x86_64 only, this machine is {machine}"
    program = seccomp_program(DENIED_X86_64)
    filters = (_SockFilter * len(program))(*(_SockFilter(*ins) for ins in program))
    fprog = _SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        code = ctypes.get_errno()
        return (
            f"prctl(PR_SET_SECCOMP) failed: {errno.errorcode.get(code, code)} {os.strerror(code)}"
        )
    return ""


class Zygote:
    def __init__(
        self,
        workspace: str,
        tmp: str,
        runtime_path: str | None,
        scratch: tuple[str, ...] = (),
        preload: tuple[str, ...] = (),
        warm: str = "",
    ) -> None:
        self.workspace = workspace
        self.tmp = tmp
        self.scratch = (tmp, *scratch)  # emptied after every job
        self.preload = preload
        self.warm = warm
        self.is_init = os.getpid() == 1
        if runtime_path:
            sys.path.insert(0, runtime_path)
        os.environ["TMPDIR"] = tmp
        self.jobs = 0
        self.host = -1  # our copy of the host's pipe (serve() makes it)
        self.seccomp = False
        self.seccomp_error = ""
        # The risk audit: each job's child arms it (`RiskAudit`); the jobs' processes count
        # their process creations in `spawns`, a page shared with them. Its module stays in
        # sys.modules, where a harness finds it to pass the audit on (`arm_inherited`).
        self.spawns = mmap.mmap(-1, 8)
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.risk_fd = RISK_FD if nofile == resource.RLIM_INFINITY else min(RISK_FD, nofile - 1)
        self.audit = riskaudit.RiskAudit(
            workspace,
            self.scratch,
            trusted=(sys.base_prefix, sys.prefix, sys.exec_prefix, "/usr",
                     *([runtime_path] if runtime_path else [])),
            zygote=(os.getpid(), os.getpgid(0)),
            in_cell=self.is_init,
            spawns=self.spawns,
            fd=self.risk_fd,
        )  # fmt: skip
        riskaudit.__dict__["CURRENT"] = (self.audit.spec(), self.risk_fd)

    def serve(self) -> None:
        _prctl(PR_SET_DUMPABLE, 0)  # jobs run as our uid: keep them from ptrace and /proc/1/mem
        # Under bubblewrap (no_new_privs is set) every job inherits the syscall filter.
        if self.is_init:
            self.seccomp_error = _install_seccomp()
        else:
            self.seccomp_error = "no isolation: the zygote is not a cell's pid 1"
        self.seccomp = not self.seccomp_error
        if not self.is_init:
            _prctl(PR_SET_CHILD_SUBREAPER, 1)
        for name in PREIMPORT:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        for name in self.preload:  # asked for by the pool: a failure here is the pool's error
            importlib.import_module(name)
        if self.warm:  # the pool's own code (trusted): state jobs import as `honing_warm`
            module = types.ModuleType(WARM_MODULE)
            exec(compile(self.warm, f"<{WARM_MODULE}>", "exec"), module.__dict__)
            sys.modules[WARM_MODULE] = module
        compile("pass", "<warm-up>", "exec")  # the first compile in a process is slow
        _warm_up_reporting()
        # The builtins site.main() adds, which python -S leaves out: exit(), quit(), help()…
        site.setquit()
        site.setcopyright()
        site.sethelper()
        self.audit.install()
        # After every fork each page the zygote writes costs it a page fault, so its collector
        # stays off (it allocates little and rarely makes cycles; it collects between jobs
        # every GC_EVERY jobs). The child turns it back on for the program.
        gc.disable()
        gc.freeze()
        # Default dispositions everywhere: as pid 1, a signal with no handler cannot reach us.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        out = os.fdopen(os.dup(1), "wb")
        ready = {"ready": True, "pid": os.getpid(), "seccomp": self.seccomp,
                 "seccomp_error": self.seccomp_error}  # fmt: skip
        self._reply(out, ready)
        self.host = os.dup(0)
        # Limits every job has, set once here for the children to inherit (the zygote neither
        # dumps core nor uses POSIX message queues).
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # no POSIX queues to leave
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        pending = bytearray()  # read from the host, not yet used
        while (line := self._next_line(pending)) is not None:
            if not line.strip():
                continue  # an abort that came after its job had ended
            try:
                if pending:  # nothing follows a job but its abort: it is over before it began
                    pending.clear()
                    result: dict[str, Any] = {"limit": "aborted"}
                else:
                    result = self.run(json.loads(line))
            except Exception as exc:  # a bug here must not take the cell down silently
                result = {"internal_error": f"{type(exc).__name__}: {exc}"}
            self._reply(out, result)
            # Clean up after replying: the host handles the reply meanwhile, and the next job
            # is read only once this is done.
            self._cleanup()
            self.jobs += 1
            if self.jobs % GC_EVERY == 0:
                gc.collect()
                gc.freeze()

    def _next_line(self, pending: bytearray) -> bytes | None:
        """The host's next line (None once it has closed our stdin)."""
        searched = 0
        while (end := pending.find(b"\n", searched)) < 0:
            searched = len(pending)
            chunk = os.read(self.host, READ_CHUNK)
            if not chunk:
                return None
            pending += chunk
        line = bytes(pending[:end])
        del pending[: end + 1]
        return line

    @staticmethod
    def _reply(out: io.BufferedWriter, obj: dict[str, Any]) -> None:
        """One JSON line, then the job's streams as they came (their lengths are in the line):
        a megabyte of output costs a copy, not a decode and ~7 ms of JSON escaping."""
        stdout, stderr = obj.pop("stdout", b""), obj.pop("stderr", b"")
        obj["stdout_bytes"], obj["stderr_bytes"] = len(stdout), len(stderr)
        out.write(json.dumps(obj).encode() + b"\n")
        out.write(stdout)
        out.write(stderr)
        out.flush()

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        program = _Program(job, self.workspace)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if job["stdin"]:
            stdin_fd = os.memfd_create("stdin", 0)
            os.write(stdin_fd, job["stdin"].encode())
            os.lseek(stdin_fd, 0, os.SEEK_SET)
        else:
            stdin_fd = os.open(os.devnull, os.O_RDONLY)  # its own: no state shared by jobs
        # Non-blocking at both ends: a process of the job never waits on it (past what the pipe
        # holds, its events are dropped), and we read it only once every writer is dead.
        risk_r, risk_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.spawns[:8] = bytes(8)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            self._child(job, program, stdin_fd, out_w, err_w, risk_w)
        os.close(out_w)
        os.close(err_w)
        os.close(stdin_fd)
        os.close(risk_w)
        try:
            result = self._supervise(job, pid, out_r, err_r, start)
            result["risks"] = self._risks(risk_r)  # every process of the job is reaped by now
            return result
        finally:
            os.close(out_r)
            os.close(err_r)
            os.close(risk_r)
            program.forget()

    def _risks(self, fd: int) -> list[dict[str, str]]:
        """The job's risk events: what its processes wrote on the risk pipe (lines that are not
        an event of a known kind are skipped: a program can write there too), deduplicated and
        capped, after a `process_explosion` when the job created too many processes."""
        data = bytearray()
        while len(data) < RISK_READ_MAX:
            try:
                chunk = os.read(fd, READ_CHUNK)
            except BlockingIOError:  # a writer outlived the job: take what it wrote
                break
            if not chunk:
                break
            data += chunk
        events: list[dict[str, str]] = []
        spawned = int.from_bytes(self.spawns[:8], "little")
        if spawned > PROCESS_EXPLOSION:
            detail = f"{spawned} processes created in one job (more than {PROCESS_EXPLOSION})"
            events.append({"kind": "process_explosion", "detail": detail})
        seen: set[tuple[str, str]] = set()
        per_kind: dict[str, int] = {}
        for line in data.split(b"\n"):
            if len(events) >= RISK_TOTAL:
                break
            if not line.strip():
                continue
            try:
                found = json.loads(line)
                kind, detail = found["kind"], found["detail"]
            except (ValueError, KeyError, TypeError, IndexError):
                continue
            if kind not in RISK_KINDS or type(detail) is not str or (kind, detail) in seen:
                continue
            if per_kind.get(kind, 0) >= (1 if kind in RISK_ONCE else RISK_PER_KIND):
                continue
            seen.add((kind, detail))
            per_kind[kind] = per_kind.get(kind, 0) + 1
            events.append({"kind": kind, "detail": detail[:RISK_DETAIL]})
        return events

    def _cleanup(self) -> None:
        """Leave nothing of the last job for the next: scratch directories, SysV IPC objects."""
        for directory in self.scratch:
            _wipe(directory)
        if self.is_init and not self.seccomp:  # the cell's own IPC namespace, and jobs may
            _remove_sysv_ipc()  # create objects in it

    def _supervise(
        self, job: dict[str, Any], pid: int, out_r: int, err_r: int, start: float
    ) -> dict[str, Any]:
        limit_bytes = int(job["max_output_bytes"])
        bufs = {out_r: bytearray(), err_r: bytearray()}
        truncated = {out_r: False, err_r: False}
        pidfd = os.pidfd_open(pid)
        poller = select.poll()
        for fd in (out_r, err_r, pidfd, self.host):  # the host writes only to stop the job
            poller.register(fd, select.POLLIN)
        deadline = start + float(job["timeout_s"])
        limit: str | None = None
        open_pipes = 2
        exited = False
        try:
            while not exited or open_pipes:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    limit = "timeout"
                    break
                events = poller.poll(remaining * 1000)
                for fd, _ in events:
                    if fd == self.host:  # left unread: the serve loop skips the empty line
                        limit = "aborted"
                        break
                    if fd == pidfd:
                        exited = True
                        poller.unregister(pidfd)
                        # Wait no longer for pipes a leftover grandchild may hold open.
                        deadline = min(deadline, time.perf_counter() + 0.05)
                        continue
                    chunk = os.read(fd, READ_CHUNK)
                    if not chunk:
                        poller.unregister(fd)
                        open_pipes -= 1
                        continue
                    room = limit_bytes - len(bufs[fd])
                    if len(chunk) > room:
                        bufs[fd] += chunk[: max(room, 0)]
                        truncated[fd] = True
                        limit = "output_limit"
                    else:
                        bufs[fd] += chunk
                if limit:
                    break
            if limit == "timeout" and exited:
                limit = None  # it finished; only a straggling descendant held the pipes
        finally:
            os.close(pidfd)
        self._kill_all(pid)
        status, usage = os.wait4(pid, 0)[1:]
        cpu = usage.ru_utime + usage.ru_stime
        maxrss = usage.ru_maxrss
        cpu += self._reap_all(pid)
        wall = time.perf_counter() - start
        exit_code = os.waitstatus_to_exitcode(status)
        return {
            "exit_code": exit_code if exit_code >= 0 else None,
            "signal": -exit_code if exit_code < 0 else None,
            "stdout": bufs[out_r],
            "stderr": bufs[err_r],
            "stdout_truncated": truncated[out_r],
            "stderr_truncated": truncated[err_r],
            "wall_s": wall,
            "cpu_s": cpu,
            "maxrss_kb": maxrss,
            "limit": limit,
        }

    def _kill_all(self, pid: int) -> None:
        if self.is_init:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)  # from pid 1: every other process in the namespace
            return
        for target in [pid, *self._adopted_children()]:
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(target, signal.SIGKILL)

    @staticmethod
    def _adopted_children() -> list[int]:
        pids: list[int] = []
        me = os.getpid()
        try:
            for tid in os.listdir(f"/proc/{me}/task"):
                with open(f"/proc/{me}/task/{tid}/children") as f:
                    pids.extend(int(p) for p in f.read().split())
        except OSError:
            pass
        return pids

    def _reap_all(self, pid: int) -> float:
        """Reap every remaining descendant; return their CPU seconds."""
        cpu = 0.0
        while True:
            try:
                # As pid 1 everything is already dead: block. Otherwise orphans may still be
                # handed to us (subreaper) while we reap, so poll and keep killing.
                reaped, _, usage = os.wait4(-1, 0 if self.is_init else os.WNOHANG)
            except ChildProcessError:
                return cpu
            if reaped:
                cpu += usage.ru_utime + usage.ru_stime
            else:
                self._kill_all(pid)
                time.sleep(0.001)

    def _child(
        self,
        job: dict[str, Any],
        program: _Program,
        stdin_fd: int,
        out_w: int,
        err_w: int,
        risk_w: int,
    ) -> None:
        code = 1
        try:
            os.setsid()
            gc.enable()
            try:  # under memory pressure the job dies, not the zygote
                fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
                os.write(fd, b"1000")
                os.close(fd)
            except OSError:
                pass
            cpu = max(1, int(float(job["cpu_s"]) + 0.999))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            fsize = int(job["max_file_bytes"])
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            if self.is_init:  # in the cell's own user namespace it counts only the cell's
                nproc = int(job["max_procs"])  # processes; on the host, all of the user's
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            if job["rlimit_as"]:
                mem = int(job["memory_bytes"])
                resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            os.dup2(stdin_fd, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.dup2(risk_w, self.risk_fd, inheritable=False)  # forks keep it, exec'd programs not
            os.closerange(3, self.risk_fd)
            os.closerange(self.risk_fd + 1, 65536)
            os.chdir(self.workspace)
            if job["env"]:
                os.environ.update(job["env"])
            # As python starts up (through _signal: the enum wrapper costs the child page faults)
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)
            # sys.stdin/stdout/stderr already wrap fds 0-2 with empty buffers (the protocol runs
            # on duplicates), so after the dup2 calls above they are the job's streams as they are.
            self.audit.arm()  # last: from here on, what runs is the program's
        except BaseException:  # the job's setup failed: its failure, reported on its stderr
            with contextlib.suppress(BaseException):
                traceback.print_exc()
                sys.stderr.flush()
            os._exit(code)
        interrupted = False
        try:
            # Not contextlib.suppress: each module the child runs code of costs it page faults.
            try:  # noqa: SIM105
                code, interrupted = _exec_main(program)
            except BaseException:  # a signal's exception, raised while reporting: the code stays 1
                pass
            code = _finalize(code)
        finally:  # whatever happened above, the child never returns into the zygote's loop
            if interrupted:  # as python does after an uncaught KeyboardInterrupt: die of SIGINT
                with contextlib.suppress(BaseException):
                    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
                    os.kill(os.getpid(), _signal.SIGINT)
                code = 128 + _signal.SIGINT
            os._exit(code)


def _warm_up_reporting() -> None:
    """Report an uncaught exception here a few times, so that a failing job's traceback runs
    code that is already specialised and caches that are filled, as the zygote's own pages."""
    source = "def job(x):\n    return {'a': [x]}['a'][0] + 1 / x\n\njob(0)\n"
    path = "<warm-up>"
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    stderr, sys.stderr = sys.stderr, io.StringIO()
    try:
        for _ in range(16):  # past the interpreter's warm-up count for each function
            try:
                exec(compile(source, path, "exec"), {"__name__": "__main__"})
            except ZeroDivisionError as exc:
                _display(exc)
    finally:
        sys.stderr = stderr
        linecache.cache.pop(path, None)


# -- the job's side: running a program as `python FILE` does, from start to finalisation -----


_MISSING = object()  # no `sys.excepthook` at all (a program may delete it)


class _Program:
    """One job's program, made ready in the zygote before the fork; the child only runs it.

    The zygote compiles it (a fresh fork pays ~3x for the parser's allocations) and builds its
    `__main__`, argv and sys.path: after the fork every page the child writes is a page fault
    (refcounts and the specialising interpreter's counters included), while the zygote, with
    no child alive, writes for free. A compile error is the program's, reported in the child.
    Sources past COMPILE_IN_PARENT_MAX compile in the child, under the job's own limits.
    """

    def __init__(self, job: dict[str, Any], workspace: str) -> None:
        self.source: str = job["code"]
        filename: str = job["filename"]
        # As `python FILE` (3.9+): an absolute __file__, its directory first on sys.path; a
        # pseudo-name such as "<stdin>" stays as it is, with "" on sys.path.
        if filename.startswith("<"):
            self.path, import_dir = filename, ""
        else:
            self.path = os.path.join(workspace, filename)
            import_dir = os.path.dirname(os.path.normpath(self.path))
        self.argv = [filename, *job["argv"]]
        self.sys_path = [import_dir, *sys.path]
        self.main: types.ModuleType | None = types.ModuleType("__main__")
        self.main.__dict__.update(
            __annotations__={}, __builtins__=builtins, __file__=self.path, __cached__=None
        )
        self.compiled: types.CodeType | Exception | None = None
        if len(self.source) <= COMPILE_IN_PARENT_MAX:
            self.compile()

    def compile(self) -> types.CodeType | Exception:
        """Compile the source and put its lines where tracebacks and warnings look (linecache)."""
        source, path = self.source, self.path
        linecache.cache[path] = (len(source), None, source.splitlines(True), path)
        try:  # dont_inherit: the program must not get this module's `from __future__ ...`
            self.compiled = compile(source, path, "exec", dont_inherit=True)
        except Exception as exc:  # SyntaxError, ValueError (NUL bytes), RecursionError…
            self.compiled = exc
        return self.compiled

    def forget(self) -> None:
        """Undo in the zygote what preparing the program changed (the child has gone)."""
        linecache.cache.pop(self.path, None)


def _exec_main(program: _Program) -> tuple[int, bool]:
    """Run the program as `__main__` the way `python FILE` does (pymain_run_file).

    Returns the exit code and whether an uncaught KeyboardInterrupt ended the program (python
    then dies of SIGINT once finalised). The uncaught exception goes through `sys.excepthook`.
    """
    compiled = program.compiled or program.compile()
    if isinstance(compiled, Exception):  # the source did not compile: report it as python does
        _flush_io()
        code = _report_uncaught(compiled.with_traceback(None))
        return (1 if code is None else code), False
    # sys.modules holds the only reference, so that finalisation can free what the program left.
    main, program.main = program.main, None
    assert main is not None  # prepared by the zygote, taken once
    namespace = main.__dict__
    sys.modules["__main__"] = main
    del main
    sys.argv = program.argv
    sys.path = program.sys_path
    uncaught: BaseException | None = None
    try:
        exec(compiled, namespace)
    except SystemExit as exc:
        _flush_io()
        return _system_exit_code(exc), False  # python exits from here: __file__ stays set
    except BaseException as exc:
        uncaught = _without_first_frame(exc)
    _flush_io()
    code, interrupted = 0, False
    if uncaught is not None:  # reported out of the except clause: no exception is "handled"
        exit_code = _report_uncaught(uncaught)
        if exit_code is not None:  # the hook raised SystemExit: python exits from there
            return exit_code, False
        code, interrupted = 1, type(uncaught) is KeyboardInterrupt  # exactly, as python checks
        del uncaught
    namespace.pop("__file__", None)  # python removes both once the file has run
    namespace.pop("__cached__", None)
    return code, interrupted


def _flush_io() -> None:
    """As python does once the file has run, before anything else: flush, ignoring errors."""
    _flush(sys.stderr)  # an error is dropped here: flush_std_files reports it later
    _flush(sys.stdout)


def _system_exit_code(exc: SystemExit) -> int:
    """The exit status of an uncaught SystemExit (as _Py_HandleSystemExit computes it)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):  # C's (int)PyLong_AsLong: -1 when it does not fit a long
        return code & 0xFF if -(2**63) <= code < 2**63 else 255
    with contextlib.suppress(BaseException):
        if sys.stderr is None:
            os.write(2, f"{code}\n".encode(errors="replace"))
        else:
            print(code, file=sys.stderr)
    return 1


def _without_first_frame(exc: BaseException) -> BaseException:
    """The exception as the program raised it: without this module's frame on top."""
    tb = exc.__traceback__
    return exc.with_traceback(tb.tb_next if tb else None)


def _report_uncaught(exc: BaseException) -> int | None:
    """Report an uncaught exception as _PyErr_PrintEx does: through `sys.excepthook`.

    Returns an exit code when the hook raised SystemExit, else None.
    """
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
    if sys.version_info >= (3, 12):
        sys.last_exc = exc
    hook: Any = getattr(sys, "excepthook", _MISSING)
    if hook is _MISSING:
        _write_stderr("sys.excepthook is missing\n")
        _display(exc)
    elif hook is sys.__excepthook__:
        # The default hook, written in Python: it reads the program's source from linecache,
        # where the C one (3.11, 3.12) looks for a file on disk that the program does not have.
        _display(exc)
    else:
        try:
            hook(type(exc), exc, exc.__traceback__)
        except SystemExit as hook_exit:
            return _system_exit_code(hook_exit)
        except BaseException as hook_error:
            _flush(sys.stdout)
            _write_stderr("Error in sys.excepthook:\n")
            _display(_without_first_frame(hook_error))
            _write_stderr("\nOriginal exception was:\n")
            _display(exc)
    return None


def _display(exc: BaseException) -> None:
    """Print what traceback.print_exception(exc) prints, formatting only the frames it shows."""
    with contextlib.suppress(BaseException):
        if sys.stderr is not None:
            _report(exc).print(file=sys.stderr)


_STDLIB_FORMATTING = (traceback.StackSummary.format, traceback.StackSummary.format_frame_summary)
_CUTOFF: int = traceback._RECURSIVE_CUTOFF  # type: ignore[attr-defined]
Key = tuple[str, int | None, str]  # what StackSummary.format() compares: file, line, function


class _RepeatsSkipped(traceback.StackSummary):
    """A stack that formats only the frames it prints. StackSummary.format() formats every
    frame, then drops the repeats of a line past the third: unbounded recursion would cost ~40
    ms of caret-finding (a compile per frame) for ~1,000 frames nobody sees (python's own C
    printer checks first). `hidden`: the positions format() drops, which it formats in order."""

    hidden: set[int]
    calls = 0

    def format_frame_summary(self, frame_summary: Any, **kwargs: Any) -> Any:
        position = self.calls % len(self)
        self.calls += 1
        if position in self.hidden:
            return ""  # not None: format() counts it, then drops it unseen
        return super().format_frame_summary(frame_summary, **kwargs)


def _hidden(keys: list[Key]) -> set[int]:
    """The positions StackSummary.format() drops: past the third of a run of one line (as it
    compares, a None field starts a new run)."""
    hidden: set[int] = set()
    last: Key | None = None
    count = 0
    for position, key in enumerate(keys):
        if last is None or None in last or key != last:
            last, count = key, 0
        count += 1
        if count > _CUTOFF:
            hidden.add(position)
    return hidden


def _report(exc: BaseException) -> traceback.TracebackException:
    """The stdlib's report of `exc`, as print_exception makes it, with its stacks made
    `_RepeatsSkipped` (unless the program replaced the stdlib's formatting: then as it is)."""
    summary = traceback.StackSummary
    if (summary.format, summary.format_frame_summary) != _STDLIB_FORMATTING:
        return traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    report = _report_from_shown_frames(exc) or traceback.TracebackException(
        type(exc), exc, exc.__traceback__, compact=True, lookup_lines=False
    )
    _skip_hidden_repeats(report)
    return report


def _report_from_shown_frames(exc: BaseException) -> traceback.TracebackException | None:
    """The report made from the frames of `exc`'s traceback that get printed, the dropped ones
    put back in its stack as repeats of the frame before them (which format() counts, and
    `_RepeatsSkipped` drops): extracting a frame costs ~5 us, and recursion makes ~1,000. None
    where no frame is dropped, or with sys.tracebacklimit (python cuts the stack first)."""
    if hasattr(sys, "tracebacklimit"):
        return None
    tbs: list[types.TracebackType] = []
    keys: list[Key] = []
    lines: dict[tuple[int, int], int | None] = {}  # (code, instruction): its first line
    tb = exc.__traceback__
    while tb is not None:
        code, at = tb.tb_frame.f_code, tb.tb_lasti
        if (id(code), at) not in lines:  # as traceback._walk_tb_with_full_positions finds it
            positions = itertools.islice(code.co_positions(), at // 2, None)
            lines[id(code), at] = next(positions)[0] if at >= 0 else None
        line = lines[id(code), at]
        keys.append((code.co_filename, tb.tb_lineno if line is None else line, code.co_name))
        tbs.append(tb)
        tb = tb.tb_next
    hidden = _hidden(keys)
    if not hidden:
        return None
    shown = None
    for position in reversed(range(len(tbs))):
        if position not in hidden:
            t = tbs[position]
            shown = types.TracebackType(shown, t.tb_frame, t.tb_lasti, t.tb_lineno)
    report = traceback.TracebackException(type(exc), exc, shown, compact=True, lookup_lines=False)
    frames = iter(report.stack)
    stack: list[traceback.FrameSummary] = []
    for position in range(len(tbs)):  # a dropped frame has three shown ones before it
        stack.append(stack[-1] if position in hidden else next(frames))
    if [(f.filename, f.lineno, f.name) for f in stack] != keys:  # not as format() will count
        return None
    report.stack = traceback.StackSummary(stack)
    return report


def _skip_hidden_repeats(report: traceback.TracebackException) -> None:
    """Make every stack of the report (its chain and group members too) a `_RepeatsSkipped`."""
    todo: list[traceback.TracebackException | None] = [report]
    seen: set[int] = set()
    while todo:
        te = todo.pop()
        if te is None or id(te) in seen:
            continue
        seen.add(id(te))
        todo += [te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())]
        if type(te.stack) is traceback.StackSummary:
            te.stack.__class__ = _RepeatsSkipped
            te.stack.hidden = _hidden(  # type: ignore[attr-defined]
                [(f.filename, f.lineno, f.name) for f in te.stack]
            )


def _write_stderr(text: str) -> None:
    with contextlib.suppress(BaseException):
        if sys.stderr is not None:
            sys.stderr.write(text)


def _flush(stream: Any) -> Exception | None:
    """Flush one of the std streams as flush_std_files does; the error, if the flush failed."""
    try:
        if stream is None or stream.closed:
            return None
    except Exception:  # no `closed` to read: python leaves such a stream alone
        return None
    try:
        stream.flush()
    except Exception as exc:
        return exc
    return None


def _finalize(code: int) -> int:
    """Finish as Py_FinalizeEx does once the program has ended; return the exit status.

    Joins non-daemon threads (the zygote's wall-clock limit bounds the wait), runs the atexit
    handlers (their errors printed, the status unchanged), flushes stdout and stderr (a failure
    makes the status 120, as in python), then lets the collector finalise what `__main__` held
    (`__del__` methods run, files left open are flushed and closed) and flushes again, quietly.
    Stops short of tearing the interpreter down: other modules' objects are not finalised.
    """
    threading = sys.modules.get("threading")  # no threads unless the program imported it
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException as exc:  # a signal handler's exception, say
            _unraisable(_without_first_frame(exc), threading)
    atexit = sys.modules.get("atexit")  # no handlers unless someone imported it
    if atexit is not None:
        atexit._run_exitfuncs()  # prints each handler's error as python does, and goes on
    if not _flush_std_files():
        code = 120
    try:
        # As finalize_modules: first drop the references sys keeps to the program's objects.
        if getattr(sys, "last_value", None) is not None:
            sys.last_type = sys.last_value = sys.last_traceback = None
            if sys.version_info >= (3, 12):
                sys.last_exc = None
        if sys.stdout is not sys.__stdout__ or sys.stderr is not sys.__stderr__:
            sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
        sys.modules.pop("__main__", None)
        # Frozen at the fork, the zygote's own objects are in no generation; the program's are
        # in the young ones unless a collection in the job moved some to the oldest. A full
        # collection also empties the free lists: tens of page faults, so only when needed.
        gc.collect(2 if gc.get_objects(2) else 1)
    except BaseException as exc:  # a finaliser let a signal's exception through
        _unraisable(exc, None)
    # What finalisers printed: python flushes it as it frees the streams, errors unreported.
    _flush(sys.stdout)
    _flush(sys.stderr)
    return code


def _flush_std_files() -> bool:
    """flush_std_files: a failure to flush stdout is reported, one of stderr is not."""
    stdout_error = _flush(sys.stdout)
    if stdout_error is not None:  # raised in C, as python sees it: no traceback
        _unraisable(stdout_error.with_traceback(None), sys.stdout)
    stderr_error = _flush(sys.stderr)
    return stdout_error is None and stderr_error is None


def _unraisable(exc: BaseException, obj: object) -> None:
    """Report an error python cannot raise ("Exception ignored in: ..."), as its default hook."""
    with contextlib.suppress(BaseException):
        hook = sys.unraisablehook
        if hook is not sys.__unraisablehook__:  # the program's: give it what it reads
            args = types.SimpleNamespace(
                exc_type=type(exc),
                exc_value=exc,
                exc_traceback=exc.__traceback__,
                err_msg=None,
                object=obj,
            )
            hook(args)
            return
        text = "" if obj is None else f"Exception ignored in: {obj!r}\n"
        if exc.__traceback__ is not None:
            text += "Traceback (most recent call last):\n"
            text += "".join(traceback.format_tb(exc.__traceback__))
        text += "".join(traceback.format_exception_only(type(exc), exc))
        _write_stderr(text)


def main(argv: list[str]) -> None:
    """argv[1]: JSON {"workspace", "tmp", "runtime" (or null), "scratch", "preload", "warm"}."""
    spec = json.loads(argv[1])
    Zygote(
        spec["workspace"],
        spec["tmp"],
        spec["runtime"],
        tuple(spec["scratch"]),
        tuple(spec["preload"]),
        spec.get("warm", ""),
    ).serve()


if __name__ == "__main__":
    main(sys.argv)
