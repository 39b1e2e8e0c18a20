"""`honing tasks check` as a user runs it: a real process, a real sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from honing.tasks import load_tasks

HONING = [sys.executable, "-m", "honing"]
SUMMARY_KEYS = {"total", "valid", "quarantined", "quarantine_file", "version", "unverified"}

BAD_REFERENCE = {
    "id": "code/bad",
    "domain": "code",
    "prompt": "def one(): ...",
    "entry_point": "one",
    "tests": "assert one() == 1\n",
    "reference": "def one():\n    return 2\n",
}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HONING_HOME": str(tmp_path / "home"), "HF_DATASETS_OFFLINE": "1"}


def tasks_check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HONING, "tasks", "check", *args], capture_output=True, text=True, env=env, timeout=120
    )


def summary(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout  # exactly one JSON object
    out = json.loads(lines[0])
    assert isinstance(out, dict) and set(out) == SUMMARY_KEYS
    return out


@pytest.fixture
def mixed_file(tmp_path: Path, rows: list[dict[str, Any]], fmt: SimpleNamespace) -> Path:
    """The fixture set, one invalid row, one duplicate and one failing reference."""
    path = tmp_path / "mixed.jsonl"
    bad_row = {"id": "no-answer", "domain": "math", "prompt": "?"}
    fmt.write_jsonl(path, [*rows, bad_row, rows[0], BAD_REFERENCE])
    return path


def test_help_lists_the_options(env: dict[str, str]) -> None:
    proc = tasks_check(env, "--help")
    assert proc.returncode == 0, proc.stderr
    for option in ("--json", "--shard", "--no-verify", "--quarantine-file"):
        assert option in proc.stdout


def test_json_summary_and_quarantine_file(
    env: dict[str, str], mixed_file: Path, tmp_path: Path
) -> None:
    qfile = tmp_path / "out" / "quarantine.jsonl"
    out = summary(tasks_check(env, str(mixed_file), "--json", "--quarantine-file", str(qfile)))
    assert out["total"] == 7
    assert out["valid"] == 4
    assert out["quarantined"] == 3
    assert out["unverified"] == 0
    assert out["quarantine_file"] == str(qfile)
    entries = [json.loads(line) for line in qfile.read_text().splitlines()]
    assert len(entries) == 3 and all(isinstance(e, dict) for e in entries)
    assert [(e["line"], e["task_id"], e["field"]) for e in entries] == [
        (5, "no-answer", "answer"),
        (6, "code/add", "id"),
        (7, "code/bad", "reference"),
    ]
    assert all(e["source"] == str(mixed_file) and e["row"] is not None for e in entries)
    # the version is the one of the tasks that passed
    valid = load_tasks(str(mixed_file))
    valid.tasks = [t for t in valid.tasks if t.id != "code/bad"]
    assert out["version"] == valid.version


def test_default_quarantine_file_goes_under_honing_home(
    env: dict[str, str], mixed_file: Path
) -> None:
    out = summary(tasks_check(env, str(mixed_file), "--json", "--no-verify"))
    assert out["quarantined"] == 2 and out["valid"] == 5
    written = Path(out["quarantine_file"])
    assert written.is_relative_to(env["HONING_HOME"])
    assert len(written.read_text().splitlines()) == 2
    assert out["version"] == load_tasks(str(mixed_file)).version


def test_nothing_quarantined_writes_no_file(
    env: dict[str, str], tmp_path: Path, rows: list[dict[str, Any]], fmt: SimpleNamespace
) -> None:
    path = fmt.write_jsonl(tmp_path / "clean.jsonl", rows)
    out = summary(tasks_check(env, str(path), "--json"))
    assert (out["total"], out["valid"], out["quarantined"]) == (4, 4, 0)
    assert out["quarantine_file"] is None
    assert not (Path(env["HONING_HOME"]) / "quarantine").exists()


def test_shard_gives_a_subset(env: dict[str, str], tmp_path: Path, fmt: SimpleNamespace) -> None:
    path = fmt.write_jsonl(tmp_path / "many.jsonl", fmt.math_rows(40))
    out = summary(tasks_check(env, str(path), "--json", "--no-verify", "--shard", "0/4"))
    expected = load_tasks(str(path)).shard(0, 4)
    assert 0 < out["valid"] < 40
    assert out["valid"] == len(expected.tasks)
    assert out["version"] == expected.version
    assert out["quarantined"] == 0


@pytest.mark.parametrize("shard", ["4/4", "x/2", "1"])
def test_bad_shard_fails(env: dict[str, str], mixed_file: Path, shard: str) -> None:
    proc = tasks_check(env, str(mixed_file), "--json", "--no-verify", "--shard", shard)
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert "shard" in proc.stderr


def test_missing_file_fails_naming_it(env: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "no-such-tasks.jsonl"
    proc = tasks_check(env, str(missing), "--json")
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert str(missing) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_corrupt_parquet_fails_naming_it(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    proc = tasks_check(env, str(bad), "--no-verify")
    assert proc.returncode != 0
    assert str(bad) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_human_output_lists_quarantined_rows(env: dict[str, str], mixed_file: Path) -> None:
    proc = tasks_check(env, str(mixed_file), "--no-verify")
    assert proc.returncode == 0, proc.stderr
    assert "no-answer" in proc.stderr and f"{mixed_file}:5" in proc.stderr
    assert "quarantined rows written to" in proc.stderr


def test_a_code_reference_that_only_exits_is_quarantined(
    env: dict[str, str], tmp_path: Path, fmt: SimpleNamespace
) -> None:
    """The reference check is the environment's judge: `sys.exit(0)` passes no test."""
    exits = {**BAD_REFERENCE, "id": "code/exits", "reference": "import sys\nsys.exit(0)\n"}
    path = fmt.write_jsonl(tmp_path / "exits.jsonl", [exits])
    qfile = tmp_path / "quarantine.jsonl"
    out = summary(tasks_check(env, str(path), "--json", "--quarantine-file", str(qfile)))
    assert (out["valid"], out["quarantined"], out["unverified"]) == (0, 1, 0)
    [entry] = [json.loads(line) for line in qfile.read_text().splitlines()]
    assert entry["task_id"] == "code/exits" and entry["field"] == "reference"
    assert "ended its process (exit status 0)" in entry["reason"]


def test_humaneval_checks_clean(env: dict[str, str]) -> None:
    out = summary(tasks_check(env, "humaneval", "--json"))
    assert out["total"] == out["valid"] == 164
    assert out["quarantined"] == 0 and out["unverified"] == 0
    assert out["quarantine_file"] is None
    assert out["version"] == load_tasks("humaneval").version
