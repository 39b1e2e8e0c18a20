"""The warm interpreter inside a sandbox cell: reads jobs, forks one child per job, reports.

This file runs *inside* the cell (`python -I -S -B zygote.py ...`) and so uses only the standard
library and never imports honing. Protocol, one JSON object per line:

    host → zygote   {"code", "filename", "argv", "stdin", "env", "timeout_s", "cpu_s",
                     "memory_bytes", "rlimit_as" (enforce memory_bytes as RLIMIT_AS, where
                     the cell has no memory cgroup), "max_procs", "max_output_bytes",
                     "max_file_bytes"}
    zygote → host   {"ready": true, "pid", "seccomp"} once at start, then per job:
                    {"exit_code", "signal", "stdout", "stderr", "stdout_truncated",
                     "stderr_truncated", "wall_s", "cpu_s", "maxrss_kb", "limit"}

`limit` is "timeout" or "output_limit" when the zygote ended the job for that reason, else null.

Under bubblewrap the zygote is pid 1 of the cell's pid namespace (`--as-pid-1`). That gives two
properties for free: a job cannot signal it (the kernel drops signals to a namespace's init that
has no handler, so every handler here stays at its default), and `kill(-1, SIGKILL)` from pid 1
ends every other process in the namespace — the job, its children, and any grandchild that
daemonised itself — so no process of a job outlives it. Without isolation (development mode) the
zygote is an ordinary process: it kills the job's process group and its adopted orphans instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import importlib
import io
import json
import linecache
import os
import resource
import select
import signal
import sys
import time
import traceback
import types
from typing import Any

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
READ_CHUNK = 65536
GC_EVERY = 256
COMPILE_IN_PARENT_MAX = 256 * 1024  # characters

# Imported once here so that forked jobs find them warm (HumanEval-style programs use these).
PREIMPORT = (
    "typing", "re", "math", "collections", "itertools", "functools", "string", "heapq", "bisect",
    "random", "hashlib", "copy", "operator",
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


def _install_seccomp() -> bool:
    """Install the filter on this process (jobs inherit it); False where it is not available."""
    if os.uname().machine != "x86_64":
        return False
    program = seccomp_program(DENIED_X86_64)
    filters = (_SockFilter * len(program))(*(_SockFilter(*ins) for ins in program))
    fprog = _SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0)


class Zygote:
    def __init__(
        self,
        workspace: str,
        tmp: str,
        runtime_path: str | None,
        scratch: tuple[str, ...] = (),
        preload: tuple[str, ...] = (),
    ) -> None:
        self.workspace = workspace
        self.tmp = tmp
        self.scratch = (tmp, *scratch)  # emptied after every job
        self.preload = preload
        self.is_init = os.getpid() == 1
        if runtime_path:
            sys.path.insert(0, runtime_path)
        os.environ["TMPDIR"] = tmp
        self.jobs = 0
        self.seccomp = False

    def serve(self) -> None:
        _prctl(PR_SET_DUMPABLE, 0)  # jobs run as our uid: keep them from ptrace and /proc/1/mem
        # Under bubblewrap (no_new_privs is set) every job inherits the syscall filter.
        self.seccomp = self.is_init and _install_seccomp()
        if not self.is_init:
            _prctl(PR_SET_CHILD_SUBREAPER, 1)
        for name in PREIMPORT:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        for name in self.preload:  # asked for by the pool: a failure here is the pool's error
            importlib.import_module(name)
        compile("pass", "<warm-up>", "exec")  # the first compile in a process is slow
        # After every fork each page the zygote writes costs it a page fault, so its collector
        # stays off (it allocates little and rarely makes cycles; it collects between jobs
        # every GC_EVERY jobs). The child turns it back on for the program.
        gc.disable()
        gc.freeze()
        # Default dispositions everywhere: as pid 1, a signal with no handler cannot reach us.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        out = os.fdopen(os.dup(1), "w", encoding="utf-8")
        self._reply(out, {"ready": True, "pid": os.getpid(), "seccomp": self.seccomp})
        stdin = os.fdopen(os.dup(0), "rb")
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        for line in stdin:
            if not line.strip():
                continue
            try:
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

    @staticmethod
    def _reply(out: io.TextIOWrapper, obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if job["stdin"]:
            stdin_fd = os.memfd_create("stdin", 0)
            os.write(stdin_fd, job["stdin"].encode())
            os.lseek(stdin_fd, 0, os.SEEK_SET)
        else:
            stdin_fd = os.open(os.devnull, os.O_RDONLY)
        start = time.perf_counter()
        # Compile here, in the long-lived process, not in the child: a fresh fork pays ~3x for
        # the parser's allocations (copy-on-write and first-touch page faults). The child
        # inherits the code object; a compile error is the program's error, raised there.
        # Sources past COMPILE_IN_PARENT_MAX compile in the child, under the job's own limits.
        compiled: types.CodeType | Exception | None = None
        if len(job["code"]) <= COMPILE_IN_PARENT_MAX:
            try:
                compiled = compile(job["code"], job["filename"], "exec")
            except Exception as exc:  # SyntaxError, ValueError (NUL bytes), RecursionError…
                compiled = exc
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            self._child(job, compiled, stdin_fd, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        os.close(stdin_fd)
        try:
            return self._supervise(job, pid, out_r, err_r, start)
        finally:
            os.close(out_r)
            os.close(err_r)

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
        for fd in (out_r, err_r, pidfd):
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
            "stdout": bufs[out_r].decode("utf-8", errors="replace"),
            "stderr": bufs[err_r].decode("utf-8", errors="replace"),
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
        compiled: types.CodeType | Exception | None,
        stdin_fd: int,
        out_w: int,
        err_w: int,
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
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # no POSIX queues to leave
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
            os.closerange(3, 65536)
            os.chdir(self.workspace)
            if job["env"]:
                os.environ.update(job["env"])
            # sys.stdin/stdout/stderr already wrap fds 0-2 with empty buffers (the protocol runs
            # on duplicates), so after the dup2 calls above they are the job's streams as they are.
            code = _exec_main(compiled, job["code"], job["filename"], job["argv"])
        except BaseException:  # anything here is the job's failure
            with contextlib.suppress(BaseException):
                traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    code = code or 120
            os._exit(code)


def _exec_main(
    compiled: types.CodeType | Exception | None, source: str, filename: str, argv: list[str]
) -> int:
    """Run the program as `__main__` the way `python FILE` would; return the exit code."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    if compiled is None:
        try:
            compiled = compile(source, filename, "exec")
        except Exception as exc:
            compiled = exc
    if isinstance(compiled, Exception):  # the source did not compile: report it as python does
        traceback.print_exception(compiled.with_traceback(None))
        return 1
    main = types.ModuleType("__main__")
    main.__file__ = filename
    sys.modules["__main__"] = main
    sys.argv = [filename, *argv]
    try:
        exec(compiled, main.__dict__)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code & 0xFF
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException as exc:
        # Like python's own report, minus this frame; traceback (unlike the C hook) reads the
        # source from linecache, where the program's text was put above.
        tb = exc.__traceback__
        traceback.print_exception(exc.with_traceback(tb.tb_next if tb else None))
        return 1
    return 0


def main(argv: list[str]) -> None:
    """argv[1]: JSON {"workspace", "tmp", "runtime" (or null), "scratch", "preload"}."""
    spec = json.loads(argv[1])
    Zygote(
        spec["workspace"],
        spec["tmp"],
        spec["runtime"],
        tuple(spec["scratch"]),
        tuple(spec["preload"]),
    ).serve()


if __name__ == "__main__":
    main(sys.argv)
