"""One adversarial program per isolation property of the threat model (honing/sandbox/__init__.py).

Every test checks both what the pool reported and, from the host's side, that the host was not
affected: host listeners got no connection, host files are unchanged, no process survives, host
processes are alive, no host secret reached the program.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from honing.sandbox import ExecRequest, ExecStatus, SandboxPool
from honing.sandbox.launch import ZYGOTE


def code(src: str) -> str:
    return textwrap.dedent(src).lstrip("\n")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _host_ipv4_addresses() -> list[str]:
    """Non-loopback IPv4 addresses of the host, as far as can be found without traffic."""
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(str(info[4][0]))
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))  # UDP connect sends nothing; it only picks a route
        found.add(s.getsockname()[0])
    return sorted(a for a in found if not a.startswith("127.") and a != "0.0.0.0")


# -- network -------------------------------------------------------------------------------


async def test_network_cannot_reach_host_listeners(pool: SandboxPool, token: str) -> None:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("0.0.0.0", 0))  # every host address, loopback included
    tcp.listen(8)
    tcp.setblocking(False)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + token)  # abstract unix sockets belong to the network namespace
    unix.listen(8)
    unix.setblocking(False)
    port = tcp.getsockname()[1]
    targets = ["127.0.0.1", *_host_ipv4_addresses(), "1.1.1.1"]
    program = code(
        """
        import json, socket, sys
        port, token, targets = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
        out = {}
        def attempt(name, family, addr):
            s = socket.socket(family, socket.SOCK_STREAM)
            s.settimeout(2)
            try:
                s.connect(addr)
                s.sendall(token.encode())
                out[name] = "connected"
            except OSError as e:
                out[name] = type(e).__name__
        for host in targets:
            attempt(host, socket.AF_INET, (host, port))
        attempt("abstract-unix", socket.AF_UNIX, "\\0" + token)
        print(json.dumps(out))
        """
    )
    try:
        result = await pool.run(
            ExecRequest(code=program, argv=[str(port), token, *targets], timeout_s=20)
        )
        assert result.status is ExecStatus.OK, result
        attempts = json.loads(result.stdout)
        assert set(attempts) == {*targets, "abstract-unix"}
        assert "connected" not in attempts.values(), attempts
        for listener in (tcp, unix):  # the host side saw no connection at all
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        tcp.close()
        unix.close()


async def test_network_has_only_loopback(pool: SandboxPool) -> None:
    result = await pool.run(ExecRequest(code="import socket; print(socket.if_nameindex())"))
    assert result.status is ExecStatus.OK, result
    assert result.stdout.strip() == "[(1, 'lo')]"


# -- host files ----------------------------------------------------------------------------


async def test_host_files_are_invisible(
    pool: SandboxPool,
    token: str,
    tmp_path: Path,
    project_dir: Path,
    home_secret: Path | None,
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(f"tmp secret {token}\n")
    other = pool.workspace()
    other.write("theirs.txt", f"another workspace's secret {token}\n")
    files = [
        str(secret),
        "/etc/passwd",
        "/etc/shadow",
        "/etc/hostname",
        "/etc/hosts",
        "/root/.bashrc",
        "/root/.ssh/id_rsa",
        str(project_dir / "pyproject.toml"),
        str(project_dir / "honing" / "config.py"),
        str(other.path / "theirs.txt"),
        str(Path.home() / ".bash_history"),
    ]
    if home_secret is not None:
        files.append(str(home_secret))
    dirs = [str(tmp_path), str(project_dir), str(pool.root), str(Path.home()), "/home", "/etc"]
    program = code(
        """
        import json, os, sys
        files, dirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
        out = {"files": {}, "dirs": {}}
        for f in files:
            try:
                with open(f, "rb") as fh:
                    out["files"][f] = "READ:" + fh.read(4096).decode("latin-1")
            except OSError as e:
                out["files"][f] = type(e).__name__
        for d in dirs:
            try:
                out["dirs"][d] = sorted(os.listdir(d))
            except OSError as e:
                out["dirs"][d] = type(e).__name__
        print(json.dumps(out))
        """
    )
    result = await pool.run(ExecRequest(code=program, argv=[json.dumps(files), json.dumps(dirs)]))
    assert result.status is ExecStatus.OK, result
    seen = json.loads(result.stdout)
    # No secret's content, and no secret's file name in any directory listing.
    assert token not in json.dumps([list(seen["files"].values()), list(seen["dirs"].values())])
    readable = {f: v for f, v in seen["files"].items() if v.startswith("READ:")}
    assert readable == {}, readable
    assert "root:x:0:0" not in result.stdout
    for d in (str(tmp_path), str(project_dir), str(pool.root)):
        assert not isinstance(seen["dirs"][d], list), f"host directory {d} is visible"
    assert seen["dirs"]["/etc"] == ["ld.so.cache"]


async def test_root_holds_only_the_system_and_the_sandbox(pool: SandboxPool) -> None:
    result = await pool.run(ExecRequest(code="import os; print(sorted(os.listdir('/')))"))
    assert result.status is ExecStatus.OK, result
    top = set(eval(result.stdout))  # a list literal printed by the program
    expected = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "opt", "proc", "sbin"}
    expected |= {"tmp", "usr", "workspace"}
    prefix_top = Path(os.path.realpath(sys.base_prefix)).parts[1]  # the interpreter's prefix
    assert top <= expected | {prefix_top}, top - expected - {prefix_top}


async def test_writes_outside_the_workspace_do_not_reach_the_host(
    pool: SandboxPool, token: str, tmp_path: Path, project_dir: Path
) -> None:
    existing = tmp_path / "existing.txt"
    existing.write_text("original\n")
    absent = tmp_path / "new-dir" / f"created-{token}.txt"
    other = pool.workspace()
    other.write("victim.txt", "untouched\n")
    protected = {
        str(existing): existing,
        str(ZYGOTE): ZYGOTE,
        "/opt/honing/zygote.py": ZYGOTE,
        str(other.path / "victim.txt"): other.path / "victim.txt",
    }
    if Path("/etc/ld.so.cache").exists():
        protected["/etc/ld.so.cache"] = Path("/etc/ld.so.cache")
    before = {p: _sha256(host) for p, host in protected.items()}
    prefix = Path(os.path.realpath(sys.base_prefix))
    must_not_exist = [
        absent,
        project_dir / f"escape-{token}.txt",
        prefix / f"escape-{token}.txt",
        Path("/usr/lib") / f"escape-{token}.txt",
        Path("/etc") / f"escape-{token}",
        Path("/opt/honing") / f"escape-{token}",
        pool.root / f"escape-{token}.txt",
        other.path / f"escape-{token}.txt",
    ]
    targets = [*protected, *map(str, must_not_exist)]
    program = code(
        """
        import json, os, sys
        out = {}
        for target in json.loads(sys.argv[1]):
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "a") as f:
                    f.write("PWNED\\n")
                out[target] = "wrote (inside the sandbox only, hopefully)"
            except OSError as e:
                out[target] = type(e).__name__
        print(json.dumps(out))
        """
    )
    result = await pool.run(ExecRequest(code=program, argv=[json.dumps(targets)]))
    assert result.status is ExecStatus.OK, result
    assert set(json.loads(result.stdout)) == set(targets)
    after = {p: _sha256(host) for p, host in protected.items()}
    assert after == before
    assert existing.read_text() == "original\n"
    leaked = [str(p) for p in must_not_exist if p.exists()]
    assert leaked == []


async def test_request_files_cannot_escape_the_workspace(pool: SandboxPool, token: str) -> None:
    for bad in (f"../escape-{token}.txt", f"../../escape-{token}.txt", f"/tmp/escape-{token}.txt"):
        try:  # refused up front (ValueError), or reported as a failed run: never written
            result = await pool.run(ExecRequest(code="print('ran')", files={bad: "PWNED"}))
        except ValueError:
            continue
        assert result.status is ExecStatus.SANDBOX_ERROR, (bad, result)
        assert "ran" not in result.stdout
    assert not Path(f"/tmp/escape-{token}.txt").exists()
    assert list(pool.root.rglob(f"escape-{token}*")) == []
    after = await pool.run(ExecRequest(code="print('still fine')"))
    assert after.stdout == "still fine\n"


# -- processes -----------------------------------------------------------------------------


def _cell_procs(pool: SandboxPool) -> dict[str, int]:
    """Processes in each cell's memory cgroup (bubblewrap and the zygote when idle)."""
    counts = {}
    for name, cell in pool._cells.items():
        if cell.cgroup is not None:
            counts[name] = len((cell.cgroup.memory / "cgroup.procs").read_text().split())
    return counts


async def test_fork_bomb_is_contained(pool: SandboxPool) -> None:
    procs_before = _cell_procs(pool)
    cells_before = set(pool._cells)
    bomb = ExecRequest(
        code=code(
            """
            import os
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
            """
        ),
        timeout_s=1.5,
    )
    bystander = ExecRequest(code="import time; time.sleep(0.5); print(sum(range(10)))")
    result, other = await pool.run_many([bomb, bystander])
    assert result.status is ExecStatus.TIMEOUT, result
    assert other.status is ExecStatus.OK and other.stdout == "45\n", other
    assert _cell_procs(pool) == procs_before  # every forked process is gone
    assert set(pool._cells) == cells_before  # the zygotes survived
    assert subprocess.run(["true"], check=False).returncode == 0  # the host can still fork
    again = await pool.run(ExecRequest(code="print('alive')"))
    assert again.status is ExecStatus.OK and again.stdout == "alive\n"


FORK_AND_COUNT = code(
    """
    import os, sys
    n = 0
    for _ in range(500):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                os.execv("/bin/sleep", ["sleep", sys.argv[1]])
            finally:
                os._exit(0)
        n += 1
    print(n)
    """
)


async def test_process_limit_holds_and_nothing_survives(
    pool: SandboxPool, sleep_token: str, host_pids_with
) -> None:
    assert pool.config.max_procs == 32
    result = await pool.run(ExecRequest(code=FORK_AND_COUNT, argv=[sleep_token]))
    assert result.status is ExecStatus.OK, result
    assert 1 <= int(result.stdout) < 32  # the job itself is one of its 32 processes
    assert host_pids_with(sleep_token) == []


async def test_per_request_process_limit_holds(
    pool: SandboxPool, sleep_token: str, host_pids_with
) -> None:
    result = await pool.run(ExecRequest(code=FORK_AND_COUNT, argv=[sleep_token], max_procs=8))
    assert result.status is ExecStatus.OK, result
    assert 1 <= int(result.stdout) < 8, "ExecRequest.max_procs=8 was not enforced"
    assert host_pids_with(sleep_token) == []


async def test_memory_bomb_is_contained(pool: SandboxPool) -> None:
    cells_before = set(pool._cells)
    bomb = ExecRequest(
        code="chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n",
        memory_mb=64,
        timeout_s=30,
    )
    bystander = ExecRequest(
        code="import time; time.sleep(0.2); x = bytearray(32 << 20); print('fine')",
        memory_mb=128,
    )
    result, other = await pool.run_many([bomb, bystander])
    assert result.status is ExecStatus.MEMORY_LIMIT, result
    assert "64 MiB" in result.error
    assert result.memory_enforcement == pool.memory_enforcement
    if pool.memory_enforcement != "rlimit_as":
        assert result.peak_memory_mb <= 64 + 1
    assert other.status is ExecStatus.OK and other.stdout == "fine\n", other
    assert set(pool._cells) == cells_before  # the job was killed, not its cell
    after = await pool.run(ExecRequest(code="x = bytearray(100 << 20); print(len(x) >> 20)"))
    assert after.status is ExecStatus.OK and after.stdout == "100\n", after


async def test_memory_bomb_in_a_child_process(pool: SandboxPool) -> None:
    if pool.memory_enforcement == "rlimit_as":
        pytest.skip("a child's memory counts toward the limit only with a memory cgroup")
    program = code(
        """
        import os
        pid = os.fork()
        if pid == 0:
            chunks = []
            while True:
                chunks.append(bytearray(16 << 20))
        os.waitpid(pid, 0)
        print("parent exits cleanly")
        """
    )
    result = await pool.run(ExecRequest(code=program, memory_mb=64, timeout_s=30))
    assert result.status is ExecStatus.MEMORY_LIMIT, result
    assert result.peak_memory_mb <= 64 + 1


async def test_infinite_loop_hits_the_wall_clock_limit(pool: SandboxPool) -> None:
    program = code(
        """
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass
        """
    )
    result = await pool.run(ExecRequest(code=program, timeout_s=1))
    assert result.status is ExecStatus.TIMEOUT, result
    assert result.signal == signal.SIGKILL
    assert result.exit_code is None
    assert "wall-clock" in result.error
    after = await pool.run(ExecRequest(code="print('next')"))
    assert after.stdout == "next\n"


async def test_cpu_time_limit_is_a_timeout(pool: SandboxPool) -> None:
    result = await pool.run(ExecRequest(code="while True: pass", cpu_s=1, timeout_s=20))
    assert result.status is ExecStatus.TIMEOUT, result
    assert "CPU" in result.error


async def test_cpu_time_limit_is_a_timeout_even_when_sigxcpu_is_ignored(
    pool: SandboxPool,
) -> None:
    # The soft RLIMIT_CPU sends SIGXCPU; a program that ignores it runs on to the hard limit,
    # where the kernel SIGKILLs it. That is still the CPU-time limit, i.e. a timeout.
    program = code(
        """
        import signal
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        while True:
            pass
        """
    )
    result = await pool.run(ExecRequest(code=program, cpu_s=1, timeout_s=20))
    assert result.status is ExecStatus.TIMEOUT, result


async def test_double_forked_daemon_does_not_survive(
    pool: SandboxPool, sleep_token: str, host_pids_with
) -> None:
    program = code(
        """
        import os, sys
        r, w = os.pipe()  # close-on-exec: EOF on r once the grandchild has exec'd
        if os.fork() == 0:
            os.close(r)
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", ["sleep", sys.argv[1]])
            os._exit(0)
        os.close(w)
        os.read(r, 1)
        os.wait()
        running = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if sys.argv[1].encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                    running += 1
            except OSError:
                pass
        print("daemons running:", running)
        """
    )
    result = await pool.run(ExecRequest(code=program, argv=[sleep_token]))
    assert result.status is ExecStatus.OK, result
    assert result.stdout == "daemons running: 1\n"  # it was alive when the job ended
    assert host_pids_with(sleep_token) == []


async def test_daemon_writing_to_a_persistent_workspace_stops_with_the_run(
    pool: SandboxPool,
) -> None:
    ws = pool.workspace()
    program = code(
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                for fd in (0, 1, 2):
                    os.close(fd)  # a proper daemon: holds none of the job's pipes
                f = open("heartbeat.txt", "a", buffering=1)
                while True:
                    f.write("beat\\n")
                    time.sleep(0.02)
            os._exit(0)
        while not os.path.exists("heartbeat.txt") or os.path.getsize("heartbeat.txt") < 20:
            time.sleep(0.01)
        print("daemon is beating")
        """
    )
    result = await pool.run(ExecRequest(code=program, workspace=ws.id))
    assert result.status is ExecStatus.OK, result
    assert result.stdout == "daemon is beating\n"
    heartbeat = ws.path / "heartbeat.txt"  # read on the host directly (see test_workspace.py)
    beats = heartbeat.read_bytes()
    assert beats.count(b"beat") >= 4
    await asyncio.sleep(1.0)  # a surviving daemon would beat ~50 times meanwhile
    assert heartbeat.read_bytes() == beats
    check = await pool.run(
        ExecRequest(
            code="import time, os; a = os.path.getsize('heartbeat.txt'); time.sleep(0.3); "
            "print(os.path.getsize('heartbeat.txt') - a)",
            workspace=ws.id,
        )
    )
    assert check.status is ExecStatus.OK and check.stdout == "0\n", check


async def test_signals_cannot_reach_the_zygote_or_the_host(
    pool: SandboxPool, host_helper: subprocess.Popen[bytes]
) -> None:
    cells_before = set(pool._cells)
    program = code(
        """
        import json, os, signal, sys
        host_pid = int(sys.argv[1])
        out = {"ppid": os.getppid()}
        attempts = [
            ("kill(-1, KILL)", lambda: os.kill(-1, signal.SIGKILL)),
            ("kill(1, KILL)", lambda: os.kill(1, signal.SIGKILL)),
            ("kill(1, TERM)", lambda: os.kill(1, signal.SIGTERM)),
            ("kill(1, STOP)", lambda: os.kill(1, signal.SIGSTOP)),
            ("kill(ppid, KILL)", lambda: os.kill(os.getppid(), signal.SIGKILL)),
            ("killpg(1, KILL)", lambda: os.killpg(1, signal.SIGKILL)),
            ("kill(host pid)", lambda: os.kill(host_pid, signal.SIGKILL)),
            ("kill(-host pid)", lambda: os.kill(-host_pid, signal.SIGKILL)),
        ]
        for name, attempt in attempts:
            try:
                attempt()
                out[name] = "sent"
            except OSError as e:
                out[name] = type(e).__name__
        print(json.dumps(out))
        """
    )
    bystander = ExecRequest(code="import time; time.sleep(0.5); print('bystander ok')")
    result, other = await pool.run_many(
        [ExecRequest(code=program, argv=[str(host_helper.pid)]), bystander]
    )
    assert result.status is ExecStatus.OK, result  # kill(-1) spares the sender
    assert json.loads(result.stdout)["ppid"] == 1
    assert other.status is ExecStatus.OK and other.stdout == "bystander ok\n", other
    assert host_helper.poll() is None  # the host process is alive
    os.kill(os.getpid(), 0)  # and so is this one
    # The zygotes ignored every signal (a stopped or killed zygote would lose the next jobs).
    after = await pool.run_many([ExecRequest(code=f"print({i})") for i in range(6)])
    assert [r.stdout for r in after] == [f"{i}\n" for i in range(6)]
    assert set(pool._cells) == cells_before


async def test_host_environment_does_not_leak(
    make_config, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HONING_TEST_SECRET", token)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", token)
    program = code(
        """
        import json, os
        raw = open("/proc/self/environ", "rb").read().decode(errors="replace")
        print(json.dumps({"environ": dict(os.environ), "raw": raw}))
        """
    )
    async with SandboxPool(make_config()) as pool:
        result = await pool.run(ExecRequest(code=program))
        with_extra = await pool.run(ExecRequest(code=program, env={"EXTRA": "1"}))
        after_extra = await pool.run_many([ExecRequest(code=program) for _ in range(2)])
    assert result.status is ExecStatus.OK, result
    assert token not in result.stdout
    seen = json.loads(result.stdout)
    allow_list = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/workspace",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": "/tmp",  # set by the zygote
        "PWD": "/workspace",  # set by bubblewrap's --chdir
    }
    assert seen["environ"] == allow_list
    assert token not in seen["raw"]
    assert json.loads(with_extra.stdout)["environ"] == {**allow_list, "EXTRA": "1"}
    for r in after_extra:  # a request's env does not stick to the cell
        assert json.loads(r.stdout)["environ"] == allow_list


async def test_proc_shows_no_host_process(
    pool: SandboxPool, token: str, host_helper: subprocess.Popen[bytes]
) -> None:
    program = code(
        """
        import json, os
        procs = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                procs[pid] = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            except OSError as e:
                procs[pid] = type(e).__name__
        print(json.dumps({"me": os.getpid(), "procs": procs}))
        """
    )
    result = await pool.run(ExecRequest(code=program))
    assert result.status is ExecStatus.OK, result
    assert token not in result.stdout  # the host helper's command line
    assert "pytest" not in result.stdout  # this very process
    seen = json.loads(result.stdout)
    assert set(seen["procs"]) == {"1", str(seen["me"])}
    assert "zygote.py" in seen["procs"]["1"]
    assert str(host_helper.pid) not in seen["procs"] or token not in seen["procs"].get(
        str(host_helper.pid), ""
    )


async def test_job_cannot_forge_the_zygote_reply(pool: SandboxPool) -> None:
    forged = json.dumps(
        {
            "exit_code": 0, "signal": None, "stdout": "FORGED", "stderr": "",
            "stdout_truncated": False, "stderr_truncated": False, "wall_s": 0.0, "cpu_s": 0.0,
            "maxrss_kb": 0, "limit": None,
        }
    )  # fmt: skip
    program = code(
        """
        import os, sys
        line = (sys.argv[1] + "\\n").encode()
        wrote = []
        for fd in os.listdir("/proc/1/fd"):
            try:
                f = os.open(f"/proc/1/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
                os.write(f, line)
                wrote.append("/proc/1/fd/" + fd)
            except OSError:
                pass
        for fd in range(3, 64):  # protocol descriptors inherited from the zygote?
            try:
                os.write(fd, line)
                wrote.append(fd)
            except OSError:
                pass
        print("wrote:", wrote)
        sys.exit(3)
        """
    )
    result = await pool.run(ExecRequest(code=program, argv=[forged]))
    assert result.status is ExecStatus.ERROR, result
    assert result.exit_code == 3
    assert result.stdout == "wrote: []\n"
    after = await pool.run_many([ExecRequest(code=f"print({i})") for i in range(4)])
    assert [r.stdout for r in after] == [f"{i}\n" for i in range(4)]


async def test_no_privileges(pool: SandboxPool) -> None:
    program = code(
        """
        import ctypes, json, os
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000
        out = {"uid": os.getuid(), "euid": os.geteuid()}
        status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
        out["CapEff"], out["NoNewPrivs"] = status["CapEff"].strip(), status["NoNewPrivs"].strip()
        for name, flags in [("userns", CLONE_NEWUSER), ("mountns", CLONE_NEWNS),
                            ("netns", CLONE_NEWNET)]:
            out[name] = "ok" if libc.unshare(flags) == 0 else os.strerror(ctypes.get_errno())
        try:
            os.setuid(0)
            out["setuid"] = "ok"
        except OSError as e:
            out["setuid"] = type(e).__name__
        try:
            os.chroot("/tmp")
            out["chroot"] = "ok"
        except OSError as e:
            out["chroot"] = type(e).__name__
        print(json.dumps(out))
        """
    )
    result = await pool.run(ExecRequest(code=program))
    assert result.status is ExecStatus.OK, result
    seen = json.loads(result.stdout)
    assert seen["uid"] == seen["euid"] != 0
    assert int(seen["CapEff"], 16) == 0
    assert seen["NoNewPrivs"] == "1"
    for key in ("userns", "mountns", "netns", "setuid", "chroot"):
        assert seen[key] != "ok", (key, seen)


# -- executions in the same cell -----------------------------------------------------------

LEFTOVERS = {
    "workspace": (
        "open('/workspace/left.txt', 'w').write('x')",
        "import os; print(os.path.exists('/workspace/left.txt'))",
    ),
    "tmp": (
        "open('/tmp/left.txt', 'w').write('x')",
        "import os; print(os.path.exists('/tmp/left.txt'))",
    ),
    "dev-shm": (
        "open('/dev/shm/left.txt', 'w').write('x')",
        "import os; print(os.path.exists('/dev/shm/left.txt'))",
    ),
    "dev": (
        "open('/dev/left.txt', 'w').write('x')",
        "import os; print(os.path.exists('/dev/left.txt'))",
    ),
    "sysv-shm": (
        "import ctypes; print(ctypes.CDLL(None).shmget(0x484f4e, 4096, 0o1600))",
        "import ctypes; print(ctypes.CDLL(None).shmget(0x484f4e, 0, 0o600) != -1)",
    ),
}


@pytest.mark.parametrize("where", sorted(LEFTOVERS))
async def test_nothing_a_job_leaves_reaches_the_next_job(pool1: SandboxPool, where: str) -> None:
    leave, look = LEFTOVERS[where]
    first = await pool1.run(ExecRequest(code=leave))
    if where == "dev":  # /dev is read-only: nothing can be left there at all
        assert first.status is ExecStatus.ERROR and "Read-only file system" in first.stderr
    else:
        assert first.status is ExecStatus.OK, first
    second = await pool1.run(ExecRequest(code=look))  # same cell: the pool has one
    assert second.status is ExecStatus.OK, second
    assert second.stdout == "False\n", f"state left in {where} survived into the next job"


async def test_a_job_cannot_shrink_the_next_jobs_memory(pool1: SandboxPool) -> None:
    if pool1.memory_enforcement == "rlimit_as":
        pytest.skip("needs the memory cgroup")
    hog = code(
        """
        import os
        for i in range(5):  # 5 x 60 MiB, each file under the 64 MiB file-size limit
            for d in ("/dev/shm", "/dev", "/tmp", "/workspace"):
                try:
                    with open(f"{d}/hog{i}", "wb") as f:
                        f.write(b"x" * (60 << 20))
                    break
                except OSError:
                    continue
        print("done")
        """
    )
    first = await pool1.run(ExecRequest(code=hog, memory_mb=512, timeout_s=30))
    assert first.stdout == "done\n", first
    second = await pool1.run(
        ExecRequest(code="x = bytearray(350 << 20); print('ok')", memory_mb=512, timeout_s=30)
    )
    assert second.status is ExecStatus.OK, second


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the syscall filter is x86_64-only")
async def test_syscall_filter_refuses_kernel_attack_surface(pool: SandboxPool) -> None:
    assert all(cell.seccomp for cell in pool._cells.values())
    program = code(
        """
        import ctypes, errno, json, os
        libc = ctypes.CDLL(None, use_errno=True)
        out = {}
        for nr, name in [(29, "shmget"), (64, "semget"), (68, "msgget"), (101, "ptrace"),
                         (250, "keyctl"), (321, "bpf"), (323, "userfaultfd"),
                         (425, "io_uring_setup"), (298, "perf_event_open")]:
            ctypes.set_errno(0)
            result = libc.syscall(nr, 0, 0, 0, 0, 0)
            out[name] = [result, errno.errorcode.get(ctypes.get_errno())]
        out["getppid"] = libc.syscall(110)  # an ordinary call still works
        print(json.dumps(out))
        """
    )
    result = await pool.run(ExecRequest(code=program))
    assert result.status is ExecStatus.OK, result
    seen = json.loads(result.stdout)
    assert seen.pop("getppid") >= 0
    assert seen == {name: [-1, "EPERM"] for name in seen}, seen
