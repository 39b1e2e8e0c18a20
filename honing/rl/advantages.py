"""Advantage estimators: one scalar per sequence from group rewards, or one value per token.

    grpo_advantages           (r - group mean) / (group std + eps)            Shao et al. 2024
    dr_grpo_advantages        r - group mean                                  Liu et al. 2025
    rloo_advantages           r - mean of the *other* samples of the group    Ahmadian et al. 2024
    reinforce_pp_advantages   group baseline, then normalised over the batch  Hu 2025
    passk_advantages          pass@k of the group's k-subsets, analytically   Chen et al. 2025
    gae_advantages            GAE over the model's tokens with a value head   Schulman et al. 2016
    distill_advantages        per token: teacher logprob - student logprob    Agarwal et al. 2024
    token_rewards / whiten / turn_level_advantages / broadcast_to_tokens      (see each docstring)

Groups are `rewards` [G, n], or flat [N] with `group_ids` [N]; a group whose rewards are all
equal gets advantages of exactly 0, never NaN, and a non-finite reward is an error
(docs/training.md, "The RL math in detail"). Not covered: the policy loss (`honing.rl.losses`),
dropping zero-variance groups (the learner's choice), and KL-in-reward shaping (honing applies
KL as a loss term, `honing.rl.kl`).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import torch
from torch import Tensor


class _Groups(NamedTuple):
    rewards: Tensor  # [N] float
    group: Tensor  # [N] long in [0, n_groups)
    n_groups: int


def _groups(rewards: Tensor, group_ids: Tensor | None) -> _Groups:
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError(
            "rewards contain NaN or inf: fix the reward function (an environment failure should "
            "be recorded as a failure, not as a non-finite reward)"
        )
    if group_ids is None:
        if rewards.dim() != 2:
            raise ValueError(
                f"rewards of shape {tuple(rewards.shape)}: pass [G, n] (one group per row) "
                "or flat [N] rewards together with group_ids [N]"
            )
        g, n = rewards.shape
        index = torch.arange(g, device=rewards.device).repeat_interleave(n)
        return _Groups(rewards.reshape(-1), index, g)
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"group_ids of shape {tuple(group_ids.shape)} need flat rewards of the same shape, "
            f"got rewards of shape {tuple(rewards.shape)}"
        )
    labels, index = torch.unique(group_ids, return_inverse=True)
    return _Groups(rewards, index, len(labels))


class _GroupStats(NamedTuple):
    centred: Tensor  # [N] r - group mean; exactly 0 in groups whose rewards are all equal
    std: Tensor  # [N] the group's unbiased std (0 for a group of one)
    size: Tensor  # [N] the group's size, float


def _group_stats(groups: _Groups) -> _GroupStats:
    r, index, g = groups
    zeros = torch.zeros(g, dtype=r.dtype, device=r.device)
    size = zeros.index_add(0, index, torch.ones_like(r))
    mean = zeros.index_add(0, index, r) / size
    centred = r - mean[index]
    var = zeros.index_add(0, index, centred**2) / (size - 1).clamp(min=1)
    hi = torch.full_like(zeros, -torch.inf).scatter_reduce(0, index, r, "amax")
    lo = torch.full_like(zeros, torch.inf).scatter_reduce(0, index, r, "amin")
    # r - mean is not exactly 0 in floating point even when all r are equal (0.1 * 3 / 3 ≠ 0.1);
    # dividing such a residue by a tiny std would turn it into a spurious signal.
    flat = (hi == lo)[index]
    centred = torch.where(flat, torch.zeros_like(centred), centred)
    return _GroupStats(centred, var.sqrt()[index], size[index])


def grpo_advantages(
    rewards: Tensor, group_ids: Tensor | None = None, *, eps: float = 1e-6
) -> Tensor:
    """GRPO (Shao et al. 2024, "DeepSeekMath", outcome supervision): `(r - mean_g) / (std_g + eps)`.

    Shapes: rewards [G, n], or [N] with group_ids [N]; returns the same shape as rewards.
    std is the unbiased (Bessel-corrected) sample std, as in TRL and verl. Leaves out GRPO's
    process supervision (see `turn_level_advantages`) and its KL term (a loss term here). The std
    division over-weights near-uniform groups (the "question-level difficulty bias" Dr.GRPO
    removes).
    """
    groups = _groups(rewards, group_ids)
    stats = _group_stats(groups)
    return (stats.centred / (stats.std + eps)).reshape(rewards.shape)


def dr_grpo_advantages(rewards: Tensor, group_ids: Tensor | None = None) -> Tensor:
    """Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): `r - mean_g`, no std.

    Shapes: rewards [G, n], or [N] with group_ids [N]; returns the same shape as rewards.
    Dr.GRPO's other half — no per-sequence length normalisation — lives in the loss: use
    `policy_loss(..., aggregation="constant", norm_len=max_new_tokens)`.
    """
    groups = _groups(rewards, group_ids)
    return _group_stats(groups).centred.reshape(rewards.shape)


def rloo_advantages(rewards: Tensor, group_ids: Tensor | None = None) -> Tensor:
    """RLOO (Ahmadian et al. 2024, "Back to Basics"): `r_i - mean_{j≠i} r_j` within the group.

    Shapes: rewards [G, n], or [N] with group_ids [N]; returns the same shape as rewards.
    Computed as `n / (n - 1) * (r_i - mean_g)`, which is the same quantity. A group of one has no
    other sample to form a baseline from and gets 0 (the paper assumes k ≥ 2 samples).
    """
    groups = _groups(rewards, group_ids)
    stats = _group_stats(groups)
    n = stats.size
    scale = torch.where(n > 1, n / (n - 1).clamp(min=1), torch.zeros_like(n))
    return (stats.centred * scale).reshape(rewards.shape)


def reinforce_pp_advantages(
    rewards: Tensor,
    group_ids: Tensor | None = None,
    *,
    group_baseline: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """REINFORCE++ (Hu 2025, "REINFORCE++: a simple and efficient approach for aligning LLMs").

    Shapes: rewards [G, n], or [N] with group_ids [N] (or [N] alone when `group_baseline` is
    False); returns the same shape as rewards.
    With `group_baseline` (the paper's "REINFORCE++-baseline", for grouped samples) the group mean
    is subtracted first; then the advantages are normalised over the whole batch,
    `(a - mean_batch) / (std_batch + eps)`, instead of per group as GRPO does. Leaves out the
    paper's per-token KL penalty folded into the reward (a loss term here), and normalises over
    sequences rather than over tokens, so long and short answers weigh the same in the statistics.
    """
    if group_baseline:
        a = _group_stats(_groups(rewards, group_ids)).centred
    else:
        a = _groups(rewards.reshape(-1, 1), None).rewards
    if a.numel() < 2 or bool(a.max() == a.min()):
        return torch.zeros_like(a).reshape(rewards.shape)
    return ((a - a.mean()) / (a.std() + eps)).reshape(rewards.shape)


def passk_advantages(rewards: Tensor, group_ids: Tensor | None = None, *, k: int) -> Tensor:
    """Pass@k advantages (Chen et al. 2025, "Pass@k Training for Adaptively Balancing Exploration
    and Exploitation of Large Reasoning Models"; the objective of Walder & Karkhanis 2025,
    "Pass@K Policy Optimization"): train for "one of k samples succeeds", not for the mean.

    Shapes: rewards [G, n], or [N] with group_ids [N]; returns the same shape as rewards.
    Rewards must be binary (0 or 1); anything else is an error. With n samples of which c
    passed, a k-subset of the group (one of C(n, k)) scores max of its rewards, 1 unless all k
    failed, so the group's pass@k is `p = 1 - f` with `f = C(n - c, k) / C(n, k)`, and the
    k-subset scores have std `sigma = sqrt(f (1 - f))`. A sample's advantage is the mean, over
    the C(n - 1, k - 1) k-subsets that hold it, of the normalised `(score - p) / sigma`:
        success:  every subset holding it scores 1               A = f / sigma
        failure:  a subset holding it scores 0 with probability  A = (f - q) / sigma,
                  q = C(n - c - 1, k - 1) / C(n - 1, k - 1)    (the other k - 1 all failed)
    Since f = (n - c) / n * q, these are `(n - c) q / (n sigma)` and `-c q / (n sigma)`: of
    opposite signs and summing to 0 over the group. k = 1 is GRPO with the population std,
    `(r - mean) / std_pop`, no eps. A group with no success, or fewer than k failures (every
    k-subset passes: sigma = 0, pass@k is already 1), gets 0, as does a group smaller than k
    (e.g. after infrastructure failures were dropped: pass@k needs k samples). Binomials are
    exact (`math.comb`), one ratio per distinct (size, successes). Leaves out Chen et al.'s
    mixing of pass@k with pass@1 advantages, and PKPO's non-binary rewards and its per-sample
    unbiased gradient estimators.
    """
    groups = _groups(rewards, group_ids)
    r, index, g = groups
    if not bool(((r == 0) | (r == 1)).all()):
        found = sorted(set(r.tolist()) - {0.0, 1.0})[:3]
        raise ValueError(
            f"passk advantages need binary rewards (0 or 1), got {found}: pass@k counts "
            "successes; use grpo (or another estimator) for graded rewards"
        )
    if r.numel() == 0:
        return torch.zeros_like(r).reshape(rewards.shape)
    zeros = torch.zeros(g, dtype=torch.long, device=r.device)
    size = zeros.index_add(0, index, torch.ones_like(index))
    passed = zeros.index_add(0, index, (r == 1).long())
    largest = int(size.max())
    if not 1 <= k <= largest:
        raise ValueError(f"k={k}: pass@k advantages need 1 <= k <= the group size ({largest})")
    per_group = [_passk_pair(n, c, k) for n, c in zip(size.tolist(), passed.tolist(), strict=True)]
    pairs = torch.tensor(per_group, dtype=torch.float64, device=r.device)  # [G, 2]
    chosen = torch.where(r == 1, pairs[index, 0], pairs[index, 1])
    return chosen.to(r.dtype).reshape(rewards.shape)


@lru_cache(maxsize=4096)
def _passk_pair(n: int, c: int, k: int) -> tuple[float, float]:
    """(a success's, a failure's) pass@k advantage in a group of n samples with c successes."""
    failed = n - c
    if c == 0 or failed < k:
        return 0.0, 0.0
    f = math.comb(failed, k) / math.comb(n, k)  # int / int: correctly rounded, any size
    q = math.comb(failed - 1, k - 1) / math.comb(n - 1, k - 1)
    sigma = math.sqrt(f * (1.0 - f))
    return f / sigma, (f - q) / sigma


class GAE(NamedTuple):
    advantages: Tensor  # [B, T], 0 where mask is 0
    returns: Tensor  # [B, T] advantages + values: the value head's regression target


def gae_advantages(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> GAE:
    """Generalised advantage estimation (Schulman et al. 2016) over the model's tokens.

    Shapes: rewards, values, mask [B, T] (mask 1 on the model's tokens); returns `GAE` of
    advantages and returns [B, T], both 0 where mask is 0.
    `delta_t = r_t + gamma * V_next - V_t`, `A_t = delta_t + gamma * lam * A_next`, where "next"
    is the next *model* token of the row: prompt, observation and padding tokens are the
    environment's, not actions, so they are skipped rather than treated as steps (multi-turn
    episodes are one chain of actions; gamma discounts per model token). After the last model
    token, V_next = 0 (the episode ended). A reward must sit on a model token (usually the last
    one of its turn); one on a masked position is an error rather than silently lost.
    Leaves out advantage whitening (`whiten`) and the value loss (`honing.rl.value`).
    """
    if not (rewards.shape == values.shape == mask.shape) or rewards.dim() != 2:
        raise ValueError(
            f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and mask "
            f"{tuple(mask.shape)} must all be [B, T]"
        )
    valid = mask.bool()
    if bool((rewards.masked_select(~valid) != 0).any()):
        raise ValueError(
            "a reward sits on a masked-out token (prompt, observation or padding): place each "
            "reward on a model token, e.g. the last token of the turn it scores"
        )
    values = values.detach()
    b, t = rewards.shape
    advantages = torch.zeros_like(values)
    next_value = torch.zeros(b, dtype=values.dtype, device=values.device)
    next_adv = torch.zeros_like(next_value)
    for i in range(t - 1, -1, -1):
        delta = rewards[:, i] + gamma * next_value - values[:, i]
        adv = delta + gamma * lam * next_adv
        here = valid[:, i]
        advantages[:, i] = torch.where(here, adv, torch.zeros_like(adv))
        next_value = torch.where(here, values[:, i], next_value)
        next_adv = torch.where(here, adv, next_adv)
    returns = torch.where(valid, advantages + values, torch.zeros_like(values))
    return GAE(advantages, returns)


def token_rewards(
    outcome: Tensor,
    mask: Tensor,
    turn_rewards: Tensor | None = None,
    token_turns: Tensor | None = None,
) -> Tensor:
    """The per-token rewards `gae_advantages` takes: each episode's outcome reward on its last
    model token, and each assistant turn's reward on the last model token of that turn.

    Shapes: outcome [N], mask [N, T] (1 on the model's tokens: GAE's steps), turn_rewards [N, K]
    (the reward to add for the k-th assistant turn, already weighted; e.g. its process reward),
    token_turns [N, T] long (the turn, 0..K-1, of each model token; -1 elsewhere: as
    honing.trainer.batching.turn_rewards gives it); returns [N, T], 0 off those positions.
    A turn's reward lands where its last token with `mask` set is; both rewards of an episode's
    last turn land on the same token and add up. A row (or turn) without a masked-in token gets
    nothing: there is no action of the model to credit. Pass turn_rewards and token_turns
    together, or neither (outcome only).
    """
    if outcome.dim() != 1 or mask.dim() != 2 or mask.shape[0] != outcome.shape[0]:
        raise ValueError(
            f"outcome {tuple(outcome.shape)} and mask {tuple(mask.shape)}: need [N] and [N, T]"
        )
    if (turn_rewards is None) != (token_turns is None):
        raise ValueError("pass turn_rewards and token_turns together (or neither)")
    if not outcome.is_floating_point():
        outcome = outcome.to(torch.get_default_dtype())
    n, t = mask.shape
    valid = mask.bool()
    positions = torch.arange(t, device=mask.device)
    out = torch.zeros((n, t), dtype=outcome.dtype, device=outcome.device)
    last = torch.where(valid, positions, -1).amax(dim=1)  # [N]; -1: no model token
    (rows,) = (last >= 0).nonzero(as_tuple=True)
    out.index_put_((rows, last[rows]), outcome[rows], accumulate=True)
    if turn_rewards is None or token_turns is None:
        return out
    k = turn_rewards.shape[1]
    if turn_rewards.shape != (n, k) or token_turns.shape != (n, t):
        raise ValueError(
            f"turn_rewards {tuple(turn_rewards.shape)} and token_turns "
            f"{tuple(token_turns.shape)}: need [N, K] and [N, T] with N = {n}, T = {t}"
        )
    turns = torch.arange(k, device=mask.device)
    on_turn = (token_turns[:, None, :] == turns[None, :, None]) & valid[:, None, :]  # [N, K, T]
    turn_last = torch.where(on_turn, positions, -1).amax(dim=2)  # [N, K]
    rows, turn = (turn_last >= 0).nonzero(as_tuple=True)
    out.index_put_(
        (rows, turn_last[rows, turn]), turn_rewards[rows, turn].to(out.dtype), accumulate=True
    )
    return out


def whiten(advantages: Tensor, mask: Tensor, *, eps: float = 1e-6) -> Tensor:
    """`(A - mean) / (std + eps)` over the masked positions of the whole batch, 0 elsewhere.

    Shapes: advantages, mask [B, T]; returns [B, T]. The batch-level normalisation PPO
    implementations apply to GAE advantages (verl, OpenRLHF, cleanrl's `norm_adv`); std is the
    unbiased sample std, as in `reinforce_pp_advantages`. Fewer than two masked positions, or
    all of them equal, give exactly 0 (nothing to rank), never NaN.
    """
    if advantages.shape != mask.shape or advantages.dim() != 2:
        raise ValueError(
            f"advantages {tuple(advantages.shape)} and mask {tuple(mask.shape)}: need both [B, T]"
        )
    valid = mask.bool()
    picked = advantages[valid]
    zero = torch.zeros_like(advantages)
    if picked.numel() < 2 or bool(picked.max() == picked.min()):
        return zero
    normalised = (advantages - picked.mean()) / (picked.std() + eps)
    return torch.where(valid, normalised, zero)


def broadcast_to_tokens(advantages: Tensor, mask: Tensor) -> Tensor:
    """One advantage per sequence onto each of its model tokens.

    Shapes: advantages [N], mask [N, T]; returns [N, T], 0 where mask is 0.
    """
    if advantages.dim() != 1 or mask.dim() != 2 or mask.shape[0] != advantages.shape[0]:
        raise ValueError(
            f"advantages {tuple(advantages.shape)} and mask {tuple(mask.shape)}: "
            "need [N] and [N, T]"
        )
    return torch.where(mask.bool(), advantages[:, None], torch.zeros((), dtype=advantages.dtype))


def turn_level_advantages(
    outcome_advantages: Tensor,
    turn_rewards: Tensor,
    turn_mask: Tensor,
    token_turns: Tensor,
    group_ids: Tensor,
    *,
    process_weight: float,
    eps: float = 1e-6,
) -> Tensor:
    """Per-token advantages from an outcome advantage plus turn-level (process) rewards.

    Shapes: outcome_advantages [N] (any estimator above, e.g. GRPO on the outcome component),
    turn_rewards [N, K] (the process reward of the k-th assistant turn of each episode: the
    reward of the observation step after it), turn_mask [N, K] (1 where the episode has a k-th
    turn), token_turns [N, T] long (which assistant turn, 0..K-1, each token belongs to; -1 on
    tokens that are not the model's: prompt, observations, padding), group_ids [N].
    Returns [N, T]: `A_outcome[i] + process_weight * A_process[i, k]` on the tokens of turn k,
    0 on tokens with token_turns == -1.

    `A_process[i, k]` is GRPO-normalised among the k-th turns of the same group (mean and std of
    the turn-k rewards of the group's episodes that have a turn k), as in MT-GRPO (Zeng et al.
    2025, "Reinforcing Multi-Turn Reasoning in LLM Agents via Turn-Level Credit Assignment").
    Why this choice: the process term is zero-mean within each (group, turn) cell, so it re-ranks
    turns against their peers but adds no net push to the group — the outcome signal is neither
    biased nor rescaled, and with `process_weight=0` the result *is* the outcome advantage. A
    process reward moves only the tokens of its own turn (and, through the cell's baseline, the
    same turn of the group's other episodes), never another turn's tokens. It is not summed into
    a return-to-go (as DeepSeekMath's process supervision does), which would let an early turn's
    credit leak into later turns. It assumes turn k is comparable across a group's episodes —
    true for the first turn, an approximation later, where episodes have diverged (GiGPO's
    anchor-state grouping is the refinement, not done here). Pass the *outcome* component as the
    outcome reward: Trajectory.reward already sums process rewards, and feeding it would count
    them twice.
    """
    n, k = turn_rewards.shape
    if outcome_advantages.shape != (n,) or turn_mask.shape != (n, k) or group_ids.shape != (n,):
        raise ValueError(
            f"outcome_advantages {tuple(outcome_advantages.shape)}, turn_rewards "
            f"{tuple(turn_rewards.shape)}, turn_mask {tuple(turn_mask.shape)}, group_ids "
            f"{tuple(group_ids.shape)}: need [N], [N, K], [N, K], [N]"
        )
    if token_turns.dim() != 2 or token_turns.shape[0] != n:
        raise ValueError(f"token_turns {tuple(token_turns.shape)}: need [N, T] with N = {n}")
    if bool((token_turns >= k).any()) or bool((token_turns < -1).any()):
        raise ValueError(f"token_turns must be in -1..{k - 1} (-1: not a model token)")
    has_turn = turn_mask.bool()
    on_turn = token_turns >= 0
    turn_of_token = token_turns.clamp(min=0)
    if bool((on_turn & ~has_turn.gather(1, turn_of_token)).any()):
        raise ValueError("a token belongs to a turn that turn_mask marks absent")

    process = torch.zeros_like(turn_rewards, dtype=outcome_advantages.dtype)
    if process_weight != 0.0 and bool(has_turn.any()):
        _, group_index = torch.unique(group_ids, return_inverse=True)
        cell = group_index[:, None] * k + torch.arange(k, device=turn_rewards.device)[None, :]
        picked = turn_rewards[has_turn]
        normalised = grpo_advantages(picked, cell[has_turn], eps=eps)
        process[has_turn] = normalised.to(process.dtype)

    per_token = outcome_advantages[:, None] + process_weight * process.gather(1, turn_of_token)
    return torch.where(on_turn, per_token, torch.zeros((), dtype=per_token.dtype))


def distill_advantages(
    teacher_logprobs: Tensor,
    student_logprobs: Tensor,
    mask: Tensor,
    *,
    clip: float | None = None,
) -> Tensor:
    """On-policy distillation's per-token advantages [B, T]: log p_teacher(x_t) - log
    p_student(x_t) on the tokens the student sampled, 0 where `mask` is 0.

    Their negative is a one-sample estimate of the reverse KL, KL(student || teacher), at each
    token, so the policy gradient with these advantages lowers the reverse KL (GKD, Agarwal et
    al. 2024, on-policy with discount 0: each token is judged by the teacher alone, no reward
    needed). `student_logprobs` are the behaviour policy's (the engine's, recorded when it
    sampled); `clip`: bound |advantage| (a token the teacher finds very unlikely can otherwise
    dominate a batch). Not covered: forward KL or a mix (generalised JSD), reward mixing."""
    if teacher_logprobs.shape != student_logprobs.shape or mask.shape != teacher_logprobs.shape:
        raise ValueError(
            f"teacher {tuple(teacher_logprobs.shape)}, student {tuple(student_logprobs.shape)} "
            f"and mask {tuple(mask.shape)} must have one shape [B, T]"
        )
    if clip is not None and clip <= 0:
        raise ValueError(f"clip must be > 0 (or None), got {clip}")
    keep = mask.bool()
    adv = torch.where(keep, teacher_logprobs - student_logprobs, torch.zeros_like(teacher_logprobs))
    if not bool(torch.isfinite(adv).all()):
        raise ValueError(
            "distill advantages are not finite on a trained token: a logprob is -inf or NaN "
            "(a token outside the teacher's or the student's vocabulary?)"
        )
    if clip is not None:
        adv = adv.clamp(-clip, clip)
    return adv
