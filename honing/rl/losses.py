"""The policy-gradient losses and how per-token losses are averaged.

    policy_loss      PPO's clipped ratio with asymmetric clip bounds, returns `PolicyLoss`
    gspo_loss        GSPO: one length-normalised ratio per sequence, clipped per sequence
    cispo_loss       CISPO: the clipped ratio as a detached weight; no token loses its gradient
    aggregate        per-token values -> one scalar, by token, by sequence, or by a constant
    PolicyLoss       the loss and its `PolicyLossStats`; `PolicyLossKind` names the three losses

PPO (Schulman et al. 2017) with clip-higher (DAPO, Yu et al. 2025), GSPO (Zheng et al. 2025, its
GSPO-token form), CISPO (MiniMax-M1, 2025); aggregation by token (DAPO), sequence (GRPO) or a
constant (Dr.GRPO, Liu et al. 2025); `global_count`: micro-batches add up to one big batch
(docs/training.md, "The RL math in detail"). Not covered: dual-clip PPO (Ye et al. 2020), the
value loss (`honing.rl.value`), the KL and entropy terms (`honing.rl.kl`, `honing.rl.logprobs`),
the behaviour/proximal correction (`honing.rl.offpolicy`, which calls these).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from honing.rl.masking import masked_mean, masked_sum

Aggregation = Literal["token", "sequence", "constant"]
PolicyLossKind = Literal["ppo", "gspo", "cispo"]


@dataclass(frozen=True, slots=True)
class PolicyLossStats:
    """Diagnostics of one policy-loss call: detached 0-d tensors (no device sync until read),
    each a mean over the model tokens of the batch. The clip fractions are those of PPO below;
    gspo_loss and cispo_loss say what theirs count."""

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
    eps_high = _check_inputs(
        logprobs, old_logprobs, advantages, mask, token_weights, eps_low, eps_high
    )
    valid = mask.bool()
    zero = torch.zeros_like(logprobs)
    log_ratio = torch.where(valid, logprobs - old_logprobs.detach(), zero)
    ratio = torch.exp(log_ratio)
    adv = torch.where(valid, advantages.detach().to(ratio.dtype), zero)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    weights = _token_weights(token_weights, valid, per_token)
    per_token = per_token * weights
    loss = aggregate(per_token, valid, aggregation, norm_len=norm_len, global_count=global_count)

    with torch.no_grad():
        r = ratio.detach()
        low = (adv < 0) & (r < 1.0 - eps_low)
        high = (adv > 0) & (r > 1.0 + eps_high)
    return PolicyLoss(loss, _stats(low, high, ratio, log_ratio, weights, valid))


def gspo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 3e-4,
    eps_high: float | None = 4e-4,
    global_count: int | float | Tensor | None = None,
    token_weights: Tensor | None = None,
) -> PolicyLoss:
    """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"), GSPO-token form.

    Per sequence i, `s_i = exp(mean_t(logprobs - old_logprobs))` over its model tokens; per token
    `s_it = sg(s_i) * exp(logprobs_t - sg(logprobs_t))` (value s_i, gradient s_i * d logprob_t),
    `loss_it = -min(s_it * A_t, clip(s_it, 1 - eps_low, 1 + eps_high) * A_t) * w_t`, averaged
    over each sequence's tokens, then over sequences ("sequence" aggregation, fixed: the paper's
    1/|y_i| is in the ratio; a sequence with no model tokens counts for nothing). With one
    advantage per sequence this is exactly GSPO's `-min(s_i A_i, clip(s_i) A_i)` per sequence,
    value and gradient; per-token advantages (process rewards, gae) are the GSPO-token variant.
    Shapes: logprobs (with gradient), old_logprobs, advantages, mask, token_weights [B, T].
    Defaults are the paper's bounds (3e-4, 4e-4): token-level bounds such as 0.2 almost never
    bind on a length-normalised ratio. `global_count` replaces the number of sequences.
    `token_weights` w_t (detached) multiply each token's term, as in policy_loss: the clip
    decision stays per sequence; a sequence-level importance weight is not covered.
    Stats: clip fractions and ratio_mean are shares/means over model tokens, each token carrying
    its sequence's ratio (with one advantage per sequence: the token share of clipped
    sequences); approx_kl is the per-token k3, as policy_loss's.
    """
    eps_high = _check_inputs(
        logprobs, old_logprobs, advantages, mask, token_weights, eps_low, eps_high
    )
    valid = mask.bool()
    zero = torch.zeros_like(logprobs)
    log_ratio = torch.where(valid, logprobs - old_logprobs.detach(), zero)
    seq_ratio = torch.exp(masked_mean(log_ratio.detach(), valid, dim=-1))  # [B], sg(s_i)
    current = torch.where(valid, logprobs, zero)
    ratio = seq_ratio[:, None] * torch.exp(current - current.detach())  # [B, T], value s_i
    adv = torch.where(valid, advantages.detach().to(ratio.dtype), zero)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    weights = _token_weights(token_weights, valid, ratio)
    per_token = -torch.minimum(unclipped, clipped) * weights
    loss = aggregate(per_token, valid, "sequence", global_count=global_count)

    with torch.no_grad():
        r = ratio.detach()
        low = (adv < 0) & (r < 1.0 - eps_low)
        high = (adv > 0) & (r > 1.0 + eps_high)
    return PolicyLoss(loss, _stats(low, high, ratio, log_ratio, weights, valid))


def cispo_loss(
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
    """CISPO (MiniMax-M1, 2025): clip the importance weight, not the update.

    Per token, `loss_t = -sg(clip(r_t, 1 - eps_low, 1 + eps_high)) * A_t * logprobs_t * w_t`
    with `r_t = exp(logprobs_t - old_logprobs_t)`: the gradient is `-clip(r_t) * A_t * w_t` times
    d logprob_t on every model token, where PPO's clip would give 0. The value is the paper's
    REINFORCE-style surrogate (it moves with the logprobs themselves), not PPO's `-r * A`.
    Shapes, `eps_high`, aggregation, `norm_len`, `global_count` and `token_weights` w_t as in
    policy_loss; the paper aggregates by token and sets no lower bound (eps_low >= 1 does that).
    Stats: clip_frac_low / clip_frac_high are the shares of model tokens whose weight was
    clipped at 1 - eps_low / 1 + eps_high, whatever the advantage's sign.
    """
    eps_high = _check_inputs(
        logprobs, old_logprobs, advantages, mask, token_weights, eps_low, eps_high
    )
    valid = mask.bool()
    zero = torch.zeros_like(logprobs)
    log_ratio = torch.where(valid, logprobs - old_logprobs.detach(), zero)
    ratio = torch.exp(log_ratio.detach())
    clipped_weight = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    adv = torch.where(valid, advantages.detach().to(ratio.dtype), zero)
    current = torch.where(valid, logprobs, zero)
    weights = _token_weights(token_weights, valid, ratio)
    per_token = -(clipped_weight * adv * weights) * current
    loss = aggregate(per_token, valid, aggregation, norm_len=norm_len, global_count=global_count)

    with torch.no_grad():
        low = ratio < 1.0 - eps_low
        high = ratio > 1.0 + eps_high
    return PolicyLoss(loss, _stats(low, high, ratio, log_ratio, weights, valid))


def _check_inputs(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    token_weights: Tensor | None,
    eps_low: float,
    eps_high: float | None,
) -> float:
    """Check one [B, T] shape and the clip bounds; return eps_high (eps_low when None)."""
    shapes = {tuple(t.shape) for t in (logprobs, old_logprobs, advantages, mask)}
    if token_weights is not None:
        shapes.add(tuple(token_weights.shape))
    if len(shapes) != 1 or logprobs.dim() != 2:
        raise ValueError(
            "logprobs, old_logprobs, advantages, mask (and token_weights) must have one shape "
            f"[B, T]; got {sorted(shapes)}"
        )
    eps_high = eps_low if eps_high is None else eps_high
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"clip bounds must be >= 0, got eps_low={eps_low}, eps_high={eps_high}")
    return eps_high


def _token_weights(token_weights: Tensor | None, valid: Tensor, like: Tensor) -> Tensor:
    """The detached per-token weights, 0 off the mask; ones when there are none."""
    if token_weights is None:
        return torch.ones_like(like)
    return torch.where(valid, token_weights.detach().to(like.dtype), torch.zeros_like(like))


def _stats(
    low: Tensor, high: Tensor, ratio: Tensor, log_ratio: Tensor, weights: Tensor, valid: Tensor
) -> PolicyLossStats:
    with torch.no_grad():
        r = ratio.detach()
        return PolicyLossStats(
            clip_frac_low=masked_mean(low.to(r.dtype), valid),
            clip_frac_high=masked_mean(high.to(r.dtype), valid),
            approx_kl=masked_mean(torch.exp(log_ratio.detach()) - 1.0 - log_ratio.detach(), valid),
            ratio_mean=masked_mean(r, valid),
            is_weight_mean=masked_mean(weights, valid),
            is_capped_frac=torch.zeros((), dtype=r.dtype, device=r.device),
        )
