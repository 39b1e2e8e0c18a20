"""The zygote's report of an uncaught exception (`_display`) is exactly what the stdlib's
`traceback.print_exception` prints, though it formats only the frames that get printed: deep
recursion, mutual recursion, chains, groups, and runs of repeats just at the cutoff."""

from __future__ import annotations

import contextlib
import io
import linecache
import sys
import textwrap
import traceback

import pytest

from honing.sandbox import zygote as z

PROGRAMS = {
    "recursion": """
        def down(n):
            return down(n + 1)
        down(0)
        """,
    "mutual_recursion": """
        def ping(n):
            return pong(n)
        def pong(n):
            return ping(n + 1)
        ping(0)
        """,
    "recursion_then_an_error_while_handling_it": """
        def down(n):
            return down(n + 1)
        try:
            down(0)
        except RecursionError:
            {}["missing"]
        """,
    "recursion_as_the_cause": """
        def down(n):
            if n > 200:
                raise KeyError(n)
            return down(n + 1)
        try:
            down(0)
        except KeyError as exc:
            raise ValueError("wrapped") from exc
        """,
    "recursion_in_a_group": """
        def down(n):
            return down(n + 1)
        def caught():
            try:
                down(0)
            except RecursionError as exc:
                return exc
        raise ExceptionGroup("several", [caught(), ValueError(1)])
        """,
    "three_repeats_then_a_fourth_line": """
        def down(n):
            if n == 3:
                raise ValueError(n)
            return down(n + 1)
        down(0)
        """,
    "four_repeats": """
        def down(n):
            if n == 4:
                raise ValueError(n)
            return down(n + 1)
        down(0)
        """,
    "alternating_lines": """
        def down(n):
            if n > 40:
                1 / 0
            if n % 2:
                return down(n + 1)
            return down(n + 1)
        down(0)
        """,
}


def uncaught(name: str) -> BaseException:
    source = textwrap.dedent(PROGRAMS[name]).lstrip("\n")
    path = f"/workspace/{name}.py"
    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    try:
        exec(compile(source, path, "exec"), {"__name__": "__main__"})
    except BaseException as exc:
        return exc.with_traceback(exc.__traceback__.tb_next if exc.__traceback__ else None)
    raise AssertionError(f"{name} raised nothing")


def displayed(exc: BaseException) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stderr(buffer):
        z._display(exc)
    return buffer.getvalue()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_report_is_the_stdlibs(name: str) -> None:
    exc = uncaught(name)
    expected = io.StringIO()
    traceback.print_exception(exc, file=expected)
    assert displayed(exc) == expected.getvalue()


def test_deep_recursion_formats_only_the_printed_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    exc = uncaught("recursion")
    frames = len(traceback.extract_tb(exc.__traceback__))
    looked_up: list[int] = []
    getline = linecache.getline

    def counting(filename: str, lineno: int, module_globals: object = None) -> str:
        looked_up.append(lineno)
        return getline(filename, lineno, module_globals)  # type: ignore[arg-type]

    monkeypatch.setattr(linecache, "getline", counting)
    report = displayed(exc)
    assert f"[Previous line repeated {frames - 4} more times]" in report
    assert frames > 500 and len(looked_up) < 10  # the printed frames' lines, not every frame's


def test_a_program_that_replaces_the_formatting_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def framed(self: traceback.StackSummary, frame: traceback.FrameSummary, **kw: object) -> str:
        return f"<{frame.name}:{frame.lineno}>\n"

    monkeypatch.setattr(traceback.StackSummary, "format_frame_summary", framed)
    exc = uncaught("four_repeats")
    expected = io.StringIO()
    traceback.print_exception(exc, file=expected)
    assert displayed(exc) == expected.getvalue()
    assert "<down:4>" in expected.getvalue()


@pytest.mark.parametrize("limit", [0, 2, 10, -5])
def test_sys_tracebacklimit_is_honoured(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    exc = uncaught("recursion")
    monkeypatch.setattr(sys, "tracebacklimit", limit, raising=False)
    expected = io.StringIO()
    traceback.print_exception(exc, file=expected)
    assert displayed(exc) == expected.getvalue()
