"""From `Group` records to tensors: per-sequence rewards and group ids, and padded micro-batches.

    drop_zero_variance   dynamic sampling (DAPO) -> Sampled: the groups that carry a signal (their
                         rewards, or with process rewards their turns' rewards, differ), the rest
    sample_groups        -> Sampled: what an update with a LearnerConfig trains on (the learner,
                         and the loop's refill, decide alike)
    batch_from_groups    -> TrainBatch: rewards [N], group ids [N], micro-batches packed by tokens
    micro_batches        trajectories -> padded micro-batches (no rewards needed: for scoring)
    MicroBatch           one forward pass: ids, attention mask, and next-token targets' tensors
    pad_rows             token rows and loss masks -> padded ids, attention and mask (SFT too)

Covered: next-token alignment (done here, once), packing by a token budget, the reward (the
"outcome" component, less `risk_weight` times the episode's risk cost when risk is priced; a
trajectory without an outcome is an error), leaving out infrastructure-failed
and stale trajectories, and the process rewards per turn (docs/training.md, "The modules in
detail"). Not covered: advantages (the learner calls honing.rl).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from honing.records import ROLE_CREDIT, Ending, Group, Trajectory
from honing.rl.advantages import turn_level_advantages
from honing.rl.risk import shaped_rewards
from honing.trainer.config import LearnerConfig

OUTCOME = "outcome"


@dataclass(frozen=True, slots=True)
class MicroBatch:
    """Rows of one forward pass. Shapes: B rows, T = the longest row's length."""

    input_ids: Tensor  # [B, T] long, right-padded with pad_id
    attention_mask: Tensor  # [B, T] long
    loss_mask: Tensor  # [B, T-1] bool: target input_ids[:, t+1] is a model token
    behaviour_logprobs: Tensor  # [B, T-1] float32: the engine's logprob of that target
    versions: Tensor  # [B, T-1] long: policy version of that target, -1 off the mask
    rows: Tensor  # [B] long: each row's index in TrainBatch.rewards
    prefix_len: int = 0  # leading tokens every row shares and no row trains on (0: none)
    # [B] float32: each row's sampling temperature (NaN: not recorded); None when no row has one
    temperatures: Tensor | None = None

    @property
    def tokens(self) -> int:
        return int(self.loss_mask.sum())


@dataclass(frozen=True, slots=True)
class TrainBatch:
    """N trajectories of one update, as tensors."""

    rewards: Tensor  # [N] float32: components["outcome"]
    group_ids: Tensor  # [N] long: index of the trajectory's group
    micro_batches: list[MicroBatch]
    trajectories: list[Trajectory]  # row i is trajectories[i]

    @property
    def sequences(self) -> int:
        return len(self.trajectories)

    @property
    def tokens(self) -> int:
        return sum(m.tokens for m in self.micro_batches)


def trainable(trajectory: Trajectory) -> bool:
    """Whether a trajectory says something about the policy (not an infrastructure failure or
    dropped as stale)."""
    return trajectory.ending not in (Ending.INFRA_ERROR, Ending.STALE)


def outcome_reward(trajectory: Trajectory) -> float:
    try:
        return trajectory.components[OUTCOME]
    except KeyError:
        raise ValueError(
            f"trajectory {trajectory.id or trajectory.task_id!r} has no {OUTCOME!r} reward "
            f"component (has {sorted(trajectory.components)}): the environment must score the "
            "outcome of every episode it trains on"
        ) from None


def episode_reward(trajectory: Trajectory) -> float:
    """What the learner trains an episode on: a team role's credit (`ROLE_CREDIT`: the team's
    outcome weighted for the role, plus its own named reward), else its outcome."""
    credit = trajectory.components.get(ROLE_CREDIT)
    return outcome_reward(trajectory) if credit is None else credit


def training_rewards(trajectories: Sequence[Trajectory], risk_weight: float = 0.0) -> Tensor:
    """[N] float32: each trajectory's `episode_reward` less `risk_weight` times its risk cost."""
    outcomes = torch.tensor([episode_reward(t) for t in trajectories], dtype=torch.float32)
    costs = torch.tensor([t.risk for t in trajectories], dtype=torch.float32)
    return shaped_rewards(outcomes, costs, risk_weight) if risk_weight else outcomes


@dataclass(frozen=True, slots=True)
class Sampled:
    """What dynamic sampling kept of an update's groups."""

    kept: list[Group]
    dropped: int  # groups without a signal (fewer than two trainable trajectories included)
    process_only: int  # of `kept`, the groups whose outcomes are equal: kept for their turns

    @property
    def kept_share(self) -> float:
        """The share of the update's groups kept: 1.0 when it had none (nothing to scale)."""
        drawn = len(self.kept) + self.dropped
        return len(self.kept) / drawn if drawn else 1.0


def drop_zero_variance(
    groups: Sequence[Group],
    risk_weight: float = 0.0,
    *,
    process_components: Sequence[str] | None = None,
) -> Sampled:
    """Dynamic sampling (DAPO, Yu et al. 2025): keep the groups whose trainable trajectories
    carry a signal: their training rewards (`training_rewards`) are not all equal, or, with
    process rewards in use (`process_components`; None when process_weight is 0), their turns
    are (`process_signal`: some process advantage the loss would use is nonzero). A group kept
    for its turns alone counts in `Sampled.process_only`."""
    kept: list[Group] = []
    process_only = 0
    for group in groups:
        trajectories = [t for t in group.trajectories if trainable(t)]
        if len(set(training_rewards(trajectories, risk_weight).tolist())) > 1:
            kept.append(group)
        elif process_components is not None and process_signal(trajectories, process_components):
            kept.append(group)
            process_only += 1
    return Sampled(kept, len(groups) - len(kept), process_only)


def sample_groups(
    groups: Sequence[Group], config: LearnerConfig, risk_weight: float = 0.0
) -> Sampled:
    """The groups an update with `config` trains on: `drop_zero_variance` with dynamic sampling
    (keeping process-only groups with `keep_process_groups` and a process weight), else all
    (a distillation's teacher judges every token)."""
    if not config.dynamic_sampling or config.advantage == "distill":
        return Sampled(list(groups), dropped=0, process_only=0)
    process = config.process_components if keeps_process(config) else None
    return drop_zero_variance(groups, risk_weight, process_components=process)


def keeps_process(config: LearnerConfig) -> bool:
    """Whether dynamic sampling keeps a group for its process rewards alone."""
    return config.keep_process_groups and config.process_weight > 0


def process_signal(trajectories: Sequence[Trajectory], components: Sequence[str]) -> bool:
    """Whether one group's process rewards (`turn_rewards`) give some model token a nonzero
    advantage: `turn_level_advantages` with outcome advantages 0 is not 0 everywhere, which needs
    some k whose k-th turns' process rewards differ among the episodes that have a k-th turn."""
    n = len(trajectories)
    if n < 2:
        return False
    turns = turn_rewards(trajectories, components)
    process = turn_level_advantages(
        torch.zeros(n),
        turns.rewards,
        turns.mask,
        turns.token_turns,
        torch.zeros(n, dtype=torch.long),
        process_weight=1.0,
    )
    return bool(process.any())


def _check(trajectory: Trajectory) -> None:
    name = trajectory.id or trajectory.task_id
    n = len(trajectory.token_ids)
    if n < 2:
        raise ValueError(
            f"trajectory {name!r} has {n} token ids: training needs the exact tokens "
            "(use a token engine such as hf, or an OpenAI server that returns token ids)"
        )
    lengths = {len(trajectory.loss_mask), len(trajectory.logprobs), len(trajectory.versions)}
    if lengths != {n}:
        raise ValueError(
            f"trajectory {name!r}: token_ids ({n}), loss_mask ({len(trajectory.loss_mask)}), "
            f"logprobs ({len(trajectory.logprobs)}) and versions ({len(trajectory.versions)}) "
            "must have one length"
        )


def trained_length(trajectory: Trajectory) -> int:
    """Tokens of `trajectory` a forward pass needs: up to its last model token (all of them when
    it has none, so that such a row keeps its shape)."""
    mask = trajectory.loss_mask
    for i in range(len(mask) - 1, -1, -1):
        if mask[i]:
            return i + 1
    return len(trajectory.token_ids)


def pack(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices grouped into micro-batches: longest first, each while `rows x longest <= budget`
    (a row longer than the budget is alone)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    packs: list[list[int]] = []
    for i in order:
        # sorted longest first, so a pack's first row is its longest
        if packs and (len(packs[-1]) + 1) * lengths[packs[-1][0]] <= budget:
            packs[-1].append(i)
        else:
            packs.append([i])
    return packs


def pad_rows(
    token_ids: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]], pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Rows right-padded to the longest: ids [B, T] long (pad_id after each row's end), attention
    [B, T] long (1 on the row's tokens) and mask [B, T] bool (the row's loss mask, False on padding
    and in column 0: the first token is never predicted). A row's mask has its ids' length."""
    b = len(token_ids)
    width = max(len(row) for row in token_ids)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.bool)
    for r, (row, row_mask) in enumerate(zip(token_ids, loss_masks, strict=True)):
        n = len(row)
        ids[r, :n] = torch.tensor(row, dtype=torch.long)
        attention[r, :n] = 1
        mask[r, :n] = torch.tensor(row_mask, dtype=torch.bool)
    mask[:, 0] = False  # the first token is never predicted
    return ids, attention, mask


def _micro_batch(rows: list[int], trajectories: Sequence[Trajectory], pad_id: int) -> MicroBatch:
    lengths = {i: trained_length(trajectories[i]) for i in rows}
    ids, attention, mask = pad_rows(
        [trajectories[i].token_ids[: lengths[i]] for i in rows],
        [trajectories[i].loss_mask[: lengths[i]] for i in rows],
        pad_id,
    )
    logprobs = torch.zeros(ids.shape, dtype=torch.float32)
    versions = torch.full(ids.shape, -1, dtype=torch.long)
    for r, i in enumerate(rows):
        t = trajectories[i]
        n = lengths[i]
        logprobs[r, :n] = torch.tensor(t.logprobs[:n], dtype=torch.float32)
        versions[r, :n] = torch.tensor(t.versions[:n], dtype=torch.long)
    return MicroBatch(
        prefix_len=shared_prefix(ids, attention, mask),
        input_ids=ids,
        attention_mask=attention,
        loss_mask=mask[:, 1:],
        behaviour_logprobs=torch.where(mask, logprobs, 0.0)[:, 1:],
        versions=torch.where(mask, versions, -1)[:, 1:],
        rows=torch.tensor(rows, dtype=torch.long),
        temperatures=_temperatures([trajectories[i] for i in rows]),
    )


def _temperatures(trajectories: Sequence[Trajectory]) -> Tensor | None:
    values = [t.temperature for t in trajectories]
    if all(v is None for v in values):
        return None
    return torch.tensor([math.nan if v is None else v for v in values], dtype=torch.float32)


@dataclass(frozen=True, slots=True)
class TurnRewards:
    """Process rewards of N trajectories with at most K assistant turns (T = the longest)."""

    rewards: Tensor  # [N, K] float32: the turn's process reward (0 when its step had none)
    mask: Tensor  # [N, K] bool: the trajectory has a k-th assistant turn
    token_turns: Tensor  # [N, T] long: the assistant turn of each model token, -1 elsewhere


def turn_rewards(trajectories: Sequence[Trajectory], components: Sequence[str]) -> TurnRewards:
    """Each assistant turn's process reward: the sum of `components` in the observation step
    right after it (a component the step did not report counts 0; a turn with no step after it,
    e.g. cut by the context limit, gets 0)."""
    spans: list[list[tuple[int, int, float]]] = []
    for t in trajectories:
        turns = []
        for j, turn in enumerate(t.turns):
            if turn.role != "assistant":
                continue
            after = t.turns[j + 1] if j + 1 < len(t.turns) else None
            reward = 0.0
            if after is not None and after.role != "assistant":
                reward = sum(after.components.get(c, 0.0) for c in components)
            turns.append((turn.start, turn.end, reward))
        spans.append(turns)
    n = len(trajectories)
    k = max((len(x) for x in spans), default=0) or 1
    width = max((len(t.token_ids) for t in trajectories), default=1)
    rewards = torch.zeros((n, k), dtype=torch.float32)
    mask = torch.zeros((n, k), dtype=torch.bool)
    token_turns = torch.full((n, width), -1, dtype=torch.long)
    for i, (t, turns) in enumerate(zip(trajectories, spans, strict=True)):
        model_tokens = torch.tensor(t.loss_mask, dtype=torch.bool)
        for index, (start, end, reward) in enumerate(turns):
            rewards[i, index] = reward
            mask[i, index] = True
            on = torch.zeros(len(t.token_ids), dtype=torch.bool)
            on[start:end] = True
            token_turns[i, : len(t.token_ids)][on & model_tokens] = index
    return TurnRewards(rewards, mask, token_turns)


def shared_prefix(ids: Tensor, attention: Tensor, mask: Tensor) -> int:
    """How many leading tokens all rows share and precede every trained target, leaving at least
    the position that predicts the first trained token to the rest (0 for a single row)."""
    if ids.shape[0] < 2:
        return 0
    lengths = attention.sum(1)
    same = (ids == ids[:1]).all(0) & (torch.arange(ids.shape[1]) < lengths.min())
    common = int(same.long().cumprod(0).sum())
    trained = mask.any(0).nonzero()
    first = int(trained[0]) if len(trained) else ids.shape[1]
    return max(0, min(common, first - 1))


def batch_from_groups(
    groups: Sequence[Group],
    pad_id: int,
    *,
    micro_batch_tokens: int = 4096,
    by_prompt: bool = False,
    risk_weight: float = 0.0,
) -> TrainBatch:
    """The trainable trajectories of `groups` as a `TrainBatch` (see the module docstring); the
    rewards are `training_rewards(…, risk_weight)`."""
    trajectories: list[Trajectory] = []
    group_ids: list[int] = []
    for g, group in enumerate(groups):
        for t in group.trajectories:
            if trainable(t):
                trajectories.append(t)
                group_ids.append(g)
    return TrainBatch(
        rewards=training_rewards(trajectories, risk_weight),
        group_ids=torch.tensor(group_ids, dtype=torch.long),
        micro_batches=micro_batches(
            trajectories, pad_id, micro_batch_tokens=micro_batch_tokens, by_prompt=by_prompt
        ),
        trajectories=trajectories,
    )


def micro_batches(
    trajectories: Sequence[Trajectory],
    pad_id: int,
    *,
    micro_batch_tokens: int = 4096,
    by_prompt: bool = False,
) -> list[MicroBatch]:
    """`trajectories` (all of them, rewards not needed) packed into micro-batches; a row's
    `rows` entry is its index in `trajectories`. `by_prompt`: rows with the same first prompt
    (a group's samples) are packed together and apart from the others, so that each
    micro-batch's shared prefix is the whole prompt (`MicroBatch.prefix_len`)."""
    if micro_batch_tokens < 1:
        raise ValueError(f"micro_batch_tokens {micro_batch_tokens}: must be at least 1")
    for t in trajectories:
        _check(t)
    buckets: dict[tuple[int, ...], list[int]] = {}
    for i, t in enumerate(trajectories):
        key = tuple(t.token_ids[: t.prompt_len]) if by_prompt else ()
        buckets.setdefault(key, []).append(i)
    out: list[MicroBatch] = []
    for rows in buckets.values():
        packs = pack([trained_length(trajectories[i]) for i in rows], micro_batch_tokens)
        out.extend(_micro_batch([rows[j] for j in p], trajectories, pad_id) for p in packs)
    return out
