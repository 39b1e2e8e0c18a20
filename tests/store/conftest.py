"""Trajectories for the store tests: realistic ones built turn by turn, and tricky values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from honing.records import Ending, Retry, Trajectory, Turn

MakeTrajectory = Callable[..., Trajectory]


@pytest.fixture
def make() -> MakeTrajectory:
    """`make(i, task_id=..., domain=..., steps=..., success=..., ...)`: see `make_trajectory`."""
    return make_trajectory


@pytest.fixture
def tricky() -> list[Trajectory]:
    return tricky_trajectories()


def make_trajectory(
    i: int,
    *,
    task_id: str | None = None,
    domain: str = "code",
    steps: int = 2,
    success: bool = False,
    reward: float = 0.0,
    ending: Ending = Ending.DONE,
    failure: str | None = None,
    **fields: Any,
) -> Trajectory:
    """A token-faithful trajectory: a 3-token prompt, then per step an assistant turn of 2 tokens
    (versions 5, 6) and an observation turn of 1 token."""
    turns = [Turn(role="user", text=f"task {i}", start=0, end=3)]
    token_ids, mask, logprobs, versions = [10, 11, 12], [0, 0, 0], [0.0] * 3, [-1] * 3
    for s in range(steps):
        n = len(token_ids)
        call = {
            "id": f"call_{s}",
            "type": "function",
            "function": {"name": "run", "arguments": '{"code": "print(1)"}'},
        }
        turns.append(
            Turn(
                role="assistant",
                text=f"step {s}",
                start=n,
                end=n + 2,
                version=5,
                tool_calls=[call],
                finish_reason="stop",
                generation_s=0.5,
            )
        )
        turns.append(
            Turn(
                role="tool",
                text="1\n",
                start=n + 2,
                end=n + 3,
                reward=0.25,
                components={"well_formed": 1.0, "outcome": 0.0},
                step_s=0.1,
                tool_s={"run": 0.08},
            )
        )
        token_ids += [100 + s, 200 + s, 300 + s]
        mask += [1, 1, 0]
        logprobs += [-0.5, -1.25, 0.0]
        versions += [5, 6, -1]
    values: dict[str, Any] = dict(
        task_id=task_id or f"task-{i}",
        domain=domain,
        sample=0,
        group_id=f"g-{i}",
        id=f"traj-{i}",
        tags=["easy"],
        dataset="synthetic-code",
        dataset_version="v1",
        turns=turns,
        token_ids=token_ids,
        loss_mask=mask,
        logprobs=logprobs,
        versions=versions,
        prompt_len=3,
        reward=reward,
        components={"outcome": 1.0 if success else 0.0},
        success=success,
        ending=ending,
        failure=failure,
        generation_s=1.0,
        env_s=0.2,
        queue_s=0.05,
        total_s=1.3,
        started_at=1_700_000_000.25,
        policy_version=5,
    )
    values.update(fields)
    return Trajectory(**values)


def tricky_trajectories() -> list[Trajectory]:
    """Empty everything, unicode everywhere, None and set failures, many turns, retries."""
    empty = Trajectory(task_id="", domain="")
    unicode = Trajectory(
        task_id="задача/naïve 🚀",
        domain="math",
        id="ü-1",
        tags=["数学", "", "tab\there"],
        turns=[
            Turn(role="user", text="résumé ☃ \x00 nul and\nnewlines\r\n"),
            Turn(
                role="assistant",
                text="",
                version=-1,
                tool_calls=[
                    {"id": "c", "function": {"name": "ünïcode", "arguments": "{}"}},
                    {"weird": [1, 2.5, None, {"nested": True}]},
                ],
                finish_reason="length",
            ),
            Turn(role="tool", text="", components={"ключ": -0.0, "x": 1e-300}, failure=None),
        ],
        components={"émoji 🎯": 0.5},
        detail="détail",
        failure=None,
    )
    many = make_trajectory(7, steps=120, success=True, reward=30.0)
    many.retries = [
        Retry(attempt=1, stage="generate", cause="EngineError: boom", at_s=0.5),
        Retry(attempt=2, stage="setup", cause="SandboxError: ✗", at_s=12.0),
    ]
    many.ending = Ending.STEP_LIMIT
    many.failure = "step_limit"
    many.detail = "120 steps"
    chat = Trajectory(  # a chat engine: text only, versions on the turns
        task_id="chat",
        domain="tools",
        id="chat-1",  # the empty trajectory has id "": ids must differ for lookups by id
        turns=[
            Turn(role="user", text="hi"),
            Turn(role="assistant", text="a", version=3),
            Turn(role="tool", text="ok", failure="tool_error", detail="bad arg"),
            Turn(role="assistant", text="b", version=4),
        ],
        ending=Ending.TIMEOUT,
        failure="episode_deadline",
        policy_version=3,
    )
    return [empty, unicode, many, chat]
