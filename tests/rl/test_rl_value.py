"""The critic's math on tiny inputs: PPO's clipped value loss, its aggregation and clip fraction,
and explained variance; expected values written as the arithmetic they are."""

from __future__ import annotations

import pytest
import torch

from honing.rl import explained_variance, value_loss


def close(actual: torch.Tensor, expected: torch.Tensor | float) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


def test_value_loss_within_the_clip_is_half_the_squared_error() -> None:
    values = torch.tensor([[0.5, 0.2]])
    old = torch.tensor([[0.4, 0.3]])  # both moved 0.1 < clip 0.2: the clip changes nothing
    returns = torch.tensor([[1.0, 0.0]])
    out = value_loss(values, old, returns, torch.ones(1, 2), clip=0.2)
    # 0.5 * (0.5 - 1)^2 = 0.125 and 0.5 * (0.2 - 0)^2 = 0.02, averaged over 2 tokens
    close(out.loss, (0.125 + 0.02) / 2)
    close(out.clip_frac, 0.0)
    # as a micro-batch of a 4-token step: the sum over the global count
    close(
        value_loss(values, old, returns, torch.ones(1, 2), clip=0.2, global_count=4).loss, 0.145 / 4
    )


def test_value_loss_takes_the_larger_error_and_the_clip_stops_the_gradient() -> None:
    values = torch.tensor([[1.0, -1.0, 0.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0, 9.9]])
    returns = torch.tensor([[1.0, 0.0, 5.0]])
    mask = torch.tensor([[1, 1, 0]])  # the third token is not the model's: never read
    out = value_loss(values, old, returns, mask, clip=0.2)
    # token 0: V = 1 jumped past the clip towards R = 1; clipped V = 0 + 0.2:
    #   unclipped 0.5 * 0^2 = 0, clipped 0.5 * (0.2 - 1)^2 = 0.32 -> 0.32, and the clip binds
    # token 1: V = -1 jumped away from R = 0; clipped V = -0.2:
    #   unclipped 0.5 * 1^2 = 0.5, clipped 0.5 * 0.2^2 = 0.02 -> 0.5, the clip does not bind
    close(out.loss, (0.32 + 0.5) / 2)
    close(out.clip_frac, 1 / 2)
    out.loss.backward()
    assert values.grad is not None
    # token 0's loss is the clipped branch, flat in V; token 1: d/dV 0.5 (V - 0)^2 / 2 = V / 2
    close(values.grad, torch.tensor([[0.0, -1.0 / 2, 0.0]]))


def test_value_loss_aggregates_like_the_policy_loss() -> None:
    values = torch.tensor([[1.0, 2.0], [3.0, 0.0]])
    zero = torch.zeros(2, 2)
    mask = torch.tensor([[1, 1], [1, 0]])
    # old values and returns 0, a clip of 10 (never binds): 0.5 V^2 = [[0.5, 2], [4.5, -]]
    seq = value_loss(values, zero, zero, mask, clip=10.0, aggregation="sequence")
    close(seq.loss, ((0.5 + 2.0) / 2 + 4.5) / 2)
    const = value_loss(values, zero, zero, mask, clip=10.0, aggregation="constant", norm_len=4)
    close(const.loss, ((0.5 + 2.0) / 4 + 4.5 / 4) / 2)


def test_value_loss_rejects_bad_shapes_and_clip() -> None:
    with pytest.raises(ValueError, match="one shape"):
        value_loss(
            torch.zeros(1, 2), torch.zeros(1, 3), torch.zeros(1, 2), torch.ones(1, 2), clip=0.2
        )
    with pytest.raises(ValueError, match="clip must be > 0"):
        value_loss(
            torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), clip=0.0
        )


def test_explained_variance() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0, 9.0]])
    returns = torch.tensor([[1.0, 2.0, 4.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    # R = [1, 2, 4]: mean 7/3, Var = (16/9 + 1/9 + 25/9) / 3 = 14/9
    # R - V = [0, 0, 1]: mean 1/3, Var = (1/9 + 1/9 + 4/9) / 3 = 2/9
    close(explained_variance(values, returns, mask), 1 - (2 / 9) / (14 / 9))
    close(explained_variance(returns, returns, mask), 1.0)  # exact predictions
    close(explained_variance(torch.zeros(1, 4), returns, mask), 0.0)  # no better than nothing
    # returns that do not vary: nothing to explain, 0 rather than NaN
    close(explained_variance(values, torch.ones(1, 4), mask), 0.0)
