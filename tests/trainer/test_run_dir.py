"""The run directory's owner: its records round-trip, its files are checked and cut back, and
reading a run needs no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from honing.errors import ConfigError
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import (
    CONFIG_FILE,
    DONE_FILE,
    EVALS_FILE,
    METRICS_FILE,
    WARM_DIR,
    EvalPoint,
    RunDir,
    UpdateRecord,
)

RECORD = UpdateRecord(
    step=3,
    phase="main",
    episodes=24,
    success_rate=0.5,
    reward_mean=None,
    infra_errors=1,
    rollout_s=40.0,
    update_s=12.5,
    sync_s=0.25,
    learner={"loss": 0.125, "version": 3.0, "stepped": True},
    signal={"groups": 6.0, "zero_variance": 2.0},
    sources={"math": 6},
    staleness={0: 23},
    tokens_per_s=310.0,
    episodes_per_s=0.6,
    unaided_answers={"math": 0.25},
    time=1_700_000_000.0,
)


def point(step: int, phase: str, name: str = "math") -> EvalPoint:
    return EvalPoint(step=step, phase=phase, set=name, success=0.5, passed=4, total=8,
                     infra_failed=0, seconds=1.0)  # fmt: skip


def test_an_update_record_round_trips_through_json() -> None:
    line = json.loads(json.dumps(RECORD.to_json()))  # as metrics.jsonl holds it
    assert UpdateRecord.from_json(line) == RECORD
    # an `update` event: its time is `t`; an older run's line lacks the newer fields
    event = {k: v for k, v in line.items() if k not in ("time", "sources", "unaided_answers")}
    read = UpdateRecord.from_json({**event, "t": 5.0})
    assert read.time == 5.0 and read.sources == {} and read.staleness == {0: 23}


def test_prepare_writes_the_config_once_and_resume_needs_it(tmp_path: Path) -> None:
    config = TrainConfig(
        model="tiny", out=tmp_path / "run", steps=2, train={"t": {"tasks": "x.jsonl"}}
    )
    with pytest.raises(ConfigError, match="nothing to resume"):
        RunDir.prepare(config, resume=True)
    run = RunDir.prepare(config, resume=False)
    assert (run / CONFIG_FILE).is_file() and run.config() == config
    with pytest.raises(ConfigError, match="already holds a run"):
        RunDir.prepare(config, resume=False)
    assert RunDir.prepare(config, resume=True) == run
    with pytest.raises(ConfigError, match="not a run directory"):
        RunDir.existing(tmp_path)


def test_records_are_appended_read_back_and_cut_back_to_a_checkpoint(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    for step in (1, 2, 3):
        run.append_update(record_at(step))
    kept = [point(0, "before"), point(2, "main")]
    for p in [*kept, point(3, "main")]:
        run.append_eval(p)
    assert [u.step for u in run.updates()] == [1, 2, 3]
    assert run.evals()[1] == kept[1]
    assert run.rewind(2, store_rows=0, evals=kept) == 0  # no store yet: nothing to drop
    assert [u.step for u in run.updates()] == [1, 2]
    assert run.evals() == kept


def test_an_evaluations_episodes_are_cut_back_with_its_point(tmp_path: Path) -> None:
    """Each evaluation's episode store is named by its step, phase and set, and a rewind
    removes the stores of the evaluations it drops (those after the checkpoint), held-out and
    validation alike."""
    run = RunDir(tmp_path)
    kept = [point(0, "warm start"), point(2, "main")]
    dropped = point(3, "main")
    assert run.episodes("eval", 0, "warm start", "math").name == "00000000-warm-start-math"
    assert run.episodes("eval", 0, "before", "math") != run.episodes("eval", 0, "warm start",
                                                                        "math")  # fmt: skip
    for kind in ("eval", "validation"):
        for p in [*kept, dropped]:
            store = run.episodes(kind, p.step, p.phase, p.set)
            store.mkdir(parents=True)
            (store / "store.json").write_text("{}")
    run.rewind(2, store_rows=0, evals=kept, validation=kept[:1])
    names = {kind: sorted(p.name for p in (tmp_path / "episodes" / kind).iterdir())
             for kind in ("eval", "validation")}  # fmt: skip
    assert names == {"eval": ["00000000-warm-start-math", "00000002-main-math"],
                     "validation": ["00000000-warm-start-math"]}  # fmt: skip


def record_at(step: int) -> UpdateRecord:
    return UpdateRecord(**{**RECORD.__dict__, "step": step})


def test_a_damaged_log_line_is_named_and_a_torn_last_one_skipped(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    good = json.dumps(point(0, "before").model_dump(mode="json"))
    (tmp_path / EVALS_FILE).write_text(f"{good}\n{good[:20]}")  # a killed writer's torn line
    assert len(run.evals()) == 1
    (tmp_path / EVALS_FILE).write_text(f"{good[:20]}\n{good}\n")
    with pytest.raises(ConfigError, match=rf"{EVALS_FILE}:1: not a JSON line"):
        run.evals()
    (tmp_path / EVALS_FILE).write_text(json.dumps({"step": 0}) + "\n")
    with pytest.raises(ConfigError, match=rf"{EVALS_FILE}:1: key 'phase': Field required"):
        run.evals()
    (tmp_path / METRICS_FILE).write_text("[1, 2]\n")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        run.updates()


def test_the_warm_model_exists_once_the_warm_start_finished(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    (tmp_path / WARM_DIR / "model").mkdir(parents=True)
    assert run.warm_model() is None  # trained, but not marked done
    (tmp_path / WARM_DIR / DONE_FILE).write_text("{}")
    assert run.warm_model() == tmp_path / WARM_DIR / "model"


def test_reading_a_run_loads_no_torch() -> None:
    code = (
        "import sys, honing.trainer.run_dir, honing.report, honing.trainer.gains;"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
