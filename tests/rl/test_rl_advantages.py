"""Advantage estimators on tiny inputs; expected values written as the arithmetic they are."""

from __future__ import annotations

import math

import pytest
import torch

from honing.rl import (
    broadcast_to_tokens,
    distill_advantages,
    dr_grpo_advantages,
    gae_advantages,
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    token_rewards,
    turn_level_advantages,
    whiten,
)

EPS = 1e-6


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected.to(actual.dtype), rtol=1e-5, atol=1e-6)


def test_grpo_normalises_by_group_mean_and_unbiased_std() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [2.0, 4.0, 2.0, 4.0]])
    std0 = ((0.75**2 + 3 * 0.25**2) / 3) ** 0.5  # = 0.5
    std1 = ((4 * 1.0**2) / 3) ** 0.5
    expected = torch.tensor(
        [
            [0.75 / (std0 + EPS), -0.25 / (std0 + EPS), -0.25 / (std0 + EPS), -0.25 / (std0 + EPS)],
            [-1 / (std1 + EPS), 1 / (std1 + EPS), -1 / (std1 + EPS), 1 / (std1 + EPS)],
        ]
    )
    close(grpo_advantages(rewards), expected)


def test_grpo_flat_rewards_with_unsorted_group_labels_of_different_sizes() -> None:
    rewards = torch.tensor([2.0, 5.0, 4.0, 1.0, 7.0])
    groups = torch.tensor([9, 3, 9, 3, 42])  # group 9: [2, 4]; group 3: [5, 1]; group 42: [7]
    s9, s3 = math.sqrt(2.0), math.sqrt(8.0)
    expected = torch.tensor(
        [(2 - 3) / (s9 + EPS), (5 - 3) / (s3 + EPS), (4 - 3) / (s9 + EPS), (1 - 3) / (s3 + EPS), 0]
    )
    close(grpo_advantages(rewards, groups), expected)


@pytest.mark.parametrize("estimator", [grpo_advantages, dr_grpo_advantages, rloo_advantages])
def test_equal_rewards_and_groups_of_one_give_exact_zeros(estimator) -> None:  # type: ignore[no-untyped-def]
    # 0.1 * 3 / 3 != 0.1 in floating point: the residue must not become a signal.
    rewards = torch.tensor([[0.1, 0.1, 0.1], [1.0, 1.0, 1.0]])
    out = estimator(rewards)
    assert torch.equal(out, torch.zeros_like(rewards))
    single = estimator(torch.tensor([0.7]), torch.tensor([0]))
    assert torch.equal(single, torch.zeros(1))


def test_dr_grpo_subtracts_the_mean_without_std() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [3.0, 1.0, 2.0, 2.0]])
    expected = torch.tensor([[1 - 0.25, 0 - 0.25, 0 - 0.25, 0 - 0.25], [3 - 2, 1 - 2, 0, 0]])
    close(dr_grpo_advantages(rewards), expected)


def test_rloo_uses_the_mean_of_the_other_samples() -> None:
    rewards = torch.tensor([[1.0, 2.0, 3.0, 6.0]])
    expected = torch.tensor(
        [[1 - (2 + 3 + 6) / 3, 2 - (1 + 3 + 6) / 3, 3 - (1 + 2 + 6) / 3, 6 - (1 + 2 + 3) / 3]]
    )
    close(rloo_advantages(rewards), expected)
    # a group of one next to a group of two, flat
    flat = rloo_advantages(torch.tensor([5.0, 1.0, 3.0]), torch.tensor([0, 1, 1]))
    close(flat, torch.tensor([0.0, 1 - 3, 3 - 1]))


def test_reinforce_pp_group_baseline_then_batch_normalisation() -> None:
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    centred = torch.tensor([[0.5, -0.5], [0.0, 0.0], [0.0, 0.0]])
    std = math.sqrt((0.5**2 + 0.5**2) / 5)  # batch mean is 0; unbiased over 6 samples
    close(reinforce_pp_advantages(rewards), centred / (std + EPS))


def test_reinforce_pp_without_baseline_normalises_the_raw_batch() -> None:
    out = reinforce_pp_advantages(torch.tensor([3.0, 1.0]), group_baseline=False)
    close(out, torch.tensor([(3 - 2) / (math.sqrt(2) + EPS), (1 - 2) / (math.sqrt(2) + EPS)]))
    flat = reinforce_pp_advantages(torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    assert torch.equal(flat, torch.zeros(2, 2))  # every group flat: zeros, not NaN


def test_bad_rewards_are_errors() -> None:
    with pytest.raises(ValueError, match="NaN or inf"):
        grpo_advantages(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(ValueError, match="group_ids"):
        grpo_advantages(torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="same shape"):
        grpo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0, 1]))


def test_gae_on_a_fully_masked_in_row() -> None:
    gamma, lam = 0.9, 0.8
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    a2 = 1.0 + gamma * 0.0 - 0.7
    a1 = (0.0 + gamma * 0.7 - 0.6) + gamma * lam * a2
    a0 = (0.0 + gamma * 0.6 - 0.5) + gamma * lam * a1
    out = gae_advantages(rewards, values, torch.ones(1, 3), gamma=gamma, lam=lam)
    close(out.advantages, torch.tensor([[a0, a1, a2]]))
    close(out.returns, torch.tensor([[a0 + 0.5, a1 + 0.6, a2 + 0.7]]))


def test_gae_skips_observation_and_padding_tokens() -> None:
    gamma, lam = 0.9, 0.8
    # model token, observation token, model token, padding
    mask = torch.tensor([[1, 0, 1, 0]])
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 9.0, 0.7, 9.0]])  # values on masked tokens must not be read
    a2 = 1.0 - 0.7
    a0 = (0.0 + gamma * 0.7 - 0.5) + gamma * lam * a2
    out = gae_advantages(rewards, values, mask, gamma=gamma, lam=lam)
    close(out.advantages, torch.tensor([[a0, 0.0, a2, 0.0]]))
    close(out.returns, torch.tensor([[a0 + 0.5, 0.0, a2 + 0.7, 0.0]]))


def test_gae_with_gamma_lambda_one_and_zero_values_is_reward_to_go() -> None:
    rewards = torch.tensor([[0.0, 1.0, 0.0, 2.0], [5.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    out = gae_advantages(rewards, torch.zeros(2, 4), mask)
    close(out.advantages, torch.tensor([[1 + 2, 1 + 2, 2, 2], [5, 0, 0, 0]]))


def test_gae_rejects_a_reward_on_a_masked_token() -> None:
    with pytest.raises(ValueError, match="masked-out token"):
        gae_advantages(torch.tensor([[0.0, 1.0]]), torch.zeros(1, 2), torch.tensor([[1, 0]]))


# prompt | turn 0 (tokens 1, 2) | observation (3) | turn 1 (tokens 4, 5) | observation (6)
TWO_TURNS_MASK = torch.tensor([[0, 1, 1, 0, 1, 1, 0]])
TWO_TURNS_OF = torch.tensor([[-1, 0, 0, -1, 1, 1, -1]])


def test_token_rewards_put_each_reward_on_the_last_token_of_its_turn() -> None:
    out = token_rewards(
        torch.tensor([1.0]), TWO_TURNS_MASK, torch.tensor([[0.5, 0.25]]), TWO_TURNS_OF
    )
    # turn 0's 0.5 on token 2; turn 1's 0.25 and the outcome 1.0 both on token 5: 1.25
    close(out, torch.tensor([[0.0, 0.0, 0.5, 0.0, 0.0, 0.25 + 1.0, 0.0]]))
    # outcome alone
    close(
        token_rewards(torch.tensor([1.0]), TWO_TURNS_MASK),
        torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]]),
    )


def test_token_rewards_without_a_model_token_to_credit_are_dropped() -> None:
    mask = torch.tensor([[0, 0, 0], [0, 1, 0]])
    turn_of = torch.tensor([[-1, -1, -1], [-1, 1, -1]])  # row 1's turn 0 has no model token
    out = token_rewards(
        torch.tensor([3.0, 2.0]), mask, torch.tensor([[7.0, 0.0], [5.0, 0.5]]), turn_of
    )
    # row 0 has no model token at all; row 1: outcome 2 and turn 1's 0.5 on token 1
    close(out, torch.tensor([[0.0, 0.0, 0.0], [0.0, 2.0 + 0.5, 0.0]]))
    with pytest.raises(ValueError, match="together"):
        token_rewards(torch.tensor([1.0, 1.0]), mask, turn_rewards=torch.zeros(2, 2))


def test_gae_over_token_rewards_of_a_two_turn_episode_skips_the_observation() -> None:
    gamma, lam = 1.0, 0.5
    mask = torch.tensor([[0, 1, 1, 0, 1]])  # prompt, turn 0 (1, 2), observation (3), turn 1 (4)
    turn_of = torch.tensor([[-1, 0, 0, -1, 1]])
    rewards = token_rewards(torch.tensor([1.0]), mask, torch.tensor([[0.5, 0.0]]), turn_of)
    values = torch.tensor([[9.0, 0.1, 0.2, 9.0, 0.4]])  # 9.0: not a step, never read
    a4 = 1.0 + gamma * 0.0 - 0.4  # the last step: nothing after it
    a2 = 0.5 + gamma * 0.4 - 0.2 + gamma * lam * a4  # bootstraps from token 4, past the observation
    a1 = 0.0 + gamma * 0.2 - 0.1 + gamma * lam * a2
    out = gae_advantages(rewards, values, mask, gamma=gamma, lam=lam)
    close(out.advantages, torch.tensor([[0.0, a1, a2, 0.0, a4]]))  # 0.6, 1.0, 0.6
    close(out.returns, torch.tensor([[0.0, a1 + 0.1, a2 + 0.2, 0.0, a4 + 0.4]]))


def test_whiten_over_the_masked_positions_of_the_batch() -> None:
    advantages = torch.tensor([[1.0, 2.0, 7.0], [3.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # picked [1, 2, 3]: mean 2, unbiased std sqrt((1 + 0 + 1) / 2) = 1
    expected = torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]) / (1.0 + EPS)
    close(whiten(advantages, mask), expected)
    close(whiten(advantages, torch.tensor([[0, 0, 0], [1, 0, 0]])), torch.zeros(2, 3))  # one
    close(whiten(torch.full((2, 3), 4.0), torch.ones(2, 3)), torch.zeros(2, 3))  # all equal


def test_broadcast_to_tokens() -> None:
    mask = torch.tensor([[0, 1, 1], [1, 0, 0]])
    close(
        broadcast_to_tokens(torch.tensor([2.0, -1.0]), mask), torch.tensor([[0, 2, 2], [-1, 0, 0]])
    )


# Three episodes: 0 and 1 in group "a" with two assistant turns, 2 alone in group "b" with one.
TOKEN_TURNS = torch.tensor(
    [
        [-1, 0, 0, -1, 1, -1],
        [-1, 0, -1, 1, 1, -1],
        [-1, 0, 0, 0, -1, -1],
    ]
)
TURN_MASK = torch.tensor([[1, 1], [1, 1], [1, 0]])
GROUPS = torch.tensor([0, 0, 1])
OUTCOME = torch.tensor([0.5, -0.5, 0.0])


def turn_rewards(r01: float = 0.0) -> torch.Tensor:
    return torch.tensor([[1.0, r01], [0.0, 0.5], [0.3, 0.0]])


def test_turn_level_adds_a_per_turn_group_normalised_process_term() -> None:
    w = 0.1
    out = turn_level_advantages(
        OUTCOME, turn_rewards(), TURN_MASK, TOKEN_TURNS, GROUPS, process_weight=w
    )
    s = math.sqrt((0.5**2 + 0.5**2) / 1) + EPS  # unbiased std of {1, 0}
    s1 = math.sqrt((0.25**2 + 0.25**2) / 1) + EPS  # unbiased std of {0, 0.5}
    p00, p10 = (1 - 0.5) / s, (0 - 0.5) / s  # turn 0 of group a: rewards {1, 0}
    p01, p11 = (0 - 0.25) / s1, (0.5 - 0.25) / s1  # turn 1 of group a: rewards {0, 0.5}
    expected = torch.tensor(
        [
            [0, 0.5 + w * p00, 0.5 + w * p00, 0, 0.5 + w * p01, 0],
            [0, -0.5 + w * p10, 0, -0.5 + w * p11, -0.5 + w * p11, 0],
            [0, 0.0, 0.0, 0.0, 0, 0],  # alone in its group: no process baseline, term 0
        ]
    )
    close(out, expected)


def test_turn_level_with_process_weight_zero_is_the_outcome_advantage() -> None:
    out = turn_level_advantages(
        OUTCOME, turn_rewards(), TURN_MASK, TOKEN_TURNS, GROUPS, process_weight=0.0
    )
    assert torch.equal(out, broadcast_to_tokens(OUTCOME, TOKEN_TURNS >= 0))


def test_a_process_reward_moves_only_its_own_turns_tokens() -> None:
    kwargs = {"process_weight": 0.3}
    before = turn_level_advantages(
        OUTCOME, turn_rewards(0.0), TURN_MASK, TOKEN_TURNS, GROUPS, **kwargs
    )
    after = turn_level_advantages(
        OUTCOME, turn_rewards(2.0), TURN_MASK, TOKEN_TURNS, GROUPS, **kwargs
    )
    changed = before != after
    turn1_of_group_a = (TOKEN_TURNS == 1) & (GROUPS == 0)[:, None]
    assert changed[0, 4]  # the turn whose reward changed
    assert torch.equal(changed, turn1_of_group_a)  # and its peer turn in the group; nothing else


def test_turn_level_rejects_tokens_of_an_absent_turn() -> None:
    bad = TOKEN_TURNS.clone()
    bad[2, 4] = 1  # episode 2 has no second turn
    with pytest.raises(ValueError, match="absent"):
        turn_level_advantages(OUTCOME, turn_rewards(), TURN_MASK, bad, GROUPS, process_weight=1.0)


# -- distill_advantages: on-policy distillation, by hand ---------------------------------------


def test_distill_advantages_are_teacher_minus_student_on_the_trained_tokens() -> None:
    teacher = torch.tensor([[-0.5, -1.0, -3.0], [-2.0, -0.1, float("-inf")]])
    student = torch.tensor([[-1.5, -1.0, -0.5], [-0.2, -0.3, -0.7]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = distill_advantages(teacher, student, mask)
    # -0.5 - -1.5 = 1.0; -1.0 - -1.0 = 0; -3.0 - -0.5 = -2.5; -2.0 - -0.2 = -1.8; -0.1 - -0.3 = 0.2
    expected = torch.tensor([[1.0, 0.0, -2.5], [-1.8, 0.2, 0.0]])
    assert torch.allclose(adv, expected)
    # the reverse KL estimate is the negative mean over the trained tokens: (-1 + 0 + 2.5 + 1.8
    # - 0.2) / 5 = 0.62
    assert -float(adv[mask.bool()].mean()) == pytest.approx(0.62)
    clipped = distill_advantages(teacher, student, mask, clip=1.5)
    assert torch.allclose(clipped, torch.tensor([[1.0, 0.0, -1.5], [-1.5, 0.2, 0.0]]))


def test_distill_advantages_refuse_mismatched_shapes_and_infinite_trained_tokens() -> None:
    with pytest.raises(ValueError, match="one shape"):
        distill_advantages(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="not finite"):
        distill_advantages(torch.tensor([[float("-inf")]]), torch.zeros(1, 1), torch.ones(1, 1))
    with pytest.raises(ValueError, match="clip"):
        distill_advantages(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), clip=0.0)
