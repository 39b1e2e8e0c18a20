"""batch_from_groups, packing and dynamic sampling on hand-built trajectories."""

from __future__ import annotations

import pytest
import torch

from honing.records import Ending, Group, Trajectory, Turn
from honing.trainer import batch_from_groups, drop_zero_variance, pack
from honing.trainer.batching import micro_batches, trained_length


def traj(ids: list[int], mask: list[int], outcome: float | None = 1.0, **kw: object) -> Trajectory:
    logprobs = [-0.5 * (i + 1) if m else 0.0 for i, m in enumerate(mask)]
    versions = [2 if m else -1 for m in mask]
    components = {} if outcome is None else {"outcome": outcome}
    return Trajectory(
        task_id="t",
        domain="math",
        token_ids=ids,
        loss_mask=mask,
        logprobs=logprobs,
        versions=versions,
        components=components,
        **kw,  # type: ignore[arg-type]
    )


def test_targets_are_shifted_for_next_token_prediction() -> None:
    t = traj([5, 6, 7, 8, 9, 4], [0, 0, 1, 0, 1, 0])
    batch = batch_from_groups([Group("t", "g", [t])], pad_id=0)
    (mb,) = batch.micro_batches
    assert mb.input_ids.tolist() == [[5, 6, 7, 8, 9]]  # the row ends at its last model token
    # position t describes the target input_ids[t + 1]: 6, 7, 8, 9
    assert mb.loss_mask.tolist() == [[False, True, False, True]]
    assert mb.behaviour_logprobs.tolist() == [[0.0, -1.5, 0.0, -2.5]]
    assert mb.versions.tolist() == [[-1, 2, -1, 2]]
    assert batch.tokens == 2


def test_padding_rewards_and_group_ids() -> None:
    g0 = Group(
        "a", "a", [traj([1, 2, 3], [0, 1, 1], 1.0), traj([1, 2, 3, 4, 5], [0, 1, 1, 1, 1], 0.0)]
    )
    g1 = Group("b", "b", [traj([7, 8], [0, 1], 0.5)])
    batch = batch_from_groups([g0, g1], pad_id=99, micro_batch_tokens=1000)
    assert batch.rewards.tolist() == [1.0, 0.0, 0.5]
    assert batch.group_ids.tolist() == [0, 0, 1]
    (mb,) = batch.micro_batches
    # longest first: rows 1, 0, 2, padded to 5 with 99
    assert mb.rows.tolist() == [1, 0, 2]
    assert mb.input_ids.tolist() == [[1, 2, 3, 4, 5], [1, 2, 3, 99, 99], [7, 8, 99, 99, 99]]
    assert mb.attention_mask.sum(-1).tolist() == [5, 3, 2]
    assert not bool(mb.loss_mask[1, 2:].any())  # padding is never trained on
    assert batch.tokens == 4 + 2 + 1


def test_pack_fills_to_the_budget_longest_first() -> None:
    # order by length: 0 (10), 2 (7), 3 (4), 1 (3); 2 rows x 10 = 20 fits, a third would not
    assert pack([10, 3, 7, 4], 20) == [[0, 2], [3, 1]]
    assert pack([30, 5], 20) == [[0], [1]]  # too long for the budget: alone
    assert pack([], 20) == []


def test_micro_batches_pad_only_to_their_own_longest() -> None:
    ts = [traj(list(range(1, n + 1)), [0] + [1] * (n - 1)) for n in (10, 3, 7, 4)]
    batch = batch_from_groups([Group("t", "g", ts)], pad_id=0, micro_batch_tokens=20)
    assert [tuple(m.input_ids.shape) for m in batch.micro_batches] == [(2, 10), (2, 4)]
    assert batch.tokens == 9 + 2 + 6 + 3


def test_missing_outcome_is_an_error_and_failures_are_left_out() -> None:
    with pytest.raises(ValueError, match="outcome"):
        batch_from_groups([Group("t", "g", [traj([1, 2], [0, 1], None)])], pad_id=0)
    failed = traj([], [], None, ending=Ending.INFRA_ERROR)
    batch = batch_from_groups([Group("t", "g", [failed, traj([1, 2], [0, 1], 1.0)])], pad_id=0)
    assert batch.sequences == 1


def test_inconsistent_lengths_are_an_error() -> None:
    bad = traj([1, 2, 3], [0, 1, 1])
    bad.logprobs = [0.0]
    with pytest.raises(ValueError, match="one length"):
        batch_from_groups([Group("t", "g", [bad])], pad_id=0)


def test_drop_zero_variance_counts_the_dropped_groups() -> None:
    same = Group("a", "a", [traj([1, 2], [0, 1], 1.0), traj([1, 2], [0, 1], 1.0)])
    mixed = Group("b", "b", [traj([1, 2], [0, 1], 1.0), traj([1, 2], [0, 1], 0.0)])
    alone = Group("c", "c", [traj([1, 2], [0, 1], 1.0)])
    sampled = drop_zero_variance([same, mixed, alone])
    assert [g.group_id for g in sampled.kept] == ["b"]
    assert sampled.dropped == 2 and sampled.process_only == 0
    assert sampled.kept_share == 1 / 3  # what scale_by_kept multiplies the step's lr by
    assert drop_zero_variance([]).kept_share == 1.0  # nothing drawn: nothing to scale
    assert torch.equal(batch_from_groups(sampled.kept, pad_id=0).rewards, torch.tensor([1.0, 0.0]))


def turned(outcome: float, *process: dict[str, float]) -> Trajectory:
    """prompt (2) | per turn: 2 model tokens, then 1 observation token reporting `process[k]`."""
    turns = [Turn(role="user", text="q", start=0, end=2)]
    for k, components in enumerate(process):
        start = 2 + 3 * k
        turns += [Turn(role="assistant", text="a", start=start, end=start + 2),
                  Turn(role="tool", text="o", start=start + 2, end=start + 3,
                       components=components)]  # fmt: skip
    t = traj(list(range(1, 3 + 3 * len(process))), [0, 0] + [1, 1, 0] * len(process), outcome)
    t.turns = turns
    return t


def test_process_rewards_keep_groups_whose_outcomes_are_equal() -> None:
    """With process rewards in use, a group whose outcomes are equal is kept exactly when some
    turn's process advantage (GRPO among the group's k-th turns) is nonzero, and counted apart."""
    ok, bad = {"well_formed": 1.0}, {"well_formed": 0.0}
    groups = [
        Group("t", "varied", [turned(1.0, ok, ok), turned(1.0, bad, ok)]),  # turn 0 differs
        Group("t", "flat", [turned(0.0, ok, bad), turned(0.0, ok, bad)]),  # nothing differs
        # turn 1: one episode has it, alone in its cell: advantage 0
        Group("t", "longer", [turned(0.0, ok, bad), turned(0.0, ok)]),
        # what differs is not a process component
        Group("t", "other", [turned(0.0, ok | {"tool_ok": 1.0}), turned(0.0, ok)]),
        Group("t", "mixed", [turned(1.0, ok), turned(0.0, ok)]),  # outcomes differ
    ]
    sampled = drop_zero_variance(groups, process_components=["well_formed"])
    assert [g.group_id for g in sampled.kept] == ["varied", "mixed"]
    assert (sampled.dropped, sampled.process_only) == (3, 1)
    # process_weight 0: the outcome alone, as before
    outcome_only = drop_zero_variance(groups)
    assert [g.group_id for g in outcome_only.kept] == ["mixed"]
    assert (outcome_only.dropped, outcome_only.process_only) == (4, 0)
    # an infrastructure failure is no episode: its turns do not count
    failed = turned(1.0, bad)
    failed.ending = Ending.INFRA_ERROR
    alone = Group("t", "alone", [turned(1.0, ok), failed])
    assert drop_zero_variance([alone], process_components=["well_formed"]).kept == []


def test_rows_end_at_their_last_model_token() -> None:
    """What follows the last model token (the final observation) is not computed, and a row
    without model tokens keeps its length."""
    tail = Trajectory(task_id="t", domain="math", token_ids=[1, 2, 3, 4, 5, 6],
                      loss_mask=[0, 0, 1, 1, 0, 0], logprobs=[0.0, 0.0, -0.5, -0.25, 0.0, 0.0],
                      versions=[-1, -1, 0, 0, -1, -1])  # fmt: skip
    none = Trajectory(task_id="u", domain="math", token_ids=[1, 2, 3], loss_mask=[0, 0, 0],
                      logprobs=[0.0] * 3, versions=[-1] * 3)  # fmt: skip
    assert (trained_length(tail), trained_length(none)) == (4, 3)
    [mb] = micro_batches([tail], pad_id=0)
    assert mb.input_ids.tolist() == [[1, 2, 3, 4]]
    assert mb.loss_mask.tolist() == [[False, True, True]]
    assert mb.behaviour_logprobs.tolist() == [[0.0, -0.5, -0.25]]
