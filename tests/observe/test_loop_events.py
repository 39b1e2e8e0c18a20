"""The trainer loop's observability end to end: a real (scripted-engine) run, SIGKILLed after an
update and resumed, leaves an event log with every kind, nothing doubled, and TensorBoard scalars
and histograms for every update (the steps after the checkpoint purged and re-written)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from honing.observe.events import KINDS, read_events

CHILD = Path(__file__).parents[1] / "trainer" / "loop_child.py"


def tasks_file(path: Path, op: str, start: int, count: int) -> str:
    rows = []
    for i in range(start, start + count):
        a, b = 10 + 7 * i, 3 + i
        answer = a + b if op == "+" else a - b
        tags = ["arith", "add" if op == "+" else "sub"]
        rows.append({"id": f"{op}{i}", "domain": "math", "prompt": f"What is {a} {op} {b}?",
                     "answer": str(answer), "tags": tags})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def run_child(cfg: dict[str, Any], path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path.write_text(json.dumps(cfg))
    return subprocess.run(
        [sys.executable, str(CHILD), str(path), *args], capture_output=True, text=True, timeout=600
    )


def test_a_killed_and_resumed_run_logs_every_event_once_and_tensorboard_has_every_step(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    cfg: dict[str, Any] = {
        "model": str(tiny_model_dir),
        "out": str(run),
        "seed": 3,
        "train": {
            "add": {"tasks": tasks_file(tmp_path / "add.jsonl", "+", 0, 12)},
            "sub": {"tasks": tasks_file(tmp_path / "sub.jsonl", "-", 0, 12)},
        },
        "heldout": {
            "add": {"tasks": tasks_file(tmp_path / "add-h.jsonl", "+", 50, 4)},
            "sub": {"tasks": tasks_file(tmp_path / "sub-h.jsonl", "-", 50, 4)},
        },
        "phases": [
            {"name": "add", "steps": 2, "train": ["add"]},
            {"name": "add+sub", "steps": 2, "train": ["add", "sub"]},
        ],
        "groups_per_step": 2,
        "n": 2,
        "learner": {"lr": 1e-3, "micro_batch_tokens": 2048},
        "agent": {"max_turns": 2, "max_new_tokens": 32, "system_prompt": ""},
        "eval": {"every": 10, "forgetting_threshold": 0.05},
        "checkpoint": {"every": 2, "keep": 3},
        "sandbox": {"pool_size": 2, "timeout_s": 20.0},
        "test": {"forget_after": 2},  # additions come out wrong after update 2: a warning
    }
    first = run_child(cfg, tmp_path / "c.json", "--kill-after", "3")
    assert first.returncode == -9, first.stderr[-3000:]  # killed after update 3; checkpoint 2
    assert max(e.step or 0 for e in read_events(run / "events.jsonl")) == 3
    second = run_child(cfg, tmp_path / "c.json", "--resume")
    assert second.returncode == 0, second.stderr[-3000:]

    events = read_events(run / "events.jsonl")
    # every kind but `alert`, which only a planted condition raises (tests/observe/test_alerts.py),
    # `retry`, which only a lost worker does (tests/trainer/test_train_ray.py), and `validation`
    # and `best`, which only validation sets do (tests/trainer/test_loop.py, keep_best)
    rare = {"alert", "retry", "validation", "best"}
    assert set(KINDS) - rare <= {e.kind for e in events} <= set(KINDS)
    by_kind: dict[str, list[Any]] = {k: [e for e in events if e.kind == k] for k in KINDS}
    starts = by_kind["run_start"]
    assert [(e.step, e.data["resumed"]) for e in starts] == [(0, False), (2, True)]
    assert starts[0].data["config"]["phases"][1]["name"] == "add+sub"
    # how the sandbox's limits held, said once per start of the run's pool
    sandboxes = by_kind["sandbox_start"]
    assert [e.step for e in sandboxes] == [0, 2]
    assert {e.data["memory"] for e in sandboxes} <= {"cgroup_v1", "cgroup_v2", "rlimit_as"}
    assert all(e.data["description"] and isinstance(e.data["seccomp"], bool) for e in sandboxes)
    # the updates after the checkpoint were re-run, and logged once
    for kind in ("update", "sync", "sandbox"):
        assert [e.step for e in by_kind[kind]] == [1, 2, 3, 4], kind
    assert [(e.step, e.data["name"]) for e in by_kind["phase"]] == [(1, "add"), (3, "add+sub")]
    assert [e.step for e in by_kind["checkpoint"]] == [2, 4]
    assert [(e.step, e.data["set"]) for e in by_kind["eval"]] == [
        (0, "add"), (0, "sub"), (2, "add"), (2, "sub"), (4, "add"), (4, "sub"),
    ]  # fmt: skip
    [end] = by_kind["run_end"]
    assert end.step == 4 and end.data["steps"] == 4
    assert any("forgetting: held-out add" in e.data["message"] for e in by_kind["warning"])

    train = [e for e in by_kind["episode"] if e.data["split"] == "train"]
    held = [e for e in by_kind["episode"] if e.data["split"] == "eval"]
    assert Counter(e.step for e in train) == {1: 4, 2: 4, 3: 4, 4: 4}  # groups_per_step * n
    assert Counter(e.step for e in held) == {0: 8, 2: 8, 4: 8}  # 2 sets x 4 tasks
    assert {e.data["set"] for e in train if e.step <= 2} == {"add"}
    for e in train:
        d = e.data
        assert d["staleness"] == 0 and d["policy_version"] >= 0  # on-policy
        assert len(d["gen_s"]) == d["turns"] >= 1 and d["model_tokens"] > 0
        assert d["tags"][0] == "arith" and d["domain"] == "math"
    assert all(e.data["staleness"] is None for e in held)
    assert any(e.data["success"] for e in train) and any(not e.data["success"] for e in train)

    update = by_kind["update"][-1].data
    assert update["phase"] == "add+sub" and update["episodes"] == 4
    assert update["staleness"] == {"0": 4}
    assert update["tokens_per_s"] > 0 and "loss" in update["learner"]
    sandbox = by_kind["sandbox"][0].data
    assert sandbox["cells"] >= 2 and 0.0 <= sandbox["busy_fraction"] <= 1.0

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/success")] == [1, 2, 3, 4]
    infra = acc.Scalars("train/infra_failures")  # left out of train/success: none here
    assert [(e.step, e.value) for e in infra] == [(1, 0.0), (2, 0.0), (3, 0.0), (4, 0.0)]
    assert [e.step for e in acc.Scalars("eval/add/success")] == [0, 2, 4]
    assert [e.step for e in acc.Scalars("learner/loss")] == [1, 2, 3, 4]
    assert {"train/success/tag/add", "train/success/tag/sub", "time/rollout_s"} <= set(
        acc.Tags()["scalars"]
    )
    assert [h.step for h in acc.Histograms("reward/all")] == [1, 2, 3, 4]
