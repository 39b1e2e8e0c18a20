"""Process (turn-level) rewards in the learner: read per assistant turn from the store's turns,
folded into per-token advantages (honing.rl.turn_level_advantages), and reaching the update."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from honing.observe.metrics import Timings, update_metrics
from honing.records import Group, Trajectory, Turn
from honing.trainer.batching import turn_rewards
from honing.trainer.config import LearnerConfig
from honing.trainer.learner import Learner
from honing.trainer.result import update_line
from honing.trainer.run_dir import UpdateRecord, numeric_fields


def two_turn_trajectory(well_formed: tuple[float, float], outcome: float, seed: int) -> Trajectory:
    """prompt (4) | turn 0 (3 model tokens) | observation (2) | turn 1 (3 model tokens) | obs (1)"""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 4000, (13,), generator=gen).tolist()
    mask = [0] * 4 + [1] * 3 + [0] * 2 + [1] * 3 + [0]
    turns = [
        Turn(role="user", text="q", start=0, end=4),
        Turn(role="assistant", text="a0", start=4, end=7),
        Turn(role="tool", text="o0", start=7, end=9, components={"well_formed": well_formed[0]}),
        Turn(role="assistant", text="a1", start=9, end=12),
        Turn(role="tool", text="o1", start=12, end=13,
             components={"well_formed": well_formed[1], "outcome": outcome}),
    ]  # fmt: skip
    return Trajectory(
        task_id="t",
        domain="math",
        turns=turns,
        token_ids=ids,
        loss_mask=mask,
        logprobs=[-3.0 if m else 0.0 for m in mask],
        versions=[0 if m else -1 for m in mask],
        prompt_len=4,
        components={"outcome": outcome, "well_formed": well_formed[1]},
    )


def test_turn_rewards_follow_each_assistant_turn() -> None:
    a = two_turn_trajectory((1.0, 0.0), 0.0, 0)
    b = two_turn_trajectory((0.0, 1.0), 1.0, 1)
    b.turns = b.turns[:4]  # its last turn has no step after it
    got = turn_rewards([a, b], ["well_formed"])
    assert got.rewards.tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert got.mask.tolist() == [[True, True], [True, True]]
    assert got.token_turns[0].tolist() == [-1] * 4 + [0] * 3 + [-1] * 2 + [1] * 3 + [-1]


def grad_after(learner: Learner, groups: list[Group]) -> float:
    learner.optimizer.zero_grad(set_to_none=True)
    learner.backward(groups)
    grads = [p.grad.norm() for p in learner.parameters if p.grad is not None]
    learner.optimizer.zero_grad(set_to_none=True)
    return float(torch.stack(grads).norm()) if grads else 0.0


def test_process_rewards_give_signal_where_outcomes_are_equal(tiny_model_dir: Path) -> None:
    # every outcome is 0: no outcome signal; the first turn was well formed in half the samples
    group = Group(
        task_id="t",
        group_id="g",
        trajectories=[two_turn_trajectory((float(i % 2), 0.0), 0.0, i) for i in range(4)],
    )
    outcome_only = Learner(tiny_model_dir, LearnerConfig(dynamic_sampling=False))
    with_process = Learner(
        tiny_model_dir,
        LearnerConfig(
            dynamic_sampling=False, process_weight=0.5, process_components=["well_formed"]
        ),
    )
    assert grad_after(outcome_only, [group]) == 0.0
    assert grad_after(with_process, [group]) > 0.0


def test_dynamic_sampling_keeps_process_signal_and_counts_it_apart(
    tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A group of equal outcomes whose first turns differ in process reward is kept with
    process_weight > 0, and the update's stats, metrics and log line count it apart."""
    varied = Group(
        "t", "varied", [two_turn_trajectory((float(i % 2), 0.0), 0.0, i) for i in range(4)]
    )
    mixed = Group(
        "u", "mixed", [two_turn_trajectory((1.0, 1.0), float(i % 2), i) for i in range(4)]
    )
    flat = Group("v", "flat", [two_turn_trajectory((1.0, 0.0), 1.0, i) for i in range(4)])
    process = LearnerConfig(process_weight=0.5, process_components=["well_formed"],
                            keep_process_groups=True)  # fmt: skip
    stats = Learner(tiny_model_dir, process).update([varied, mixed, flat])
    assert stats.stepped and stats.sequences == 8
    assert (stats.groups, stats.dropped_groups, stats.process_only_groups) == (3, 1, 1)
    outcome_only = Learner(tiny_model_dir, LearnerConfig()).update([varied, mixed, flat])
    assert (outcome_only.dropped_groups, outcome_only.process_only_groups) == (2, 0)
    # The default: process rewards used, but a group with equal outcomes still dropped.
    default = process.model_copy(update={"keep_process_groups": False})
    dropped = Learner(tiny_model_dir, default).update([varied, mixed, flat])
    assert (dropped.dropped_groups, dropped.process_only_groups) == (2, 0)

    learner = numeric_fields(stats)
    metrics = update_metrics([], learner_version=1, learner=learner, timings=Timings(1, 1, 0))
    assert metrics.scalars["learner/process_only_groups"] == 1.0
    record = UpdateRecord(step=1, phase="main", episodes=12, success_rate=0.5, reward_mean=0.5,
                          infra_errors=0, rollout_s=1.0, update_s=1.0, sync_s=0.0,
                          learner=learner)  # fmt: skip
    assert "groups kept 2/3 (1 for process rewards) |" in update_line(record, 4, 0.0)

    with caplog.at_level(logging.WARNING):
        nothing = Learner(tiny_model_dir, process).update([flat])
    assert not nothing.stepped and nothing.process_only_groups == 0
    assert "equal rewards, and equal process rewards turn by turn" in caplog.text
