"""The whole circle as a user runs it, each command a real process: `honing train` a few steps →
`honing export` → `honing serve` → `honing eval --policy openai:URL` gives the same results as
`honing eval --policy model:EXPORT` in process (greedy, so every episode must match, not only the
success rate)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.dtype  # run again under each forced auto dtype (make test)

HONING = [sys.executable, "-m", "honing"]
URL = re.compile(r"at (http://\S+/v1)")


def honing(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HONING, *args], capture_output=True, text=True, timeout=600)


def write_run_config(
    tmp: Path, model: Path, math_tasks: Callable[[Path, int], Path],
    tiny_run_config: Callable[..., dict[str, Any]],
) -> tuple[Path, Path]:  # fmt: skip
    tasks = math_tasks(tmp, 8)
    agent = {"max_turns": 2, "max_new_tokens": 12, "system_prompt": ""}
    config = tiny_run_config("circle", model, tasks, agent=agent, checkpoint={"every": 1})
    path = tmp / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, tasks


@pytest.fixture(scope="module")
def exported(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path,
    math_tasks: Callable[[Path, int], Path], tiny_run_config: Callable[..., dict[str, Any]],
) -> tuple[Path, Path]:  # fmt: skip
    tmp = tmp_path_factory.mktemp("circle")
    config, tasks = write_run_config(tmp, tiny_model_dir, math_tasks, tiny_run_config)
    run = tmp / "run"
    trained = honing("train", str(config), f"out={run}", "--quiet")
    assert trained.returncode == 0, trained.stderr[-3000:]
    out = tmp / "export"
    proc = honing("export", str(run), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    return out, tasks


@pytest.fixture()
def served(exported: tuple[Path, Path]) -> Iterator[str]:
    out, _ = exported
    proc = subprocess.Popen([*HONING, "serve", str(out), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ})  # fmt: skip
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 180
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            match = URL.search(line)
            url = match.group(1) if match else None
        assert url is not None, proc.stderr.read() if proc.stderr else "no output"
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def evaluate(policy: str, tasks: Path) -> dict[str, Any]:
    """`honing eval` with no agent flags: the export's own settings (2 turns of 12 tokens, the
    tool descriptions alone as system prompt), read from its honing_agent.json or, through the
    server, from /v1/models."""
    proc = honing("eval", "--tasks", str(tasks), "--policy", policy, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = "2 turn(s) of at most 12 tokens, system prompt: tool descriptions only"
    assert "agent settings from " in proc.stderr and said in proc.stderr, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """What must match between the two policies: everything but names and timings."""
    drop = {"policy", "elapsed_s"}
    return {k: v for k, v in report.items() if k not in drop}


def test_train_export_serve_eval_matches_in_process(
    exported: tuple[Path, Path], served: str
) -> None:
    out, tasks = exported
    assert (out / "README.md").is_file() and (out / "model.safetensors").is_file()
    remote = evaluate(f"openai:{served}", tasks)
    local = evaluate(f"model:{out}", tasks)
    assert remote["end_to_end"]["total"] == 8
    assert comparable(remote) == comparable(local)


def test_the_export_loads_with_transformers_and_differs_from_the_base(
    exported: tuple[Path, Path], tiny_model_dir: Path
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    out, _ = exported
    trained = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        a, b = trained(ids).logits, base(ids).logits
    assert not torch.allclose(a, b), "the export holds the base weights, not the trained ones"


def assistant_texts(run: Path) -> dict[str, list[str]]:
    from honing.store import read_trajectories

    return {t.task_id: [turn.text for turn in t.turns if turn.role == "assistant"]
            for t in read_trajectories(run)}  # fmt: skip


def test_served_and_in_process_models_write_the_same_words(
    exported: tuple[Path, Path], served: str, tmp_path: Path
) -> None:
    """Greedy rollouts through the server (chat mode: messages and tools over HTTP, the server
    renders the template) and in process (token mode) produce the same text, turn by turn."""
    out, tasks = exported
    texts = {}
    for name, model in (("remote", f"openai:{served}"), ("local", str(out))):
        proc = honing("rollout", "--tasks", str(tasks), "--model", model, "--out",
                      str(tmp_path / name), "--temperature", "0", "--max-turns", "2",
                      "--max-new-tokens", "12", "--quiet")  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        texts[name] = assistant_texts(tmp_path / name)
    assert len(texts["local"]) == 8
    assert all(turns and all(turns) for turns in texts["local"].values())
    assert texts["remote"] == texts["local"]


def test_flags_override_the_exports_agent_settings(exported: tuple[Path, Path]) -> None:
    out, tasks = exported
    proc = honing("eval", "--tasks", str(tasks), "--policy", f"model:{out}", "--json",
                  "--max-steps", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(flags override them)" in proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["trajectory"]["mean_steps"] == 1.0  # one turn, not the export's two
