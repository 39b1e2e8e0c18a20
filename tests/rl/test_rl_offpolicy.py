"""Decoupled PPO's capped importance weights and the per-token staleness bound."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from honing.rl import decoupled_policy_loss, policy_loss, staleness_mask, token_staleness


def close(actual: torch.Tensor, expected: torch.Tensor | float) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


def test_on_policy_tokens_give_exactly_the_ppo_loss() -> None:
    torch.manual_seed(0)
    cur, prox, adv = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0]])
    plain = policy_loss(cur, prox, adv, mask, eps_high=0.28)
    decoupled = decoupled_policy_loss(cur, prox, prox.clone(), adv, mask, eps_high=0.28)
    assert torch.equal(decoupled.loss, plain.loss)
    for f in dataclasses.fields(plain.stats):
        assert torch.equal(getattr(decoupled.stats, f.name), getattr(plain.stats, f.name)), f.name
    close(decoupled.stats.is_weight_mean, 1.0)
    close(decoupled.stats.is_capped_frac, 0.0)


# proximal - behaviour = log of [0.5, 1.5, 3.0]: the third weight is above the cap of 2
PROX = torch.zeros(1, 3)
BEHAV = -torch.tensor([[math.log(0.5), math.log(1.5), math.log(3.0)]])
ADV = torch.ones(1, 3)
MASK = torch.ones(1, 3)


def test_truncated_importance_weights() -> None:
    cur = PROX.clone().requires_grad_(True)  # ratio 1: only the weights matter
    out = decoupled_policy_loss(cur, PROX, BEHAV, ADV, MASK, max_weight=2.0)
    close(out.loss, -(0.5 * 1 + 1.5 * 1 + 2.0 * 1) / 3)
    close(out.stats.is_weight_mean, (0.5 + 1.5 + 2.0) / 3)
    close(out.stats.is_capped_frac, 1 / 3)
    (grad,) = torch.autograd.grad(out.loss, cur)
    close(grad, torch.tensor([[-0.5 / 3, -1.5 / 3, -2.0 / 3]]))  # weight × d(-ratio·A)


def test_masking_importance_weights_drops_tokens_above_the_cap() -> None:
    out = decoupled_policy_loss(PROX, PROX, BEHAV, ADV, MASK, max_weight=2.0, cap_mode="mask")
    close(out.loss, -(0.5 * 1 + 1.5 * 1) / 2)  # the capped token leaves the count too
    close(out.stats.is_capped_frac, 1 / 3)


def test_the_ratio_is_clipped_around_the_proximal_policy_not_the_behaviour() -> None:
    # current is 1.5x the proximal policy: clipped at 1.2 whatever the behaviour policy was
    cur = torch.full((1, 3), math.log(1.5))
    out = decoupled_policy_loss(cur, PROX, BEHAV, ADV, MASK, max_weight=2.0, eps_low=0.2)
    close(out.loss, -(0.5 * 1.2 + 1.5 * 1.2 + 2.0 * 1.2) / 3)
    close(out.stats.clip_frac_high, 1.0)


def test_bad_cap_is_an_error() -> None:
    with pytest.raises(ValueError, match="max_weight"):
        decoupled_policy_loss(PROX, PROX, BEHAV, ADV, MASK, max_weight=0.5)


VERSIONS = torch.tensor([[3, 3, -1, 5, 4], [-1, 5, 5, -1, -1]])
VMASK = torch.tensor([[1, 1, 0, 1, 1], [0, 1, 1, 0, 0]])


def test_token_staleness_and_the_staleness_mask() -> None:
    assert torch.equal(
        token_staleness(VERSIONS, 5, VMASK),
        torch.tensor([[5 - 3, 5 - 3, 0, 5 - 5, 5 - 4], [0] * 5]),
    )
    kept = staleness_mask(VERSIONS, 5, VMASK, max_staleness=1)
    assert torch.equal(kept, torch.tensor([[0, 0, 0, 1, 1], [0, 1, 1, 0, 0]]).bool())
    on_policy = staleness_mask(VERSIONS, 5, VMASK, max_staleness=0)
    assert torch.equal(on_policy, torch.tensor([[0, 0, 0, 1, 0], [0, 1, 1, 0, 0]]).bool())


def test_broken_version_bookkeeping_is_an_error() -> None:
    with pytest.raises(ValueError, match="no policy version"):
        token_staleness(VERSIONS, 5, torch.ones(2, 5))
    with pytest.raises(ValueError, match="newer than the current version"):
        token_staleness(VERSIONS, 4, VMASK)
