"""Masked reductions shared by the RL functions.

A mask is a tensor of the same shape as the values, bool or 0/1 (float or int); it marks the
elements that count (the model's tokens) and leaves out the rest (prompt, observations, padding).
An all-zero mask gives 0, never NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of `values` where `mask` is set. Shapes: values and mask alike; the result drops `dim`
    (or is 0-d when `dim` is None). Masked-out values may be NaN or inf: they are not read."""
    _check_same_shape(values, mask)
    picked = torch.where(mask.bool(), values, torch.zeros_like(values))
    return picked.sum() if dim is None else picked.sum(dim)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `values` where `mask` is set; 0 where nothing is set (a fully padded row, an
    empty batch). Shapes as `masked_sum`."""
    total = masked_sum(values, mask, dim)
    count = mask.bool().sum() if dim is None else mask.bool().sum(dim)
    return total / count.clamp(min=1).to(total.dtype)


def _check_same_shape(values: Tensor, mask: Tensor) -> None:
    if values.shape != mask.shape:
        raise ValueError(
            f"values of shape {tuple(values.shape)} and mask of shape {tuple(mask.shape)} differ: "
            "pass one mask entry per value (mask.expand_as(values) if you mean to broadcast)"
        )
