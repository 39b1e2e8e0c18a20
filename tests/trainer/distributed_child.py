"""What each rank of the sharded-learner tests runs (spawned by test_distributed_learner.py):
one update's loss and gradients, full fine-tune and LoRA, and checkpoints across world sizes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from learner_helpers import PROMPTS, trajectory

from honing.records import Group, Trajectory
from honing.trainer import LearnerConfig, LoraSettings
from honing.trainer.learner import Learner


@dataclass(frozen=True)
class Spec:
    """One spawned run: the model, where rank 0 writes its results, the world-size-1 checkpoint
    to resume from."""

    model_dir: Path
    out: Path
    checkpoint_1: Path
    port: int


def seeded(kind: str) -> LearnerConfig:
    """`config(kind)`, with the global generator seeded: LoRA's random init is the same in every
    process."""
    torch.manual_seed(0)
    return config(kind)


def config(kind: str) -> LearnerConfig:
    """The tests' learner: 16-token micro-batches (one a trajectory: ranks get uneven shares),
    KL to the reference, no shared-prefix pass (a sharded learner runs none)."""
    lora = LoraSettings(r=4, alpha=8, dropout=0.0) if kind == "lora" else None
    return LearnerConfig(
        micro_batch_tokens=16, kl_coef=0.1, shared_prefix=False, lr=1e-3, lora=lora,
        dtype="float32",
    )  # fmt: skip


def groups(seed: int) -> list[Group]:
    """Two groups of 4 and one of 3 trajectories (rewards vary within each), sampled near the
    tiny random model's uniform logprob (ln 1/49152 ≈ -10.8): importance weights near 1."""
    gen = torch.Generator().manual_seed(seed)
    outcomes = [1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.2, 0.0, 1.0, 0.3]
    trajs: list[Trajectory] = []
    for i, r in enumerate(outcomes):
        n = 3 + (5 * i + seed) % 7
        ids = torch.randint(10, 4000, (n,), generator=gen).tolist()
        trajs.append(trajectory(PROMPTS[i % 3], ids, r, [-10.8 + 0.1 * (i % 4)] * n, [0] * n))
    return [
        Group(task_id=f"g{k}", group_id=f"g{k}", trajectories=trajs[k * 4 : k * 4 + 4])
        for k in range(3)
    ]


def full_grads(learner: Learner) -> dict[str, torch.Tensor]:
    """Every parameter's gradient in full (a collective for a sharded learner)."""
    out = {}
    for name, p in learner.model.named_parameters():
        if p.grad is not None:
            g = p.grad
            out[name] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
    return out


def first_update(learner: Learner) -> dict[str, object]:
    """Loss and gradients of the update on groups(1), then its step."""
    sums, batch, _ = learner.backward(groups(1))
    assert batch is not None
    result = {"loss": sums.get("loss"), "tokens": sums.get("tokens"), "grads": full_grads(learner)}
    learner.apply_gradients("test")
    return result


def rank_main(rank: int, world: int, spec: Spec) -> None:
    from honing.trainer.distributed import DistributedLearner

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(spec.port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        results: dict[str, object] = {}
        for kind in ("full", "lora"):
            learner = DistributedLearner(spec.model_dir, seeded(kind))
            results[kind] = first_update(learner)
            learner.save(spec.out / f"checkpoint-2-{kind}")
            learner.update(groups(2))
            results[f"{kind}_unbroken"] = learner.weights()
            resumed = DistributedLearner(spec.model_dir, seeded(kind))
            resumed.load(spec.checkpoint_1 / kind)
            stats = resumed.update(groups(2))
            results[f"{kind}_resumed"] = {"weights": resumed.weights(), "version": stats.version}
        if rank == 0:
            torch.save(results, spec.out / "results.pt")
    finally:
        dist.destroy_process_group()
