"""Learning from stale or partial-rollout tokens: decoupled PPO and the staleness bound.

    decoupled_policy_loss   clipped ratio to the proximal policy × capped importance weight
    token_staleness         current policy version - the version that produced each token
    staleness_mask          the loss mask without tokens staler than a bound

Decoupled PPO (AReaL, Fu et al. 2025): the trust region is taken around the *proximal* policy
(the learner's weights before this update) and the behaviour/proximal gap is corrected by the
importance weight `w = exp(proximal - behaviour)`, capped at `max_weight` by truncation (Yao et
al. 2025) or by masking (AReaL's `behav_imp_weight_cap`); with behaviour == proximal it is
exactly `policy_loss`; `loss` swaps PPO's clipped ratio for GSPO's or CISPO's, the weight unchanged.
docs/training.md ("The RL math in detail") gives the formulas and the staleness bound. Not
covered: sequence-level importance weights, and recomputing the proximal logprobs (the learner's
forward pass before its first optimiser step on this batch).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from torch import Tensor

from honing.rl.losses import (
    Aggregation,
    PolicyLoss,
    PolicyLossKind,
    cispo_loss,
    gspo_loss,
    policy_loss,
)
from honing.rl.masking import masked_mean

CapMode = Literal["truncate", "mask"]


def decoupled_policy_loss(
    logprobs: Tensor,
    proximal_logprobs: Tensor,
    behaviour_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    max_weight: float = 2.0,
    cap_mode: CapMode = "truncate",
    aggregation: Aggregation = "token",
    norm_len: int | None = None,
    global_count: int | float | Tensor | None = None,
    loss: PolicyLossKind = "ppo",
) -> PolicyLoss:
    """Decoupled PPO loss (AReaL); see the module docstring.

    Shapes: logprobs (current policy, with gradient), proximal_logprobs (learner before this
    update), behaviour_logprobs (the engine's, Trajectory.logprobs), advantages, mask [B, T];
    returns `PolicyLoss` whose stats also carry the mean applied importance weight and the share
    of tokens at the cap. With cap_mode="mask", capped tokens leave the mask (and the local
    token count); a `global_count` the caller passes should not include them.
    `loss` "gspo" (gspo_loss) needs aggregation "sequence", its only one; "cispo" (cispo_loss)
    clips r = current/proximal, so the weight on a token is w * clip(r), w capped separately.
    """
    if max_weight < 1.0:
        raise ValueError(
            f"max_weight {max_weight} < 1 would down-weight even on-policy tokens: use >= 1 "
            "(e.g. 2.0)"
        )
    if cap_mode not in ("truncate", "mask"):
        raise ValueError(f"unknown cap_mode {cap_mode!r}: use 'truncate' or 'mask'")
    if loss not in ("ppo", "gspo", "cispo"):
        raise ValueError(f"unknown loss {loss!r}: use 'ppo', 'gspo' or 'cispo'")
    if loss == "gspo" and aggregation != "sequence":
        raise ValueError(
            f"loss 'gspo' averages over sequences (its ratio is one per sequence): pass "
            f"aggregation='sequence', not {aggregation!r}"
        )
    if proximal_logprobs.shape != behaviour_logprobs.shape:
        raise ValueError(
            f"proximal_logprobs {tuple(proximal_logprobs.shape)} and behaviour_logprobs "
            f"{tuple(behaviour_logprobs.shape)} differ"
        )
    valid = mask.bool()
    log_w = (proximal_logprobs - behaviour_logprobs).detach()
    log_w = torch.where(valid, log_w, torch.zeros_like(log_w))
    weight = torch.exp(log_w)
    capped = valid & (weight > max_weight)
    if cap_mode == "truncate":
        weight = weight.clamp(max=max_weight)
        kept = valid
    else:
        kept = valid & ~capped
        weight = torch.where(capped, torch.zeros_like(weight), weight)

    if loss == "gspo":
        result = gspo_loss(
            logprobs,
            proximal_logprobs,
            advantages,
            kept,
            eps_low=eps_low,
            eps_high=eps_high,
            global_count=global_count,
            token_weights=weight,
        )
    else:
        result = (policy_loss if loss == "ppo" else cispo_loss)(
            logprobs,
            proximal_logprobs,
            advantages,
            kept,
            eps_low=eps_low,
            eps_high=eps_high,
            aggregation=aggregation,
            norm_len=norm_len,
            global_count=global_count,
            token_weights=weight,
        )
    stats = dataclasses.replace(
        result.stats,
        is_weight_mean=masked_mean(weight, valid),
        is_capped_frac=masked_mean(capped.to(weight.dtype), valid),
    )
    return PolicyLoss(result.loss, stats)


def token_staleness(versions: Tensor, current_version: int, mask: Tensor) -> Tensor:
    """`current_version - versions` on the model's tokens, 0 elsewhere.

    Shapes: versions [B, T] (integer, Trajectory.versions: -1 where mask is 0), mask [B, T];
    returns [B, T] long. A model token without a version (< 0), or from a version newer than
    `current_version`, is an error: either means the version bookkeeping is broken.
    """
    if versions.shape != mask.shape:
        raise ValueError(f"versions {tuple(versions.shape)} and mask {tuple(mask.shape)} differ")
    valid = mask.bool()
    v = versions.long()
    if bool((valid & (v < 0)).any()):
        raise ValueError(
            "a model token has no policy version (< 0): the engine must stamp every generated "
            "token with the version that produced it"
        )
    if bool((valid & (v > current_version)).any()):
        raise ValueError(
            f"a token's policy version is newer than the current version {current_version}: "
            "pass the learner's current version (it increments on every weight sync)"
        )
    return torch.where(valid, current_version - v, torch.zeros_like(v))


def staleness_mask(
    versions: Tensor, current_version: int, mask: Tensor, *, max_staleness: int
) -> Tensor:
    """The mask without tokens more than `max_staleness` versions behind `current_version`.

    Shapes: versions, mask [B, T]; returns bool [B, T]. max_staleness 0 keeps only tokens of the
    current version (fully on-policy).
    """
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    return mask.bool() & (token_staleness(versions, current_version, mask) <= max_staleness)
