"""Process (turn-level) rewards in the learner: read per assistant turn from the store's turns,
folded into per-token advantages (honing.rl.turn_level_advantages), and reaching the update."""

from __future__ import annotations

from pathlib import Path

import torch

from honing.records import Group, Trajectory, Turn
from honing.trainer.batching import turn_rewards
from honing.trainer.config import LearnerConfig
from honing.trainer.learner import Learner


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
