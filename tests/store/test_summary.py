"""The rollout summary against hand-computed values, from records and from a written store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest

from honing.eval.summary import format_summary, summarize
from honing.store import Ending, Retry, Trajectory, TrajectoryWriter

MakeTrajectory = Callable[..., Trajectory]


@pytest.fixture
def rollout(make: MakeTrajectory) -> list[Trajectory]:
    """Task A (code): 4 samples, passed/failed/passed/infrastructure-failed; task B (sql): 2
    failed samples; task C (code): 1 passed sample with 4 steps. generation_s = 1..7."""
    a = [
        make(0, task_id="A", success=True, reward=1.0),
        make(1, task_id="A", reward=0.5, failure="tool_error"),
        make(2, task_id="A", success=True, reward=1.0),
        make(
            3,
            task_id="A",
            reward=0.0,
            ending=Ending.INFRA_ERROR,
            failure="sandbox_error",
            retries=[Retry(i, "step", "SandboxError: cell died", float(i)) for i in (1, 2, 3)],
        ),
    ]
    b = [
        make(4, task_id="B", domain="sql", reward=0.0, failure="tool_error"),
        make(
            5,
            task_id="B",
            domain="sql",
            reward=0.25,
            ending=Ending.STEP_LIMIT,
            failure="step_limit",
        ),
    ]
    c = [make(6, task_id="C", success=True, reward=1.0, steps=4)]
    trajectories = a + b + c
    for i, t in enumerate(trajectories, start=1):
        t.generation_s = float(i)
    return trajectories


def test_summary_by_hand(rollout: list[Trajectory]) -> None:
    s = summarize(rollout)
    # judged: all but A's infrastructure failure; per task (n, c): A (3, 2), B (2, 0), C (1, 1).
    assert asdict(s.overall) == dict(
        trajectories=7,
        tasks=3,
        infra_failed=1,
        judged=6,
        passed=3,
        success_rate=3 / 6,
        mean_reward=pytest.approx((1.0 + 0.5 + 1.0 + 0.0 + 0.25 + 1.0) / 6),
        # k in {1, 3} (the most judged samples of a task is 3). pass@1 = mean of c/n over
        # tasks; pass@3 over A only: n - c = 1 < 3, so 1.
        pass_at_k={1: pytest.approx((2 / 3 + 0 / 2 + 1 / 1) / 3), 3: 1.0},
    )
    assert {d: asdict(o) for d, o in s.by_domain.items()} == {
        "code": dict(
            trajectories=5,
            tasks=2,
            infra_failed=1,
            judged=4,
            passed=3,
            success_rate=3 / 4,
            mean_reward=pytest.approx((1.0 + 0.5 + 1.0 + 1.0) / 4),
            pass_at_k={1: pytest.approx((2 / 3 + 1 / 1) / 2), 3: 1.0},
        ),
        "sql": dict(
            trajectories=2,
            tasks=1,
            infra_failed=0,
            judged=2,
            passed=0,
            success_rate=0.0,
            mean_reward=pytest.approx(0.25 / 2),
            pass_at_k={1: 0.0, 2: 0.0},
        ),
    }
    assert s.endings == {"done": 5, "infra_error": 1, "step_limit": 1}
    assert s.failures == {"sandbox_error": 1, "step_limit": 1, "tool_error": 2}
    assert s.retries == 3
    # make(): 3 prompt tokens, then 3 tokens (2 generated) per step; 2 steps except C's 4.
    assert s.mean_steps == pytest.approx((6 * 2 + 4) / 7)
    assert s.tokens == 6 * (3 + 3 * 2) + (3 + 3 * 4)
    assert s.model_tokens == 6 * 2 * 2 + 2 * 4
    assert s.mean_generation_s == pytest.approx((1 + 2 + 3 + 4 + 5 + 6 + 7) / 7)
    assert s.mean_env_s == pytest.approx(0.2)
    assert s.mean_total_s == pytest.approx(1.3)


def test_single_samples_have_no_pass_at_k(make: MakeTrajectory) -> None:
    s = summarize([make(0, success=True), make(1)])
    assert s.overall.pass_at_k == {}
    assert s.overall.success_rate == 0.5


def test_all_infrastructure_failed_is_not_a_zero_success_rate(make: MakeTrajectory) -> None:
    s = summarize([make(0, ending=Ending.INFRA_ERROR, failure="sandbox_error")])
    assert s.overall.success_rate is None
    assert s.overall.mean_reward is None
    assert "success n/a (0/0; infra failures 1)" in format_summary(s)


def test_empty_summary() -> None:
    s = summarize([])
    assert s.overall.trajectories == 0
    assert s.mean_generation_s is None
    assert "0 trajectories" in format_summary(s)


async def test_summary_of_a_store_equals_summary_of_its_records(
    tmp_path: Path, rollout: list[Trajectory]
) -> None:
    async with TrajectoryWriter(tmp_path, shard_rows=3) as writer:
        for t in rollout:
            await writer.add(t)
    assert summarize(tmp_path) == summarize(rollout)
    assert summarize(str(tmp_path)) == summarize(rollout)


def test_format_summary(rollout: list[Trajectory]) -> None:
    text = format_summary(summarize(rollout))
    lines = text.splitlines()
    assert lines[0] == (
        "7 trajectories · 3 tasks · success 50.0% (3/6; infra failures 1) · "
        "mean reward 0.625 · pass@1 0.556 pass@3 1.000"
    )
    assert lines[1].startswith("by domain: code success 75.0% (3/4; infra failures 1)")
    assert "sql success 0.0% (0/2; infra failures 0)" in lines[1]
    assert lines[2] == "endings: done 5, infra_error 1, step_limit 1"
    assert lines[3] == "failures: tool_error 2, sandbox_error 1, step_limit 1"
    assert "tokens 69 (32 generated) · retries 3" in lines[4]
