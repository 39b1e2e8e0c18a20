"""A run decides its precision once and writes it down (config.yaml, events, result.json, the
report), the start-up check passes with the defaults, a mixed setup the config states is measured
and shown without a warning, and an engine that samples in a dtype the run did not choose is."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from honing.report import headline, load_run
from honing.rollout.engines.hf import HFEngine
from honing.trainer.loop import train
from honing.trainer.precision import MATCH_THRESHOLD
from honing.trainer.run_config import TrainConfig

pytestmark = pytest.mark.dtype


@pytest.fixture(scope="module")
def sharp_model_dir(make_random_llama: Callable[[str, float], Path]) -> Path:
    """A 2-layer random Llama with large logits (initialiser std 1.0): rounding it to bf16 moves
    its logprobs by far more than the start-up check allows, so a mismatch is certain."""
    return make_random_llama("sharp-llama", 1.0)


def run_config(tmp_path: Path, model: Path, **settings: Any) -> TrainConfig:
    tasks = tmp_path / "tasks.jsonl"
    rows = [{"id": f"m{i}", "domain": "math", "prompt": f"What is {i} + {i}?",
             "answer": str(2 * i)} for i in range(1, 3)]  # fmt: skip
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    values: dict[str, Any] = {
        "name": "precision",
        "model": str(model),
        "out": str(tmp_path / "run"),
        "train": {"m": {"tasks": str(tasks)}},
        "steps": 1,
        "groups_per_step": 2,
        "n": 2,
        "agent": {"max_turns": 1, "max_new_tokens": 12, "system_prompt": ""},
        "sandbox": {"pool_size": 1, "timeout_s": 20.0},
        "observe": {"tensorboard": False},
        **settings,
    }
    return TrainConfig.model_validate(values)


def events(run: Path, kind: str) -> list[dict[str, Any]]:
    lines = (run / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def mismatch_warnings(run: Path) -> list[str]:
    return [e["message"] for e in events(run, "warning") if "disagree" in e["message"]]


async def test_a_run_writes_its_precision_down_and_passes_the_startup_check(
    tmp_path: Path, sharp_model_dir: Path
) -> None:
    await train(run_config(tmp_path, sharp_model_dir))
    run = tmp_path / "run"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["engine"]["dtype"], saved["learner"]["dtype"]) == ("float32", "float32")
    result = json.loads((run / "result.json").read_text())
    assert result["precision"]["engine"] == result["precision"]["learner"] == "float32"
    assert result["precision"]["mixed"] is False
    assert result["logprob_check"]["tokens"] > 0
    assert result["logprob_check"]["max_abs_diff"] < MATCH_THRESHOLD
    [check] = events(run, "logprob_check")
    assert check["passed"] is True and check["engine"] == check["learner"] == "float32"
    [start] = events(run, "run_start")
    assert start["precision"]["engine"] == "float32"
    assert mismatch_warnings(run) == []
    data = load_run(run)
    assert data.info.precision == "float32 (sampling and learning)"
    assert data.info.logprob_check.endswith("(passed)")
    assert re.search(r"(s|min), float32; no held-out set", headline(data))  # the numerics


async def test_a_stated_mixed_setup_is_measured_and_shown_without_a_warning(
    tmp_path: Path, sharp_model_dir: Path
) -> None:
    settings = run_config(
        tmp_path, sharp_model_dir, engine={"dtype": "bfloat16"}, learner={"dtype": "float32"}
    )
    await train(settings)
    run = tmp_path / "run"
    result = json.loads((run / "result.json").read_text())
    assert (result["precision"]["engine"], result["precision"]["learner"]) == (
        "bfloat16",
        "float32",
    )
    assert result["precision"]["mixed"] is True
    [check] = events(run, "logprob_check")
    assert check["mixed"] is True and check["passed"] is False  # bf16 rounding: a real gap
    assert check["max_abs_diff"] == result["logprob_check"]["max_abs_diff"] > MATCH_THRESHOLD
    assert mismatch_warnings(run) == []  # asked for: shown, not warned about
    data = load_run(run)
    assert data.info.precision == "mixed: engine bfloat16, learner float32"
    assert ", mixed: engine bfloat16, learner float32; no held-out set" in headline(data)
    assert data.info.logprob_check.endswith("(over the threshold)")


async def test_an_engine_in_a_dtype_the_run_did_not_choose_is_warned_about(
    tmp_path: Path, sharp_model_dir: Path
) -> None:
    async with HFEngine(sharp_model_dir, dtype="bfloat16", max_batch=4, seed=0) as engine:
        await train(run_config(tmp_path, sharp_model_dir), engine=engine)
    run = tmp_path / "run"
    [warning] = mismatch_warnings(run)
    assert "check the engine's dtype (this run's is float32)" in warning
    [check] = events(run, "logprob_check")
    assert check["passed"] is False and check["mixed"] is False
