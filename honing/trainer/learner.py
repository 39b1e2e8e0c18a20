"""The learner: one optimiser step per batch of groups, on any transformers causal LM.

    Learner               full fine-tune or LoRA (peft), AdamW, warm-up + constant/cosine schedule
      .update(groups)     -> LearnerStats: dynamic sampling, advantages, micro-batched
                          gradient accumulation, clipping, one step; version += 1
      .logprobs(trajs)    teacher-forced token logprobs at the temperature each was sampled at
      .weights()          name -> tensor for `HFEngine.update_weights` (merged LoRA for LoRA)
      .save(dir) .load(dir)   weights or adapter, optimiser, schedule, counters, the critic
      .critic             advantage gae's value head, optimiser and schedule (`Critic`), or None
      .teacher            advantage distill's teacher (frozen): per-token advantages, no reward
    check_logprob_match   engine's behaviour logprobs vs the learner's on the same tokens

The loss is decoupled PPO, or GSPO or CISPO in its place (`policy_loss`; docs/training.md, "The
modules in detail": the loss, the warnings, process rewards, the critic). Not covered: several
PPO epochs over one batch (so the value clip never binds), KL folded into the reward, sharding
(honing.trainer.distributed subclasses this); the sync itself is honing.trainer.sync.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor

from honing.errors import CheckpointError
from honing.precision import train_dtype
from honing.records import Group, Trajectory
from honing.rl import (
    aggregate,
    decoupled_policy_loss,
    distill_advantages,
    dr_grpo_advantages,
    explained_variance,
    gae_advantages,
    grpo_advantages,
    kl_penalty,
    masked_mean,
    passk_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    staleness_mask,
    token_entropy,
    token_logprobs,
    token_rewards,
    turn_level_advantages,
    value_loss,
    whiten,
)
from honing.trainer.batching import (
    MicroBatch,
    Sampled,
    TrainBatch,
    batch_from_groups,
    keeps_process,
    micro_batches,
    sample_groups,
    trainable,
    turn_rewards,
)
from honing.trainer.config import LearnerConfig

log = logging.getLogger(__name__)

_ADVANTAGES = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
}


def advantages(config: LearnerConfig, rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Per-sequence advantages [N] by the group estimator `config.advantage` (not gae, which
    needs values: the learner's critic computes it)."""
    name = config.advantage
    if name == "passk":
        return passk_advantages(rewards, group_ids, k=config.passk_k)
    if name not in _ADVANTAGES:
        raise ValueError(f"advantage {name!r} is not a group estimator: it needs a critic")
    return _ADVANTAGES[name](rewards, group_ids)


@dataclass(frozen=True, slots=True)
class LearnerStats:
    """What one `update` did. Means are over the update's model tokens."""

    version: int  # the policy version after this update
    loss: float  # the policy's total loss (policy + kl_coef * KL); the critic's is value_loss
    policy_loss: float
    clip_frac_low: float
    clip_frac_high: float
    approx_kl: float  # k3 estimate of KL(proximal || current): 0 with one step per batch
    ratio_mean: float
    is_weight_mean: float  # mean importance weight exp(proximal - behaviour), after the cap
    is_capped_frac: float  # share of tokens whose weight hit max_importance_weight
    kl: float  # mean KL to the reference model (0 when kl_coef is 0)
    teacher_kl: float  # advantage distill: mean reverse KL to the teacher, sampled (0 otherwise)
    entropy: float  # mean token entropy at the sampling temperature(s)
    advantage_abs_mean: float
    value_loss: float  # gae: the clipped value loss (0 without a critic, as are the next three)
    value_clip_frac: float  # share of tokens whose value clip bound
    value_mean: float  # mean value of the trained tokens before the update
    explained_variance: float  # of the returns by those values: 1 - Var(R - V) / Var(R)
    grad_norm: float  # before clipping
    lr: float  # the learning rate this step used
    tokens: int  # model tokens trained on
    sequences: int
    micro_batches: int
    groups: int  # groups received
    dropped_groups: int  # zero-variance groups dropped (dynamic sampling)
    # of the groups kept, those with equal outcomes kept for their process rewards alone
    process_only_groups: int
    stale_tokens: int  # model tokens left out for being older than max_staleness
    seconds: float
    stepped: bool  # False when nothing was left to train on (no optimiser step was taken)


@dataclass(frozen=True, slots=True)
class MatchReport:
    """Engine (behaviour) vs learner logprobs on the same model tokens."""

    tokens: int
    max_abs_diff: float
    mean_abs_diff: float

    def __str__(self) -> str:
        return (
            f"logprob match over {self.tokens} tokens: max |diff| {self.max_abs_diff:.2e}, "
            f"mean {self.mean_abs_diff:.2e}"
        )


@dataclass(frozen=True, slots=True)
class Critic:
    """The value head of advantage gae and what trains it (see the module docstring)."""

    head: torch.nn.Linear  # hidden size -> 1, float32, zero when created
    trunk: torch.nn.Module  # the policy's decoder, whose final hidden states the head reads
    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.LambdaLR


@dataclass(frozen=True, slots=True)
class _ValueTargets:
    """What the critic says about one batch before the update, in token coordinates [N, W]:
    column i is token i of trajectory (row) i, W the longest trajectory."""

    advantages: Tensor  # GAE, whitened over `trained`; 0 elsewhere
    values: Tensor  # the critic's value of each model token (the state before it), 0 elsewhere
    returns: Tensor  # advantages (before whitening) + values: the value loss's target
    trained: Tensor  # bool: the model tokens this update trains on (stale ones left out)


class _Sums:
    """Token-weighted sums of the per-micro-batch statistics."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def add(self, name: str, value: Tensor | float, weight: float) -> None:
        self.values[name] = self.values.get(name, 0.0) + float(value) * weight

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)


class Learner:
    """See the module docstring. `version` counts optimiser steps; it is the policy version the
    caller stamps on the next weight sync."""

    def __init__(
        self,
        model: str | Path | Any,
        config: LearnerConfig,
        *,
        pad_id: int | None = None,
        version: int = 0,
    ) -> None:
        """`model`: a model directory, a built-in name ("default"), or a loaded causal LM (trained
        in place; it is cast to float32). `pad_id`: the padding token (default: the tokenizer's
        pad, else its eos, else 0; padding is masked, so its value only has to be a valid id)."""
        self.config = config
        # what the forward pass computes in: `auto` is the run's default (honing.precision)
        self.dtype = train_dtype() if config.dtype == "auto" else config.dtype
        self.tokenizer: Any = None
        if isinstance(model, (str, Path)):
            from honing.rollout.models import load_model, load_tokenizer, resolve_model

            path = resolve_model(str(model))
            model = load_model(path, "float32")
            self.tokenizer = load_tokenizer(path)
        model = model.float()
        model.config.use_cache = False
        if config.lora is not None:
            model = _with_lora(model, config)
        else:
            model.requires_grad_(True)
        self.model: Any = model
        self.pad_id = pad_id if pad_id is not None else _pad_id(self.tokenizer)
        self.version = version
        self.steps = 0
        self.reference: Any = None
        if config.kl_coef > 0 and config.lora is None:
            self.reference = copy.deepcopy(model).requires_grad_(False).eval()
        # whether forward_logits may run a shared prefix in a pass of its own (a sharded learner
        # turns it off: every rank must run the same number of passes)
        self.prefix_pass = config.shared_prefix
        self._new_optimizer()
        self.critic = self._new_critic() if config.advantage == "gae" else None
        self.teacher: Any = self._load_teacher() if config.advantage == "distill" else None
        self._zero_grad_updates = 0

    def _new_optimizer(self) -> None:
        """A fresh AdamW and LR schedule over the model's trainable parameters (again after the
        parameters are replaced, as sharding does)."""
        cfg = self.config
        self.parameters = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = adamw(self.parameters, cfg.lr, cfg)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)

    # ---- public API ------------------------------------------------------------------------

    def update(self, groups: Sequence[Group], *, risk_weight: float = 0.0) -> LearnerStats:
        """One optimiser step on `groups` (see the module docstring). `risk_weight`: the price
        of an episode's risk cost, taken off its outcome before the advantages (0: unpriced)."""
        start = time.perf_counter()
        cfg = self.config
        sampled = sample_groups(groups, cfg, risk_weight)
        if groups and not sampled.kept:
            log.warning(
                "learner: every one of the %d groups of this update had equal rewards%s "
                "(zero variance): nothing to learn, no step taken. The tasks are all too easy or "
                "too hard for the policy, or the reward is constant (check the environment's "
                "outcome reward)",
                len(groups),
                ", and equal process rewards turn by turn" if keeps_process(cfg) else "",
            )
        lr = self.optimizer.param_groups[0]["lr"]
        sums, batch, stale = self.backward(sampled.kept, risk_weight=risk_weight)
        tokens = batch.tokens - stale if batch is not None else 0
        if batch is not None and tokens == 0 and stale:
            log.warning(
                "learner: all %d model tokens of this update are more than max_staleness=%s "
                "versions old: no step taken. Rollouts lag behind the learner; raise "
                "max_staleness or let the scheduler re-issue stale episodes",
                stale,
                cfg.max_staleness,
            )
        if batch is None or tokens == 0:
            self._zero_grad()
            return self._stats(sums, batch, groups, sampled, stale, 0.0, lr, start, False)
        scale = sampled.kept_share if cfg.scale_by_kept and cfg.dynamic_sampling else 1.0
        lr *= scale
        grad_norm = self.apply_gradients("learner", lr_scale=scale)
        self._watch_gradient(grad_norm, sums.get("loss"))
        return self._stats(sums, batch, groups, sampled, stale, grad_norm, lr, start, True)

    def apply_gradients(self, who: str, lr_scale: float = 1.0) -> float:
        """Clip the accumulated gradient, take one optimiser and schedule step, clear the
        gradient, and count the step (a new policy version); the norm before clipping. The
        value head, when it has a gradient, is clipped apart and steps with its own optimiser.
        `lr_scale`: this step's learning rate is the schedule's times it (`scale_by_kept`).
        A non-finite norm takes no step and raises FloatingPointError naming `who`."""
        max_norm = self.config.max_grad_norm
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, max_norm))
        head = self._critic_gradients()
        head_norm = float(torch.nn.utils.clip_grad_norm_(head, max_norm)) if head else 0.0
        if not (math.isfinite(grad_norm) and math.isfinite(head_norm)):
            self._zero_grad()
            raise FloatingPointError(
                f"{who}: gradient norm is {grad_norm} (value head: {head_norm}) at update "
                f"{self.steps}; no step taken. Lower the learning rate, or use dtype float32"
            )
        scheduled = [group["lr"] for group in self.optimizer.param_groups]
        for group in self.optimizer.param_groups:
            group["lr"] *= lr_scale
        self.optimizer.step()
        for group, lr in zip(self.optimizer.param_groups, scheduled, strict=True):
            group["lr"] = lr
        self.scheduler.step()
        if head and self.critic is not None:
            self.critic.optimizer.step()
            self.critic.scheduler.step()
        self._zero_grad()
        self.steps += 1
        self.version += 1
        return grad_norm

    def forward_logits(
        self,
        model: Any,
        input_ids: Tensor,
        attention_mask: Tensor,
        keep: Tensor | None = None,
        prefix_len: int = 0,
    ) -> Tensor:
        """Logits [B, K, V] of `model` (the learner's, or the reference) at positions `keep`
        (default: every position but the last, K=T-1), under the configured autocast. The LM
        head runs only there where the model takes `logits_to_keep` (with a 50k vocabulary,
        projecting every prompt token is a large share of a small model's step).

        `prefix_len` P > 0 (every row shares its first P tokens, and `keep` starts at P or
        later): the prefix is run once, its key/value cache repeated for every row, and only
        the rest of each row is run on top of it. Exact — the same attention over the same keys
        and values; gradients reach the prefix's computation through the repeated cache — and a
        GRPO group's n samples of one prompt cost the prompt once instead of n times."""
        device = next(model.parameters()).device
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        use_prefix = (
            prefix_len > 0
            and keep is not None
            and len(keep) > 0
            and int(keep[0]) >= prefix_len
            and self.prefix_pass
        )
        kwargs: dict[str, Any] = {}
        if keep is not None and _takes_logits_to_keep(model):
            kwargs["logits_to_keep"] = (keep - (prefix_len if use_prefix else 0)).to(device)
        with self._autocast():
            if use_prefix:
                rows, width = input_ids.shape
                prefix = model(
                    input_ids=input_ids[:1, :prefix_len],
                    attention_mask=attention_mask[:1, :prefix_len],
                    use_cache=True,
                    **({"logits_to_keep": 1} if "logits_to_keep" in kwargs else {}),
                )
                name = _cache_arg(model)  # transformers 5 renamed past_key_values to cache
                cache = getattr(prefix, name)
                cache.batch_repeat_interleave(rows)
                positions = torch.arange(prefix_len, width, device=device).expand(rows, -1)
                out = model(
                    input_ids=input_ids[:, prefix_len:],
                    attention_mask=attention_mask,
                    position_ids=positions,
                    use_cache=True,
                    **{name: cache},
                    **kwargs,
                )
            else:
                out = model(
                    input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kwargs
                )
        if kwargs:
            return out.logits  # type: ignore[no-any-return]
        shift = prefix_len if use_prefix else 0
        logits: Tensor = out.logits[:, : width - 1 - shift] if use_prefix else out.logits[:, :-1]
        if keep is None:
            return logits
        return logits[:, (keep - shift).to(device)]

    def backward(
        self, groups: Sequence[Group], *, risk_weight: float = 0.0
    ) -> tuple[_Sums, TrainBatch | None, int]:
        """Accumulate the loss gradient of `groups` into the parameters' `.grad` (no step): the
        statistics' sums, the batch (None when no trajectory is trainable), and the number of
        model tokens left out as stale."""
        cfg = self.config
        sums = _Sums()
        if not any(trainable(t) for g in groups for t in g.trajectories):
            return sums, None, 0
        batch = batch_from_groups(
            groups,
            self.pad_id,
            micro_batch_tokens=cfg.micro_batch_tokens,
            by_prompt=cfg.shared_prefix,
            risk_weight=risk_weight,
        )
        masks = [self._mask(mb) for mb in batch.micro_batches]
        tokens = sum(int(m.sum()) for m in masks)
        stale = batch.tokens - tokens
        if tokens == 0:
            return sums, batch, stale
        rows = sum(int(m.any(-1).sum()) for m in masks)
        count = tokens if cfg.aggregation == "token" else rows
        targets: _ValueTargets | None = None
        if self.critic is not None:
            targets = self._value_targets(batch, masks)
            adv = targets.advantages
            trained = targets.trained
            sums.add("advantage_abs_mean", masked_mean(adv.abs(), trained), 1.0)
            sums.add("value_mean", masked_mean(targets.values, trained), 1.0)
            ev = explained_variance(targets.values, targets.returns, trained)
            sums.add("explained_variance", ev, 1.0)
        elif self.teacher is not None:
            adv = self._distill_advantages(batch, masks, sums)
            trained = torch.zeros_like(adv, dtype=torch.bool)
            for mb, mask in zip(batch.micro_batches, masks, strict=True):
                trained[mb.rows, 1 : mask.shape[1] + 1] = mask.bool()
            sums.add("advantage_abs_mean", masked_mean(adv.abs(), trained), 1.0)
        else:
            adv = self._group_advantages(batch)
            sums.add("advantage_abs_mean", adv.abs().mean(), 1.0)
        self.model.train()
        try:
            self._accumulate(batch.micro_batches, masks, adv, count, sums, targets)
        finally:
            self.model.eval()
        return sums, batch, stale

    def _accumulate(
        self,
        micro: Sequence[MicroBatch],
        masks: Sequence[Tensor],
        adv: Tensor,
        count: int,
        sums: _Sums,
        targets: _ValueTargets | None,
    ) -> None:
        """Backward every micro-batch that trains on something (a sharded learner runs its
        share of them instead)."""
        for mb, mask in zip(micro, masks, strict=True):
            if mask.any():
                self._backward_micro(mb, mask, adv, count, sums, targets)

    def _group_advantages(self, batch: TrainBatch) -> Tensor:
        """The group estimator's advantages: [N], or per token [N, W] with process rewards."""
        cfg = self.config
        adv = advantages(cfg, batch.rewards, batch.group_ids)
        if cfg.process_weight > 0:
            turns = turn_rewards(batch.trajectories, cfg.process_components)
            adv = turn_level_advantages(
                adv,
                turns.rewards,
                turns.mask,
                turns.token_turns,
                batch.group_ids,
                process_weight=cfg.process_weight,
            )
        return adv

    @torch.no_grad()
    @torch.no_grad()
    def _distill_advantages(
        self, batch: TrainBatch, masks: Sequence[Tensor], sums: _Sums
    ) -> Tensor:
        """advantage distill: per token [N, W], each trained token's teacher logprob minus the
        logprob the student sampled it with (honing.rl.distill_advantages); the sampled reverse
        KL to the teacher goes to `sums` ("teacher_kl")."""
        width = max(mb.input_ids.shape[1] for mb in batch.micro_batches)
        adv = torch.zeros(len(batch.trajectories), width)
        for mb, mask in zip(batch.micro_batches, masks, strict=True):
            if not mask.any():
                continue
            teacher = self._token_logprobs(self.teacher, mb, mask).float().cpu()
            raw = distill_advantages(teacher, mb.behaviour_logprobs, mask)
            sums.add("teacher_kl", -float(raw.sum()), 1.0)
            clipped = raw.clamp(-c, c) if (c := self.config.distill_clip) is not None else raw
            adv[mb.rows, 1 : mask.shape[1] + 1] = clipped
        return adv

    def _load_teacher(self) -> Any:
        """advantage distill: the teacher, frozen, in float32 (the forward pass autocasts as
        the student's does). Its vocabulary must be the student's: a token id means the same."""
        from honing.rollout.models import load_model, resolve_model

        assert self.config.teacher is not None
        teacher = load_model(resolve_model(self.config.teacher), "float32")
        teacher.config.use_cache = False
        ours, theirs = self.model.config.vocab_size, teacher.config.vocab_size
        if ours != theirs:
            raise ValueError(
                f"teacher {self.config.teacher} has a vocabulary of {theirs} tokens and the "
                f"student {ours}: distillation compares logprobs token by token, so both need "
                "the same tokenizer (a student shrunk from the teacher has it)"
            )
        return teacher.to(next(self.model.parameters()).device).requires_grad_(False).eval()

    def _value_targets(self, batch: TrainBatch, masks: Sequence[Tensor]) -> _ValueTargets:
        """Score every model token of `batch` with the critic as it is before the update (the
        policy in eval mode), lay the rewards onto the tokens, and run GAE (module docstring)."""
        cfg = self.config
        n = batch.sequences
        width = max(len(t.token_ids) for t in batch.trajectories)
        values = torch.zeros((n, width), dtype=torch.float32)
        steps = torch.zeros((n, width), dtype=torch.bool)
        trained = torch.zeros((n, width), dtype=torch.bool)
        for mb, mask in zip(batch.micro_batches, masks, strict=True):
            # target-aligned column t of a micro-batch is token t + 1 of its rows
            cols = slice(1, mb.input_ids.shape[1])
            values[mb.rows, cols] = self._critic_values(mb).cpu()
            steps[mb.rows, cols] = mb.loss_mask
            trained[mb.rows, cols] = mask.cpu()
        if cfg.process_weight > 0:
            turns = turn_rewards(batch.trajectories, cfg.process_components)
            process = cfg.process_weight * turns.rewards
            rewards = token_rewards(batch.rewards, steps, process, turns.token_turns)
        else:
            rewards = token_rewards(batch.rewards, steps)
        gae = gae_advantages(rewards, values, steps, gamma=cfg.gamma, lam=cfg.lam)
        return _ValueTargets(whiten(gae.advantages, trained), values, gae.returns, trained)

    def _critic_values(self, mb: MicroBatch) -> Tensor:
        """The critic's values [B, T-1] of `mb`'s model tokens (target-aligned), 0 elsewhere."""
        keep = mb.loss_mask.any(0).nonzero().squeeze(-1)
        if len(keep) == 0:
            return torch.zeros(mb.loss_mask.shape)
        with self._hidden_states() as hidden:
            # the values need the hidden states only: the LM head runs on one position
            self._logits(self.model, mb, keep[-1:])
        values = _spread(
            self._values(hidden[-1], keep, mb.input_ids.shape[1]), keep, mb.loss_mask.shape
        )
        return torch.where(mb.loss_mask.to(values.device), values, 0.0)

    @torch.no_grad()
    def logprobs(self, trajectories: Sequence[Trajectory]) -> list[list[float]]:
        """Teacher-forced logprobs of each trajectory's tokens at its sampling temperature, aligned
        with token_ids like Trajectory.logprobs (0.0 where loss_mask is 0 and at position 0)."""
        out: list[list[float]] = [[] for _ in trajectories]
        packed = micro_batches(
            trajectories,
            self.pad_id,
            micro_batch_tokens=self.config.micro_batch_tokens,
            by_prompt=self.config.shared_prefix,
        )
        for mb in packed:
            logp = self._token_logprobs(self.model, mb).cpu()
            logp = torch.where(mb.loss_mask, logp, 0.0)
            for r, row in enumerate(mb.rows.tolist()):
                n = len(trajectories[row].token_ids)
                scored = logp[r, : n - 1].tolist()  # the row may end at its last model token
                out[row] = [0.0, *scored, *[0.0] * (n - 1 - len(scored))]
        return out

    @torch.no_grad()
    def weights(self) -> dict[str, Tensor]:
        """Weights for `HFEngine.update_weights`, under the base model's names: every parameter
        for a full fine-tune; for LoRA only the adapted modules' merged weights W + s·B·A (the
        frozen rest is already in the engine). Full fine-tune tensors are views of the live
        parameters, not copies: finish the sync before the next `update`."""
        if self.config.lora is None:
            return {n: p.detach() for n, p in self.model.named_parameters()}
        from peft.tuners.lora import LoraLayer

        merged: dict[str, Tensor] = {}
        for name, module in self.model.named_modules():
            if isinstance(module, LoraLayer):
                layer: Any = module
                weight: Tensor = layer.get_base_layer().weight.detach()
                delta: Tensor = layer.get_delta_weight("default")
                merged[_base_name(name) + ".weight"] = weight + delta.to(weight.dtype)
        return merged

    # ---- checkpoints: save / load ----------------------------------------------------------

    def save(self, directory: Path) -> None:
        """Write what an exact resume needs into `directory` (created if missing): the trained
        weights (every parameter as `model.safetensors`; for LoRA only the adapter, in peft's
        layout: `adapter_model.safetensors` + `adapter_config.json`), the optimiser and LR
        schedule states (`optimizer.pt`, `scheduler.pt`), with a critic (advantage gae) its value
        head, optimiser and schedule (`value_head.safetensors`, `value_optimizer.pt`,
        `value_scheduler.pt`), and `learner.json` (config, steps, version, the zero-gradient
        streak, tensor shapes). The frozen base model and the KL reference are not saved: a
        resume rebuilds them from the same model. Neither atomic nor fsynced:
        `honing.trainer.checkpoint.save_checkpoint` adds both."""
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        tensors = {n: t.detach().cpu().contiguous() for n, t in self._checkpoint_tensors().items()}
        save_file(tensors, str(directory / self._weights_file()))
        if self.config.lora is not None:
            self.model.peft_config["default"].save_pretrained(str(directory))
        torch.save(self.optimizer.state_dict(), directory / "optimizer.pt")
        torch.save(self.scheduler.state_dict(), directory / "scheduler.pt")
        if self.critic is not None:
            head = {
                n: t.detach().cpu().contiguous() for n, t in self.critic.head.state_dict().items()
            }
            save_file(head, str(directory / _VALUE_HEAD))
            torch.save(self.critic.optimizer.state_dict(), directory / _VALUE_OPTIMIZER)
            torch.save(self.critic.scheduler.state_dict(), directory / _VALUE_SCHEDULER)
        manifest = {
            "format": _LEARNER_FORMAT,
            "kind": "full" if self.config.lora is None else "lora",
            "config": self.config.model_dump(mode="json"),
            "steps": self.steps,
            "version": self.version,
            "zero_grad_updates": self._zero_grad_updates,
            "tensors": {n: list(t.shape) for n, t in tensors.items()},
        }
        if self.critic is not None:
            manifest["value_head"] = {
                n: list(t.shape) for n, t in self.critic.head.state_dict().items()
            }
        (directory / "learner.json").write_text(json.dumps(manifest, indent=2) + "\n")

    def load(self, directory: Path) -> None:
        """Restore what `save` wrote into this learner, which must have been built from the same
        model with the same LearnerConfig: the next `update` then computes bit for bit what the
        saved learner's next update would have. Raises CheckpointError (naming the directory and
        what differs or which file is broken) before changing anything."""
        from safetensors.torch import load_file

        manifest = _read_json(directory / "learner.json")
        if manifest.get("format") != _LEARNER_FORMAT:
            raise CheckpointError(
                f"{directory / 'learner.json'}: learner checkpoint format "
                f"{manifest.get('format')!r}, this honing reads format {_LEARNER_FORMAT}"
            )
        differences = _config_differences(manifest.get("config"), self.config)
        if differences:
            raise CheckpointError(
                f"learner checkpoint {directory} was saved with another learner config: "
                + "; ".join(differences)
                + ". Resume with the config the run was started with (an exact resume needs the "
                "same config), or start a new run from the weights"
            )
        weights = directory / self._weights_file()
        saved = _load_or_raise(weights, lambda: load_file(str(weights)))
        ours = self._checkpoint_tensors()
        _check_tensors(weights, saved, ours)
        optimizer_state = _load_or_raise(
            directory / "optimizer.pt",
            lambda: torch.load(directory / "optimizer.pt", map_location="cpu", weights_only=True),
        )
        scheduler_state = _load_or_raise(
            directory / "scheduler.pt",
            lambda: torch.load(directory / "scheduler.pt", map_location="cpu", weights_only=True),
        )
        critic_state = self._read_critic(directory) if self.critic is not None else None
        with torch.no_grad():
            for name, tensor in ours.items():
                # state-dict tensors are detached views of the parameters: this writes in place,
                # so the optimiser keeps pointing at the live parameters
                tensor.copy_(saved[name])
        _load_or_raise(
            directory / "optimizer.pt", lambda: self.optimizer.load_state_dict(optimizer_state)
        )
        _load_or_raise(
            directory / "scheduler.pt", lambda: self.scheduler.load_state_dict(scheduler_state)
        )
        if self.critic is not None and critic_state is not None:
            self._restore_critic(directory, self.critic, critic_state)
        self.steps = int(manifest["steps"])
        self.version = int(manifest["version"])
        self._zero_grad_updates = int(manifest["zero_grad_updates"])

    def _new_critic(self) -> Critic:
        cfg = self.config
        decoder = getattr(self.model, "get_decoder", None)
        trunk = decoder() if callable(decoder) else None
        if not isinstance(trunk, torch.nn.Module):
            raise ValueError(
                f"advantage gae reads the final hidden states of the model's decoder "
                f"(get_decoder()), which {type(self.model).__name__} does not expose: use a "
                "transformers causal LM, or a group estimator (grpo, rloo, ...)"
            )
        size = int(self.model.config.hidden_size)
        device = next(self.model.parameters()).device
        # skip_init: no draw from the global generator (a zero head needs none), so creating the
        # critic leaves the run's randomness (LoRA init, dropout, sampling) where it was
        head = torch.nn.utils.skip_init(torch.nn.Linear, size, 1, device=device)  # type: ignore[no-untyped-call]
        with torch.no_grad():
            head.weight.zero_()
            head.bias.zero_()
        optimizer = adamw(list(head.parameters()), cfg.critic_learning_rate, cfg)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self._lr_factor)
        return Critic(head, trunk, optimizer, scheduler)

    def _critic_gradients(self) -> list[Tensor]:
        """The value head's parameters that hold a gradient (none without a critic)."""
        if self.critic is None:
            return []
        return [p for p in self.critic.head.parameters() if p.grad is not None]

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if self.critic is not None:
            self.critic.optimizer.zero_grad(set_to_none=True)

    @contextlib.contextmanager
    def _hidden_states(self) -> Iterator[list[Tensor]]:
        """Collect the final hidden states [B, L, H] of each pass of the policy's decoder inside
        the block (L: the positions the pass ran; a shared prefix runs in a pass of its own)."""
        assert self.critic is not None
        captured: list[Tensor] = []

        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            captured.append(output[0])  # last_hidden_state, after the final norm

        handle = self.critic.trunk.register_forward_hook(hook)
        try:
            yield captured
        finally:
            handle.remove()

    def _values(self, hidden: Tensor, keep: Tensor, width: int, trunk_grad: float = 1.0) -> Tensor:
        """The value head [B, K] (float32) at target-aligned positions `keep` of rows `width`
        tokens long; `hidden` [B, L, H] covers their last L positions. The gradient into the
        trunk is scaled by `trunk_grad` (0: none)."""
        assert self.critic is not None
        offset = width - hidden.shape[1]
        h = hidden[:, (keep - offset).to(hidden.device)].float()
        if h.requires_grad and trunk_grad == 0.0:
            h = h.detach()
        elif h.requires_grad and trunk_grad != 1.0:
            h.register_hook(lambda grad: grad * trunk_grad)  # type: ignore[no-untyped-call]
        values: Tensor = self.critic.head(h).squeeze(-1)
        return values

    def _read_critic(self, directory: Path) -> tuple[dict[str, Tensor], Any, Any]:
        """The value head's tensors, optimiser and schedule states saved in `directory`, checked
        against this learner's head (CheckpointError before anything changes)."""
        from safetensors.torch import load_file

        assert self.critic is not None
        path = directory / _VALUE_HEAD
        saved = _load_or_raise(path, lambda: load_file(str(path)))
        _check_tensors(path, saved, dict(self.critic.head.state_dict()))
        optimizer_state = _load_or_raise(
            directory / _VALUE_OPTIMIZER, _torch_reader(directory / _VALUE_OPTIMIZER)
        )
        scheduler_state = _load_or_raise(
            directory / _VALUE_SCHEDULER, _torch_reader(directory / _VALUE_SCHEDULER)
        )
        return saved, optimizer_state, scheduler_state

    @staticmethod
    def _restore_critic(
        directory: Path, critic: Critic, state: tuple[dict[str, Tensor], Any, Any]
    ) -> None:
        tensors, optimizer_state, scheduler_state = state
        with torch.no_grad():
            for name, tensor in critic.head.state_dict().items():
                tensor.copy_(tensors[name])  # in place: the optimiser keeps the live parameters
        _load_or_raise(
            directory / _VALUE_OPTIMIZER, lambda: critic.optimizer.load_state_dict(optimizer_state)
        )
        _load_or_raise(
            directory / _VALUE_SCHEDULER, lambda: critic.scheduler.load_state_dict(scheduler_state)
        )

    def _weights_file(self) -> str:
        return "model.safetensors" if self.config.lora is None else "adapter_model.safetensors"

    def _checkpoint_tensors(self) -> dict[str, Tensor]:
        """The trained tensors under their saved names, as views of the live parameters."""
        if self.config.lora is None:
            return {n: p.detach() for n, p in self.model.named_parameters()}
        from peft import get_peft_model_state_dict

        state: dict[str, Tensor] = get_peft_model_state_dict(
            self.model, save_embedding_layers=False
        )
        return state

    # ---- internals -------------------------------------------------------------------------

    def _lr_factor(self, step: int) -> float:
        cfg = self.config
        if step < cfg.warmup_steps:
            return (step + 1) / (cfg.warmup_steps + 1)
        if cfg.schedule == "constant":
            return 1.0
        span = max(1, cfg.schedule_steps - cfg.warmup_steps)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    def _mask(self, mb: MicroBatch) -> Tensor:
        if self.config.max_staleness is None:
            return mb.loss_mask
        return staleness_mask(
            mb.versions, self.version, mb.loss_mask, max_staleness=self.config.max_staleness
        )

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype == "bfloat16":
            device = next(self.model.parameters()).device.type
            return torch.autocast(device_type=device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _logits(self, model: Any, mb: MicroBatch, keep: Tensor | None = None) -> Tensor:
        return self.forward_logits(model, mb.input_ids, mb.attention_mask, keep, mb.prefix_len)

    def _token_logprobs(self, model: Any, mb: MicroBatch, mask: Tensor | None = None) -> Tensor:
        """Logprobs [B, T-1] of each target; positions no row trains on (mask all 0 there) are
        not computed and hold 0."""
        mask = mb.loss_mask if mask is None else mask
        keep = mask.any(0).nonzero().squeeze(-1)
        logits = self._logits(model, mb, keep)
        targets = mb.input_ids[:, 1:][:, keep].to(logits.device)
        picked = token_logprobs(logits, targets, temperature=self._temperature(mb, logits))
        return _spread(picked, keep, mask.shape)

    def _temperature(self, mb: MicroBatch, logits: Tensor) -> float | Tensor:
        """The temperature `mb`'s rows were sampled at: the config's, unless a row recorded
        another (per-task exploration), then [B], one per row (unrecorded rows: the config's)."""
        t = self.config.temperature
        if mb.temperatures is None:
            return t
        rows = torch.nan_to_num(mb.temperatures, nan=t)
        if bool((rows == t).all()):
            return t
        return rows.to(logits.device)

    @contextlib.contextmanager
    def _reference(self) -> Iterator[Any]:
        if self.reference is not None:
            yield self.reference
        else:  # LoRA: the base model is the reference, with the adapter switched off
            with self.model.disable_adapter():
                yield self.model

    def _backward_micro(
        self,
        mb: MicroBatch,
        mask: Tensor,
        adv: Tensor,
        count: int,
        sums: _Sums,
        value_targets: _ValueTargets | None = None,
        scale: float = 1.0,
    ) -> None:
        """Backward `mb`'s loss times `scale` (0: a pass that only keeps a sharded learner's
        ranks in step) and add its statistics to `sums`."""
        cfg = self.config
        keep = mask.any(0).nonzero().squeeze(-1)  # positions some row trains on
        capture: contextlib.AbstractContextManager[list[Tensor]] = (
            self._hidden_states() if value_targets is not None else contextlib.nullcontext([])
        )
        with capture as hidden:
            logits = self._logits(self.model, mb, keep)
        targets = mb.input_ids[:, 1:][:, keep].to(logits.device)
        temperature = self._temperature(mb, logits)
        logp = _spread(token_logprobs(logits, targets, temperature=temperature), keep, mask.shape)
        device = logp.device
        mask = mask.to(device)
        if adv.dim() == 1:  # one advantage per sequence
            token_adv = adv.to(device)[mb.rows.to(device)][:, None].expand_as(logp)
        else:  # per token [N, T] (process rewards): row r's targets are its tokens 1..width-1
            token_adv = adv.to(device)[mb.rows.to(device), 1 : logp.shape[1] + 1]
        result = decoupled_policy_loss(
            logp,
            logp.detach(),
            mb.behaviour_logprobs.to(device),
            token_adv,
            mask,
            eps_low=cfg.eps_low,
            eps_high=cfg.eps_high,
            max_weight=cfg.max_importance_weight,
            aggregation=cfg.aggregation,
            norm_len=cfg.norm_len,
            global_count=count,
            loss=cfg.policy_loss,
        )
        loss = result.loss
        n = float(mask.sum())
        if cfg.kl_coef > 0:
            with torch.no_grad(), self._reference() as ref:
                ref_logp = _spread(
                    token_logprobs(self._logits(ref, mb, keep), targets, temperature=temperature),
                    keep,
                    mask.shape,
                )
            per_token = kl_penalty(logp, ref_logp, mask, estimator=cfg.kl_estimator)
            kl_loss = aggregate(
                per_token, mask, cfg.aggregation, norm_len=cfg.norm_len, global_count=count
            )
            loss = loss + cfg.kl_coef * kl_loss
            sums.add("kl", (per_token.detach() * mask).sum() / max(n, 1.0), n)
        total = loss
        if value_targets is not None:
            critic_loss = self._critic_loss(mb, mask, keep, hidden[-1], value_targets, count, sums)
            total = loss + critic_loss
        if scale != 1.0:
            total = total * scale
        total.backward()  # type: ignore[no-untyped-call]
        with torch.no_grad():
            entropy = _spread(
                token_entropy(logits.detach(), temperature=temperature), keep, mask.shape
            )
            sums.add("entropy", (entropy * mask).sum() / max(n, 1.0), n)
        sums.add("loss", loss.detach(), 1.0)
        sums.add("policy_loss", result.loss.detach(), 1.0)
        for name in (
            "clip_frac_low",
            "clip_frac_high",
            "approx_kl",
            "ratio_mean",
            "is_weight_mean",
            "is_capped_frac",
        ):
            sums.add(name, getattr(result.stats, name), n)
        sums.add("tokens", n, 1.0)

    def _critic_loss(
        self,
        mb: MicroBatch,
        mask: Tensor,
        keep: Tensor,
        hidden: Tensor,
        targets: _ValueTargets,
        count: int,
        sums: _Sums,
    ) -> Tensor:
        """The value loss of `mb`'s trained tokens, aggregated like the policy loss."""
        cfg = self.config
        values = self._values(hidden, keep, mb.input_ids.shape[1], trunk_grad=cfg.value_coef)
        values = _spread(values, keep, mask.shape)
        device = values.device
        rows, cols = mb.rows.to(device), slice(1, mask.shape[1] + 1)
        result = value_loss(
            values,
            targets.values.to(device)[rows, cols],
            targets.returns.to(device)[rows, cols],
            mask,
            clip=cfg.value_clip,
            aggregation=cfg.aggregation,
            norm_len=cfg.norm_len,
            global_count=count,
        )
        sums.add("value_loss", result.loss.detach(), 1.0)
        sums.add("value_clip_frac", result.clip_frac, float(mask.sum()))
        return result.loss

    def _watch_gradient(self, grad_norm: float, loss: float) -> None:
        if grad_norm != 0.0:
            self._zero_grad_updates = 0
            return
        self._zero_grad_updates += 1
        if self._zero_grad_updates >= self.config.zero_grad_warn_after:
            log.warning(
                "learner: the gradient has been exactly 0 for %d updates in a row (loss %.3g): "
                "the policy is not learning. Check that rewards vary within groups, that "
                "loss_mask marks the model's tokens, and that lr > 0",
                self._zero_grad_updates,
                loss,
            )

    def _stats(
        self,
        sums: _Sums,
        batch: TrainBatch | None,
        groups: Sequence[Group],
        sampled: Sampled,
        stale: int,
        grad_norm: float,
        lr: float,
        start: float,
        stepped: bool,
    ) -> LearnerStats:
        n = max(sums.get("tokens"), 1.0)
        return LearnerStats(
            version=self.version,
            loss=sums.get("loss"),
            policy_loss=sums.get("policy_loss"),
            clip_frac_low=sums.get("clip_frac_low") / n,
            clip_frac_high=sums.get("clip_frac_high") / n,
            approx_kl=sums.get("approx_kl") / n,
            ratio_mean=sums.get("ratio_mean") / n,
            is_weight_mean=sums.get("is_weight_mean") / n,
            is_capped_frac=sums.get("is_capped_frac") / n,
            kl=sums.get("kl") / n,
            teacher_kl=sums.get("teacher_kl") / n,
            entropy=sums.get("entropy") / n,
            advantage_abs_mean=sums.get("advantage_abs_mean"),
            value_loss=sums.get("value_loss"),
            value_clip_frac=sums.get("value_clip_frac") / n,
            value_mean=sums.get("value_mean"),
            explained_variance=sums.get("explained_variance"),
            grad_norm=grad_norm,
            lr=lr,
            tokens=int(sums.get("tokens")),
            sequences=batch.sequences if batch is not None else 0,
            micro_batches=len(batch.micro_batches) if batch is not None else 0,
            groups=len(groups),
            dropped_groups=sampled.dropped,
            process_only_groups=sampled.process_only,
            stale_tokens=stale,
            seconds=time.perf_counter() - start,
            stepped=stepped,
        )


def adamw(parameters: list[Tensor], lr: float, config: LearnerConfig) -> torch.optim.AdamW:
    """AdamW over `parameters`: the fused kernel (one pass over each tensor for the whole update,
    several times faster on a CPU than torch's default per-tensor loop on a 135M model) when
    every parameter is a plain CPU or CUDA float tensor; else torch's default (a sharded
    learner's DTensors)."""
    plain = all(
        type(p) is torch.nn.Parameter
        and p.device.type in ("cpu", "cuda")
        and p.dtype in (torch.float32, torch.bfloat16, torch.float16)
        for p in parameters
    )
    return torch.optim.AdamW(
        parameters,
        lr=lr,
        betas=config.betas,
        weight_decay=config.weight_decay,
        **({"fused": True} if plain and parameters else {}),
    )


def check_logprob_match(learner: Learner, trajectories: Sequence[Trajectory]) -> MatchReport:
    """Compare the engine's behaviour logprobs (Trajectory.logprobs) with the learner's on the
    model tokens of `trajectories`. Run it at start-up on a first batch: for the hf engine in
    float32 the difference must be ~0; a large one means the temperature, the tokens or the
    weights differ between engine and learner, and the importance weights will be off."""
    ours = learner.logprobs(trajectories)
    diffs: list[float] = []
    for t, mine in zip(trajectories, ours, strict=True):
        for i, (m, theirs, lp) in enumerate(zip(t.loss_mask, t.logprobs, mine, strict=True)):
            if m and i > 0:
                diffs.append(abs(theirs - lp))
    if not diffs:
        return MatchReport(0, 0.0, 0.0)
    return MatchReport(len(diffs), max(diffs), sum(diffs) / len(diffs))


# ---- checkpoint helpers (Learner.save / Learner.load) ----------------------------------------

_LEARNER_FORMAT = 1
_VALUE_HEAD = "value_head.safetensors"
_VALUE_OPTIMIZER = "value_optimizer.pt"
_VALUE_SCHEDULER = "value_scheduler.pt"
_T = TypeVar("_T")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(
            f"{path} is missing: {path.parent} is not a complete learner checkpoint (Learner.save "
            "writes this file). Point at another checkpoint, or delete this one"
        )
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{path} is unreadable or corrupt ({e}): delete {path.parent} and resume from the "
            "previous checkpoint"
        ) from e
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} is corrupt: expected a JSON object, found {value!r:.80}")
    return value


def _torch_reader(path: Path) -> Callable[[], Any]:
    return lambda: torch.load(path, map_location="cpu", weights_only=True)


def _load_or_raise(path: Path, read: Callable[[], _T]) -> _T:
    try:
        return read()
    except CheckpointError:
        raise
    except Exception as e:  # torch, safetensors and pickle each raise their own types
        if not path.is_file():
            raise CheckpointError(
                f"{path} is missing: {path.parent} is not a complete learner checkpoint"
            ) from e
        raise CheckpointError(
            f"{path} is corrupt or does not fit this learner ({type(e).__name__}: {e}). Delete "
            f"{path.parent} and resume from the previous checkpoint"
        ) from e


def _config_differences(saved: Any, config: LearnerConfig) -> list[str]:
    """'key: checkpoint X, this learner Y' for each differing (dotted) key. A setting the
    checkpoint does not name was added to honing after it was saved: it ran with the default."""
    if not isinstance(saved, dict):
        return [f"config: checkpoint {saved!r}, this learner {config.model_dump(mode='json')}"]
    ours = config.model_dump(mode="json")
    defaults = LearnerConfig().model_dump(mode="json")
    saved = {**{k: v for k, v in defaults.items() if k not in saved}, **saved}
    if (saved.get("lora") is None) != (ours.get("lora") is None):
        what = {True: "a full fine-tune", False: "a LoRA adapter"}
        return [
            f"lora: the checkpoint holds {what[saved.get('lora') is None]}, this learner is "
            f"{what[ours.get('lora') is None]}"
        ]
    return _differences(saved, ours, "")


def _differences(saved: dict[str, Any], ours: dict[str, Any], prefix: str) -> list[str]:
    out: list[str] = []
    for key in sorted(saved.keys() | ours.keys()):
        a, b = saved.get(key, "<absent>"), ours.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: checkpoint {a!r}, this learner {b!r}")
    return out


def _check_tensors(path: Path, saved: dict[str, Tensor], ours: dict[str, Tensor]) -> None:
    missing = sorted(ours.keys() - saved.keys())
    extra = sorted(saved.keys() - ours.keys())
    shapes = [
        f"{n}: checkpoint {tuple(saved[n].shape)} {saved[n].dtype}, "
        f"this learner {tuple(t.shape)} {t.dtype}"
        for n, t in ours.items()
        if n in saved and (saved[n].shape != t.shape or saved[n].dtype != t.dtype)
    ]
    if missing or extra or shapes:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensors (first: {missing[0]})")
        if extra:
            parts.append(f"{len(extra)} unknown tensors (first: {extra[0]})")
        parts += shapes[:3]
        raise CheckpointError(
            f"{path} does not fit this learner's model: " + "; ".join(parts) + ". Was the run "
            "started from another model? Resume with the run's own model and config"
        )


def _spread(values: Tensor, keep: Tensor, shape: torch.Size) -> Tensor:
    """[B, K] values at positions `keep` -> [B, T-1] with zeros elsewhere (differentiable)."""
    if values.shape[1] == shape[1]:
        return values
    out = values.new_zeros(shape)
    out[:, keep.to(values.device)] = values
    return out


def _cache_arg(model: Any) -> str:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _takes_logits_to_keep(model: Any) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def _pad_id(tokenizer: Any) -> int:
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            return value
    return 0


def _base_name(peft_name: str) -> str:
    prefix = "base_model.model."
    return peft_name[len(prefix) :] if peft_name.startswith(prefix) else peft_name


def _with_lora(model: Any, config: LearnerConfig) -> Any:
    from peft import LoraConfig, get_peft_model

    lora = config.lora
    assert lora is not None
    peft_config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,  # type: ignore[arg-type]
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        bias="none",
        layers_to_transform=_top_layers(model, lora.top_layers),
    )
    return get_peft_model(model, peft_config)


def _top_layers(model: Any, count: int | None) -> list[int] | None:
    """The indices of the last `count` decoder layers (None: every layer)."""
    if count is None:
        return None
    total = int(model.config.num_hidden_layers)
    if count > total:
        raise ValueError(f"lora.top_layers {count}: the model has only {total} decoder layers")
    return list(range(total - count, total))
