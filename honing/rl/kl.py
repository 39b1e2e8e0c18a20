"""KL divergence to a reference model, estimated per token from sampled tokens.

    kl_k1, kl_k2, kl_k3   the three estimators of KL(policy || reference)
    kl_penalty            one of them by name, masked

From Schulman, "Approximating KL Divergence" (2020 blog), with `log r = ref_logprob - logprob`:

    k1 = -log r                 unbiased, high variance, can be negative per token
    k2 = (log r)^2 / 2          biased, low variance, always >= 0
    k3 = (r - 1) - log r        unbiased, low variance, always >= 0 (the usual GRPO choice)

Per token, 0 where mask is 0; k3 clamps `log r` (docs/training.md, "The RL math in detail").
Not covered: the KL-in-reward form (PPO-RLHF, REINFORCE++), where the penalty shapes the
per-token reward instead of being a loss term.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

KLEstimator = Literal["k1", "k2", "k3"]

_LOG_RATIO_BOUND = 20.0


def _log_ratio(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)} and ref_logprobs {tuple(ref_logprobs.shape)} differ"
        )
    return ref_logprobs - logprobs


def _masked(values: Tensor, mask: Tensor | None) -> Tensor:
    if mask is None:
        return values
    if mask.shape != values.shape:
        raise ValueError(f"mask {tuple(mask.shape)} must match logprobs {tuple(values.shape)}")
    return torch.where(mask.bool(), values, torch.zeros_like(values))


def kl_k1(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor | None = None) -> Tensor:
    """k1 = logprob - ref_logprob. Shapes: all [B, T] (or any shape, alike); returns the same."""
    return _masked(-_log_ratio(logprobs, ref_logprobs), mask)


def kl_k2(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor | None = None) -> Tensor:
    """k2 = (logprob - ref_logprob)^2 / 2. Shapes: all [B, T] (or alike); returns the same."""
    return _masked(0.5 * _log_ratio(logprobs, ref_logprobs) ** 2, mask)


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor | None = None) -> Tensor:
    """k3 = exp(log r) - 1 - log r, log r = ref_logprob - logprob clamped to ±20.

    Shapes: all [B, T] (or alike); returns the same.
    """
    log_r = _log_ratio(logprobs, ref_logprobs).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    return _masked(torch.expm1(log_r) - log_r, mask)


def kl_penalty(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor | None = None,
    *,
    estimator: KLEstimator = "k3",
) -> Tensor:
    """The per-token KL estimate named by `estimator`. Shapes: all [B, T]; returns [B, T]."""
    if estimator == "k1":
        return kl_k1(logprobs, ref_logprobs, mask)
    if estimator == "k2":
        return kl_k2(logprobs, ref_logprobs, mask)
    if estimator == "k3":
        return kl_k3(logprobs, ref_logprobs, mask)
    raise ValueError(f"unknown KL estimator {estimator!r}: use 'k1', 'k2' or 'k3'")
