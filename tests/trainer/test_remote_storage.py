"""A run's copy at a URL (honing.trainer.remote): the commit protocol on memory:// (an interrupted
upload is invisible, the latest commit wins, a short file is named), the mirror's push and pull,
and a tiny training run mirrored to a real S3-compatible server (moto, on loopback), crashed
after a checkpoint and resumed from the URL in a fresh directory to the straight run's records,
then exported to the server."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from honing.errors import ConfigError, ExportError, RemoteError
from honing.trainer.remote import (
    COMMIT_FILE,
    Location,
    RemoteSettings,
    RunMirror,
    commit_dir,
    publish_dir,
    read_commit,
    read_published,
)
from honing.trainer.run_config import TrainConfig


@pytest.fixture(params=["memory", "file"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh folder of the process's in-memory filesystem (removed afterwards), or of the
    local one by a file:// URL (its uploads go through a temporary name and a rename)."""
    if request.param == "file":
        yield f"file://{tmp_path}/remote"
        return
    path = f"/honing-test-{secrets.token_hex(4)}"
    yield f"memory://{path}"
    fs = fsspec.filesystem("memory")
    if fs.exists(path):
        fs.rm(path, recursive=True)


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


def checkpoint(run: Path, step: int, weights: bytes = b"w" * 10) -> Path:
    """A stand-in for honing.trainer.checkpoint's layout: the mirror only moves its files."""
    path = run / "checkpoints" / f"step-{step:08d}"
    write(path / "learner" / "model.safetensors", weights)
    write(path / "meta.json", json.dumps({"step": step}))
    return path


def fake_run(run: Path) -> Path:
    write(run / "config.yaml", "out: x\n")
    write(run / "metrics.jsonl", '{"step": 1}\n{"step": 2}\n')
    write(run / "trajectories" / "part-00000.parquet", b"shard0")
    write(run / "trajectories" / ".lock", "")
    write(run / "weights" / "model.safetensors", b"staged")
    checkpoint(run, 2)
    return run


# -- the commit protocol --------------------------------------------------------------------


def test_a_directory_is_visible_only_once_its_commit_record_is_there(
    tmp_path: Path, url: str
) -> None:
    local = write(tmp_path / "d" / "a" / "b.bin", b"12345").parent.parent
    write(local / "c.txt", "hi")
    location = Location(url)
    for name in ("a/b.bin", "c.txt"):  # an upload interrupted before its record
        location.upload(local / name, f"x/{name}")
    assert read_commit(location, "x") is None
    record = commit_dir(location, local, "x")
    assert record.files == {"a/b.bin": 5, "c.txt": 2}
    assert read_commit(location, "x") == record


def test_a_short_file_makes_a_checkpoint_uncommitted_and_the_error_names_its_url(
    tmp_path: Path, url: str
) -> None:
    run = fake_run(tmp_path / "run")
    checkpoint(run, 4)
    mirror = RunMirror.open(RemoteSettings(url=url))
    mirror.push(run)
    assert mirror.latest() is not None and mirror.latest().step == 4  # type: ignore[union-attr]
    location = Location(url)
    location.write_bytes("checkpoints/step-00000004/learner/model.safetensors", b"short")
    with pytest.raises(RemoteError) as caught:
        read_commit(location, "checkpoints/step-00000004")
    message = str(caught.value)
    assert f"{url}/checkpoints/step-00000004/learner/model.safetensors is 5 bytes" in message
    assert "lists 10" in message and "not a complete commit" in message
    again = RunMirror.open(RemoteSettings(url=url))  # the reader falls back to step 2
    assert sorted(again.committed) == ["step-00000002"]
    assert again.latest().step == 2  # type: ignore[union-attr]


def test_the_latest_commit_wins_and_an_uncommitted_later_step_is_ignored(
    tmp_path: Path, url: str
) -> None:
    run = fake_run(tmp_path / "run")
    checkpoint(run, 6)
    mirror = RunMirror.open(RemoteSettings(url=url))
    mirror.push(run)
    location = Location(url)  # a step 8 whose upload died before its record
    location.upload(run / "checkpoints" / "step-00000006" / "meta.json",
                    "checkpoints/step-00000008/meta.json")  # fmt: skip
    reader = RunMirror.open(RemoteSettings(url=url))
    assert [c.step for c in sorted(reader.committed.values(), key=lambda c: c.step)] == [2, 6]
    assert reader.latest().step == 6  # type: ignore[union-attr]
    assert reader.stale == {"step-00000008"}
    reader.push(run)  # the writer's next push clears what the dead upload left
    assert "checkpoints/step-00000008/meta.json" not in location.files()


# -- the mirror ------------------------------------------------------------------------------


def test_push_mirrors_the_run_and_pull_restores_it_in_a_fresh_directory(
    tmp_path: Path, url: str
) -> None:
    run = fake_run(tmp_path / "run")
    mirror = RunMirror.open(RemoteSettings(url=url))
    mirror.push(run)
    files = Location(url).files()
    assert set(files) == {
        "config.yaml",
        "metrics.jsonl",
        "trajectories/part-00000.parquet",
        "checkpoints/step-00000002/learner/model.safetensors",
        "checkpoints/step-00000002/meta.json",
        f"checkpoints/step-00000002/{COMMIT_FILE}",
    }  # no lock file, no staged weights
    assert mirror.push(run) == 0  # nothing changed: nothing sent

    checkpoint(run, 4)  # a new checkpoint; step 2 pruned; a shard dropped by a rewind
    (run / "checkpoints" / "step-00000002" / "meta.json").unlink()
    (run / "checkpoints" / "step-00000002" / "learner" / "model.safetensors").unlink()
    write(run / "metrics.jsonl", '{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4}\n')
    (run / "trajectories" / "part-00000.parquet").unlink()
    write(run / "trajectories" / "part-00001.parquet", b"shard1")
    mirror.push(run)
    files = Location(url).files()
    assert not any(f.startswith("checkpoints/step-00000002") for f in files)
    assert "trajectories/part-00000.parquet" not in files
    assert files["metrics.jsonl"] == (run / "metrics.jsonl").stat().st_size

    fresh = tmp_path / "fresh"
    latest = RunMirror.open(RemoteSettings(url=url)).pull(fresh)
    assert latest is not None and latest.step == 4
    for name in ("config.yaml", "metrics.jsonl", "trajectories/part-00001.parquet",
                 "checkpoints/step-00000004/learner/model.safetensors"):  # fmt: skip
        assert (fresh / name).read_bytes() == (run / name).read_bytes(), name
    assert not (fresh / "checkpoints" / "step-00000004" / COMMIT_FILE).exists()


def test_a_resume_refuses_a_local_copy_older_than_the_url(tmp_path: Path, url: str) -> None:
    run = fake_run(tmp_path / "run")
    checkpoint(run, 4)
    RunMirror.open(RemoteSettings(url=url)).push(run)
    old = fake_run(tmp_path / "old")  # holds step 2 only
    with pytest.raises(RemoteError, match=r"holds checkpoint step 4, newer than .*step 2"):
        RunMirror.open(RemoteSettings(url=url)).resume_into(old)
    empty = Location(f"{url}-none")
    with pytest.raises(RemoteError, match=r"no config\.yaml"):
        RunMirror(empty).pull(tmp_path / "x")


def test_publish_never_overwrites_and_its_reader_checks_the_commit(
    tmp_path: Path, url: str
) -> None:
    export = write(tmp_path / "export" / "model.safetensors", b"weights").parent
    write(export / "config.json", "{}")
    assert publish_dir(export, f"{url}/export") == f"{url}/export"
    assert read_published(f"{url}/export").files == {"config.json": 2, "model.safetensors": 7}
    with pytest.raises(RemoteError, match="not empty"):
        publish_dir(export, f"{url}/export")
    Location(f"{url}/half").upload(export / "config.json", "config.json")
    with pytest.raises(RemoteError, match=f"{re.escape(url)}/half: no {COMMIT_FILE}"):
        read_published(f"{url}/half")


def test_settings_read_a_plain_url_refuse_a_url_as_out_and_name_a_missing_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = {"out": str(tmp_path / "run"), "train": {"m": {"tasks": "synthetic-math"}}, "steps": 1}
    cfg = TrainConfig.model_validate({**base, "remote": "s3://bucket/runs/x/"})
    assert cfg.remote == RemoteSettings(url="s3://bucket/runs/x")
    with pytest.raises(ValueError, match="out=LOCAL_DIR and remote=s3://bucket/x"):
        TrainConfig.model_validate({**base, "out": "s3://bucket/x"})
    with pytest.raises(ValueError, match="not a URL"):
        RemoteSettings(url="bucket/x")

    def no_s3fs(url: str, **options: Any) -> Any:
        raise ImportError("Install s3fs to access S3")

    monkeypatch.setattr(fsspec.core, "url_to_fs", no_s3fs)
    with pytest.raises(ConfigError, match=r"s3://bucket/x: .*pip install 'honing\[s3\]'"):
        Location("s3://bucket/x")


# -- a real run against a real S3-compatible server ------------------------------------------

QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 with a bucket `runs`; its endpoint URL."""
    pytest.importorskip("s3fs")
    server_module = pytest.importorskip("moto.server")
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    port = free_port()
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        fsspec.filesystem("s3", client_kwargs={"endpoint_url": endpoint}).mkdir("runs")
        yield endpoint
    finally:
        server.stop()


class Crash(Exception):
    """Stands for the machine going away right after an update (before its checkpoint)."""


def test_a_run_mirrored_to_s3_resumes_from_the_url_in_a_fresh_directory(
    tmp_path: Path, tiny_model_dir: Path, s3: str, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    import torch

    from honing.rollout.engines.base import Prompt
    from honing.rollout.engines.scripted import ScriptedEngine
    from honing.rollout.models import load_tokenizer
    from honing.store import read_trajectories
    from honing.trainer.loop import train
    from honing.trainer.run_config import load_remote
    from honing.trainer.run_dir import UpdateRecord

    tokenizer = load_tokenizer(tiny_model_dir)

    def respond(prompt: Prompt, seed: int) -> str:
        a, b = QUESTION.findall(tokenizer.decode(prompt.token_ids or []))[-1]
        value = int(a) + int(b) + (seed % 3 == 0)  # a third of the answers wrong: a signal
        return f'<tool_call>{{"name": "answer", "arguments": {{"value": "{value}"}}}}</tool_call>'

    def engine() -> ScriptedEngine:
        return ScriptedEngine(respond, tokenizer=tokenizer, by_seed=True)

    tasks = tmp_path / "add.jsonl"
    tasks.write_text("".join(
        json.dumps({"id": f"a{i}", "domain": "math", "prompt": f"What is {10 + 7 * i} + {3 + i}?",
                    "answer": str(13 + 8 * i)}) + "\n" for i in range(8)))  # fmt: skip
    url = "s3://runs/tiny"
    options = {"client_kwargs": {"endpoint_url": s3}}

    def config(out: Path, **extra: Any) -> TrainConfig:
        return TrainConfig.model_validate({
            "model": str(tiny_model_dir), "out": str(out), "seed": 3, "deterministic": True,
            "train": {"add": {"tasks": str(tasks)}}, "steps": 3, "groups_per_step": 2, "n": 2,
            "learner": {"lr": 1e-3, "micro_batch_tokens": 2048},
            "agent": {"max_turns": 1, "max_new_tokens": 32, "system_prompt": ""},
            "eval": {"before": False}, "checkpoint": {"every": 2, "keep": 3},
            "sandbox": {"pool_size": 1, "timeout_s": 20.0}, **extra,
        })  # fmt: skip

    def crash_after(step: int) -> Any:
        def on_step(record: UpdateRecord) -> None:
            if record.step == step:
                raise Crash

        return on_step

    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        asyncio.run(train(config(tmp_path / "straight"), engine=engine()))
        mirrored = config(tmp_path / "first", remote={"url": url, "storage_options": options})
        with pytest.raises(Crash):  # after update 3, before its checkpoint: resumes at step 2
            asyncio.run(train(mirrored, engine=engine(), on_step=crash_after(3)))
        # `honing train --resume s3://runs/tiny out=DIR`, on a machine without the first dir
        fresh = tmp_path / "second"
        endpoint = f"remote.storage_options.client_kwargs.endpoint_url={s3}"
        resumed = load_remote(url, [f"out={fresh}", endpoint])
        assert resumed.out == fresh and resumed.remote is not None
        assert resumed.remote.url == url and resumed.remote.storage_options == options
        with caplog.at_level(logging.INFO, logger="honing"):
            asyncio.run(train(resumed, resume=True, engine=engine()))
    finally:
        torch.use_deterministic_algorithms(deterministic)

    def records(path: Path) -> list[dict[str, Any]]:
        timing = ("rollout_s", "update_s", "sync_s", "tokens_per_s", "episodes_per_s", "time")
        out = []
        for line in path.read_text().splitlines():
            record = {k: v for k, v in json.loads(line).items() if k not in timing}
            record["learner"] = {k: v for k, v in record["learner"].items() if k != "seconds"}
            out.append(record)
        return out

    assert f"remote: pulled {url} into {fresh}" in caplog.text
    assert re.search(r"resuming .*second at step 2 \(step-00000002\)", caplog.text)
    straight = records(tmp_path / "straight" / "metrics.jsonl")
    assert [r["step"] for r in straight] == [1, 2, 3]
    assert records(fresh / "metrics.jsonl") == straight
    assert any(r["learner"].get("stepped") for r in straight)  # the updates trained
    keyed = [[(t.task_id, t.sample, t.reward) for t in read_trajectories(run)]
             for run in (tmp_path / "straight", fresh)]  # fmt: skip
    assert keyed[0] == keyed[1] and len(keyed[0]) == 3 * 2 * 2

    # the URL holds the finished run: its logs, its store, checkpoints 2 and 3 committed
    mirror = RunMirror.open(RemoteSettings(url=url, storage_options=options))
    assert sorted(c.step for c in mirror.committed.values()) == [2, 3]
    location = Location(url, options)
    assert location.read_bytes("metrics.jsonl") == (fresh / "metrics.jsonl").read_bytes()
    assert location.read_bytes("result.json") == (fresh / "result.json").read_bytes()
    shards = sorted(f for f in location.files() if f.startswith("trajectories/part-"))
    assert shards == sorted(f"trajectories/{p.name}"
                            for p in (fresh / "trajectories").glob("part-*"))  # fmt: skip
    # `honing export RUN --out s3://...`: the export's files, then its commit record
    from honing.export import export_run_to_url

    exported = export_run_to_url(fresh, "s3://runs/exports/tiny")
    assert exported.url == "s3://runs/exports/tiny" and exported.step == 3
    published = read_published("s3://runs/exports/tiny", options)
    assert "config.json" in published.files and "README.md" in published.files
    assert {f.path.as_posix(): f.bytes for f in exported.files} == published.files
    with pytest.raises(ExportError, match="not empty"):
        export_run_to_url(fresh, "s3://runs/exports/tiny")
    # the first directory is a stale copy now: resuming it would overwrite the URL's progress
    with pytest.raises(RemoteError, match="holds checkpoint step 3, newer than"):
        mirror.resume_into(tmp_path / "first")
