"""The critic's math: PPO's clipped value loss, and how much of the returns the values explain.

    value_loss           0.5 * max((V - R)^2, (V_clip - R)^2), V_clip = V_old + clip(V - V_old, ±c)
    explained_variance   1 - Var(R - V) / Var(R) over the model's tokens

The value loss is PPO's (Schulman et al. 2017, as in OpenAI baselines' ppo2, cleanrl, verl and
OpenRLHF); with one optimiser step per batch the clip never binds (docs/training.md, "The RL
math in detail"). Explained variance: 1 predicts the returns exactly, 0 is no better than their
mean, below 0 worse. Not covered: returns and advantages (`honing.rl.advantages`), the value
head and its optimiser (`honing.trainer.learner`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from honing.rl.losses import Aggregation, aggregate
from honing.rl.masking import masked_mean


class ValueLoss(NamedTuple):
    loss: Tensor  # 0-d, differentiable in `values`
    clip_frac: Tensor  # 0-d, detached: share of model tokens where the clip bound (took effect)


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip: float,
    aggregation: Aggregation = "token",
    norm_len: int | None = None,
    global_count: int | float | Tensor | None = None,
) -> ValueLoss:
    """PPO's clipped value loss (see the module docstring), aggregated like the policy loss.

    Shapes: values (the critic's, with gradient), old_values (its predictions when the batch was
    scored; no gradient), returns (the regression target, no gradient), mask [B, T]; returns
    `ValueLoss`. `aggregation`, `norm_len`, `global_count`: as `honing.rl.aggregate`, so that
    micro-batches accumulate to the one-batch gradient. Masked-out positions may hold anything.
    """
    shapes = {tuple(t.shape) for t in (values, old_values, returns, mask)}
    if len(shapes) != 1 or values.dim() != 2:
        raise ValueError(
            f"values, old_values, returns and mask must have one shape [B, T]; got {sorted(shapes)}"
        )
    if clip <= 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    valid = mask.bool()
    zero = torch.zeros_like(values)
    old = torch.where(valid, old_values.detach().to(values.dtype), zero)
    target = torch.where(valid, returns.detach().to(values.dtype), zero)
    current = torch.where(valid, values, zero)
    clipped = old + (current - old).clamp(-clip, clip)
    unclipped_error = (current - target) ** 2
    clipped_error = (clipped - target) ** 2
    per_token = 0.5 * torch.maximum(unclipped_error, clipped_error)
    loss = aggregate(per_token, valid, aggregation, norm_len=norm_len, global_count=global_count)
    with torch.no_grad():
        # the clip binds where it moved the value and the clipped error is the larger; the first
        # condition keeps float rounding of old + (V - old) from counting as a clip
        moved = (current - old).abs() > clip
        binds = (moved & (clipped_error > unclipped_error)).to(values.dtype)
        clip_frac = masked_mean(binds, valid)
    return ValueLoss(loss, clip_frac)


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """`1 - Var(R - V) / Var(R)` over the masked positions (population variances), 0-d.

    Shapes: values, returns, mask [B, T]. Returns 0 when the returns do not vary (or no position is
    set): there is nothing to explain, and a NaN would poison the metric logs.
    """
    if not (values.shape == returns.shape == mask.shape):
        raise ValueError(
            f"values {tuple(values.shape)}, returns {tuple(returns.shape)} and mask "
            f"{tuple(mask.shape)} must have one shape"
        )
    valid = mask.bool()
    v = values.detach().to(torch.float64)
    r = returns.detach().to(torch.float64)
    var_r = masked_mean((r - masked_mean(r, valid)) ** 2, valid)
    residual = r - v
    var_residual = masked_mean((residual - masked_mean(residual, valid)) ** 2, valid)
    if float(var_r) <= 0.0:
        return torch.zeros((), dtype=values.dtype, device=values.device)
    return (1.0 - var_residual / var_r).to(values.dtype)
