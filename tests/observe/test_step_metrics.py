"""One update's metrics from hand-built trajectories, expected values written as arithmetic."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from honing.observe.metrics import (
    Outcomes,
    Signal,
    Timings,
    episode_fields,
    eval_scalars,
    failure_reason,
    learning_signal,
    outcomes,
    signal_warning,
    staleness,
    staleness_counts,
    update_metrics,
)
from honing.records import Ending, Group, Retry, Trajectory, Turn


def traj(
    domain: str, tags: list[str], reward: float, success: bool, *, version: int = 2,
    tokens: int = 3, failure: str | None = None, ending: Ending = Ending.DONE,
    steps: Sequence[tuple[float, dict[str, float]]] = (),
    components: dict[str, float] | None = None, retries: Sequence[str] = (),
    generation_s: float = 1.0, queue_s: float = 0.0,
) -> Trajectory:  # fmt: skip
    turns = []
    for step_s, tool_s in steps:
        turns.append(Turn(role="assistant", text="", generation_s=generation_s / len(steps)))
        turns.append(Turn(role="tool", text="", step_s=step_s, tool_s=tool_s))
    return Trajectory(
        task_id=f"{domain}-{reward}", domain=domain, tags=tags, reward=reward, success=success,
        policy_version=version, loss_mask=[1] * tokens + [0], failure=failure, ending=ending,
        turns=turns, components=components or {},
        retries=[Retry(attempt=i, stage=s, cause="X", at_s=0.0) for i, s in enumerate(retries)],
        generation_s=generation_s, queue_s=queue_s,
    )  # fmt: skip


def batch() -> list[Trajectory]:
    return [
        traj("math", ["easy"], 1.0, True, version=3, tokens=4, generation_s=2.0, queue_s=1.0,
             steps=[(0.5, {"python": 0.4})], components={"outcome": 1.0, "well_formed": 1.0}),
        traj("math", ["easy", "add"], 0.25, False, version=2, tokens=6, failure="tool_error",
             steps=[(0.25, {"python": 0.2}), (1.0, {"answer": 0.1})], retries=["step"],
             components={"outcome": 0.0, "well_formed": 0.5}),
        traj("code", ["hard"], 0.0, False, version=3, tokens=2, ending=Ending.STEP_LIMIT,
             generation_s=0.0, retries=["setup", "step"], components={"outcome": 0.0}),
        traj("code", [], 0.0, False, version=-1, tokens=0, failure="infra:generate",
             ending=Ending.INFRA_ERROR, generation_s=0.0, queue_s=3.0),
    ]  # fmt: skip


def test_update_metrics_by_domain_tag_component_failure_retry_and_time() -> None:
    m = update_metrics(
        batch(),
        learner_version=3,
        learner={"loss": 0.5, "kl": 0.01, "stepped": True, "tokens": 12},
        timings=Timings(rollout_s=4.0, update_s=2.0, sync_s=0.5),
        busy_fraction=0.75,
    )
    s = m.scalars
    # the 4th episode is an infrastructure failure: left out of success and reward, counted
    assert s["train/success"] == pytest.approx(1 / 3)
    assert s["train/reward"] == pytest.approx((1.0 + 0.25 + 0) / 3)
    assert s["train/infra_failures"] == 1
    assert s["train/success/domain/math"] == pytest.approx(1 / 2)
    assert s["train/success/domain/code"] == 0.0  # the step-limited one: judged, unsolved
    assert s["train/reward/domain/math"] == pytest.approx((1.0 + 0.25) / 2)
    assert s["train/success/tag/easy"] == pytest.approx(1 / 2)
    assert s["train/success/tag/add"] == 0.0
    assert s["train/success/tag/hard"] == 0.0
    assert s["train/reward/tag/easy"] == pytest.approx((1.0 + 0.25) / 2)
    assert s["train/reward/tag/add"] == pytest.approx(0.25)
    assert m.histograms["reward/tag/easy"] == [1.0, 0.25]
    assert s["train/reward/component/outcome"] == pytest.approx(1 / 3)  # the 3 that have it
    assert s["train/reward/component/well_formed"] == pytest.approx((1.0 + 0.5) / 2)
    assert s["train/failures/tool_error"] == 1
    assert s["train/failures/step_limit"] == 1  # no failure named: its ending
    assert s["train/failures/infra:generate"] == 1
    assert not any(k.startswith("train/failures/") and s[k] == 0 for k in s)
    assert s["retries/step"] == 2 and s["retries/setup"] == 1
    # staleness 3-3, 3-2, 3-3; the one that generated nothing has none
    assert s["staleness/mean"] == pytest.approx((0 + 1 + 0) / 3)
    assert s["staleness/max"] == 1
    assert m.histograms["staleness"] == [0.0, 1.0, 0.0]
    assert (s["time/rollout_s"], s["time/update_s"], s["time/sync_s"]) == (4.0, 2.0, 0.5)
    assert s["time/generation_per_sample_s"] == pytest.approx((2.0 + 1.0 + 0 + 0) / 4)
    assert s["time/queue_wait_s"] == pytest.approx((1.0 + 0 + 0 + 3.0) / 4)
    assert s["time/env_step_s"] == pytest.approx((0.5 + 0.25 + 1.0) / 3)
    assert s["time/tool/python_s"] == pytest.approx((0.4 + 0.2) / 2)
    assert s["time/tool/answer_s"] == pytest.approx(0.1)
    assert s["throughput/tokens_per_s"] == pytest.approx((4 + 6 + 2 + 0) / 4.0)
    assert s["throughput/episodes_per_s"] == pytest.approx(4 / 4.0)
    assert s["learner/loss"] == 0.5 and s["learner/stepped"] == 1.0 and s["learner/tokens"] == 12
    assert s["sandbox/busy_fraction"] == 0.75
    assert m.histograms["reward/all"] == [1.0, 0.25, 0.0]
    assert m.histograms["reward/domain/code"] == [0.0]
    assert m.histograms["reward/component/well_formed"] == [1.0, 0.5]


def test_outcomes_leave_infrastructure_failures_out_and_count_them() -> None:
    # rewards 1.0, 0.25, 0.0 judged; the infrastructure failure's 0.0 is no reward
    assert outcomes(batch()) == Outcomes(success=1 / 3, reward=(1.0 + 0.25 + 0.0) / 3,
                                          infra_failures=1)  # fmt: skip
    crashed = traj("math", [], 7.0, False, ending=Ending.INFRA_ERROR, failure="infra:step")
    assert outcomes([*batch(), crashed]).reward == pytest.approx((1.0 + 0.25 + 0.0) / 3)
    assert outcomes([]) == Outcomes(success=None, reward=None, infra_failures=0)


def test_an_update_the_infrastructure_failed_entirely_has_no_success_or_reward() -> None:
    failed = [
        traj("math", ["easy"], 0.0, False, failure="infra:generate", ending=Ending.INFRA_ERROR,
             components={"well_formed": 1.0}),
        traj("code", [], 0.0, False, failure="infra:runner", ending=Ending.INFRA_ERROR),
    ]  # fmt: skip
    assert outcomes(failed) == Outcomes(success=None, reward=None, infra_failures=2)
    m = update_metrics(failed, learner_version=3, learner={}, timings=Timings(1.0, 0.0, 0.0))
    s = m.scalars
    assert s["train/infra_failures"] == 2
    assert s["train/failures/infra:generate"] == 1 and s["train/failures/infra:runner"] == 1
    assert not [k for k in s if k.startswith(("train/success", "train/reward"))]
    assert not [k for k in m.histograms if k.startswith("reward/")]
    signal = learning_signal([Group("t", "g", failed)])
    assert (signal.groups, signal.zero_variance, signal.all_failed) == (0, 0, 0)
    assert signal.reward_mean is None and signal.reward_std is None
    assert signal.scalars() == {
        "signal/zero_variance_share": 0.0,
        "signal/all_failed_share": 0.0,
        "signal/all_solved_share": 0.0,
    }  # no train/reward_std: nothing was judged


def test_an_empty_update_has_only_its_timings() -> None:
    m = update_metrics([], learner_version=0, learner={}, timings=Timings(0.0, 0.0, 0.0))
    assert m.scalars == {"time/rollout_s": 0.0, "time/update_s": 0.0, "time/sync_s": 0.0}
    assert m.histograms == {}


def test_failure_reason_staleness_and_counts() -> None:
    ok, tool, limit, _ = batch()
    assert failure_reason(ok) is None
    assert failure_reason(tool) == "tool_error"
    assert failure_reason(limit) == "step_limit"
    wrong = traj("math", [], 0.0, False)
    assert failure_reason(wrong) == "unsolved"
    assert [staleness(t, 5) for t in batch()] == [2, 3, 2, None]
    assert staleness_counts([2, 3, 2, None, 10]) == {"2": 2, "3": 1, "10": 1}


def test_eval_scalars_leave_out_what_was_not_measured() -> None:
    assert eval_scalars("add", 0.5, None) == {"eval/add/success": 0.5}
    assert eval_scalars("add", None, 1.0) == {"eval/add/well_formed": 1.0}


def test_episode_fields_sum_tool_time_and_list_per_turn_times() -> None:
    t = batch()[1]
    t.turns[1].tool_s = {"python": 0.2, "answer": 0.05}
    f = episode_fields(t, split="train", set="add", staleness=1)
    assert f["split"] == "train" and f["set"] == "add" and f["staleness"] == 1
    assert f["turns"] == 2 and f["model_tokens"] == 6
    assert f["gen_s"] == [0.5, 0.5] and f["step_s"] == [0.25, 1.0]
    assert f["tool_s"] == {"answer": pytest.approx(0.05 + 0.1), "python": 0.2}
    assert f["failure"] == "tool_error" and f["ending"] == "done"
    assert f["retries"] == [{"stage": "step", "cause": "X"}]
    assert f["tags"] == ["easy", "add"] and f["policy_version"] == 2


def answered(domain: str, tools: Sequence[Sequence[str]], outcome: float | None) -> Trajectory:
    """An episode whose assistant turns call `tools` (one list per turn)."""
    turns = [
        Turn(role="assistant", text="", tool_calls=[{"function": {"name": n}} for n in names])
        for names in tools
    ]
    components = {} if outcome is None else {"outcome": outcome}
    return Trajectory(task_id="t", domain=domain, turns=turns, components=components)


def test_unaided_answers_are_the_judged_answers_given_without_a_tool() -> None:
    batch = [
        answered("math", [["calculator"], ["answer"]], 1.0),  # worked out: aided
        answered("math", [["answer"]], 1.0),  # from memory
        answered("math", [[]], 0.0),  # a boxed answer in the text, no call at all
        answered("math", [["calculator"]], None),  # never answered: not counted
        answered("tools", [["lookup", "answer"]], 0.0),
    ]
    s = update_metrics(batch, learner_version=0, learner={}, timings=Timings(1.0, 0.0, 0.0))
    assert s.scalars["train/unaided_answers/domain/math"] == pytest.approx(2 / 3)
    assert s.scalars["train/unaided_answers/domain/tools"] == 0.0


def group(rewards: Sequence[float], solved: Sequence[bool]) -> Group:
    trajs = [
        Trajectory(task_id="t", domain="math", reward=r, success=ok)
        for r, ok in zip(rewards, solved, strict=True)
    ]
    return Group("t", "g", trajs)


def test_learning_signal_counts_the_groups_that_can_teach_nothing() -> None:
    groups = [
        group([1.0, 1.0], [True, True]),  # all solved: equal rewards
        group([0.0, 0.0], [False, False]),  # all failed
        group([0.5, 0.5], [False, False]),  # equal partial rewards, all failed
        group([1.0, 0.0], [True, False]),  # the one that teaches
    ]
    s = learning_signal(groups)
    assert (s.groups, s.zero_variance, s.all_failed, s.all_solved) == (4, 3, 2, 1)
    rewards = [1.0, 1.0, 0.0, 0.0, 0.5, 0.5, 1.0, 0.0]
    mean = sum(rewards) / 8  # 0.5
    assert s.reward_mean == mean
    assert s.reward_std == pytest.approx((sum((r - mean) ** 2 for r in rewards) / 8) ** 0.5)
    assert s.scalars()["signal/zero_variance_share"] == 3 / 4
    assert s.scalars()["signal/all_failed_share"] == 2 / 4


def test_learning_signal_leaves_infrastructure_failures_out() -> None:
    crashed = Trajectory(task_id="t", domain="math", ending=Ending.INFRA_ERROR)  # reward 0.0
    groups = [
        Group("t", "g", [*group([1.0, 1.0], [True, True]).trajectories, crashed]),  # all solved
        group([1.0, 0.0], [True, False]),
        Group("t", "g", [crashed, crashed]),  # nothing judged: not a group that was judged
    ]
    s = learning_signal(groups)
    assert (s.groups, s.zero_variance, s.all_failed, s.all_solved) == (2, 1, 0, 1)
    rewards = [1.0, 1.0, 1.0, 0.0]
    mean = sum(rewards) / 4  # 0.75
    assert s.reward_mean == mean
    assert s.reward_std == pytest.approx((sum((r - mean) ** 2 for r in rewards) / 4) ** 0.5)


def test_the_sampled_entropy_is_the_mean_surprise_of_every_judged_groups_model_tokens() -> None:
    """-log p of each sampled model token (prompt and observation tokens, mask 0, left out),
    over the groups dynamic sampling drops as well as those it keeps; an infrastructure
    failure's tokens are not judged."""

    def sampled(logprobs: list[float], mask: list[int], reward: float, **kw: Any) -> Trajectory:
        return Trajectory(task_id="t", domain="math", reward=reward, success=reward > 0,
                          logprobs=logprobs, loss_mask=mask, **kw)  # fmt: skip

    same = Group("t", "a", [sampled([0.0, -0.5, -1.5], [0, 1, 1], 1.0),
                            sampled([0.0, -1.0], [0, 1], 1.0)])  # fmt: skip
    mixed = Group("t", "b", [sampled([-2.0, 0.0], [1, 0], 1.0), sampled([-9.0], [1], 0.0,
                             ending=Ending.INFRA_ERROR), sampled([-3.0], [1], 0.0)])  # fmt: skip
    s = learning_signal([same, mixed])
    assert s.sampled_entropy == pytest.approx((0.5 + 1.5 + 1.0 + 2.0 + 3.0) / 5)  # 1.6
    assert s.scalars()["signal/sampled_entropy"] == pytest.approx(1.6)
    assert learning_signal([group([1.0, 0.0], [True, False])]).sampled_entropy is None


def signal(zero: int, failed: int = 0, solved: int = 0, groups: int = 4) -> Signal:
    return Signal(groups, zero, failed, solved, reward_mean=0.0, reward_std=0.0)


def test_the_warning_comes_once_per_streak_of_starved_updates_and_names_causes() -> None:
    starved, fine = signal(3, failed=3), signal(1, failed=1)
    assert signal_warning([starved, starved], 0.5) is None  # not yet 3 in a row
    message = signal_warning([fine, starved, starved, starved], 0.05)
    assert message is not None
    assert "more than 50% of the groups had equal rewards (9 of 12 groups)" in message
    assert "9 of them failed every sample: the tasks are too hard" in message
    assert "entropy is 0.050" in message and "too easy" not in message
    assert signal_warning([fine, starved, starved, starved, starved], 0.05) is None  # said
    easy = signal(4, solved=4)
    again = signal_warning([starved, starved, starved, fine, easy, easy, easy], 1.0)
    assert again is not None and "12 of them solved every sample: the tasks are too easy" in again
    assert "entropy" not in again
    assert signal_warning([signal(2)] * 3, 0.5) is None  # half is not more than half


def test_a_teams_risk_is_its_executors_not_diluted_by_its_other_roles() -> None:
    """Two team episodes (executor, validator, analyst each): one executor took a risky step
    (cost 1), the other none. Per episode the rate is 1/2 and the cost 1/2; counted over every
    role's trajectory it would read 1/6. A single agent's trajectories count as they are."""
    from honing.observe.metrics import acting, risk_scalars, risk_summary

    def team(risk: float) -> list[Trajectory]:
        lead = Trajectory(task_id="t", domain="code", role="executor", risk=risk,
                          components={"team_rounds": 1.0})  # fmt: skip
        others = [Trajectory(task_id="t", domain="code", role=r) for r in ("validator", "analyst")]
        return [lead, *others]

    batch = team(1.0) + team(0.0)
    assert [t.role for t in acting(batch)] == ["executor", "executor"]
    summary = risk_summary(batch)
    assert summary.rate == 0.5 and summary.cost == 0.5
    assert risk_scalars(batch)["risk/rate"] == 0.5
    alone = [Trajectory(task_id="t", domain="math", risk=r) for r in (0.0, 0.5, 0.0, 0.0)]
    assert risk_summary(alone).rate == 0.25 and risk_summary(alone).cost == 0.125
