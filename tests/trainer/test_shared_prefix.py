"""Running a shared prompt prefix once (cache repeated per row) is exact: the same logprobs and
the same gradients as running every row in full, for a full fine-tune and for LoRA."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from honing.records import Group, Trajectory
from honing.trainer.batching import micro_batches
from honing.trainer.config import LearnerConfig, LoraSettings
from honing.trainer.learner import Learner


def group(seed: int) -> Group:
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(10, 4000, (12,), generator=gen).tolist()
    trajectories = []
    for i, outcome in enumerate([1.0, 0.0, 0.0, 1.0]):
        completion = torch.randint(10, 4000, (3 + 2 * i,), generator=gen).tolist()
        ids = prompt + completion
        mask = [0] * len(prompt) + [1] * len(completion)
        trajectories.append(Trajectory(
            task_id="t", domain="math", sample=i, token_ids=ids, loss_mask=mask,
            logprobs=[-2.0 * m for m in mask], versions=[0 if m else -1 for m in mask],
            prompt_len=len(prompt), components={"outcome": outcome},
        ))  # fmt: skip
    return Group(task_id="t", group_id=f"g{seed}", trajectories=trajectories)


def test_a_micro_batch_knows_its_shared_prefix() -> None:
    [mb] = micro_batches(group(0).trajectories, pad_id=0)
    assert mb.prefix_len == 11  # the 12 prompt tokens; the last one predicts the first answer
    rows = group(1).trajectories + group(2).trajectories
    assert [m.prefix_len for m in micro_batches(rows, pad_id=0)] == [0]  # two prompts mixed
    by_prompt = micro_batches(rows, pad_id=0, by_prompt=True)
    assert [m.prefix_len for m in by_prompt] == [11, 11]
    assert sorted(r for m in by_prompt for r in m.rows.tolist()) == list(range(8))


def wrap(forward: Any, calls: list[int]) -> Any:
    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[4] if len(args) > 4 else kwargs.get("prefix_len", 0))
        return forward(*args, **kwargs)

    return spy


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_shared_prefix_gives_the_same_logprobs_and_gradients(
    tiny_model_dir: Path, lora: bool
) -> None:
    adapter = LoraSettings(r=4) if lora else None
    grads = []
    logprobs = []
    for shared in (True, False):
        torch.manual_seed(0)
        learner = Learner(tiny_model_dir, LearnerConfig(lora=adapter, shared_prefix=shared))
        groups = [group(1), group(2)]
        calls: list[int] = []
        learner.forward_logits = wrap(learner.forward_logits, calls)  # type: ignore[method-assign]
        learner.backward(groups)
        grads.append({n: p.grad.clone() for n, p in learner.model.named_parameters()
                      if p.grad is not None})  # fmt: skip
        logprobs.append(learner.logprobs([t for g in groups for t in g.trajectories]))
        assert all(p == (11 if shared else 0) for p in calls)  # the shared path really ran
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name, grad in grads[0].items():
        torch.testing.assert_close(grad, grads[1][name], rtol=1e-4, atol=1e-6, msg=name)
    for a, b in zip(logprobs[0], logprobs[1], strict=True):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=0, atol=1e-5)


def test_sft_runs_the_shared_system_prompt_once_with_the_same_loss_and_gradients(
    tiny_model_dir: Path,
) -> None:
    """SFT examples share their system prompt: it is run once per micro-batch, exactly."""
    from honing.trainer.sft import SftSequence, _assistant_logits, _micro_batches, sft_loss

    rows = [(t.token_ids, t.loss_mask) for g in (group(1), group(2)) for t in g.trajectories]
    seqs = [SftSequence(token_ids=ids, loss_mask=mask) for ids, mask in rows[:4]]
    [mb] = _micro_batches(seqs, 0, 4096)
    assert mb.prefix_len == 11
    results = []
    for shared in (True, False):
        torch.manual_seed(0)
        learner = Learner(tiny_model_dir, LearnerConfig(lora=LoraSettings(r=4),
                                                        shared_prefix=shared))  # fmt: skip
        calls: list[int] = []
        learner.forward_logits = wrap(learner.forward_logits, calls)  # type: ignore[method-assign]
        loss = sft_loss(learner, seqs)
        logits, labels = _assistant_logits(learner, mb)
        torch.nn.functional.cross_entropy(logits, labels).backward()  # type: ignore[no-untyped-call]
        results.append((loss, {n: p.grad.clone() for n, p in learner.model.named_parameters()
                               if p.grad is not None}))  # fmt: skip
        assert calls == [11, 11]  # passed along; the learner uses it when shared_prefix is on
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-6)
    assert results[0][1].keys() == results[1][1].keys() and results[0][1]
    for name, grad in results[0][1].items():
        torch.testing.assert_close(grad, results[1][1][name], rtol=1e-4, atol=1e-6, msg=name)
