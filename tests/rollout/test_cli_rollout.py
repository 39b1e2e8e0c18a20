"""Smoke runs of the rollout commands as a user runs them: real processes, a real (tiny) model,
the real sandbox, a real store: `honing rollout`, `honing store query|describe`,
`honing eval --policy model:PATH` and `honing check-template`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HONING = [sys.executable, "-m", "honing"]


def honing(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HONING, *args], capture_output=True, text=True, timeout=300)


def test_rollout_writes_a_queryable_store(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = honing("rollout", "--tasks", "examples-math", "--model", str(tiny_model_dir),
                  "--out", str(out), "--n", "2", "--max-turns", "2", "--max-new-tokens", "12",
                  "--limit", "3", "--seed", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "6 trajectories · 3 tasks" in proc.stdout
    meta = json.loads((out / "rollout.json").read_text())
    assert meta["n"] == 2 and meta["tasks"] == "examples-math"

    sql = (
        "SELECT task_id, count(*) AS k, min(n_tokens) AS tokens, sum(model_tokens) AS model, "
        "min(policy_version) AS v FROM trajectories GROUP BY task_id ORDER BY task_id"
    )
    proc = honing("store", "query", str(out), sql, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert row["k"] == 2  # a group of n=2 per task, each exactly once
        assert row["model"] > 0 and row["tokens"] > row["model"] / 2
        assert row["v"] == 0

    # Every model turn's tokens sit in the loss mask, nothing else does.
    proc = honing("store", "query", str(out), "SELECT sum(\"end\" - start) AS n FROM turns "
                  "WHERE role = 'assistant'", "--json")  # fmt: skip
    masked = json.loads(proc.stdout)["n"]
    proc = honing("store", "query", str(out), "SELECT sum(model_tokens) AS n FROM trajectories",
                  "--json")  # fmt: skip
    assert json.loads(proc.stdout)["n"] == masked

    # A seed makes the run reproducible, yet the samples of a group differ.
    sql = "SELECT count(DISTINCT token_ids::VARCHAR) AS n FROM trajectories GROUP BY task_id"
    proc = honing("store", "query", str(out), sql, "--json")
    assert [json.loads(line)["n"] for line in proc.stdout.splitlines()] == [2, 2, 2]
    # A random model never submits an answer: every episode runs out of steps.
    proc = honing("store", "query", str(out), "SELECT DISTINCT ending FROM trajectories", "--json")
    assert json.loads(proc.stdout) == {"ending": "step_limit"}

    proc = honing("store", "describe", str(out))
    assert proc.returncode == 0 and "trajectories" in proc.stdout and "turns" in proc.stdout


def test_store_query_errors_are_clear(tmp_path: Path) -> None:
    proc = honing("store", "query", str(tmp_path / "nowhere"), "SELECT 1")
    assert proc.returncode == 2
    assert "nowhere" in proc.stderr


def test_eval_with_a_model_policy(tiny_model_dir: Path) -> None:
    proc = honing("eval", "--tasks", "examples-math", "--policy", f"model:{tiny_model_dir}",
                  "--max-steps", "2", "--max-new-tokens", "8", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["policy"] == f"model:{tiny_model_dir}"
    e2e = report["end_to_end"]
    assert e2e["total"] > 0 and e2e["infra_failed"] == 0
    # A random tiny model writes no valid tool call, so every step is a format failure.
    assert report["single_step"]["well_formed_rate"] < 1.0


def test_eval_unknown_policy_lists_the_model_forms() -> None:
    proc = honing("eval", "--tasks", "examples-math", "--policy", "gpt-9")
    assert proc.returncode == 2
    assert "model:PATH" in proc.stderr


def test_check_template(tiny_model_dir: Path, tmp_path: Path) -> None:
    proc = honing("check-template", str(tiny_model_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = tmp_path / "broken.jinja"
    # Drops every assistant message but the last: earlier turns are re-rendered differently.
    broken.write_text(
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
        "{% endif %}"
    )
    proc = honing("check-template", str(tiny_model_dir), "--chat-template", str(broken))
    assert proc.returncode == 1
    assert "FAIL" in proc.stdout and "fix:" in proc.stdout


# Slow (a Ray instance started by the CLI): the rollout on Ray actors is test_ray.py's
# (actors killed mid-run included), the command line this file's local rollout.
@pytest.mark.slow
def test_rollout_on_ray_writes_the_same_store(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`--backend ray`: the engine and the sandbox run in Ray actors of a local instance."""
    out = tmp_path / "ray-run"
    proc = honing("rollout", "--tasks", "examples-math", "--model", str(tiny_model_dir),
                  "--out", str(out), "--n", "2", "--max-turns", "1", "--max-new-tokens", "8",
                  "--limit", "2", "--seed", "3", "--backend", "ray")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "4 trajectories · 2 tasks" in proc.stdout
    sql = (
        "SELECT count(*) AS k, sum(model_tokens) AS m, count(DISTINCT id) AS ids FROM trajectories"
    )
    proc = honing("store", "query", str(out), sql, "--json")
    row = json.loads(proc.stdout)
    assert (row["k"], row["ids"]) == (4, 4)  # each trajectory exactly once
    assert row["m"] > 0


def test_unknown_backend_is_refused() -> None:
    proc = honing("rollout", "--tasks", "examples-math", "--model", "default", "--out", "/tmp/x",
                  "--backend", "slurm")  # fmt: skip
    assert proc.returncode == 2
    assert "allowed: local, ray" in proc.stderr


def test_images_need_a_chat_engine_serving_a_vision_model(tiny_model_dir: Path) -> None:
    proc = honing("rollout", "--tasks", "examples-structure", "--model", str(tiny_model_dir),
                  "--out", "unused", "--images")  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "--images" in proc.stderr and "openai:URL" in proc.stderr
    proc = honing("eval", "--tasks", "examples-structure", "--policy", "reference", "--images")
    assert proc.returncode == 2 and "model policies" in proc.stderr, proc.stderr
