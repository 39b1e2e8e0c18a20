"""`honing train` and `honing sft` as a user runs them: a real subprocess, a tiny real model with
the hf engine, the real sandbox; the last line, resume, and config errors that name the key."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

HONING = [sys.executable, "-m", "honing"]
LAST_LINE = re.compile(
    r"^tiny: held-out success base \d+% → RL \d+% \(RL [+-]\d+ pts, 95% CI [+-]\d+\.\.[+-]\d+; "
    r"n=2; infra failures 0\) in [\d.]+ min$"
)


def honing(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HONING, *args], capture_output=True, text=True, timeout=600)


def write_config(tmp_path: Path, model: Path) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    rows = [{"id": f"m{i}", "domain": "math", "prompt": f"What is {i} + {2 * i}?",
             "answer": str(3 * i)} for i in range(1, 9)]  # fmt: skip
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "name": "tiny",
        "model": str(model),
        "train": {"m": {"tasks": str(tasks), "limit": 6}},
        "heldout": {"m": {"tasks": str(tasks)}},  # the 2 tasks not trained on stay
        "steps": 1,
        "groups_per_step": 1,
        "n": 2,
        "learner": {"lr": 1e-3},
        "agent": {"max_turns": 1, "max_new_tokens": 8, "system_prompt": ""},
        "checkpoint": {"every": 1},
        "sandbox": {"pool_size": 1, "timeout_s": 20.0},
    }
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_train_runs_prints_the_line_and_resumes(tmp_path: Path, tiny_model_dir: Path) -> None:
    config = write_config(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    proc = honing("train", str(config), f"out={run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert LAST_LINE.match(proc.stdout.strip().splitlines()[-1]), proc.stdout
    assert "step 1/1" in proc.stderr and "start-up check" in proc.stderr
    assert "sandbox: memory" in proc.stderr and "seccomp: " in proc.stderr  # the limits, at start
    # every success figure says how many episodes it left out as infrastructure failures
    assert re.search(r"step 1/1 \[[^\]]+\] success (\d+%|n/a) \(infra failures 0\)", proc.stderr)
    assert re.search(r"eval m \(before\): success \d+% \(\d/2; infra failures 0\)", proc.stderr)
    evals = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]
    assert [(e["phase"], e["total"]) for e in evals] == [("before", 2), ("main", 2)]

    again = honing("train", str(config), f"out={run}")
    assert again.returncode == 2 and "--resume" in again.stderr

    more = honing("train", "--resume", str(run), "steps=2")
    assert more.returncode == 0, more.stderr[-3000:]
    assert "at step 1" in more.stderr
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


def test_train_config_errors_name_the_key(tmp_path: Path, tiny_model_dir: Path) -> None:
    config = write_config(tmp_path, tiny_model_dir)
    proc = honing("train", str(config), f"out={tmp_path / 'r'}", "learner.lrr=1")
    assert proc.returncode == 2
    assert "unknown key 'learner.lrr'" in proc.stderr and "lr," in proc.stderr
    proc = honing(
        "train",
        str(config),
        f"out={tmp_path / 'r'}",
        "phases=[{name: a, steps: 1, train: [x]}]",
        "steps=null",
    )
    assert proc.returncode == 2 and "not train sources" in proc.stderr


def test_sft_command_trains_and_saves_a_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    data = tmp_path / "chat.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Say {w}."},
                {"role": "assistant", "content": w},
            ]
        }
        for w in ("yes", "no", "maybe")
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "sft.yaml"
    config.write_text(yaml.safe_dump({"model": str(tiny_model_dir), "data": str(data),
                                      "out": str(tmp_path / "sft"), "batch_size": 2}))  # fmt: skip
    proc = honing("sft", str(config), "epochs=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sft: 4 steps on 3 examples" in proc.stdout
    assert (tmp_path / "sft" / "model" / "config.json").is_file()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "robot", "content": "x"}]}\n')
    proc = honing("sft", str(config), f"data={bad}")
    assert proc.returncode == 2 and "bad.jsonl:1" in proc.stderr and "role" in proc.stderr
