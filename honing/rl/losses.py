"""The clipped policy-gradient loss and how per-token losses are averaged.

    policy_loss      PPO's clipped ratio with asymmetric clip bounds, returns `PolicyLoss`
    aggregate        per-token values -> one scalar, by token, by sequence, or by a constant
    PolicyLoss       the loss and its `PolicyLossStats` (clip fractions, approx KL, ratio mean…)

PPO's objective (Schulman et al. 2017) with clip-higher bounds (DAPO, Yu et al. 2025);
aggregation by token (DAPO), by sequence (GRPO) or by a constant (Dr.GRPO, Liu et al. 2025);
`global_count` makes accumulated micro-batches equal one big batch (docs/training.md, "The RL
math in detail"). Not covered: dual-clip PPO (Ye et al. 2020), sequence-level ratios (GSPO), the
value loss (`honing.rl.value`), the KL and entropy terms (the learner adds them, `honing.rl.kl`,
`honing.rl.logprobs`), and correction for the gap between behaviour and proximal policy
(`honing.rl.offpolicy`, which calls this).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from honing.rl.masking import masked_mean, masked_sum

Aggregation = Literal["token", "sequence", "constant"]


@dataclass(frozen=True, slots=True)
class PolicyLossStats:
    """Diagnostics of one policy-loss call: detached 0-d tensors (no device sync until read),
    each a mean over the model tokens of the batch."""

    clip_frac_low: Tensor  # A < 0 and ratio < 1 - eps_low: clipped, no gradient
    clip_frac_high: Tensor  # A > 0 and ratio > 1 + eps_high: clipped, no gradient
    approx_kl: Tensor  # k3 estimate of KL(old || current): (ratio - 1) - log ratio
    ratio_mean: Tensor
    is_weight_mean: Tensor  # importance weight applied per token (1 when on-policy)
    is_capped_frac: Tensor  # share of tokens whose importance weight hit its cap (0 on-policy)


@dataclass(frozen=True, slots=True)
class PolicyLoss:
    loss: Tensor  # 0-d, differentiable
    stats: PolicyLossStats


def aggregate(
    per_token: Tensor,
    mask: Tensor,
    mode: Aggregation,
    *,
    norm_len: int | None = None,
    global_count: int | float | Tensor | None = None,
) -> Tensor:
    """Reduce per-token values to one scalar as `mode` says (see the module docstring).

    Shapes: per_token, mask [B, T]; returns 0-d. A sequence with no model tokens counts for
    nothing (not even in the number of sequences); an all-zero mask gives 0, not NaN.
    `norm_len` is required for "constant". `global_count`: see the module docstring.
    """
    if per_token.dim() != 2 or per_token.shape != mask.shape:
        raise ValueError(
            f"per_token {tuple(per_token.shape)} and mask {tuple(mask.shape)}: need both [B, T]"
        )
    valid = mask.bool()
    rows = valid.any(dim=-1)
    if mode == "token":
        total = masked_sum(per_token, valid)
        count = valid.sum()
    elif mode == "sequence":
        total = masked_mean(per_token, valid, dim=-1).sum()
        count = rows.sum()
    elif mode == "constant":
        if norm_len is None or norm_len <= 0:
            raise ValueError(
                "aggregation 'constant' (Dr.GRPO) needs norm_len > 0, a fixed number of tokens "
                "such as the generation budget max_new_tokens"
            )
        total = masked_sum(per_token, valid) / norm_len
        count = rows.sum()
    else:
        raise ValueError(f"unknown aggregation {mode!r}: use 'token', 'sequence' or 'constant'")
    if global_count is None:
        return total / count.clamp(min=1).to(total.dtype)
    if float(global_count) <= 0:
        raise ValueError(f"global_count must be positive, got {global_count}")
    return total / global_count


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    aggregation: Aggregation = "token",
    norm_len: int | None = None,
    global_count: int | float | Tensor | None = None,
    token_weights: Tensor | None = None,
) -> PolicyLoss:
    """PPO's clipped surrogate with asymmetric clip (DAPO's clip-higher); see the module docstring.

    Shapes: logprobs (the current policy's, with gradient), old_logprobs (the policy the ratio is
    taken against, no gradient), advantages, mask, token_weights [B, T]; returns `PolicyLoss`.
    `eps_high` defaults to `eps_low` (symmetric PPO). `token_weights` multiply the per-token
    loss (detached), e.g. importance weights; they enter no statistic but the two `is_*`.
    Masked-out positions may hold anything (padding garbage, inf): they are never exponentiated.
    """
    shapes = {tuple(t.shape) for t in (logprobs, old_logprobs, advantages, mask)}
    if token_weights is not None:
        shapes.add(tuple(token_weights.shape))
    if len(shapes) != 1:
        raise ValueError(
            "logprobs, old_logprobs, advantages, mask (and token_weights) must have one shape "
            f"[B, T]; got {sorted(shapes)}"
        )
    eps_high = eps_low if eps_high is None else eps_high
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip bounds must be >= 0, got eps_low={eps_low}, eps_high={eps_high}")
    valid = mask.bool()
    zero = torch.zeros_like(logprobs)
    log_ratio = torch.where(valid, logprobs - old_logprobs.detach(), zero)
    ratio = torch.exp(log_ratio)
    adv = torch.where(valid, advantages.detach().to(ratio.dtype), zero)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    if token_weights is None:
        weights = torch.ones_like(per_token)
    else:
        weights = torch.where(valid, token_weights.detach().to(per_token.dtype), zero)
        per_token = per_token * weights
    loss = aggregate(per_token, valid, aggregation, norm_len=norm_len, global_count=global_count)

    with torch.no_grad():
        r = ratio.detach()
        low = (adv < 0) & (r < 1.0 - eps_low)
        high = (adv > 0) & (r > 1.0 + eps_high)
        stats = PolicyLossStats(
            clip_frac_low=masked_mean(low.to(r.dtype), valid),
            clip_frac_high=masked_mean(high.to(r.dtype), valid),
            approx_kl=masked_mean((r - 1.0) - log_ratio.detach(), valid),
            ratio_mean=masked_mean(r, valid),
            is_weight_mean=masked_mean(weights, valid),
            is_capped_frac=torch.zeros((), dtype=r.dtype, device=r.device),
        )
    return PolicyLoss(loss, stats)
