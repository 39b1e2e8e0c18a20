"""One SFT optimiser step with the RL learner: masked mean cross-entropy on assistant tokens.

    stats = sft_update(learner, [seq, ...])  # SftStats; advances learner.steps and .version
    loss = sft_loss(learner, sequences)      # the same loss, no gradient, no step

Covered: micro-batching by the learner's token budget (padding by `honing.trainer.batching`),
each micro-batch's sum divided by the batch's global token count (accumulation equals one big
batch), the shared prefix run once, the LM head only where a target is trained, and the
learner's clipping, optimiser and schedule. Not covered: data, tokenising (`data`, `tokenize`),
the epochs and saving of a run (`run`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from honing.trainer.batching import pack, pad_rows, shared_prefix
from honing.trainer.learner import Learner
from honing.trainer.sft.tokenize import SftSequence


@dataclass(frozen=True, slots=True)
class SftStats:
    """What one `sft_update` did."""

    version: int  # the learner's version after the step
    loss: float  # mean cross-entropy over the batch's assistant tokens (before the step)
    tokens: int  # assistant tokens trained on
    context_tokens: int  # all tokens forwarded (padding excluded)
    sequences: int
    micro_batches: int
    grad_norm: float  # before clipping
    lr: float  # the learning rate this step used
    seconds: float


@dataclass(frozen=True, slots=True)
class _Micro:
    input_ids: Tensor  # [B, T]
    attention_mask: Tensor  # [B, T]
    targets: Tensor  # [B, T-1] bool: input_ids[:, t+1] is an assistant token
    prefix_len: int = 0  # leading tokens every row shares and none trains on (run once)


def _micro_batches(batch: Sequence[SftSequence], pad_id: int, budget: int) -> list[_Micro]:
    out: list[_Micro] = []
    for rows in pack([len(s.token_ids) for s in batch], budget):
        ids, attention, mask = pad_rows(
            [batch[r].token_ids for r in rows], [batch[r].loss_mask for r in rows], pad_id
        )
        out.append(_Micro(ids, attention, mask[:, 1:], shared_prefix(ids, attention, mask)))
    return out


def _assistant_logits(learner: Learner, mb: _Micro) -> tuple[Tensor, Tensor]:
    """Logits [N, V] (float32) at the positions that predict an assistant token, and those
    tokens [N]. The LM head runs only at positions some row needs (`logits_to_keep`, where the
    model takes it): with a vocabulary of 50k and more, projecting every context token is most
    of the cost of a small model's step."""
    device = next(learner.model.parameters()).device
    targets = mb.targets.to(device)
    keep = targets.any(0).nonzero().squeeze(-1)  # positions t whose target t + 1 is trained
    logits = learner.forward_logits(
        learner.model, mb.input_ids, mb.attention_mask, keep, prefix_len=mb.prefix_len
    )
    ids = mb.input_ids.to(device)
    return logits[targets[:, keep]].float(), ids[:, keep + 1][targets[:, keep]]


def sft_update(learner: Learner, batch: Sequence[SftSequence]) -> SftStats:
    """One optimiser step of masked mean cross-entropy over `batch`'s assistant tokens (see the
    module docstring)."""
    start = time.perf_counter()
    cfg = learner.config
    micro = _micro_batches(batch, learner.pad_id, cfg.micro_batch_tokens)
    count = sum(int(m.targets.sum()) for m in micro)
    if count == 0:
        raise ValueError("sft_update: the batch has no assistant tokens to train on")
    lr = float(learner.optimizer.param_groups[0]["lr"])
    total = 0.0
    learner.model.train()
    try:
        for mb in micro:
            logits, labels = _assistant_logits(learner, mb)
            loss = torch.nn.functional.cross_entropy(logits, labels, reduction="sum") / count
            loss.backward()  # type: ignore[no-untyped-call]
            total += float(loss.detach())
    finally:
        learner.model.eval()
    grad_norm = learner.apply_gradients("sft")
    return SftStats(
        version=learner.version,
        loss=total,
        tokens=count,
        context_tokens=sum(int(m.attention_mask.sum()) for m in micro),
        sequences=len(batch),
        micro_batches=len(micro),
        grad_norm=grad_norm,
        lr=lr,
        seconds=time.perf_counter() - start,
    )


@torch.no_grad()
def sft_loss(learner: Learner, sequences: Sequence[SftSequence]) -> float:
    """Mean cross-entropy over the assistant tokens of `sequences` (no gradient, no step)."""
    micro = _micro_batches(sequences, learner.pad_id, learner.config.micro_batch_tokens)
    total, count = 0.0, 0
    for mb in micro:
        logits, labels = _assistant_logits(learner, mb)
        total += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
        count += len(labels)
    return total / max(count, 1)
