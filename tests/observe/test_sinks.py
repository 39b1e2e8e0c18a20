"""The metric sinks, read back with the real packages: TensorBoard's EventAccumulator, MLflow's
client on the file store, and the records of the W&B offline run file. No network, no process
left behind."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from honing.errors import ConfigError
from honing.observe.sinks import (
    MlflowSink,
    ObserveConfig,
    TensorBoardSink,
    WandbSink,
    close_sinks,
    flatten,
    log_to,
    make_sinks,
)

PARAMS = {"name": "t", "learner": {"lr": 1e-5, "loss": "grpo"}, "train": {"add": {"count": 3}}}


def children() -> list[str]:
    """Processes this test process started that are still alive."""
    out = subprocess.run(
        ["ps", "--ppid", str(os.getpid()), "-o", "pid=,comm="], capture_output=True, text=True
    ).stdout
    return [line for line in out.splitlines() if "ps" not in line.split()[-1]]


def test_tensorboard_scalars_and_histograms_read_back(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path / "tb")
    sink.log(1, {"train/success": 0.25, "learner/loss": 1.5}, {"reward/all": [0.0, 1.0, 1.0]})
    sink.log(2, {"train/success": 0.5}, {"reward/all": []})
    sink.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0, "scalars": 0})
    acc.Reload()
    tags = acc.Tags()
    assert {"train/success", "learner/loss"} <= set(tags["scalars"])
    assert [(e.step, e.value) for e in acc.Scalars("train/success")] == [(1, 0.25), (2, 0.5)]
    [hist] = acc.Histograms("reward/all")  # the empty one was left out
    assert hist.step == 1
    assert hist.histogram_value.num == 3 and hist.histogram_value.sum == 2.0


def test_tensorboard_resume_purges_the_steps_after_the_checkpoint(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first = TensorBoardSink(tmp_path / "tb")
    for step in (1, 2, 3):
        first.log(step, {"train/reward": float(step)}, {})
    first.close()
    second = TensorBoardSink(tmp_path / "tb", resume_step=2)  # resumed from checkpoint 2
    second.log(3, {"train/reward": 30.0}, {})
    second.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    values = [(e.step, e.value) for e in acc.Scalars("train/reward")]
    assert values == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_mlflow_file_store_has_the_params_and_metrics(tmp_path: Path) -> None:
    sink = MlflowSink(tmp_path / "mlflow", experiment="honing", run_name="t", params=PARAMS)
    from mlflow.tracking import MlflowClient

    log_to([sink], 1, {"train/success": 0.25, "eval/add/success": 0.5}, {"reward/all": [1.0]})
    log_to([sink], 2, {"train/success": 0.75})
    sink.close()
    sink.close()  # idempotent
    client = MlflowClient(tracking_uri=(tmp_path / "mlflow").resolve().as_uri())
    run = client.get_run(sink.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "t"
    assert run.data.params["learner.lr"] == "1e-05"
    assert run.data.params["train.add.count"] == "3"
    history = client.get_metric_history(sink.run_id, "train/success")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.25), (2, 0.75)]
    assert client.get_metric_history(sink.run_id, "eval/add/success")[0].value == 0.5

    again = MlflowSink(tmp_path / "mlflow", experiment="honing", run_name="t", params=PARAMS)
    assert again.run_id == sink.run_id  # a resumed run continues the same MLflow run
    again.close()


def wandb_records(run_file: Path) -> list[Any]:
    """The protobuf records of a W&B run file (a LevelDB-style log: 7-byte header, 32 KiB blocks,
    each chunk `crc32 | length (2 bytes LE) | type`; types 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    block, pos, records, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()  # type: ignore[attr-defined]
            record.ParseFromString(pending)
            records.append(record)
    return records


def test_wandb_offline_run_holds_history_and_config_and_leaves_no_process(tmp_path: Path) -> None:
    import json

    sink = WandbSink(tmp_path / "wandb", project="honing", run_name="t", params=PARAMS)
    log_to([sink], 1, {"train/success": 0.25}, {"reward/all": [0.0, 1.0]})
    log_to([sink], 2, {"train/success": 0.75}, {})
    sink.close()
    assert not [c for c in children() if "wandb" in c], children()
    [run_file] = (tmp_path / "wandb").glob("wandb/offline-run-*/run-*.wandb")
    history: dict[int, dict[str, Any]] = {}
    config: dict[str, Any] = {}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                     for i in record.history.item}  # fmt: skip
            history[items["_step"]] = items
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "run":
            assert record.run.display_name == "t" and record.run.project == "honing"
            config.update({i.key: json.loads(i.value_json) for i in record.run.config.update})
    assert history[1]["train/success"] == 0.25 and history[2]["train/success"] == 0.75
    assert history[1]["reward/all/_type"] == "histogram"  # W&B flattens it into the history
    assert sum(history[1]["reward/all/values"]) == 2
    assert config["learner"] == {"lr": 1e-5, "loss": "grpo"}


def test_make_sinks_follows_the_config_and_missing_packages_say_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ObserveConfig() == ObserveConfig(tensorboard=True, mlflow=False, wandb=False)
    sinks = make_sinks(ObserveConfig(), tmp_path, run_name="t", params=PARAMS)
    assert [type(s).__name__ for s in sinks] == ["TensorBoardSink"]
    close_sinks(sinks)
    assert make_sinks(ObserveConfig(tensorboard=False), tmp_path, run_name="t", params={}) == []

    import sys

    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "mlflow.entities", None)
    with pytest.raises(ConfigError, match=r"pip install 'honing\[observe\]'"):
        make_sinks(ObserveConfig(mlflow=True), tmp_path / "x", run_name="t", params={})


def test_flatten_names_nested_keys_with_dots() -> None:
    assert flatten(PARAMS) == {
        "name": "t",
        "learner.lr": "1e-05",
        "learner.loss": "grpo",
        "train.add.count": "3",
    }
