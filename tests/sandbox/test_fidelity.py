"""Differential fidelity: each program of a corpus runs under `python -E FILE` and in the sandbox,
and both must print the same stdout, exit the same way and (compared as `Program.stderr` says)
print the same stderr; files a program leaves behind are compared where it names them.

The reference is the interpreter that runs the tests, started in a fresh directory with the
sandbox's own environment (`launch.clean_env()`). It runs with -E because the zygote does (-I):
the PYTHON* variables of that environment (PYTHONUNBUFFERED=1 among them) reach the processes a
program starts, not the program itself. Paths and memory addresses are normalised before
comparing (the reference's directory reads as the sandbox's /workspace).

Where isolation forbids what python would do, `ISOLATED` lists the program, the reason and both
outputs; docs/sandbox.md lists the same cases. What this file does not cover: C extensions,
programs whose output depends on timing, and finalisation of modules other than `__main__`.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from honing.sandbox import ExecRequest, ExecStatus, SandboxPool
from honing.sandbox.launch import INSIDE_WORKSPACE, clean_env

# The module shares one pool, on the module's event loop.
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")

StderrCheck = Literal["exact", "frames", "last_line"]


@dataclass(frozen=True)
class Program:
    """One program of the corpus, with how to run it and how to compare its stderr.

    `stderr`: "exact" (after normalising), "frames" (every line but source lines and carets,
    i.e. those indented 4+ spaces: on Python < 3.13 tracebacks printed by the interpreter's C
    code, for exceptions in threads, atexit handlers and `__del__`, show no source lines in the
    sandbox, where the program has no file on disk) or "last_line".
    """

    code: str
    argv: tuple[str, ...] = ()
    stdin: str = ""
    files: dict[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()  # workspace files whose content must match after the run
    stderr: StderrCheck = "exact"


def p(code: str, **kwargs: Any) -> Program:
    return Program(textwrap.dedent(code).lstrip("\n"), **kwargs)


CORPUS: dict[str, Program] = {
    # -- threads ---------------------------------------------------------------------------
    "thread_prints_after_main_ends": p(
        """
        import threading
        go = threading.Event()
        def late():
            go.wait()
            print("from thread")
        threading.Thread(target=late).start()
        print("main done")
        go.set()
        """
    ),
    "threads_joined_in_order": p(
        """
        import threading
        events = [threading.Event() for _ in range(6)]
        def work(i):
            events[i].wait()
            print("worker", i)
            events[i + 1].set()
        for i in range(5):
            threading.Thread(target=work, args=(i,)).start()
        print("started")
        events[0].set()
        """
    ),
    "daemon_thread_is_not_joined": p(
        """
        import threading, time
        def forever():
            while True:
                time.sleep(0.05)
        threading.Thread(target=forever, daemon=True).start()
        threading.Thread(target=lambda: print("worker"), daemon=False).start()
        print("main")
        """
    ),
    "thread_exception_goes_to_threading_excepthook": p(
        """
        import threading
        def fail():
            raise ValueError("in thread")
        t = threading.Thread(target=fail, name="failing")
        t.start()
        t.join()
        print("main goes on")
        """,
        stderr="frames",
    ),
    "custom_threading_excepthook": p(
        """
        import threading
        threading.excepthook = lambda args: print("hook:", args.exc_type.__name__, args.exc_value)
        def fail():
            raise KeyError("k")
        threading.Thread(target=fail).start()
        """
    ),
    "sys_exit_in_a_thread_ends_only_the_thread": p(
        """
        import sys, threading
        def leave():
            sys.exit(3)
        t = threading.Thread(target=leave)
        t.start()
        t.join()
        print("still here")
        """
    ),
    "threads_are_joined_before_atexit": p(
        """
        import atexit, threading
        go = threading.Event()
        atexit.register(print, "atexit")
        def late():
            go.wait()
            print("thread")
        threading.Thread(target=late).start()
        print("main")
        go.set()
        """
    ),
    "threads_are_joined_after_an_uncaught_exception": p(
        """
        import threading
        go = threading.Event()
        def late():
            go.wait()
            print("thread finished")
        threading.Thread(target=late).start()
        go.set()
        raise RuntimeError("main failed")
        """
    ),
    "keyboard_interrupt_waits_for_threads_then_dies_of_sigint": p(
        """
        import threading
        go = threading.Event()
        def late():
            go.wait()
            print("thread finished")
        threading.Thread(target=late).start()
        go.set()
        raise KeyboardInterrupt
        """
    ),
    "signal_handler_error_while_joining_threads": p(
        """
        import signal, threading, time
        def on_alarm(signum, frame):
            raise TimeoutError("alarm during the join")
        def alarm_once_main_has_ended():
            while threading.main_thread().is_alive():
                time.sleep(0.01)
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            threading.Event().wait()  # never set: python leaves it blocked and exits
        signal.signal(signal.SIGALRM, on_alarm)
        threading.Thread(target=alarm_once_main_has_ended).start()
        print("main done")
        """
    ),
    "timer_thread_fires": p(
        """
        import threading
        threading.Timer(0.05, print, ["timer fired"]).start()
        print("armed")
        """
    ),
    # -- atexit ----------------------------------------------------------------------------
    "atexit_runs_last_registered_first": p(
        """
        import atexit
        for name in ("first", "second", "third"):
            atexit.register(print, "atexit", name)
        atexit.register(print, "unregistered")
        atexit.unregister(print)
        atexit.register(lambda: print("lambda"))
        print("main")
        """
    ),
    "atexit_handler_error_is_printed_and_the_rest_run": p(
        """
        import atexit
        def broken():
            raise ValueError("handler failed")
        atexit.register(print, "runs after")
        atexit.register(broken)
        print("main")
        """,
        stderr="frames",
    ),
    "sys_exit_in_atexit_keeps_the_exit_code": p(
        """
        import atexit, sys
        def leave():
            sys.exit(5)
        atexit.register(leave)
        sys.exit(3)
        """,
        stderr="frames",
    ),
    "atexit_runs_after_an_uncaught_exception": p(
        """
        import atexit
        atexit.register(print, "cleanup")
        raise LookupError("boom")
        """
    ),
    "file_is_gone_from_globals_at_atexit": p(
        """
        import atexit
        atexit.register(lambda: print("__file__" in globals()))
        """
    ),
    "file_stays_in_globals_at_atexit_after_sys_exit": p(
        """
        import atexit, sys
        atexit.register(lambda: print("__file__" in globals()))
        sys.exit(0)
        """
    ),
    "os_exit_in_atexit_loses_buffered_output": p(
        """
        import atexit, os
        atexit.register(os._exit, 4)
        print("buffered, never flushed")
        """
    ),
    "weakref_finalize_runs_at_exit": p(
        """
        import weakref
        class Resource:
            pass
        kept = Resource()
        weakref.finalize(kept, print, "finalized at exit")
        """
    ),
    # -- exit codes and messages -----------------------------------------------------------
    "sys_exit_int": p("import sys\nprint('out')\nsys.exit(3)\n"),
    "sys_exit_none": p("import sys\nsys.exit(None)\n"),
    "sys_exit_str": p("import sys\nprint('out')\nsys.exit('goodbye')\n"),
    "sys_exit_list": p("import sys\nsys.exit([1, 'two'])\n"),
    "sys_exit_true": p("import sys\nsys.exit(True)\n"),
    "sys_exit_negative": p("import sys\nsys.exit(-1)\n"),
    "sys_exit_wraps_to_a_byte": p("import sys\nsys.exit(256 + 7)\n"),
    "sys_exit_huge_int": p("import sys\nsys.exit(2**70)\n"),
    "raise_system_exit_bare": p("raise SystemExit\n"),
    "exit_and_quit_builtins": p("print('bye')\nexit(4)\n"),
    "quit_builtin": p("quit()\n"),
    "sys_exit_message_without_sys_stderr": p(
        "import sys\nsys.stderr = None\nsys.exit('to fd 2 all the same')\n"
    ),
    "os_exit_drops_buffered_output": p("import os\nprint('lost')\nos._exit(6)\n"),
    "os_exit_after_flush": p("import os\nprint('kept', flush=True)\nos._exit(0)\n"),
    # -- uncaught exceptions ---------------------------------------------------------------
    "uncaught_exception_in_a_function": p(
        """
        def inner(x):
            return 1 / x
        def outer():
            return inner(0)
        print("before")
        outer()
        """
    ),
    "chained_exception_raise_from": p(
        """
        try:
            {}["missing"]
        except KeyError as exc:
            raise RuntimeError("lookup failed") from exc
        """
    ),
    "exception_during_handling": p(
        """
        try:
            int("x")
        except ValueError:
            undefined_name
        """
    ),
    "exception_group": p(
        """
        raise ExceptionGroup("several", [ValueError("a"), TypeError("b")])
        """
    ),
    "syntax_error": p("print('never')\ndef f(:\n    pass\n"),
    "custom_excepthook": p(
        """
        import sys
        def hook(kind, value, tb):
            print("hooked:", kind.__name__, value, tb.tb_frame.f_code.co_name)
        sys.excepthook = hook
        raise ValueError("v")
        """
    ),
    "excepthook_calling_sys_exit": p(
        """
        import sys
        def hook(kind, value, tb):
            sys.exit(7)
        sys.excepthook = hook
        raise ValueError("v")
        """
    ),
    "excepthook_that_fails": p(
        """
        import sys
        def hook(kind, value, tb):
            raise RuntimeError("bad hook")
        sys.excepthook = hook
        1 / 0
        """
    ),
    "excepthook_deleted": p("import sys\ndel sys.excepthook\n1 / 0\n"),
    "keyboard_interrupt_dies_of_sigint": p("print('partial')\nraise KeyboardInterrupt\n"),
    "keyboard_interrupt_subclass_exits_1": p(
        "class Stop(KeyboardInterrupt):\n    pass\nraise Stop('x')\n"
    ),
    "recursion_error": p(
        """
        def down(n):
            return down(n + 1)
        down(0)
        """,
        stderr="last_line",
    ),
    "recursion_error_caught": p(
        """
        import sys
        def down(n):
            return down(n + 1)
        try:
            down(0)
        except RecursionError as exc:
            print("caught:", exc)
        sys.setrecursionlimit(5000)
        def count(n):
            return 0 if n == 0 else 1 + count(n - 1)
        print(count(4000))
        """
    ),
    # -- signals and alarms ----------------------------------------------------------------
    "alarm_without_handler_kills": p(
        "import signal, time\nprint('armed')\nsignal.alarm(1)\ntime.sleep(30)\n"
    ),
    "alarm_with_handler": p(
        """
        import signal, time
        def on_alarm(signum, frame):
            raise TimeoutError("alarm")
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(1)
        try:
            time.sleep(30)
        except TimeoutError as exc:
            print("caught", exc)
        """
    ),
    "sigterm_to_self": p(
        "import os, signal\nprint('lost')\nos.kill(os.getpid(), signal.SIGTERM)\n"
    ),
    "sigterm_handler": p(
        """
        import os, signal, sys
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
        os.kill(os.getpid(), signal.SIGTERM)
        print("not reached")
        """
    ),
    "sigint_to_self_raises_keyboard_interrupt": p(
        """
        import os, signal, time
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            print("caught KeyboardInterrupt")
        print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        """
    ),
    # -- thread and process pools, subprocesses --------------------------------------------
    "thread_pool_map": p(
        """
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=3) as pool:
            print(list(pool.map(lambda x: x * x, range(8))))
        """
    ),
    "thread_pool_left_open_is_joined_at_exit": p(
        """
        import threading
        from concurrent.futures import ThreadPoolExecutor
        go = threading.Event()
        pool = ThreadPoolExecutor(max_workers=2)
        pool.submit(lambda: (go.wait(), print("task done")))
        print("submitted")
        go.set()
        """
    ),
    "process_pool_map": p(
        """
        from concurrent.futures import ProcessPoolExecutor
        def cube(x):
            return x ** 3
        if __name__ == "__main__":
            with ProcessPoolExecutor(max_workers=2) as pool:
                print(list(pool.map(cube, range(6))))
        """
    ),
    "multiprocessing_pool": p(
        """
        import multiprocessing
        def double(x):
            return 2 * x
        if __name__ == "__main__":
            with multiprocessing.Pool(2) as pool:
                print(pool.map(double, [1, 2, 3]))
        """
    ),
    "multiprocessing_process_joined_at_exit": p(
        """
        import multiprocessing
        def child():
            print("child runs", flush=True)
        if __name__ == "__main__":
            print("printed before the fork, so the child flushes a copy too")
            multiprocessing.Process(target=child).start()
        """
    ),
    "os_fork_child_finishes_the_program_too": p(
        """
        import os
        print("before the fork", flush=True)
        pid = os.fork()
        if pid == 0:
            print("in the child")
        else:
            os.waitpid(pid, 0)
            print("in the parent")
        """
    ),
    "subprocess_python": p(
        """
        import subprocess, sys
        done = subprocess.run([sys.executable, "-c", "import sys; print('child', sys.argv[1:]); "
                               "sys.exit(3)", "a b"], capture_output=True, text=True)
        print(repr(done.stdout), done.returncode)
        """
    ),
    "subprocess_shares_stdout_with_buffered_parent": p(
        """
        import subprocess, sys
        print("parent, buffered")
        subprocess.run([sys.executable, "-c", "print('child, unbuffered')"])
        subprocess.run(["echo", "from echo"])
        """
    ),
    # -- stdin, argv, __file__, __name__, globals ------------------------------------------
    "stdin_lines": p(
        """
        import sys
        lines = sys.stdin.read().splitlines()
        print(list(reversed(lines)))
        """,
        stdin="alpha\nbeta\ngamma\n",
    ),
    "input_until_eof": p(
        """
        while True:
            try:
                print("got", input())
            except EOFError:
                print("eof")
                break
        """,
        stdin="one\ntwo",
    ),
    "argv": p("import sys\nprint(sys.argv)\n", argv=("a", "b c", "", "ünï")),
    "file_name_and_path": p(
        """
        import os, sys
        print(__name__, __file__ == os.path.join(os.getcwd(), "main.py"), os.path.isabs(__file__))
        print(sys.path[0] == os.getcwd(), os.getcwd() == os.path.dirname(__file__))
        """
    ),
    "main_globals": p(
        """
        print(sorted(globals()))
        print(type(__builtins__).__name__, __spec__, __cached__, __package__, __doc__)
        print(__annotations__)
        """
    ),
    "annotations_are_evaluated": p(
        """
        def f(x: int) -> "str":
            return str(x)
        print(f.__annotations__)
        """
    ),
    "import_from_the_scripts_directory": p(
        "import helper\nprint(helper.VALUE, helper.__name__)\n",
        files={"helper.py": "VALUE = 42\n"},
    ),
    # -- output ----------------------------------------------------------------------------
    "unicode_output": p(
        """
        import sys
        print("héllo ✓ 日本語 🎉")
        print("erreur ✗", file=sys.stderr)
        """
    ),
    "print_without_newline": p("print('no newline', end='')\n"),
    "writes_without_flush": p(
        "import sys\nsys.stdout.write('partial out')\nsys.stderr.write('partial err')\n"
    ),
    "large_output": p(
        """
        for i in range(20000):
            print(f"line {i:05d} " + "x" * 20)
        """
    ),
    "stdout_closed_by_the_program": p(
        "import sys\nprint('flushed by close')\nsys.stdout.close()\n"
    ),
    "stdout_fd_closed_flush_fails": p("import os\nprint('lost')\nos.close(1)\n"),
    "warnings_to_stderr": p(
        """
        import warnings
        warnings.warn("careful")
        warnings.warn("old api", DeprecationWarning)
        warnings.warn("hidden", PendingDeprecationWarning)
        """
    ),
    # -- finalisation of what __main__ holds -----------------------------------------------
    "del_methods_run_at_exit": p(
        """
        class Noisy:
            def __init__(self, name):
                self.name = name
            def __del__(self):
                print("del", self.name)
        _private = Noisy("underscore")
        a = Noisy("a")
        b = Noisy("b")
        print("end of main")
        """
    ),
    "del_error_at_exit_is_printed": p(
        """
        class Broken:
            def __del__(self):
                raise ValueError("in __del__")
        kept = Broken()
        print("end of main")
        """,
        stderr="frames",
    ),
    "logging_flushed_at_exit": p(
        """
        import logging
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
        logging.getLogger("app").info("hello")
        logging.warning("careful")
        """
    ),
    "unclosed_file_is_flushed_at_exit": p(
        """
        f = open("out.txt", "w")
        f.write("written, never closed")
        """,
        outputs=("out.txt",),
    ),
    "generator_finally_runs_at_exit": p(
        """
        def gen():
            try:
                yield 1
            finally:
                print("generator closed")
        it = gen()
        next(it)
        """
    ),
}

# Where isolation forbids what python does: (why, program, python's stdout, the sandbox's stdout).
# {port} is a TCP port listening on the host's loopback. docs/sandbox.md lists the same cases.
ISOLATED: dict[str, tuple[str, Program, str, str]] = {
    "network": (
        "a cell has its own network namespace: the host's loopback (and any network) is not "
        "reachable",
        p(
            """
            import socket, sys
            try:
                socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
                print("connected")
            except OSError:
                print("refused")
            """,
            argv=("{port}",),
        ),
        "connected\n",
        "refused\n",
    ),
    "process_outliving_the_program": (
        "no process of a job outlives it: when the program's process exits, whatever it left "
        "running is killed",
        p(
            """
            import subprocess, sys
            subprocess.Popen([sys.executable, "-c",
                              "import time; time.sleep(0.3); print('orphan', flush=True)"])
            print("parent")
            """
        ),
        "parent\norphan\n",
        "parent\n",
    ),
}


@dataclass
class Outcome:
    status: int  # the exit code, or minus the signal that ended the process
    stdout: str
    stderr: str
    files: dict[str, str]


ADDRESS = re.compile(r"0x[0-9a-f]+")


def normalise(text: str, workspace: str) -> str:
    return ADDRESS.sub("0x…", text.replace(workspace, INSIDE_WORKSPACE))


def stderr_view(text: str, check: StderrCheck) -> list[str]:
    lines = text.splitlines()
    if check == "frames":
        return [line for line in lines if not line.startswith("    ")]
    if check == "last_line":
        return lines[-1:]
    return lines


# The reference python inherits SIGINT's disposition: a test run started in the background by a
# non-interactive shell ignores SIGINT, and so would the reference (but not a sandbox job, whose
# child sets python's handler). A handler here makes exec give the reference the default.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


async def run_python(program: Program, directory: Path) -> Outcome:
    """`python -E main.py ARGV` in a fresh directory, with the sandbox's environment."""
    workspace = directory / "workspace"
    tmp = directory / "tmp"
    workspace.mkdir()
    tmp.mkdir()
    (workspace / "main.py").write_text(program.code)
    for name, text in program.files.items():
        (workspace / name).write_text(text)
    env = {**clean_env(), "HOME": str(workspace), "TMPDIR": str(tmp)}
    done = await asyncio.to_thread(  # beside the sandbox's run, which the event loop drives
        subprocess.run,
        [sys.executable, "-E", "main.py", *program.argv],
        cwd=workspace,
        env=env,
        input=program.stdin.encode(),
        capture_output=True,
        timeout=60,
    )
    files = {name: (workspace / name).read_text() for name in program.outputs}
    ws = str(workspace)
    out, err = normalise(done.stdout.decode(), ws), normalise(done.stderr.decode(), ws)
    return Outcome(done.returncode, out, err, files)


async def run_sandbox(pool: SandboxPool, program: Program) -> Outcome:
    result = await pool.run(
        ExecRequest(
            code=program.code,
            argv=list(program.argv),
            stdin=program.stdin,
            files=dict(program.files),
            output_files=list(program.outputs),
        )
    )
    if result.signal is not None:
        assert result.status is ExecStatus.KILLED, result
        status = -result.signal
    else:
        assert result.exit_code is not None, result
        status = result.exit_code
        expected = ExecStatus.OK if status == 0 else ExecStatus.ERROR
        assert result.status is expected, result
    assert not (result.stdout_truncated or result.stderr_truncated), result
    files = {name: result.files[name].decode() for name in program.outputs if name in result.files}
    return Outcome(
        status,
        normalise(result.stdout, INSIDE_WORKSPACE),
        normalise(result.stderr, INSIDE_WORKSPACE),
        files,
    )


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool


@pytest.fixture(scope="module")
def listening_port() -> Iterator[int]:
    """A TCP port listening on the host's loopback for the whole module."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def test_the_corpus_is_broad_enough() -> None:
    assert len(CORPUS) >= 40


@MODULE_LOOP
@pytest.mark.parametrize("name", list(CORPUS))
async def test_sandbox_runs_the_program_as_python_does(
    pool: SandboxPool, tmp_path: Path, name: str
) -> None:
    program = CORPUS[name]
    python, sandbox = await asyncio.gather(
        run_python(program, tmp_path), run_sandbox(pool, program)
    )
    assert sandbox.stdout == python.stdout
    assert sandbox.status == python.status, (sandbox, python)
    assert stderr_view(sandbox.stderr, program.stderr) == stderr_view(python.stderr, program.stderr)
    assert sandbox.files == python.files


@MODULE_LOOP
@pytest.mark.parametrize("name", list(ISOLATED))
async def test_what_isolation_forbids_differs_as_documented(
    pool: SandboxPool, tmp_path: Path, listening_port: int, name: str
) -> None:
    _, template, python_stdout, sandbox_stdout = ISOLATED[name]
    argv = tuple(arg.format(port=listening_port) for arg in template.argv)
    program = Program(template.code, argv=argv)
    python, sandbox = await asyncio.gather(
        run_python(program, tmp_path), run_sandbox(pool, program)
    )
    assert (python.status, python.stdout) == (0, python_stdout)
    assert (sandbox.status, sandbox.stdout) == (0, sandbox_stdout)


def test_the_isolated_cases_are_documented(project_dir: Path) -> None:
    docs = (project_dir / "docs" / "sandbox.md").read_text()
    for name in ISOLATED:
        assert f"`{name}`" in docs


@MODULE_LOOP
async def test_threads_that_never_end_reach_the_timeout(pool: SandboxPool) -> None:
    program = p(
        """
        import threading
        def spin():
            while True:
                pass
        threading.Thread(target=spin).start()
        print("main done")
        """
    )
    result = await pool.run(ExecRequest(code=program.code, timeout_s=1))
    assert result.status is ExecStatus.TIMEOUT, result
    assert result.error == "wall-clock limit reached"
    # The main module had ended (python flushes stdout then, before joining threads); the job
    # had not.
    assert result.stdout == "main done\n"
