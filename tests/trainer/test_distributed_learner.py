"""The sharded learner (honing.trainer.distributed) on CPU: 2 gloo processes under FSDP2 against
one process on the same batch — the loss and every gradient within fp32 tolerance, full fine-tune
and LoRA — and checkpoints that resume at another world size (2 -> 1 and 1 -> 2)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from distributed_child import Spec, config, first_update, groups, rank_main, seeded

from honing.errors import CheckpointError
from honing.trainer.distributed import load_sharded, save_sharded, share
from honing.trainer.learner import Learner

KINDS = ("full", "lora")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One process (here) and two spawned ranks, each: the first update's loss and gradients,
    then a checkpoint, the next update's weights, and a resume from the other's checkpoint."""
    out = tmp_path_factory.mktemp("distributed")
    one: dict[str, Any] = {}
    for kind in KINDS:
        learner = Learner(tiny_model_dir, seeded(kind))
        one[kind] = first_update(learner)
        save_sharded(learner, out / "checkpoint-1" / kind)
        learner.update(groups(2))
        one[f"{kind}_unbroken"] = learner.weights()
    spec = Spec(tiny_model_dir, out, out / "checkpoint-1", _free_port())
    mp.spawn(rank_main, args=(2, spec), nprocs=2, join=True)
    two: dict[str, Any] = torch.load(out / "results.pt", weights_only=False)
    return {"one": one, "two": two, "out": out, "model": tiny_model_dir}


def _assert_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys() and want
    scale = max(float(t.abs().max()) for t in want.values())
    assert scale > 1e-4  # a real signal, so the comparison means something
    for name in want:
        diff = float((got[name] - want[name]).abs().max())
        assert torch.allclose(got[name], want[name], atol=1e-5 * scale, rtol=1e-4), (name, diff)


@pytest.mark.parametrize("kind", KINDS)
def test_two_ranks_give_the_one_process_loss_and_gradients(runs: dict[str, Any], kind: str) -> None:
    one, two = runs["one"][kind], runs["two"][kind]
    assert two["tokens"] == one["tokens"] > 0  # the ranks' shares cover the batch once
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5, abs=1e-6)
    _assert_close(two["grads"], one["grads"])


@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_of_two_ranks_resumes_in_one_process(runs: dict[str, Any], kind: str) -> None:
    learner = Learner(runs["model"], seeded(kind))
    load_sharded(learner, runs["out"] / f"checkpoint-2-{kind}")
    assert (learner.steps, learner.version) == (1, 1)
    stats = learner.update(groups(2))
    assert stats.version == 2
    _assert_close(learner.weights(), runs["two"][f"{kind}_unbroken"])


@pytest.mark.parametrize("kind", KINDS)
def test_a_one_process_checkpoint_resumes_on_two_ranks(runs: dict[str, Any], kind: str) -> None:
    resumed = runs["two"][f"{kind}_resumed"]
    assert resumed["version"] == 2
    _assert_close(resumed["weights"], runs["one"][f"{kind}_unbroken"])


def test_a_sharded_checkpoint_refuses_another_config(runs: dict[str, Any]) -> None:
    learner = Learner(runs["model"], config("full").model_copy(update={"lr": 5e-4}))
    with pytest.raises(CheckpointError, match=r"lr: checkpoint 0\.001, this learner 0\.0005"):
        load_sharded(learner, runs["out"] / "checkpoint-2-full")


def test_share_balances_padded_tokens_and_covers_each_micro_batch_once() -> None:
    from honing.trainer.batching import micro_batches

    batch = [t for g in groups(1) for t in g.trajectories]
    micro = micro_batches(batch, 0, micro_batch_tokens=16)
    shares = share(micro, 2)
    assert sorted(i for s in shares for i in s) == list(range(len(micro)))
    loads = [sum(micro[i].input_ids.numel() for i in s) for s in shares]
    assert abs(loads[0] - loads[1]) <= max(mb.input_ids.numel() for mb in micro)
