"""The clipped policy loss, its aggregations and stats; KL estimators; logprobs and entropy."""

from __future__ import annotations

import math

import pytest
import torch

from honing.rl import (
    Aggregation,
    aggregate,
    entropy_from_logits,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_penalty,
    policy_loss,
    token_entropy,
    token_logprobs,
)


def close(actual: torch.Tensor, expected: torch.Tensor | float) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


RATIOS = [0.5, 1.5, 1.5, 0.5]
ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0]])


def current_logprobs() -> torch.Tensor:
    return torch.tensor([[math.log(r) for r in RATIOS]], requires_grad=True)


def test_clipped_loss_with_clip_higher_and_its_stats() -> None:
    lp = current_logprobs()
    out = policy_loss(lp, torch.zeros(1, 4), ADV, torch.ones(1, 4), eps_low=0.2, eps_high=0.28)
    per_token = [
        -min(0.5 * 1, 0.8 * 1),  # A > 0, ratio below the band: unclipped term is the min
        -min(1.5 * 1, 1.28 * 1),  # A > 0, ratio above 1 + eps_high: clipped
        -min(1.5 * -1, 1.28 * -1),  # A < 0, ratio above the band: unclipped (pessimistic)
        -min(0.5 * -1, 0.8 * -1),  # A < 0, ratio below 1 - eps_low: clipped
    ]
    close(out.loss, sum(per_token) / 4)
    close(out.stats.clip_frac_low, 1 / 4)
    close(out.stats.clip_frac_high, 1 / 4)
    close(out.stats.ratio_mean, (0.5 + 1.5 + 1.5 + 0.5) / 4)
    close(out.stats.approx_kl, sum((r - 1) - math.log(r) for r in RATIOS) / 4)
    close(out.stats.is_weight_mean, 1.0)
    (grad,) = torch.autograd.grad(out.loss, lp)
    # d(-ratio * A)/d logprob = -ratio * A / 4 on unclipped tokens; 0 where clipped
    close(grad, torch.tensor([[-0.5 / 4, 0.0, 1.5 / 4, 0.0]]))


def test_symmetric_clip_by_default() -> None:
    out = policy_loss(current_logprobs(), torch.zeros(1, 4), ADV, torch.ones(1, 4), eps_low=0.2)
    close(out.loss, (-0.5 - 1.2 + 1.5 + 0.8) / 4)


PER_TOKEN = torch.tensor([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the third row is all padding


def test_aggregations() -> None:
    close(aggregate(PER_TOKEN, MASK, "token"), (1 + 2 + 4) / 3)
    close(aggregate(PER_TOKEN, MASK, "sequence"), ((1 + 2) / 2 + 4 / 1) / 2)
    close(aggregate(PER_TOKEN, MASK, "constant", norm_len=4), ((1 + 2) / 4 + 4 / 4) / 2)
    close(aggregate(PER_TOKEN, MASK, "token", global_count=10), (1 + 2 + 4) / 10)
    with pytest.raises(ValueError, match="norm_len"):
        aggregate(PER_TOKEN, MASK, "constant")


@pytest.mark.parametrize("mode", ["token", "sequence", "constant"])
def test_micro_batches_with_global_count_add_up_to_the_full_batch(mode: Aggregation) -> None:
    torch.manual_seed(0)
    lp = torch.randn(4, 5, requires_grad=True)
    old, adv = torch.randn(4, 5), torch.randn(4, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0], [1, 1, 0, 0, 0]])
    full = policy_loss(lp, old, adv, mask, aggregation=mode, norm_len=5).loss
    count = int(mask.sum()) if mode == "token" else 4
    parts = [
        policy_loss(
            lp[s], old[s], adv[s], mask[s], aggregation=mode, norm_len=5, global_count=count
        ).loss
        for s in (slice(0, 1), slice(1, 4))
    ]
    close(parts[0] + parts[1], full.detach())
    (grad_full,) = torch.autograd.grad(full, lp)
    (grad_parts,) = torch.autograd.grad(parts[0] + parts[1], lp)
    close(grad_parts, grad_full)


def test_empty_mask_and_padding_garbage_give_finite_loss_and_grads() -> None:
    lp = torch.tensor([[0.0, float("inf")], [float("nan"), -float("inf")]], requires_grad=True)
    mask = torch.tensor([[1, 0], [0, 0]])
    out = policy_loss(lp, torch.zeros(2, 2), torch.ones(2, 2), mask)
    close(out.loss, -1.0)
    (grad,) = torch.autograd.grad(out.loss, lp)
    assert torch.isfinite(grad).all()
    empty = policy_loss(lp, torch.zeros(2, 2), torch.ones(2, 2), torch.zeros(2, 2))
    assert empty.loss.item() == 0.0 and empty.stats.ratio_mean.item() == 0.0


def test_policy_loss_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="one shape"):
        policy_loss(torch.zeros(1, 3), torch.zeros(1, 3), torch.zeros(1, 2), torch.ones(1, 3))


def test_kl_estimators_by_hand() -> None:
    lp = torch.tensor([[math.log(0.5), math.log(0.25), 0.0]])
    ref = torch.tensor([[math.log(0.25), math.log(0.5), 5.0]])
    mask = torch.tensor([[1, 1, 0]])
    ln2 = math.log(2)  # log r = ref - lp = [-ln2, +ln2]
    close(kl_k1(lp, ref, mask), torch.tensor([[ln2, -ln2, 0.0]]))
    close(kl_k2(lp, ref, mask), torch.tensor([[0.5 * ln2**2, 0.5 * ln2**2, 0.0]]))
    close(kl_k3(lp, ref, mask), torch.tensor([[(0.5 - 1) + ln2, (2 - 1) - ln2, 0.0]]))
    assert torch.equal(kl_penalty(lp, ref, mask, estimator="k2"), kl_k2(lp, ref, mask))


def test_k1_and_k3_expectations_are_the_exact_kl() -> None:
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.2, 0.6])
    exact = (p * (p / q).log()).sum()
    # the expectation under the policy p, computed exactly over the three tokens
    close((p * kl_k1(p.log(), q.log())).sum(), exact)
    close((p * kl_k3(p.log(), q.log())).sum(), exact)


def test_k3_stays_finite_when_the_reference_is_far_likelier() -> None:
    out = kl_k3(torch.tensor([-200.0]), torch.tensor([0.0]))
    assert torch.isfinite(out).all() and out.item() > 0


def test_token_logprobs_with_temperature() -> None:
    logits = torch.tensor([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]])
    ids = torch.tensor([[2, 1]])
    lse = math.log(math.e**1 + math.e**2 + math.e**3)
    close(token_logprobs(logits, ids), torch.tensor([[3 - lse, -math.log(3)]]))
    lse_t2 = math.log(math.e**0.5 + math.e**1.0 + math.e**1.5)
    close(
        token_logprobs(logits, ids, temperature=2.0), torch.tensor([[1.5 - lse_t2, -math.log(3)]])
    )
    # greedy (T = 0) is scored like the engine does: at T = 1
    assert torch.equal(token_logprobs(logits, ids, temperature=0.0), token_logprobs(logits, ids))
    out = token_logprobs(logits.bfloat16(), ids)
    assert out.dtype == torch.float32
    with pytest.raises(ValueError, match="causal LM"):
        token_logprobs(logits, torch.tensor([[2, 1, 0]]))


def test_token_logprobs_match_log_softmax_of_a_random_vocabulary() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 50)
    ids = torch.randint(0, 50, (2, 3))
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, ids[..., None])[..., 0]
    close(token_logprobs(logits, ids, temperature=0.7), expected)


def test_entropy_is_stable_and_masked() -> None:
    inf = float("inf")
    logits = torch.tensor(
        [
            [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -inf, -inf]],  # uniform over 4; over 2 (banned)
            [[1e4, 0.0, 0.0, 0.0], [5.0, 5.0, 5.0, 5.0]],  # one-hot; padding
        ]
    )
    ent = token_entropy(logits)
    assert torch.isfinite(ent).all()
    close(ent, torch.tensor([[math.log(4), math.log(2)], [0.0, math.log(4)]]))
    mask = torch.tensor([[1, 1], [1, 0]])
    close(entropy_from_logits(logits, mask), (math.log(4) + math.log(2) + 0.0) / 3)
    close(entropy_from_logits(logits, torch.zeros(2, 2)), 0.0)
