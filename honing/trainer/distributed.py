"""A sharded learner on torch.distributed: the model under FSDP2 (`fully_shard`), a process a rank.

    init_from_env()          torchrun's environment -> process group (nccl on GPU, gloo on CPU)
    DistributedLearner       a Learner whose parameters, gradients and optimiser state are sharded;
      .update(groups)        each rank backwards its share of the micro-batches: the same step as
                             one process on the whole batch (every rank must call it, same groups)
      .weights()             full weights gathered on rank 0 for sync/export ({} on other ranks)
      .save(dir) .load(dir)  a sharded checkpoint (torch.distributed.checkpoint), any world size;
                             .load also reads a one-process `Learner.save` directory
    save_sharded, load_sharded   that checkpoint from/into any Learner, with or without a group
    is_sharded(dir)          whether a learner directory is a sharded checkpoint
    share(micro, world)      micro-batches -> ranks, balanced by padded tokens

Why the step is the one-process step: every rank builds the whole batch (advantages, and the loss
aggregation's global token/sequence count), backwards only its micro-batches, and the gradients
are summed across ranks, never averaged (docs/scaling.md, "A sharded learner"). Not covered:
advantage gae (the critic), the shared-prefix pass (off: ranks must run equal passes), a sharded KL
reference (each rank holds a full copy), Ray's torch integration, HSDP or tensor parallelism.
`honing train` drives it from rank 0 through honing.trainer.ranks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from honing.errors import CheckpointError
from honing.trainer.batching import MicroBatch
from honing.trainer.config import LearnerConfig
from honing.trainer.learner import (
    Learner,
    _base_name,
    _config_differences,
    _read_json,
    _Sums,
    _ValueTargets,
)

SHARDED_FORMAT = 1
_MANIFEST = "learner.json"
_SCHEDULER = "scheduler.pt"
# the statistics `_backward_micro` adds per micro-batch: summed over ranks after the passes
_ADDITIVE = (
    "loss",
    "policy_loss",
    "clip_frac_low",
    "clip_frac_high",
    "approx_kl",
    "ratio_mean",
    "is_weight_mean",
    "is_capped_frac",
    "kl",
    "entropy",
    "tokens",
)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where this process sits in the process group."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device


def init_from_env(backend: str | None = None) -> Placement:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT); a group already initialised is kept. backend: nccl when CUDA is present, else
    gloo. On CUDA the process takes GPU LOCAL_RANK."""
    if not dist.is_initialized():
        missing = [
            k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ
        ]
        if missing:
            raise RuntimeError(
                f"no process group and {', '.join(missing)} not set: start each rank with "
                "torchrun (docs/scaling.md, 'A sharded learner'), or call "
                "torch.distributed.init_process_group yourself"
            )
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        dist.init_process_group(backend)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if dist.get_backend() == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    return Placement(dist.get_rank(), dist.get_world_size(), local_rank, device)


def share(micro: Sequence[MicroBatch], world_size: int) -> list[list[int]]:
    """Indices of `micro` per rank: the costliest (rows x width) first, each to the least loaded
    rank (ties: the lower rank), every rank's list in ascending order. Deterministic, so every
    rank computes the same split."""
    cost = [int(mb.input_ids.numel()) for mb in micro]
    load = [0] * world_size
    out: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(len(micro)), key=lambda i: (-cost[i], i)):
        rank = min(range(world_size), key=lambda r: (load[r], r))
        out[rank].append(i)
        load[rank] += cost[i]
    return [sorted(s) for s in out]


class DistributedLearner(Learner):
    """A Learner sharded with FSDP2 over the default process group (see the module docstring).
    Every rank builds it from the same model and config; the model's decoder layers and then the
    whole model are sharded, and the optimiser is rebuilt over the sharded parameters."""

    def __init__(
        self,
        model: str | Path | Any,
        config: LearnerConfig,
        *,
        pad_id: int | None = None,
        version: int = 0,
        device: torch.device | None = None,
    ) -> None:
        if not dist.is_initialized():
            raise RuntimeError(
                "DistributedLearner needs a process group: call init_from_env() (under torchrun) "
                "first"
            )
        if config.advantage == "gae":
            raise ValueError(
                "a sharded learner does not train a critic yet: use a group estimator (grpo, "
                "rloo, dr_grpo, reinforce_pp, passk), or the one-process Learner for advantage gae"
            )
        super().__init__(model, config, pad_id=pad_id, version=version)
        self.source = model  # a one-process checkpoint is read by a Learner built from it
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard

        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        device = device or torch.device("cpu")
        self.model.to(device)
        if self.reference is not None:
            self.reference.to(device)
        if config.lora is not None:
            # the adapter's random init drew from each rank's own generator: take rank 0's
            with torch.no_grad():
                for p in self.model.parameters():
                    if p.requires_grad:
                        dist.broadcast(p.data, src=0)
        mesh = init_device_mesh(device.type, (self.world_size,))
        for layer in _decoder_layers(self.model):
            fully_shard(layer, mesh=mesh)
        fully_shard(self.model, mesh=mesh)
        for module in self.model.modules():
            if isinstance(module, FSDPModule):
                # each rank's loss is already divided by the global count: sum, do not average
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
        self.prefix_pass = False
        self._new_optimizer()

    def _accumulate(
        self,
        micro: Sequence[MicroBatch],
        masks: Sequence[Tensor],
        adv: Tensor,
        count: int,
        sums: _Sums,
        targets: _ValueTargets | None,
    ) -> None:
        """Backward this rank's share of the micro-batches; a rank with fewer runs zero-weighted
        passes, because each pass all-gathers and reduce-scatters with the other ranks."""
        live = [i for i, mask in enumerate(masks) if mask.any()]
        shares = share([micro[i] for i in live], self.world_size)
        mine = [live[j] for j in shares[self.rank]]
        local = _Sums()
        for k in range(max(len(s) for s in shares)):
            if k < len(mine):
                i = mine[k]
                self._backward_micro(micro[i], masks[i], adv, count, local, targets)
            else:
                i = mine[0] if mine else live[0]
                self._backward_micro(micro[i], masks[i], adv, count, _Sums(), targets, scale=0.0)
        values = torch.tensor([local.get(n) for n in _ADDITIVE], dtype=torch.float64)
        values = values.to(_comm_device())
        dist.all_reduce(values)
        for name, value in zip(_ADDITIVE, values.tolist(), strict=True):
            sums.add(name, value, 1.0)

    @torch.no_grad()
    def weights(self) -> dict[str, Tensor]:
        """Learner.weights() gathered in full on CPU on rank 0 (other ranks: {}). Every rank must
        call it: the gather is collective."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full: dict[str, Any] = get_model_state_dict(self.model, options=options)
        if self.rank != 0:
            return {}
        if self.config.lora is None:
            return {n: full[n] for n, _ in self.model.named_parameters()}
        from peft.tuners.lora import LoraLayer

        merged: dict[str, Tensor] = {}
        for name, module in self.model.named_modules():
            if isinstance(module, LoraLayer):
                layer: Any = module
                weight = full[f"{name}.base_layer.weight"]
                a = full[f"{name}.lora_A.default.weight"]
                b = full[f"{name}.lora_B.default.weight"]
                delta = (b @ a) * layer.scaling["default"]
                if getattr(layer, "fan_in_fan_out", False):
                    delta = delta.T
                merged[_base_name(name) + ".weight"] = weight + delta.to(weight.dtype)
        return merged

    def save(self, directory: Path) -> None:
        """`save_sharded`: every rank must call it, with the same directory."""
        save_sharded(self, directory)

    def load(self, directory: Path) -> None:
        """`load_sharded`, or a one-process `Learner.save` directory: every rank reads it into a
        Learner of its own, built from the same model, and takes its shards of it (so a run
        checkpointed in one process resumes sharded). Every rank must call it, with the same
        directory."""
        if is_sharded(directory):
            load_sharded(self, directory)
            return
        if not isinstance(self.source, (str, Path)):
            raise CheckpointError(
                f"{directory} is a one-process learner checkpoint: a DistributedLearner reads it "
                "only when built from a model path or name (it rebuilds the model to read it)"
            )
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        whole = Learner(self.source, self.config, pad_id=self.pad_id)
        whole.load(directory)  # every check of Learner.load, before this learner changes
        stepped = bool(whole.optimizer.state)
        model_state, optim_state = _state(whole)
        options = StateDictOptions(full_state_dict=True, ignore_frozen_params=True, strict=False)
        _set_state(self, model_state, optim_state if stepped else None, options)
        self.scheduler.load_state_dict(whole.scheduler.state_dict())
        self.steps, self.version = whole.steps, whole.version
        self._zero_grad_updates = whole._zero_grad_updates


def is_sharded(directory: Path) -> bool:
    """Whether the learner directory `directory` holds a `save_sharded` checkpoint (its
    learner.json says kind: sharded); False for a `Learner.save` one or an unreadable one (its
    reader then names the problem)."""
    try:
        manifest = json.loads((directory / _MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("kind") == "sharded"


def save_sharded(learner: Learner, directory: Path) -> None:
    """Write `learner`'s trained weights and optimiser state as a torch.distributed.checkpoint
    (each rank its shards; `directory` on a filesystem every rank sees), and, from rank 0, the
    schedule (`scheduler.pt`) and `learner.json`. Works on a one-process Learner too (no group).
    The frozen base of a LoRA learner and the KL reference are not saved (rebuilt on resume)."""
    from torch.distributed.checkpoint import state_dict_saver

    _check_supported(learner)
    directory.mkdir(parents=True, exist_ok=True)
    stepped = bool(learner.optimizer.state)
    model_state, optim_state = _state(learner)
    if not stepped:  # get_state_dict gave AdamW a zero step, counted: undo it, save no state
        learner.optimizer.state.clear()
    state = {"model": model_state, **({"optimizer": optim_state} if stepped else {})}
    state_dict_saver.save(state, checkpoint_id=str(directory))
    if _rank() == 0:
        torch.save(learner.scheduler.state_dict(), directory / _SCHEDULER)
        manifest = {
            "format": SHARDED_FORMAT,
            "kind": "sharded",
            "config": learner.config.model_dump(mode="json"),
            "steps": learner.steps,
            "version": learner.version,
            "zero_grad_updates": learner._zero_grad_updates,
            "optimizer": stepped,  # false before the first step: AdamW has no state yet
            "world_size": _world(),
        }
        (directory / _MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if dist.is_initialized():
        dist.barrier()


def load_sharded(learner: Learner, directory: Path) -> None:
    """Restore a `save_sharded` checkpoint, saved at any world size, into `learner` (sharded or
    not), built from the same model and config. CheckpointError names the directory and what
    differs or is broken."""
    from torch.distributed.checkpoint import state_dict_loader

    _check_supported(learner)
    manifest = _read_json(directory / _MANIFEST)
    if manifest.get("kind") != "sharded" or manifest.get("format") != SHARDED_FORMAT:
        raise CheckpointError(
            f"{directory / _MANIFEST}: not a sharded learner checkpoint of format "
            f"{SHARDED_FORMAT} (kind {manifest.get('kind')!r}, format "
            f"{manifest.get('format')!r}); a one-process checkpoint loads with Learner.load"
        )
    differences = _config_differences(manifest.get("config"), learner.config)
    if differences:
        raise CheckpointError(
            f"sharded learner checkpoint {directory} was saved with another learner config: "
            + "; ".join(differences)
            + ". Resume with the config the run was started with"
        )
    stepped = manifest.get("optimizer", True) is not False
    model_state, optim_state = _state(learner)
    try:
        state = {"model": model_state, **({"optimizer": optim_state} if stepped else {})}
        state_dict_loader.load(state, checkpoint_id=str(directory))
        schedule = torch.load(directory / _SCHEDULER, map_location="cpu", weights_only=True)
    except Exception as e:  # DCP, torch.load and pickle each raise their own types
        raise CheckpointError(
            f"sharded learner checkpoint {directory} is incomplete, corrupt or does not fit this "
            f"learner's model ({type(e).__name__}: {e}). Resume with the run's own model and "
            "config, or from the previous checkpoint"
        ) from e
    # not strict: the frozen base (LoRA) is not in it; DCP has checked every trained tensor
    _set_state(learner, state["model"], state.get("optimizer"), _options(strict=False))
    learner.scheduler.load_state_dict(schedule)
    learner.steps = int(manifest["steps"])
    learner.version = int(manifest["version"])
    learner._zero_grad_updates = int(manifest["zero_grad_updates"])


def _state(learner: Learner) -> tuple[dict[str, Any], Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    return get_state_dict(learner.model, learner.optimizer, options=_options())


def _set_state(learner: Learner, model_state: Any, optim_state: Any | None, options: Any) -> None:
    """Set the learner's trained weights, and its optimiser state, or none (`optim_state` None:
    saved before the first step; set_state_dict's zero step is undone, as in `save_sharded`)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    if optim_state is None:
        set_model_state_dict(learner.model, model_state, options=options)
        learner.optimizer.state.clear()
        return
    set_state_dict(
        learner.model,
        learner.optimizer,
        model_state_dict=model_state,
        optim_state_dict=optim_state,
        options=options,
    )


def _options(*, strict: bool = True) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # LoRA: the adapter only (the frozen base is rebuilt from the model on resume)
    return StateDictOptions(ignore_frozen_params=True, strict=strict)


def _check_supported(learner: Learner) -> None:
    if learner.critic is not None:
        raise ValueError(
            "a sharded checkpoint does not hold a critic yet (advantage gae): use Learner.save"
        )


def _decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The modules FSDP shards one by one: those of the classes transformers names in
    `_no_split_modules` (the decoder layers); none for a model that names none."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names]


def _comm_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1
