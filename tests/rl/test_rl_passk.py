"""Pass@k advantages on tiny groups: expected values written as the arithmetic over the k-subsets
they average, and checked against enumerating every k-subset."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from honing.rl import grpo_advantages, passk_advantages


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected.to(actual.dtype), rtol=1e-6, atol=1e-7)


def enumerated(rewards: list[int], k: int) -> list[float]:
    """By definition: every k-subset scores max of its rewards; a sample's advantage is the mean,
    over the subsets holding it, of (score - mean score) / std score (population std over all
    subsets); 0 when every subset scores the same."""
    subsets = list(itertools.combinations(range(len(rewards)), k))
    score = {s: max(rewards[i] for i in s) for s in subsets}
    p = sum(score.values()) / len(subsets)
    sigma = math.sqrt(sum((v - p) ** 2 for v in score.values()) / len(subsets))
    if sigma == 0:
        return [0.0] * len(rewards)
    return [
        sum((score[s] - p) / sigma for s in subsets if i in s) / math.comb(len(rewards) - 1, k - 1)
        for i in range(len(rewards))
    ]


def test_one_success_in_four_with_k_2_by_its_six_pairs() -> None:
    # pairs {0,1} {0,2} {0,3} pass, {1,2} {1,3} {2,3} fail: p = 3/6, sigma = sqrt(1/2 * 1/2)
    p, sigma = 3 / 6, math.sqrt(0.5 * 0.5)
    success = (1 - p) / sigma  # all 3 pairs holding sample 0 pass
    failure = ((1 + 0 + 0) / 3 - p) / sigma  # sample 1's pairs: {0,1} pass, {1,2} {1,3} fail
    expected = torch.tensor([[success, failure, failure, failure]])
    close(passk_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), k=2), expected)
    close(expected, torch.tensor([[1.0, -1 / 3, -1 / 3, -1 / 3]]))


def test_two_successes_in_five_with_k_2_by_its_ten_pairs() -> None:
    # the 3 pairs of failures fail, the other 7 pass: p = 7/10
    p = 7 / 10
    sigma = math.sqrt(p * (1 - p))
    success = (1 - p) / sigma
    failure = ((1 + 1 + 0 + 0) / 4 - p) / sigma  # its 4 pairs: with each success, each failure
    expected = torch.tensor([[success, success, failure, failure, failure]])
    close(passk_advantages(torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0]]), k=2), expected)
    assert 2 * success + 3 * failure == pytest.approx(0.0, abs=1e-12)


def test_the_closed_form_matches_enumerating_every_k_subset() -> None:
    for n in range(1, 7):
        for rewards in itertools.product([0, 1], repeat=n):
            for k in range(1, n + 1):
                actual = passk_advantages(torch.tensor([rewards], dtype=torch.float64), k=k)
                close(actual, torch.tensor([enumerated(list(rewards), k)]))


def test_flat_groups_of_different_sizes_match_enumeration_per_group() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    groups = torch.tensor([7, 7, 7, 2, 2, 2, 2, 2, 5])
    # group 7 is [1, 0, 0], group 2 is [1, 0, 0, 0, 1], group 5 is [0] (smaller than k: 0)
    expected = torch.zeros(9, dtype=torch.float64)
    expected[[0, 1, 2]] = torch.tensor(enumerated([1, 0, 0], 2), dtype=torch.float64)
    expected[[3, 4, 5, 6, 7]] = torch.tensor(enumerated([1, 0, 0, 0, 1], 2), dtype=torch.float64)
    close(passk_advantages(rewards, groups, k=2), expected)


def test_k_1_is_grpo_with_the_population_std() -> None:
    # [1, 0, 0, 0]: mean 1/4, population std sqrt(1/4 * 3/4)
    std = math.sqrt(1 / 4 * 3 / 4)
    expected = torch.tensor([[(1 - 1 / 4) / std, -1 / 4 / std, -1 / 4 / std, -1 / 4 / std]])
    close(passk_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), k=1), expected)
    mixed = torch.tensor(
        [[1.0, 0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0, 1.0]], dtype=torch.float64
    )
    n = mixed.shape[1]  # unbiased std = population std * sqrt(n / (n - 1))
    close(passk_advantages(mixed, k=1), grpo_advantages(mixed, eps=0.0) * math.sqrt(n / (n - 1)))


def test_groups_without_a_spread_at_k_get_exact_zeros() -> None:
    rewards = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],  # no success
            [1.0, 1.0, 1.0, 1.0],  # no failure
            [1.0, 1.0, 1.0, 0.0],  # one failure < k = 2: every pair passes
        ]
    )
    assert torch.equal(passk_advantages(rewards, k=2), torch.zeros_like(rewards))
    # a group shrunk below k (dropped infrastructure failures) cannot estimate pass@k: 0
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    out = passk_advantages(rewards, torch.tensor([0, 0, 1, 1, 1, 1]), k=3)
    assert torch.equal(out[:2], torch.zeros(2))
    assert bool((out[2:] != 0).all())


def test_a_success_is_pushed_up_and_a_failure_down_in_every_group_with_signal() -> None:
    for n in range(2, 9):
        for c in range(1, n):
            rewards = torch.tensor([[1.0] * c + [0.0] * (n - c)], dtype=torch.float64)
            for k in range(1, n - c + 1):  # at least k failures: some k-subset fails
                a = passk_advantages(rewards, k=k)[0]
                assert bool((a[:c] > 0).all()) and bool((a[c:] < 0).all()), (n, c, k)
                assert float(a.sum()) == pytest.approx(0.0, abs=1e-9)
                # A- = -c / (n - c) * A+ (both are q / sigma times (n - c) / n and -c / n)
                assert float(a[-1]) == pytest.approx(-c / (n - c) * float(a[0]))


def test_large_groups_use_exact_binomials() -> None:
    # n = 2000, one success, k = 1000: f = C(1999, 1000) / C(2000, 1000) = (2000 - 1000) / 2000,
    # so A+ = f / sqrt(f (1 - f)) = 1 and A- = -1 / 1999 · A+ (C(2000, 1000) ~ 1e600)
    n, k = 2000, 1000
    rewards = torch.zeros((1, n), dtype=torch.float64)
    rewards[0, 0] = 1.0
    a = passk_advantages(rewards, k=k)
    close(a[0, :2], torch.tensor([1.0, -1 / 1999], dtype=torch.float64))


def test_dtype_and_bool_rewards() -> None:
    out = passk_advantages(torch.tensor([[True, False, False, False]]), k=2)
    assert out.dtype == torch.get_default_dtype()
    close(out, torch.tensor([[1.0, -1 / 3, -1 / 3, -1 / 3]]))
    half = passk_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float16), k=2)
    assert half.dtype == torch.float16


def test_bad_inputs_are_errors() -> None:
    with pytest.raises(ValueError, match=r"binary rewards \(0 or 1\), got \[0.5\]"):
        passk_advantages(torch.tensor([[1.0, 0.5, 0.0]]), k=2)
    with pytest.raises(ValueError, match=r"k=4: .*1 <= k <= the group size \(3\)"):
        passk_advantages(torch.tensor([[1.0, 0.0, 0.0]]), k=4)
    with pytest.raises(ValueError, match=r"k=0"):
        passk_advantages(torch.tensor([[1.0, 0.0, 0.0]]), k=0)
    with pytest.raises(ValueError, match="NaN or inf"):
        passk_advantages(torch.tensor([[1.0, float("nan")]]), k=1)
