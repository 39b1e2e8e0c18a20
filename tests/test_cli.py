"""Smoke runs of each `honing` command as a user runs them: real processes, real sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HONING = [sys.executable, "-m", "honing"]
COMMANDS = [
    [],
    ["version"],
    ["sandbox"],
    ["sandbox", "exec"],
    ["sandbox", "humaneval"],
    ["sandbox", "runtime"],
    ["sandbox", "runtime", "build"],
    ["sandbox", "runtime", "list"],
    ["tasks"],
    ["tasks", "check"],
    ["eval"],
    ["rollout"],
    ["store"],
    ["store", "query"],
    ["store", "describe"],
    ["store", "rescore"],
    ["check-template"],
    ["train"],
    ["sft"],
]


def honing(
    *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HONING, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "honing")
def test_every_command_has_help(command: list[str]) -> None:
    proc = honing(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout


def test_exec_prints_one_json_result(tmp_path: Path) -> None:
    program = tmp_path / "prog.py"
    program.write_text("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(4)\n")
    proc = honing("sandbox", "exec", "--timeout", "5", "--memory-mb", "128", str(program))
    assert proc.returncode == 0, proc.stderr  # the sandbox worked; the program failed
    result = json.loads(proc.stdout)
    assert result["status"] == "error"
    assert result["exit_code"] == 4
    assert result["stdout"] == "out\n"
    assert result["stderr"] == "err\n"
    expected = {"signal", "stdout_truncated", "stderr_truncated", "wall_s", "cpu_s",
                "peak_memory_mb"}  # fmt: skip
    assert expected <= result.keys()


def test_exec_reads_stdin_and_reports_timeout() -> None:
    proc = honing("sandbox", "exec", "--timeout", "0.5", "-", stdin="while True: pass\n")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "timeout"


def test_exec_without_bubblewrap_fails_with_install_hint(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    env = {**os.environ, "PATH": str(tmp_path)}  # no bwrap on PATH
    proc = honing("sandbox", "exec", str(program), env=env)
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert "apt-get install bubblewrap" in proc.stderr


def test_exec_missing_file_names_it(tmp_path: Path) -> None:
    proc = honing("sandbox", "exec", str(tmp_path / "absent.py"))
    assert proc.returncode == 2
    assert "absent.py" in proc.stderr


def test_humaneval_demo_passes_reference_solutions() -> None:
    proc = honing("sandbox", "humaneval", "--limit", "8")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("humaneval: 8/8 passed")


def test_runtime_build_and_list(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("# nothing but the stdlib\n")
    env = {**os.environ, "HONING_HOME": str(tmp_path / "home")}
    built = honing("sandbox", "runtime", "build", "empty", "-r", str(req), env=env)
    assert built.returncode == 0, built.stderr
    info = json.loads(built.stdout)
    assert info["name"] == "empty" and not info["cached"]
    again = json.loads(
        honing("sandbox", "runtime", "build", "empty", "-r", str(req), env=env).stdout
    )
    assert again["cached"] and again["id"] == info["id"]
    listed = honing("sandbox", "runtime", "list", env=env)
    assert "empty" in listed.stdout
    program = tmp_path / "p.py"
    program.write_text("print('in runtime')\n")
    ran = honing("sandbox", "exec", "--runtime", "empty", str(program), env=env)
    assert json.loads(ran.stdout)["stdout"] == "in runtime\n"
