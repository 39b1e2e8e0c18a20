"""`honing eval` as a user runs it: a real process, real HumanEval tasks, a real sandbox."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HONING = [sys.executable, "-m", "honing"]
TIER_KEYS = {"end_to_end", "single_step", "trajectory"}
REPORT_KEYS = TIER_KEYS | {"by_domain", "by_tag", "policy", "tasks", "version", "samples",
                           "max_steps", "elapsed_s"}  # fmt: skip


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HONING_HOME": str(tmp_path / "home"), "HF_DATASETS_OFFLINE": "1"}


def honing_eval(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HONING, "eval", *args], capture_output=True, text=True, env=env, timeout=300
    )


def report(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout  # exactly one JSON object
    out = json.loads(lines[0])
    assert isinstance(out, dict) and set(out) == REPORT_KEYS
    assert set(out["by_domain"]) == {"code"} and set(out["by_domain"]["code"]) == TIER_KEYS
    return out


def test_reference_solves_all_of_humaneval(env: dict[str, str]) -> None:
    out = report(honing_eval(env, "--tasks", "humaneval", "--policy", "reference", "--json"))
    e2e = out["end_to_end"]
    assert {k: e2e[k] for k in ("passed", "total", "success_rate", "infra_failed")} == {
        "passed": 164, "total": 164, "success_rate": 1.0, "infra_failed": 0,
    }  # fmt: skip
    assert e2e["pass_at_k"] == {"1": 1.0}
    assert out["by_tag"]["humaneval"]["end_to_end"]["passed"] == 164
    assert out["single_step"]["well_formed_rate"] == 1.0
    assert out["trajectory"]["mean_steps_to_success"] == 1.0


def test_noop_solves_none_of_humaneval(env: dict[str, str]) -> None:
    proc = honing_eval(env, "--tasks", "humaneval", "--policy", "noop", "--max-steps", "1",
                       "--json")  # fmt: skip
    out = report(proc)
    e2e = out["end_to_end"]
    assert (e2e["passed"], e2e["total"], e2e["success_rate"]) == (0, 164, 0.0)
    assert out["single_step"]["failures"] == {"malformed_action": 164}
    assert out["max_steps"] == 1


def test_table_for_a_shard(env: dict[str, str], tmp_path: Path) -> None:
    proc = honing_eval(env, "--tasks", "humaneval", "--policy", "reference", "--shard", "0/8",
                       "--k", "2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "policy reference" in proc.stdout and "pass@2" in proc.stdout
    assert "domain code" in proc.stdout and "tag humaneval" in proc.stdout
    assert "infra failures" in proc.stdout  # beside every success rate, 0 here
    assert re.search(r"^sandbox: memory.*; seccomp: (on|off)$", proc.stderr, re.M), proc.stderr


def test_a_judge_with_criteria_reports_each_one_met(env: dict[str, str]) -> None:
    """Structure's judge gives a verdict per criterion (`met:*`): the table's last line counts
    them; HumanEval's judge has none, and the table says nothing of criteria."""
    proc = honing_eval(env, "--tasks", "synthetic-structure", "--policy", "reference",
                       "--shard", "0/16")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # the console wraps long lines
    assert "criteria met (the judge's, at each judged episode's last verdict): 100.0% on" in text
    for name in ("iou", "dims", "volume", "holes", "features", "surface"):
        assert re.search(rf"\b{name} 2/2\b", text), text
    humaneval = honing_eval(env, "--tasks", "humaneval", "--policy", "reference", "--shard",
                            "0/16")  # fmt: skip
    assert humaneval.returncode == 0, humaneval.stderr
    assert "criteria met" not in humaneval.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "random"], "--policy 'random': unknown; allowed: reference, noop"),
        (["--policy", "noop", "--k", "0"], "--k 0: must be at least 1"),
        (["--policy", "noop", "--shard", "2"], "--shard '2': expected I/N"),
        (["--policy", "noop", "--max-steps", "0"], "--max-steps 0: must be at least 1"),
    ],
)
def test_bad_options_are_named(env: dict[str, str], args: list[str], message: str) -> None:
    proc = honing_eval(env, "--tasks", "humaneval", *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_infrastructure_failures_exit_3_and_are_reported(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    """In process, with every sandbox run failing: the report says so, never 'reward 0'."""
    from typer.testing import CliRunner

    from honing.cli import app
    from honing.sandbox import ExecRequest, ExecResult, ExecStatus, SandboxPool

    async def broken(self: SandboxPool, request: ExecRequest) -> ExecResult:
        return ExecResult(status=ExecStatus.SANDBOX_ERROR, error="cell crashed (simulated)")

    monkeypatch.setattr(SandboxPool, "run", broken)
    monkeypatch.setenv("HONING_HOME", env["HONING_HOME"])
    args = ["eval", "--tasks", "humaneval", "--policy", "reference", "--shard", "0/16", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output
    out = json.loads(result.stdout)
    e2e = out["end_to_end"]
    assert e2e["infra_failed"] > 0 and e2e["total"] == 0 and e2e["success_rate"] is None
    assert "failed for infrastructure reasons" in result.stderr
    table = CliRunner().invoke(app, args[:-1])  # the table says how many were left out
    assert table.exit_code == 3
    row = re.search(r"│ all\s+│\s+(\d+)\s+│\s+(\d+)\s+│\s+(\S+)\s+│\s+(\d+)\s+│", table.stdout)
    assert row is not None, table.stdout
    assert row.groups() == ("0", "0", "–", str(e2e["infra_failed"]))


TRIO = "roles:\n  - kind: analyst\n  - kind: executor\n  - kind: validator\nmax_rounds: 1\n"


def eval_in_process(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *args: str) -> Any:
    """`honing eval ARGS` in this process (no second start-up of torch): its Click result."""
    from typer.testing import CliRunner

    from honing.cli import app

    monkeypatch.setenv("HONING_HOME", env["HONING_HOME"])
    return CliRunner().invoke(app, ["eval", *args])


def test_a_model_alone_and_as_a_team(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A random tiny model (garbage, quickly): the structure of both outputs, not the scores."""
    team = tmp_path / "team.yaml"
    team.write_text(TRIO)
    args = ["--tasks", "examples-math", "--shard", "0/7", "--policy", f"model:{tiny_model_dir}",
            "--team", str(team), "--max-steps", "2", "--max-new-tokens", "8"]  # fmt: skip
    result = eval_in_process(monkeypatch, env, *args)
    assert result.exit_code == 0, result.output
    table = result.stdout
    assert table.count("end to end (infra failures") == 2  # alone, then as the team
    assert table.count("single step · trajectory") == 2
    assert "· team (analyst, executor, validator)" in " ".join(table.split())
    for row in ("alone vs as a team", "success", "success, paired", "valid steps", "team roles",
                "validator", "precision", "rounds to acceptance", "mean reward analyst",
                "mean reward executor", "mean reward validator"):  # fmt: skip
        assert row in table, row

    result = eval_in_process(monkeypatch, env, *args, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == REPORT_KEYS | {"team"}
    teamed = out["team"]
    assert set(teamed) == REPORT_KEYS | {"config", "roles", "versus", "models"}
    assert teamed["models"] == {role: f"model:{tiny_model_dir}"
                                for role in ("analyst", "executor", "validator")}  # fmt: skip
    versus = teamed["versus"]  # team − alone on the episodes judged on both sides
    assert versus["pairs"] <= min(out["end_to_end"]["total"], teamed["end_to_end"]["total"])
    assert versus["gain"] == pytest.approx(versus["team"] - versus["alone"])
    low, high = versus["ci95"]
    assert -1 <= low <= versus["gain"] <= high <= 1
    assert teamed["policy"] == f"model:{tiny_model_dir} · team (analyst, executor, validator)"
    assert teamed["config"]["max_rounds"] == 1
    # The same tasks, each played as often alone as by the team.
    alone, together = out["end_to_end"], teamed["end_to_end"]
    assert alone["tasks"] == together["tasks"] > 0
    assert alone["total"] + alone["infra_failed"] == together["total"] + together["infra_failed"]
    roles = teamed["roles"]
    assert set(roles) == {"episodes", "precision", "recall", "verdict_accuracy", "rounds",
                          "accepted", "reward"}  # fmt: skip
    assert roles["episodes"] == together["total"]
    assert set(roles["reward"]) == {"analyst", "executor", "validator"}
    assert all(f["n"] == together["total"] for f in roles["reward"].values())
    assert set(roles["precision"]) == {"value", "n"}


@pytest.mark.parametrize(
    ("policy", "text", "message"),
    [
        ("model:default", "model: m\nsteps: 3\n", "no team in it: give a team config (roles:"),
        ("model:default", "team:\n  roles: [{kind: coach}]\n", "key 'team.roles.0.kind'"),
        ("reference", TRIO, "--team needs a model policy"),
    ],
)
def test_a_bad_team_is_named(
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    tmp_path: Path,
    policy: str,
    text: str,
    message: str,
) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(text)
    result = eval_in_process(monkeypatch, env, "--tasks", "examples-math", "--policy", policy,
                             "--team", str(team))  # fmt: skip
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert message in said
    if policy != "reference":
        assert str(team) in said


def test_episodes_past_the_episode_timeout_are_unsolved_and_said(env: dict[str, str]) -> None:
    """--episode-timeout limits the episode's steps: the reference's HumanEval runs take longer
    than 1 ms, so every episode ends at it, unsolved, and stderr says to raise it."""
    args = ["--tasks", "humaneval", "--policy", "reference", "--shard", "0/41", "--json"]
    proc = honing_eval(env, *args, "--episode-timeout", "0.001")
    limited = report(proc)
    e2e = limited["end_to_end"]
    assert (e2e["passed"], e2e["total"]) == (0, 4)
    assert limited["single_step"]["failures"] == {"episode_timeout": 4}
    assert "4 episode(s) ended at the episode's time limit (0.001 s)" in proc.stderr
    assert "--episode-timeout" in proc.stderr
    default = honing_eval(env, *args)  # 300 s: the same episodes pass, and nothing is said
    assert report(default)["end_to_end"]["passed"] == 4
    assert "time limit" not in default.stderr
