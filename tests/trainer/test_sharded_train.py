"""`train` at world size 2 (honing.trainer.ranks): two processes over gloo on CPU, started with
torchrun's environment, run sharded_child.py (a seeded scripted run); rank 0 plays the episodes and
the learner is sharded. Its per-update losses and final weights are the one-process run's within
fp32 tolerance, and checkpoints resume across world sizes (2 -> 1 and 1 -> 2)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from test_loop import config, lines

from honing.errors import ConfigError
from honing.trainer.checkpoint import latest_checkpoint
from honing.trainer.config import LearnerConfig
from honing.trainer.distributed import is_sharded, load_sharded
from honing.trainer.learner import Learner
from honing.trainer.ranks import refuse_unsupported
from honing.trainer.run_config import TrainConfig

CHILD = Path(__file__).with_name("sharded_child.py")
TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(cfg_path: Path, world: int, *args: str) -> list[subprocess.CompletedProcess[str]]:
    """sharded_child.py on `cfg_path` in `world` processes (torchrun's variables when world > 1)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if world == 1:
        commands = [(env, [sys.executable, str(CHILD), str(cfg_path), *args])]
    else:
        port = str(_free_port())
        commands = []
        for rank in range(world):
            ranked = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                      "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": port}  # fmt: skip
            commands.append((ranked, [sys.executable, str(CHILD), str(cfg_path), *args]))
    procs = [
        subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for e, cmd in commands
    ]
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT_S)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


def assert_ok(done: list[subprocess.CompletedProcess[str]], steps: int = 2) -> None:
    for rank, proc in enumerate(done):
        assert proc.returncode == 0, (rank, proc.stderr[-4000:])
        assert json.loads(proc.stdout.splitlines()[-1])["steps"] == steps


def final_weights(run_dir: Path, model: Path) -> dict[str, torch.Tensor]:
    """The latest checkpoint's trained weights, whichever kind of learner wrote them."""
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None and checkpoint.name == "step-00000002"
    directory = checkpoint / "learner"
    if not is_sharded(directory):
        return load_file(directory / "model.safetensors")
    meta = json.loads((checkpoint / "meta.json").read_text())
    learner = Learner(model, LearnerConfig.model_validate(meta["learner"]))
    load_sharded(learner, directory)
    return {n: p.detach().clone() for n, p in learner.model.named_parameters()}


def losses(run_dir: Path) -> list[float]:
    return [m["learner"]["loss"] for m in lines(run_dir / "metrics.jsonl")]


def assert_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys() and want
    scale = max(float(t.abs().max()) for t in want.values())
    for name in want:
        diff = float((got[name] - want[name]).abs().max())
        assert torch.allclose(got[name], want[name], atol=1e-5 * scale, rtol=1e-4), (name, diff)


def back_to_step_1(src: Path, dst: Path, cfg: dict[str, Any]) -> Path:
    """A copy of the finished run `src` at `dst` whose latest checkpoint is step 1; its config
    file (out=dst) for a resume."""
    shutil.copytree(src, dst)
    shutil.rmtree(dst / "checkpoints" / "step-00000002")
    (dst / "checkpoints" / "LATEST").write_text("step-00000001\n")
    path = dst.with_suffix(".json")
    path.write_text(json.dumps({**cfg, "out": str(dst)}))
    return path


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same 2-update run in one process and at two ranks, each checkpointed after every
    update; then each resumed from its step-1 checkpoint at the other world size."""
    tmp = tmp_path_factory.mktemp("sharded")
    cfg = config(tmp, tiny_model_dir, tmp / "one", steps=2,
                 learner={"lr": 1e-3, "micro_batch_tokens": 256, "shared_prefix": False},
                 checkpoint={"every": 1, "keep": 3})  # fmt: skip
    out = {"one": tmp / "one", "two": tmp / "two", "model": tiny_model_dir}
    for name, world in (("one", 1), ("two", 2)):
        path = tmp / f"{name}.json"
        path.write_text(json.dumps({**cfg, "out": str(out[name])}))
        assert_ok(run(path, world))
    for src, world, name in (("two", 1, "two_to_one"), ("one", 2, "one_to_two")):
        out[name] = tmp / name
        done = run(back_to_step_1(out[src], out[name], cfg), world, "--resume")
        assert_ok(done)
        assert "at step 1" in done[0].stderr, done[0].stderr[-3000:]
    return out


def test_two_ranks_train_as_one_process(runs: dict[str, Path]) -> None:
    one, two = losses(runs["one"]), losses(runs["two"])
    assert len(one) == 2 and any(abs(x) > 1e-6 for x in one)  # real updates
    assert two == pytest.approx(one, rel=1e-5, abs=1e-7)
    assert is_sharded(runs["two"] / "checkpoints" / "step-00000002" / "learner")
    straight = final_weights(runs["one"], runs["model"])
    assert_close(final_weights(runs["two"], runs["model"]), straight)
    start = load_file(runs["model"] / "model.safetensors")
    assert any(not torch.equal(straight[n], start[n]) for n in start if n in straight)


@pytest.mark.parametrize("name", ["two_to_one", "one_to_two"])
def test_a_checkpoint_resumes_at_the_other_world_size(runs: dict[str, Path], name: str) -> None:
    assert losses(runs[name]) == pytest.approx(losses(runs["one"]), rel=1e-5, abs=1e-7)
    model = runs["model"]
    assert_close(final_weights(runs[name], model), final_weights(runs["one"], model))


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"learner": {"advantage": "gae"}}, "advantage: gae"),
        ({"async": {"max_staleness": 1}, "deterministic": False}, "async.max_staleness: 1"),
        ({"engine": {"url": "http://localhost:8000"}}, "engine.url"),
    ],
)
def test_what_a_sharded_learner_does_not_run_is_refused(
    tmp_path: Path, tiny_model_dir: Path, setting: dict[str, Any], named: str
) -> None:
    cfg = TrainConfig.model_validate({**config(tmp_path, tiny_model_dir, tmp_path), **setting})
    with pytest.raises(ConfigError, match=named):
        refuse_unsupported(cfg)


def test_a_sharded_checkpoint_exports_the_gathered_weights(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    from honing.export.model import export_run

    result = export_run(runs["two"], tmp_path / "export")
    assert result.kind == "full" and result.step == 2
    exported = load_file(tmp_path / "export" / "model.safetensors")
    want = final_weights(runs["two"], runs["model"])
    tied = {n: t for n, t in want.items() if n in exported}
    assert tied and all(torch.equal(exported[n], t) for n, t in tied.items())
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    assert config.get("use_cache") is not False  # exported for generation
