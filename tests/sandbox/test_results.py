"""What an `ExecResult` reports: statuses, exit codes, signals, streams, argv, files, limits."""

from __future__ import annotations

import json
import signal
import textwrap

import pytest

from honing.sandbox import ExecRequest, ExecResult, ExecStatus, SandboxPool


def code(src: str) -> str:
    return textwrap.dedent(src).lstrip("\n")


@pytest.mark.parametrize(
    ("program", "status", "exit_code"),
    [
        ("pass", ExecStatus.OK, 0),
        ("import sys; sys.exit()", ExecStatus.OK, 0),
        ("import sys; sys.exit(0)", ExecStatus.OK, 0),
        ("import sys; sys.exit(None)", ExecStatus.OK, 0),
        ("import sys; sys.exit(3)", ExecStatus.ERROR, 3),
        ("import sys; sys.exit(True)", ExecStatus.ERROR, 1),
        ("import sys; sys.exit(-1)", ExecStatus.ERROR, 255),  # as `python main.py` exits
        ("import sys; sys.exit(256)", ExecStatus.OK, 0),  # the OS keeps the low byte
        ("import os; os._exit(7)", ExecStatus.ERROR, 7),
        ("raise ValueError('boom')", ExecStatus.ERROR, 1),
        ("def f(:\n    pass", ExecStatus.ERROR, 1),  # a syntax error is the program's error
    ],
)
async def test_exit_codes(
    pool: SandboxPool, program: str, status: ExecStatus, exit_code: int
) -> None:
    result = await pool.run(ExecRequest(code=program))
    assert result.status is status, result
    assert result.exit_code == exit_code
    assert result.signal is None
    assert result.ok is (status is ExecStatus.OK)


async def test_system_exit_with_a_message(pool: SandboxPool) -> None:
    result = await pool.run(ExecRequest(code="import sys; print('out'); sys.exit('goodbye')"))
    assert result.status is ExecStatus.ERROR
    assert result.exit_code == 1
    assert result.stdout == "out\n"
    assert result.stderr == "goodbye\n"


async def test_uncaught_exception_shows_the_programs_traceback(pool: SandboxPool) -> None:
    program = "def f():\n    raise ValueError('boom')\n\nf()\n"
    result = await pool.run(ExecRequest(code=program, filename="solution.py"))
    assert result.status is ExecStatus.ERROR
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    # As under `python solution.py` (3.9+), the path is absolute: the workspace's.
    assert 'File "/workspace/solution.py", line 4, in <module>' in result.stderr
    assert 'File "/workspace/solution.py", line 2, in f' in result.stderr
    assert result.stderr.rstrip().endswith("ValueError: boom")
    assert "zygote" not in result.stderr and "_exec_main" not in result.stderr


async def test_traceback_shows_source_lines_like_python_file_does(pool: SandboxPool) -> None:
    # `python solution.py` prints each frame's source line under it; the zygote puts the
    # source in linecache for exactly that.
    program = "def f():\n    raise ValueError('boom')\n\nf()\n"
    result = await pool.run(ExecRequest(code=program, filename="solution.py"))
    assert result.status is ExecStatus.ERROR
    assert "    raise ValueError('boom')\n" in result.stderr, result.stderr
    assert "    f()\n" in result.stderr


async def test_signal_ends_the_program(pool: SandboxPool) -> None:
    result = await pool.run(
        ExecRequest(code="import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    )
    assert result.status is ExecStatus.KILLED, result
    assert result.signal == signal.SIGTERM
    assert result.exit_code is None
    assert "SIGTERM" in result.error


async def test_stdin(pool: SandboxPool) -> None:
    program = "import sys; data = sys.stdin.read(); print(len(data)); print(data[:20][::-1])"
    result = await pool.run(ExecRequest(code=program, stdin="hello\nworld\n"))
    assert result.status is ExecStatus.OK, result
    assert result.stdout == "12\n\ndlrow\nolleh\n"
    big = "x" * 1_000_000
    result = await pool.run(ExecRequest(code=program, stdin=big))
    assert result.stdout.splitlines()[0] == "1000000"
    empty = await pool.run(ExecRequest(code="import sys; print(repr(sys.stdin.read()))"))
    assert empty.stdout == "''\n"  # no stdin: end of file at once, never a hang
    unicode = await pool.run(
        ExecRequest(code="import sys; print(sys.stdin.read())", stdin="héllo ✓")
    )
    assert unicode.stdout == "héllo ✓\n"


async def test_argv_filename_and_main(pool: SandboxPool) -> None:
    program = code(
        """
        import json, os, sys
        cwd = os.getcwd()
        print(json.dumps({"argv": sys.argv, "name": __name__, "file": __file__, "cwd": cwd}))
        """
    )
    result = await pool.run(ExecRequest(code=program, argv=["a", "b c", ""], filename="prog.py"))
    assert result.status is ExecStatus.OK, result
    seen = json.loads(result.stdout)
    assert seen == {
        "argv": ["prog.py", "a", "b c", ""],
        "name": "__main__",
        "file": "/workspace/prog.py",  # absolute, as python (3.9+) makes it; argv[0] is not
        "cwd": "/workspace",
    }
    default = await pool.run(ExecRequest(code="import sys; print(sys.argv)"))
    assert default.stdout == "['main.py']\n"


async def test_files_in_and_out(pool: SandboxPool) -> None:
    program = code(
        """
        import os
        text = open("data/in.txt").read()
        blob = open("blob.bin", "rb").read()
        os.makedirs("out/deep", exist_ok=True)
        open("out/result.txt", "w").write(text.upper())
        open("out/deep/nested.txt", "w").write("nested")
        open("out/skip.log", "w").write("not asked for")
        open("other.txt", "w").write("not asked for either")
        open("out/raw.bin", "wb").write(blob[::-1])
        print(sorted(os.listdir(".")))
        """
    )
    result = await pool.run(
        ExecRequest(
            code=program,
            files={"data/in.txt": "hello", "blob.bin": b"\x00\xff\x10"},
            output_files=["out/*.txt", "out/*.bin"],
        )
    )
    assert result.status is ExecStatus.OK, result
    assert result.stdout == "['blob.bin', 'data', 'other.txt', 'out']\n"
    assert result.files == {
        "out/result.txt": b"HELLO",
        "out/deep/nested.txt": b"nested",  # fnmatch's * crosses directories
        "out/raw.bin": b"\x10\xff\x00",
    }
    as_json = result.to_json_dict()
    assert as_json["status"] == "ok"
    assert as_json["files"]["out/result.txt"] == "HELLO"
    json.dumps(as_json)  # JSON-ready


async def test_each_run_gets_a_fresh_workspace(pool: SandboxPool) -> None:
    first = await pool.run_many(
        [ExecRequest(code="open('left.txt', 'w').write('x')", files={"given.txt": "g"})] * 2
    )
    assert all(r.status is ExecStatus.OK for r in first)
    after = await pool.run_many(
        [ExecRequest(code="import os; print(sorted(os.listdir('.')))") for _ in range(4)]
    )
    assert [r.stdout for r in after] == ["[]\n"] * 4


async def test_request_env_is_passed(pool: SandboxPool) -> None:
    result = await pool.run(
        ExecRequest(code="import os; print(os.environ['GREETING'])", env={"GREETING": "hi there"})
    )
    assert result.stdout == "hi there\n"


async def test_output_within_the_limit_is_complete(pool: SandboxPool) -> None:
    result = await pool.run(
        ExecRequest(code="import sys; sys.stdout.write('x' * 1000)", max_output_bytes=1000)
    )
    assert result.status is ExecStatus.OK, result
    assert result.stdout == "x" * 1000
    assert result.stdout_truncated is False and result.stderr_truncated is False


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_huge_output_is_cut_at_the_limit(pool: SandboxPool, stream: str) -> None:
    program = code(
        f"""
        import sys
        while True:
            sys.{stream}.write("y" * 65536)
        """
    )
    result = await pool.run(ExecRequest(code=program, max_output_bytes=100_000, timeout_s=20))
    assert result.status is ExecStatus.OUTPUT_LIMIT, result
    assert getattr(result, stream) == "y" * 100_000
    assert getattr(result, f"{stream}_truncated") is True
    other = "stderr" if stream == "stdout" else "stdout"
    assert getattr(result, f"{other}_truncated") is False
    after = await pool.run(ExecRequest(code="print('next')"))
    assert after.status is ExecStatus.OK and after.stdout == "next\n"


async def test_output_one_byte_past_the_limit(pool: SandboxPool) -> None:
    result = await pool.run(
        ExecRequest(code="import sys; sys.stdout.write('z' * 1001)", max_output_bytes=1000)
    )
    assert result.status is ExecStatus.OUTPUT_LIMIT
    assert result.stdout == "z" * 1000 and result.stdout_truncated is True


async def test_default_output_limit(pool: SandboxPool) -> None:
    result = await pool.run(ExecRequest(code="while True: print('spam' * 100)", timeout_s=20))
    assert result.status is ExecStatus.OUTPUT_LIMIT, result
    assert len(result.stdout.encode()) == pool.config.max_output_bytes == 1_000_000


async def test_binary_output_within_a_large_limit_is_reported(pool: SandboxPool) -> None:
    # 12 MiB of control bytes is within the configured 13 MiB limit; each byte becomes a
    # six-character \\uXXXX escape in the zygote's JSON reply (72 MiB on one line).
    program = "import sys; sys.stdout.buffer.write(b'\\x01' * (12 << 20))"
    result = await pool.run(ExecRequest(code=program, max_output_bytes=13 << 20, timeout_s=30))
    assert result.status is ExecStatus.OK, result
    assert result.stdout == "\x01" * (12 << 20)
    assert result.stdout_truncated is False


async def test_file_size_limit(pool: SandboxPool) -> None:
    program = code(
        """
        with open("big.bin", "wb") as f:
            f.write(b"x" * (3 << 20))
        """
    )
    result = await pool.run(ExecRequest(code=program, max_file_mb=1))
    assert result.status is ExecStatus.ERROR, result
    assert "File too large" in result.stderr


async def test_tmp_is_private_and_bounded(make_config) -> None:
    program = code(
        """
        import os, tempfile
        print(tempfile.gettempdir())
        with open("/tmp/fill.bin", "wb") as f:
            for _ in range(64):
                f.write(b"x" * (1 << 20))
        """
    )
    async with SandboxPool(make_config(pool_size=1, tmp_mb=16)) as pool:
        result = await pool.run(ExecRequest(code=program))
    assert result.status is ExecStatus.ERROR, result
    assert result.stdout == "/tmp\n"
    assert "No space left on device" in result.stderr


async def test_result_measurements(pool: SandboxPool) -> None:
    program = code(
        """
        import time
        x = bytearray(100 << 20)
        while time.process_time() < 0.2:
            pass
        print("done")
        """
    )
    result = await pool.run(ExecRequest(code=program, memory_mb=512))
    assert result.status is ExecStatus.OK, result
    assert result.cpu_s >= 0.2  # the program itself measured that much CPU time
    assert result.wall_s > 0
    assert result.peak_memory_mb >= 90
    assert result.memory_enforcement == pool.memory_enforcement
    assert result.memory_enforcement in ("cgroup_v1", "cgroup_v2", "rlimit_as")
    assert result.error == ""


def test_result_defaults_and_json() -> None:
    result = ExecResult(ExecStatus.TIMEOUT, files={"a": b"\xff"})
    assert not result.ok
    d = result.to_json_dict()
    assert d["status"] == "timeout"
    assert d["files"] == {"a": "\ufffd"}
    assert ExecStatus("memory_limit") is ExecStatus.MEMORY_LIMIT
