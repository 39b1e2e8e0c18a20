"""Trajectories the learner's tests train on: token prompts, and one model turn after each."""

from __future__ import annotations

from collections.abc import Sequence

from honing.records import Trajectory

PROMPTS = [[1, 504, 3032, 28], [1, 2016, 314], [1, 77, 88, 99, 100, 4000]]


def trajectory(
    prompt: list[int],
    ids: list[int],
    outcome: float,
    logprobs: Sequence[float] | None = None,
    versions: Sequence[int] | None = None,
) -> Trajectory:
    """`prompt` then the model's `ids` (sampled with `logprobs` by policy `versions`; 0.0 and
    version 0 when not given), rewarded `outcome`."""
    return Trajectory(
        task_id="t",
        domain="math",
        token_ids=prompt + ids,
        loss_mask=[0] * len(prompt) + [1] * len(ids),
        logprobs=[0.0] * len(prompt) + list(logprobs or [0.0] * len(ids)),
        versions=[-1] * len(prompt) + list(versions or [0] * len(ids)),
        prompt_len=len(prompt),
        components={"outcome": outcome},
        reward=outcome,
    )
