"""GSPO's sequence-level ratio and CISPO's clipped importance weight, by hand; and both as the
`loss` of decoupled_policy_loss."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from honing.rl import Aggregation, cispo_loss, decoupled_policy_loss, gspo_loss, policy_loss


def close(actual: torch.Tensor, expected: torch.Tensor | float) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


# 2 sequences x 3 tokens, the last position of the second one padding (garbage: inf).
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, 0.0]])
# token log ratios: sequence 0 averages to log 1.1, sequence 1 to log 0.9
LOG_RATIO = torch.tensor(
    [
        [math.log(1.1) + 0.2, math.log(1.1), math.log(1.1) - 0.2],
        [math.log(0.9) + 0.1, math.log(0.9) - 0.1, float("inf")],
    ]
)


def gspo_logprobs() -> torch.Tensor:
    return (OLD + LOG_RATIO).requires_grad_(True)


def per_sequence(a0: float, a1: float) -> torch.Tensor:
    return torch.tensor([[a0] * 3, [a1] * 3])


def test_gspo_value_and_gradient_inside_the_clip_band() -> None:
    lp = gspo_logprobs()
    out = gspo_loss(lp, OLD, per_sequence(1.0, -1.0), MASK, eps_low=0.2, eps_high=0.2)
    # s_0 = 1.1, s_1 = 0.9, both inside [0.8, 1.2]: the unclipped terms, mean over 2 sequences
    close(out.loss, (-(1.1 * 1.0) - (0.9 * -1.0)) / 2)
    (grad,) = torch.autograd.grad(out.loss, lp)
    # d s_i / d logprob_t = s_i / |y_i|; then / 2 sequences
    close(grad, torch.tensor([[-1.1 / 3 / 2] * 3, [0.9 / 2 / 2, 0.9 / 2 / 2, 0.0]]))
    close(out.stats.ratio_mean, (3 * 1.1 + 2 * 0.9) / 5)  # each token carries its sequence's
    close(out.stats.clip_frac_low + out.stats.clip_frac_high, 0.0)


def test_gspo_clipping_zeroes_the_gradient_of_a_whole_sequence() -> None:
    lp = gspo_logprobs()
    out = gspo_loss(lp, OLD, per_sequence(1.0, 1.0), MASK, eps_low=0.05, eps_high=0.05)
    # s_0 = 1.1 > 1.05 with A > 0: clipped; s_1 = 0.9 with A > 0: min(0.9, 0.95), unclipped
    close(out.loss, (-1.05 - 0.9) / 2)
    (grad,) = torch.autograd.grad(out.loss, lp)
    close(grad, torch.tensor([[0.0, 0.0, 0.0], [-0.9 / 2 / 2, -0.9 / 2 / 2, 0.0]]))
    close(out.stats.clip_frac_high, 3 / 5)  # a share of tokens: sequence 0's 3 of 5
    close(out.stats.clip_frac_low, 0.0)
    # token-level PPO clips sequence 0's first two tokens (1.1 e^0.2, 1.1) but not its third
    ppo = policy_loss(lp, OLD, per_sequence(1.0, 1.0), MASK, eps_low=0.05, eps_high=0.05)
    close(ppo.stats.clip_frac_high, 2 / 5)


def test_gspo_per_token_advantages_clip_by_the_advantage_sign() -> None:
    adv = torch.tensor([[1.0, -1.0, 2.0], [0.0, 0.0, 0.0]])
    out = gspo_loss(gspo_logprobs(), OLD, adv, MASK, eps_low=0.05, eps_high=0.05)
    # s_0 = 1.1: A > 0 takes the clipped 1.05, A < 0 the unclipped 1.1 (pessimistic)
    close(out.loss, (-(1.05 * 1) - (1.1 * -1) - (1.05 * 2)) / 3 / 2)


def sequence_level_gspo(
    lp: torch.Tensor, old: torch.Tensor, adv: list[float], lengths: list[int], eps: float
) -> torch.Tensor:
    """GSPO written out per sequence: s_i = exp(sum of log ratios / |y_i|)."""
    terms = []
    for i, (a, n) in enumerate(zip(adv, lengths, strict=True)):
        s = torch.exp((lp[i, :n] - old[i, :n]).sum() / n)
        terms.append(-torch.minimum(s * a, s.clamp(1 - eps, 1 + eps) * a))
    return torch.stack(terms).mean()


@pytest.mark.parametrize("eps", [0.2, 0.01])
def test_gspo_with_one_advantage_per_sequence_is_the_sequence_level_objective(eps: float) -> None:
    torch.manual_seed(0)
    old = torch.randn(3, 4)
    lp = (old + 0.05 * torch.randn(3, 4)).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])
    adv = [1.5, -0.5, 0.7]
    out = gspo_loss(
        lp, old, torch.tensor(adv)[:, None].expand(3, 4), mask, eps_low=eps, eps_high=eps
    )
    expected = sequence_level_gspo(lp, old, adv, [4, 2, 3], eps)
    close(out.loss, expected.detach())
    (grad,) = torch.autograd.grad(out.loss, lp)
    (grad_expected,) = torch.autograd.grad(expected, lp)
    close(grad, grad_expected)


def test_gspo_token_weights_and_padding_garbage() -> None:
    lp = torch.tensor([[0.0, float("nan")], [float("inf"), -float("inf")]], requires_grad=True)
    mask = torch.tensor([[1, 0], [0, 0]])  # the second sequence has no model token
    out = gspo_loss(
        lp, torch.zeros(2, 2), torch.ones(2, 2), mask, token_weights=torch.full((2, 2), 0.5)
    )
    close(out.loss, -(1.0 * 1 * 0.5) / 1)  # one sequence counts, not two
    (grad,) = torch.autograd.grad(out.loss, lp)
    assert torch.isfinite(grad).all()
    close(out.stats.is_weight_mean, 0.5)


# CISPO: ratios [0.5, 1.0, 1.5] and [1.5, 0.25]; clipped to [0.8, 1.2] as weights
RATIOS = torch.tensor([[0.5, 1.0, 1.5], [1.5, 0.25, 1.0]])


def cispo_logprobs() -> torch.Tensor:
    lp = OLD + RATIOS.log()
    lp[1, 2] = float("nan")  # padding garbage
    return lp.requires_grad_(True)


def test_cispo_value_gradient_and_stats() -> None:
    lp = cispo_logprobs()
    adv = per_sequence(1.0, -1.0)
    out = cispo_loss(lp, OLD, adv, MASK, eps_low=0.2, eps_high=0.2)
    logp = OLD + RATIOS.log()
    terms = [
        -0.8 * 1 * logp[0, 0],
        -1.0 * 1 * logp[0, 1],
        -1.2 * 1 * logp[0, 2],
        -1.2 * -1 * logp[1, 0],
        -0.8 * -1 * logp[1, 1],
    ]
    close(out.loss, sum(terms) / 5)  # token aggregation: / 5 model tokens
    (grad,) = torch.autograd.grad(out.loss, lp)
    close(grad, torch.tensor([[-0.8 / 5, -1.0 / 5, -1.2 / 5], [1.2 / 5, 0.8 / 5, 0.0]]))
    close(out.stats.clip_frac_low, 2 / 5)  # 0.5 and 0.25
    close(out.stats.clip_frac_high, 2 / 5)  # 1.5 and 1.5
    close(out.stats.ratio_mean, (0.5 + 1.0 + 1.5 + 1.5 + 0.25) / 5)


def test_cispo_keeps_the_gradient_where_ppo_clips() -> None:
    adv = per_sequence(1.0, -1.0)
    lp = cispo_logprobs()
    (ppo,) = torch.autograd.grad(policy_loss(lp, OLD, adv, MASK, eps_low=0.2).loss, lp)
    (cispo,) = torch.autograd.grad(cispo_loss(lp, OLD, adv, MASK, eps_low=0.2).loss, lp)
    # ratio 1.5 with A > 0, 0.25 with A < 0: PPO's clip drops them, CISPO weighs them 1.2, 0.8
    assert ppo[0, 2] == 0 and ppo[1, 1] == 0
    close(cispo[0, 2], -1.2 * 1 / 5)
    close(cispo[1, 1], -0.8 * -1 / 5)


def test_cispo_sequence_aggregation_and_no_lower_bound() -> None:
    lp = cispo_logprobs()
    out = cispo_loss(lp, OLD, per_sequence(1.0, -1.0), MASK, eps_low=1.0, aggregation="sequence")
    (grad,) = torch.autograd.grad(out.loss, lp)
    # eps_low = 1 sets no lower bound (the paper's choice): 0.5 and 0.25 are not clipped
    close(
        grad,
        torch.tensor(
            [[-0.5 / 3 / 2, -1.0 / 3 / 2, -1.5 / 3 / 2], [1.5 / 2 / 2, 0.25 / 2 / 2, 0.0]]
        ),
    )


@pytest.mark.parametrize(
    ("kind", "mode"), [("gspo", "sequence"), ("cispo", "token"), ("cispo", "constant")]
)
def test_micro_batches_with_global_count_add_up_to_the_full_batch(
    kind: str, mode: Aggregation
) -> None:
    torch.manual_seed(0)
    lp = torch.randn(4, 5, requires_grad=True)
    old, adv, w = torch.randn(4, 5), torch.randn(4, 5), torch.rand(4, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0], [1, 1, 0, 0, 0]])

    def loss(s: slice, count: int | None) -> torch.Tensor:
        if kind == "gspo":
            return gspo_loss(
                lp[s], old[s], adv[s], mask[s], eps_low=0.2, global_count=count, token_weights=w[s]
            ).loss
        return cispo_loss(
            lp[s],
            old[s],
            adv[s],
            mask[s],
            aggregation=mode,
            norm_len=5,
            global_count=count,
            token_weights=w[s],
        ).loss

    full = loss(slice(0, 4), None)
    count = int(mask.sum()) if mode == "token" else 4
    parts = loss(slice(0, 1), count) + loss(slice(1, 4), count)
    close(parts, full.detach())
    (grad_full,) = torch.autograd.grad(full, lp)
    (grad_parts,) = torch.autograd.grad(parts, lp)
    close(grad_parts, grad_full)


# proximal - behaviour = log of [0.5, 1.5, 3.0] on sequence 0, log 1.0 on sequence 1
PROX = torch.zeros(2, 3)
BEHAV = -torch.tensor([[math.log(0.5), math.log(1.5), math.log(3.0)], [0.0, 0.0, 0.0]])


def test_decoupled_gspo_and_cispo_apply_the_capped_importance_weight() -> None:
    cur = PROX.clone().requires_grad_(True)  # ratio 1 to the proximal policy
    adv = per_sequence(1.0, -1.0)
    gspo = decoupled_policy_loss(
        cur, PROX, BEHAV, adv, MASK, loss="gspo", aggregation="sequence", max_weight=2.0
    )
    close(gspo.loss, (-(0.5 + 1.5 + 2.0) * 1 / 3 - (1.0 + 1.0) * -1 / 2) / 2)
    close(gspo.stats.is_capped_frac, 1 / 5)
    cispo = decoupled_policy_loss(cur, PROX, BEHAV, adv, MASK, loss="cispo", max_weight=2.0)
    (grad,) = torch.autograd.grad(cispo.loss, cur)
    # weight × clip(ratio 1) × A, / 5 tokens; the value is 0 at logprobs 0
    close(grad, torch.tensor([[-0.5 / 5, -1.5 / 5, -2.0 / 5], [1.0 / 5, 1.0 / 5, 0.0]]))
    close(cispo.loss, 0.0)


def test_decoupled_loss_on_policy_is_the_plain_loss() -> None:
    torch.manual_seed(0)
    cur, prox, adv = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    plain = cispo_loss(cur, prox, adv, MASK, eps_high=0.28)
    decoupled = decoupled_policy_loss(
        cur, prox, prox.clone(), adv, MASK, eps_high=0.28, loss="cispo"
    )
    assert torch.equal(decoupled.loss, plain.loss)
    for f in dataclasses.fields(plain.stats):
        assert torch.equal(getattr(decoupled.stats, f.name), getattr(plain.stats, f.name)), f.name


def test_decoupled_gspo_needs_sequence_aggregation_and_the_kind_must_exist() -> None:
    with pytest.raises(ValueError, match="aggregation='sequence'"):
        decoupled_policy_loss(PROX, PROX, PROX, PROX, MASK, loss="gspo")
    with pytest.raises(ValueError, match="'ppo', 'gspo' or 'cispo'"):
        decoupled_policy_loss(PROX, PROX, PROX, PROX, MASK, loss="gpso")  # type: ignore[arg-type]
