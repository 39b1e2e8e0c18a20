"""Checkpoints on a tiny random Llama: a loaded learner continues bit for bit (full and LoRA, with
and without the checkpoint module), random states round-trip, LATEST and pruning, leftovers of
interrupted saves, corrupt files, mismatched configs, and a save killed with SIGKILL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from learner_helpers import PROMPTS, trajectory
from pydantic import BaseModel

from honing.errors import CheckpointError
from honing.records import Group
from honing.trainer import (
    AdvantageEstimator,
    Learner,
    LearnerConfig,
    LearnerStats,
    LoraSettings,
    checkpoint,
)
from honing.trainer.checkpoint import (
    RngState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)

PROJECT_DIR = Path(__file__).resolve().parents[2]


def make_batches(model_dir: Path, updates: int) -> list[list[Group]]:
    """`updates` batches of two groups of two, each with its own tokens and rewards, and
    near-policy behaviour logprobs (the base model's ± 0.05), fixed once for every learner."""
    gen = torch.Generator().manual_seed(1)
    trajs = []
    for k in range(updates * 4):
        n = 4 + (k * 5) % 9
        ids = torch.randint(10, 4000, (n,), generator=gen).tolist()
        trajs.append(trajectory(PROMPTS[k % 3], ids, float((k * 7) % 3) / 2))
    scorer = Learner(model_dir, LearnerConfig())
    for k, (t, lp) in enumerate(zip(trajs, scorer.logprobs(trajs), strict=True)):
        shift = 0.05 if k % 2 else -0.05
        t.logprobs = [x + shift * m for x, m in zip(lp, t.loss_mask, strict=True)]
    groups = [Group(f"t{i}", f"g{i}", trajs[i : i + 2]) for i in range(0, len(trajs), 2)]
    return [groups[i : i + 2] for i in range(0, len(groups), 2)]


@pytest.fixture(scope="module")
def batches(tiny_model_dir: Path) -> list[list[Group]]:
    return make_batches(tiny_model_dir, 4)


def weights(learner: Learner) -> dict[str, torch.Tensor]:
    """Every trained tensor: the policy's, and the value head's when there is a critic."""
    out = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    if learner.critic is not None:
        out |= {
            f"value_head.{n}": p.detach().clone() for n, p in learner.critic.head.named_parameters()
        }
    return out


def config_for(lora: LoraSettings | None, advantage: AdvantageEstimator = "grpo") -> LearnerConfig:
    # warm-up, cosine decay, weight decay and a KL term: every piece of state a resume must carry
    return LearnerConfig(
        advantage=advantage,
        lr=1e-2 if lora else 1e-3,
        warmup_steps=1,
        schedule="cosine",
        schedule_steps=6,
        weight_decay=0.01,
        kl_coef=0.05,
        micro_batch_tokens=64,  # two or three micro-batches per update
        lora=lora,
    )


def stats_of(stats: LearnerStats) -> dict[str, object]:
    """An update's statistics but its wall-clock time."""
    return {k: getattr(stats, k) for k in stats.__dataclass_fields__ if k != "seconds"}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [n for n in a if not torch.equal(a[n], b[n])]
    assert not different, f"{len(different)} tensors differ, first {different[0]}"


@pytest.mark.parametrize(
    ("lora", "advantage"),
    [
        (None, "grpo"),
        (LoraSettings(r=4, alpha=8), "grpo"),
        (None, "gae"),
        (LoraSettings(r=4, alpha=8), "gae"),
    ],
    ids=["full", "lora", "full-gae", "lora-gae"],
)
def test_a_loaded_learner_continues_bit_for_bit(
    tiny_model_dir: Path,
    tmp_path: Path,
    batches: list[list[Group]],
    lora: LoraSettings | None,
    advantage: AdvantageEstimator,
) -> None:
    config = config_for(lora, advantage)
    first = Learner(tiny_model_dir, config)
    for batch in batches[:2]:
        assert first.update(batch).stepped
    first.save(tmp_path / "learner")
    at_save = weights(first)
    next_stats = stats_of(first.update(batches[2]))
    after_three = weights(first)
    last_stats = stats_of(first.update(batches[3]))
    uninterrupted = weights(first)
    moved = [n for n in at_save if not torch.equal(at_save[n], after_three[n])]
    assert moved  # the updates after the save changed the weights
    if advantage == "gae":  # the value head too, and the losses say it was trained
        assert any(n.startswith("value_head.") for n in moved)
        assert next_stats["value_loss"] != 0.0 and next_stats["value_mean"] != 0.0

    second = Learner(tiny_model_dir, config)
    second.load(tmp_path / "learner")
    assert (second.steps, second.version) == (2, 2)
    assert_same(weights(second), at_save)
    assert stats_of(second.update(batches[2])) == next_stats  # every loss and statistic, exactly
    assert stats_of(second.update(batches[3])) == last_stats
    assert_same(weights(second), uninterrupted)
    assert second.optimizer.param_groups[0]["lr"] == first.optimizer.param_groups[0]["lr"]
    assert (second.steps, second.version) == (first.steps, first.version) == (4, 4)

    # the control: the same weights without the optimiser and schedule state end elsewhere
    third = Learner(tiny_model_dir, config)
    with torch.no_grad():
        for n, p in third.model.named_parameters():
            p.copy_(at_save[n])
        if third.critic is not None:
            for n, p in third.critic.head.named_parameters():
                p.copy_(at_save[f"value_head.{n}"])
    third.update(batches[2])
    after = weights(third)
    assert any(not torch.equal(after[n], after_three[n]) for n in moved)


def test_a_critic_resumes_only_from_its_own_checkpoint(
    tiny_model_dir: Path, tmp_path: Path, batches: list[list[Group]]
) -> None:
    """Its files are checked before anything changes; a group-estimator checkpoint is another
    config; a checkpoint saved before the critic settings existed still loads."""
    config = config_for(None, "gae")
    learner = Learner(tiny_model_dir, config)
    learner.update(batches[0])
    learner.save(tmp_path / "gae")
    assert {"value_head.safetensors", "value_optimizer.pt", "value_scheduler.pt"} <= {
        p.name for p in (tmp_path / "gae").iterdir()
    }
    fresh = Learner(tiny_model_dir, config)
    before = weights(fresh)
    (tmp_path / "gae" / "value_optimizer.pt").unlink()
    with pytest.raises(CheckpointError, match=r"value_optimizer\.pt is missing"):
        fresh.load(tmp_path / "gae")
    assert_same(weights(fresh), before)  # nothing was changed

    Learner(tiny_model_dir, config_for(None)).save(tmp_path / "grpo")
    with pytest.raises(CheckpointError, match="advantage: checkpoint 'grpo', this learner 'gae'"):
        fresh.load(tmp_path / "grpo")

    # an older checkpoint's config does not name gamma, lam, ...: it ran with their defaults
    manifest = json.loads((tmp_path / "grpo" / "learner.json").read_text())
    for key in ("gamma", "lam", "critic_lr", "value_coef", "value_clip"):
        del manifest["config"][key]
    (tmp_path / "grpo" / "learner.json").write_text(json.dumps(manifest))
    Learner(tiny_model_dir, config_for(None)).load(tmp_path / "grpo")


def test_a_resumed_run_with_lora_dropout_is_bit_exact_through_the_checkpoint(
    tiny_model_dir: Path, tmp_path: Path, batches: list[list[Group]]
) -> None:
    """Dropout draws from torch's global generator: only the restored RNG makes this exact."""
    config = config_for(LoraSettings(r=4, alpha=8, dropout=0.3))
    torch.manual_seed(5)
    first = Learner(tiny_model_dir, config)
    first.update(batches[0])
    path = save_checkpoint(tmp_path, 1, first, {"cursor": 1})
    first.update(batches[1])
    uninterrupted = weights(first)

    torch.manual_seed(123)  # a restarted process: the generators are anywhere
    second = Learner(tiny_model_dir, config)
    loaded = load_checkpoint(path, second)
    assert loaded.step == 1 and loaded.loop_state == {"cursor": 1}
    second.update(batches[1])
    assert_same(weights(second), uninterrupted)


def test_random_states_round_trip(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    np.random.randn()  # leaves a cached gaussian in numpy's state
    RngState.capture().save(tmp_path / "rng.pt")
    expected = (random.random(), np.random.randn(), torch.rand(4))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    RngState.load(tmp_path / "rng.pt").restore()
    got = (random.random(), np.random.randn(), torch.rand(4))
    assert got[:2] == expected[:2]
    assert torch.equal(got[2], expected[2])


@pytest.fixture(scope="module")
def learner(tiny_model_dir: Path) -> Learner:
    return Learner(tiny_model_dir, LearnerConfig())


def names(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").iterdir())


def test_save_points_latest_at_the_new_checkpoint_and_prunes(
    learner: Learner, tmp_path: Path
) -> None:
    assert latest_checkpoint(tmp_path) is None
    for step in range(1, 5):
        path = save_checkpoint(tmp_path, step, learner, {"cursor": step * 10}, keep=2)
        assert path == tmp_path / "checkpoints" / f"step-{step:08d}"
        assert latest_checkpoint(tmp_path) == path
    assert names(tmp_path) == ["LATEST", "step-00000003", "step-00000004"]
    assert (tmp_path / "checkpoints" / "LATEST").read_text().strip() == "step-00000004"
    meta = json.loads((tmp_path / "checkpoints" / "step-00000004" / "meta.json").read_text())
    assert meta["step"] == 4 and meta["learner"] == learner.config.model_dump(mode="json")
    assert "learner/model.safetensors" in meta["files"]

    torch.manual_seed(0)
    path = save_checkpoint(tmp_path, 5, learner, {"cursor": 50}, keep=1)
    expected = torch.rand(3)
    assert names(tmp_path) == ["LATEST", "step-00000005"]
    loaded = load_checkpoint(path, learner)
    assert (loaded.step, loaded.loop_state) == (5, {"cursor": 50})
    assert torch.equal(torch.rand(3), expected)  # the generators are back where the save was


def test_saving_an_earlier_step_replaces_it_and_drops_the_abandoned_later_ones(
    learner: Learner, tmp_path: Path
) -> None:
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, learner, {"cursor": step}, keep=None)
    path = save_checkpoint(tmp_path, 2, learner, {"cursor": 22}, keep=None)
    assert names(tmp_path) == ["LATEST", "step-00000001", "step-00000002"]
    assert latest_checkpoint(tmp_path) == path
    assert load_checkpoint(path, learner).loop_state == {"cursor": 22}


def test_latest_follows_the_pointer_and_falls_back_to_the_newest_complete(
    learner: Learner, tmp_path: Path
) -> None:
    one = save_checkpoint(tmp_path, 1, learner, {}, keep=None)
    two = save_checkpoint(tmp_path, 2, learner, {}, keep=None)
    root = tmp_path / "checkpoints"
    (root / "LATEST").write_text("step-00000001\n")  # killed between the rename and the pointer
    assert latest_checkpoint(tmp_path) == one
    (root / "LATEST").write_text("step-00000007\n")  # names nothing
    assert latest_checkpoint(tmp_path) == two
    (root / "step-00000009").mkdir()  # no meta.json: not a checkpoint
    (root / "LATEST").unlink()
    assert latest_checkpoint(tmp_path) == two


def dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_leftovers_of_interrupted_saves_are_ignored_and_removed(
    learner: Learner, tmp_path: Path
) -> None:
    good = save_checkpoint(tmp_path, 1, learner, {"cursor": 1})
    root = tmp_path / "checkpoints"
    dead = dead_pid()
    leftover = root / f".tmp-step-00000002-{dead}-0123abcd"
    (leftover / "learner").mkdir(parents=True)
    (leftover / "meta.json").write_text("{}")
    stray_pointer = root / f".tmp-LATEST-{dead}-89abcdef"
    stray_pointer.write_text("step-00000002\n")
    busy = root / f".tmp-step-00000003-{os.getpid()}-fedcba98"  # a live writer's: left alone
    busy.mkdir()
    assert latest_checkpoint(tmp_path) == good
    assert not leftover.exists() and not stray_pointer.exists()
    assert busy.exists()


def test_corrupt_or_missing_files_are_checkpoint_errors(learner: Learner, tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path, 1, learner, {"cursor": 1})
    weights_file = path / "learner" / "model.safetensors"
    data = weights_file.read_bytes()
    weights_file.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is \d+ bytes.*delete"):
        load_checkpoint(path, learner)
    weights_file.write_bytes(data)

    optimizer = path / "learner" / "optimizer.pt"
    size = optimizer.stat().st_size
    optimizer.write_bytes(b"\x00" * size)  # same size, garbage
    with pytest.raises(CheckpointError, match=r"optimizer\.pt is corrupt"):
        load_checkpoint(path, learner)
    optimizer.unlink()
    with pytest.raises(CheckpointError, match=r"optimizer\.pt is missing"):
        load_checkpoint(path, learner)

    (path / "meta.json").write_text('{"format": 1, "st')
    with pytest.raises(CheckpointError, match=r"meta\.json is unreadable or corrupt"):
        load_checkpoint(path, learner)
    with pytest.raises(CheckpointError, match="is a run directory"):
        load_checkpoint(tmp_path, learner)


def test_a_checkpoint_of_another_config_or_model_is_refused(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    lora = Learner(tiny_model_dir, LearnerConfig(lora=LoraSettings(r=4, alpha=8)))
    lora.save(tmp_path / "lora")
    with pytest.raises(CheckpointError, match=r"lora: the checkpoint holds a LoRA adapter, this"):
        Learner(tiny_model_dir, LearnerConfig()).load(tmp_path / "lora")
    other = LearnerConfig(lora=LoraSettings(r=8, alpha=8), lr=1e-4)
    with pytest.raises(CheckpointError, match=str(tmp_path / "lora")) as info:
        Learner(tiny_model_dir, other).load(tmp_path / "lora")
    assert "lora.r: checkpoint 4, this learner 8" in str(info.value)
    assert "lr: checkpoint 1e-05, this learner 0.0001" in str(info.value)

    from transformers import LlamaConfig, LlamaForCausalLM

    full = Learner(tiny_model_dir, LearnerConfig())
    full.save(tmp_path / "full")
    small = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=full.model.config.vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            tie_word_embeddings=True,
        )
    )
    stranger = Learner(small, LearnerConfig())
    before = weights(stranger)
    with pytest.raises(CheckpointError, match="does not fit this learner's model"):
        stranger.load(tmp_path / "full")
    assert_same(weights(stranger), before)  # nothing was changed


class LoopState(BaseModel):
    cursor: int
    in_flight: list[str]


def test_the_loop_state_comes_back_as_its_model(learner: Learner, tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path, 3, learner, LoopState(cursor=7, in_flight=["g1", "g2"]))
    loaded = load_checkpoint(path, learner)
    assert loaded.state(LoopState) == LoopState(cursor=7, in_flight=["g1", "g2"])

    class Other(BaseModel):
        queue: list[int]

    with pytest.raises(CheckpointError, match=r"state\.json does not match Other"):
        loaded.state(Other)
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        save_checkpoint(tmp_path, 4, learner, {"cursor": object()})
    assert latest_checkpoint(tmp_path) == path  # the failed save left nothing behind
    assert names(tmp_path) == ["LATEST", "step-00000003"]


CHILD = r"""
import sys, time
from pathlib import Path
import honing.trainer.checkpoint as ckpt
from honing.trainer import Learner, LearnerConfig

model, run = sys.argv[1:3]
learner = Learner(model, LearnerConfig())
ckpt.save_checkpoint(Path(run), 1, learner, {"cursor": 1})
save = Learner.save

def save_then_stall(self, directory):
    save(self, directory)  # the learner is written, the rest of the checkpoint is not
    print("stalled", flush=True)
    time.sleep(600)

Learner.save = save_then_stall
ckpt.save_checkpoint(Path(run), 2, learner, {"cursor": 2})
"""


def test_a_save_killed_by_sigkill_leaves_the_previous_checkpoint_latest(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tiny_model_dir), str(tmp_path)],
        cwd=PROJECT_DIR,
        stdout=subprocess.PIPE,
    )
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
        watchdog.cancel()
    assert line == b"stalled\n", "the child died before it stalled inside save_checkpoint"
    root = tmp_path / "checkpoints"
    assert any(p.name.startswith(".tmp-step-00000002") for p in root.iterdir())
    latest = latest_checkpoint(tmp_path)
    assert latest == root / "step-00000001"
    assert not any(p.name.startswith(".") for p in root.iterdir())
    resumed = Learner(tiny_model_dir, LearnerConfig())
    assert load_checkpoint(latest, resumed).loop_state == {"cursor": 1}
    # the resumed run saves step 2 again, over whatever the killed save left
    again = save_checkpoint(tmp_path, 2, resumed, {"cursor": 2})
    assert latest_checkpoint(tmp_path) == again
    assert load_checkpoint(again, resumed).loop_state == {"cursor": 2}


def test_a_save_interrupted_after_the_rename_keeps_the_pointer_on_the_previous(
    learner: Learner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window between the rename and LATEST: nothing is undone after the rename, so an
    exception there leaves the disk exactly as a SIGKILL would."""
    one = save_checkpoint(tmp_path, 1, learner, {"cursor": 1})

    def killed(root: Path, name: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "_write_latest", killed)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, learner, {"cursor": 2})
    monkeypatch.undo()
    root = tmp_path / "checkpoints"
    assert (root / "step-00000002" / "meta.json").is_file()  # complete, but not yet pointed at
    assert latest_checkpoint(tmp_path) == one
    assert load_checkpoint(one, learner).loop_state == {"cursor": 1}
    again = save_checkpoint(tmp_path, 2, learner, {"cursor": 22})
    assert latest_checkpoint(tmp_path) == again
    assert load_checkpoint(again, learner).loop_state == {"cursor": 22}
