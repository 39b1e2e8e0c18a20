"""Per-token quantities read from a model's logits: the logprob of given tokens, the entropy.

    token_logprobs       log_softmax(logits / T) at the given token ids (T: one, or one per row)
    token_entropy        entropy of softmax(logits / T) per position
    entropy_from_logits  its masked mean

Exactly what the engine reports (temperature-scaled, before top-k/top-p, T = 0 scored as T = 1),
in float32, so that the ratio is not biased from the first step (docs/training.md, "The RL math
in detail"). Alignment is the caller's: `logits[:, t]` must be the distribution *of*
`token_ids[:, t]`; for a causal LM's forward pass that means `logits[:, :-1]` with
`input_ids[:, 1:]`. Not covered: chunking over the sequence to bound the [B, T, V] float32 copy
(the learner's micro-batching does that).
"""

from __future__ import annotations

import torch
from torch import Tensor

from honing.rl.masking import masked_mean

Temperature = float | Tensor  # one for all rows, or [B] (a row's own: per-task exploration)


def _scaled_log_softmax(logits: Tensor, temperature: Temperature) -> Tensor:
    scaled = logits.float()
    if isinstance(temperature, Tensor):
        if temperature.shape != logits.shape[:1]:
            raise ValueError(
                f"temperature of shape {tuple(temperature.shape)}: pass one per row, "
                f"[{logits.shape[0]}]"
            )
        if bool((temperature < 0).any()):
            raise ValueError("a temperature is negative: use 0 (greedy) or more")
        t = torch.where(temperature == 0, torch.ones_like(temperature), temperature).float()
        return torch.log_softmax(scaled / t.reshape(-1, *([1] * (logits.dim() - 1))), dim=-1)
    if temperature < 0:
        raise ValueError(f"temperature {temperature} is negative: use 0 (greedy) or more")
    if temperature not in (0.0, 1.0):
        scaled = scaled / temperature
    return torch.log_softmax(scaled, dim=-1)


def token_logprobs(logits: Tensor, token_ids: Tensor, *, temperature: Temperature = 1.0) -> Tensor:
    """`log_softmax(logits / temperature)[..., token_ids]`, in float32.

    Shapes: logits [B, T, V], token_ids [B, T] (long); returns [B, T] float32. `temperature`:
    one float, or [B], each row's own. 0 means greedy sampling and is scored at temperature 1,
    as the engine does.
    """
    if logits.shape[:-1] != token_ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and token_ids {tuple(token_ids.shape)}: need [B, T, V] "
            "and [B, T] (for a causal LM pass logits[:, :-1] with input_ids[:, 1:])"
        )
    logp = _scaled_log_softmax(logits, temperature)
    return logp.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: Tensor, *, temperature: Temperature = 1.0) -> Tensor:
    """Entropy `-sum_v p_v log p_v` of `softmax(logits / temperature)` at each position, float32.

    Shapes: logits [B, T, V]; returns [B, T]; temperature as `token_logprobs`. Stable for large
    logits (log-softmax, no exp overflow) and for -inf logits (banned tokens: p = 0 contributes
    0, not NaN).
    """
    logp = _scaled_log_softmax(logits, temperature)
    p_logp = logp.exp() * logp
    return -torch.where(torch.isneginf(logp), torch.zeros_like(p_logp), p_logp).sum(-1)


def entropy_from_logits(logits: Tensor, mask: Tensor, *, temperature: Temperature = 1.0) -> Tensor:
    """Mean token entropy over the positions where mask is set; 0-d, 0 for an empty mask.

    Shapes: logits [B, T, V], mask [B, T].
    """
    return masked_mean(token_entropy(logits, temperature=temperature), mask)
