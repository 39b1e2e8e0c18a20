"""The run's accounting: base -> warm start -> RL, the RL gain measured from the warm start, its
interval over the same episodes, n and infrastructure failures; expected values by hand."""

from __future__ import annotations

from honing.eval.stats import difference_interval, difference_interval_counts
from honing.trainer.gains import account, best_by_validation
from honing.trainer.run_dir import BEFORE, WARM_START, EvalPoint


def point(
    step: int, phase: str, solved: list[bool], *, set: str = "math", infra: int = 0,
    outcomes: bool = True,
) -> EvalPoint:  # fmt: skip
    passed = sum(solved)
    return EvalPoint(
        step=step, phase=phase, set=set, success=passed / len(solved), passed=passed,
        total=len(solved), infra_failed=infra, seconds=1.0,
        outcomes={f"t{i}#0": ok for i, ok in enumerate(solved)} if outcomes else {},
    )  # fmt: skip


BASE = [False, False, False, False]
WARM = [True, True, False, False]
RL = [True, True, True, False]


def test_the_rl_gain_is_measured_from_the_warm_start_not_the_base() -> None:
    gains = account([point(0, BEFORE, BASE), point(0, WARM_START, WARM), point(6, "main", RL)])
    assert gains.rl_gain == 3 / 4 - 2 / 4  # not 3/4 - 0
    interval = difference_interval(WARM, RL)  # the same 4 episodes at both points
    assert (gains.ci_low, gains.ci_high) == (interval.low, interval.high)
    assert gains.paired and gains.n == 4 and gains.infra_failures == 0
    low, high = round(100 * interval.low), round(100 * interval.high)
    assert gains.line("q", 1.5) == (
        f"q: held-out success base 0% → warm start 50% → RL 75% (RL +25 pts, 95% CI "
        f"{low:+d}..{high:+d}; n=4; infra failures 0) in 1.5 min"
    )
    assert gains.line("d", 1.5, trained="distilled").startswith(
        "d: held-out success base 0% → warm start 50% → distilled 75% (distilled +25 pts"
    )
    summary = gains.summary()
    assert summary["rl_gain"] == 0.25 and summary["ci95"] == [interval.low, interval.high]
    assert summary["warm_start"] == {"step": 0, "success": 0.5, "passed": 2, "total": 4,
                                     "infra_failed": 0}  # fmt: skip


def test_without_a_warm_start_the_gain_is_from_the_base() -> None:
    gains = account([point(0, BEFORE, WARM), point(4, "main", RL)])
    assert gains.warm is None and gains.rl_gain == 1 / 4
    assert gains.line("q", 2.0).startswith(
        "q: held-out success base 50% → RL 75% (RL +25 pts, 95% CI "
    )


def test_points_without_outcomes_get_the_interval_for_independent_samples() -> None:
    gains = account([point(0, WARM_START, WARM, outcomes=False), point(2, "main", RL)])
    interval = difference_interval_counts(2, 4, 3, 4)
    assert not gains.paired and gains.n == 4
    assert (gains.ci_low, gains.ci_high) == (interval.low, interval.high)


def test_sets_are_pooled_the_latest_evaluation_counts_and_infra_failures_are_summed() -> None:
    evals = [
        point(0, WARM_START, WARM, infra=1),
        point(0, WARM_START, BASE, set="code"),
        point(3, "main", BASE),  # an earlier evaluation after RL: not the last
        point(3, "main", BASE, set="code"),
        point(6, "main", RL, infra=2),
        point(6, "main", WARM, set="code"),
    ]
    gains = account(evals)
    assert gains.rl is not None and gains.rl.step == 6
    assert (gains.rl.passed, gains.rl.total) == (3 + 2, 8)
    assert gains.rl_gain == 5 / 8 - 2 / 8
    assert gains.infra_failures == 1 + 2
    assert gains.n == 8 and gains.paired  # math/t0#0 and code/t0#0 are different episodes


def test_a_run_without_an_evaluation_after_rl_says_so() -> None:
    gains = account([point(0, BEFORE, BASE), point(0, WARM_START, WARM)])
    assert gains.rl_gain is None and gains.ci_low is None
    assert gains.line("q", 1.0) == (
        "q: held-out success base 0% → warm start 50% (no evaluation after RL; infra failures "
        "0) in 1.0 min"
    )
    assert account([]).line("q", 1.0) == "q: no held-out success measured in 1.0 min"


def test_a_run_evaluated_only_after_rl_says_what_is_missing() -> None:
    gains = account([point(4, "main", RL)])  # eval.before off, no warm start
    assert gains.rl is not None and gains.rl_gain is None
    assert gains.line("q", 1.0) == (
        "q: held-out success RL 75% (no evaluation before RL to compare with; infra failures 0) "
        "in 1.0 min"
    )


def test_the_best_update_on_validation_is_pooled_over_sets_and_the_earliest_on_a_tie() -> None:
    points = [
        point(0, WARM_START, [True, True, True, True]),  # the start is no candidate
        point(2, "main", [True, False], set="a"), point(2, "main", [True, True], set="b"),
        point(4, "main", [True, True], set="a"), point(4, "main", [True, False], set="b"),
        point(6, "main", [True, False], set="a"), point(6, "main", [False, False], set="b"),
    ]  # fmt: skip
    assert best_by_validation(points) == (2, 0.75)  # 3/4 at 2 and at 4: the earlier
    assert best_by_validation(points[:1]) is None
    assert best_by_validation([point(2, "m", [True], infra=1, outcomes=False)]) == (2, 1.0)


def test_the_rl_stage_can_be_the_update_chosen_on_validation() -> None:
    evals = [point(0, WARM_START, WARM), point(2, "main", RL), point(4, "main", BASE)]
    assert account(evals).rl is not None and account(evals).rl.step == 4  # the latest
    chosen = account(evals, rl_step=2)
    assert chosen.rl is not None and chosen.rl.step == 2
    assert chosen.rl_gain == 3 / 4 - 2 / 4


def test_a_judge_with_criteria_adds_the_criteria_met_pooled_over_sets_to_the_line() -> None:
    def graded(step: int, phase: str, criteria: dict[str, tuple[int, int]], set: str) -> EvalPoint:
        return point(step, phase, BASE, set=set).model_copy(update={"criteria": criteria})

    evals = [
        graded(0, WARM_START, {"iou": (1, 4), "dims": (2, 4)}, "a"),
        graded(0, WARM_START, {"iou": (0, 4), "dims": (1, 4)}, "b"),
        graded(5, "main", {"iou": (3, 4), "dims": (4, 4)}, "a"),
        graded(5, "main", {"iou": (2, 4), "dims": (3, 4)}, "b"),
    ]
    gains = account(evals)
    assert gains.warm is not None and gains.rl is not None
    # pooled: iou 1/8, dims 3/8 -> (12.5% + 37.5%) / 2 = 25%; after: 5/8, 7/8 -> 75%
    assert gains.warm.criteria == {"iou": (1, 8), "dims": (3, 8)}
    assert gains.line("s", 1.0).endswith(
        "infra failures 0; criteria met warm start 25% → RL 75%) in 1.0 min"
    )
    assert gains.summary()["rl"] == {"step": 5, "success": 0.0, "passed": 0, "total": 8,
                                     "infra_failed": 0, "criteria_met": 0.75}  # fmt: skip
    # without criteria the line is as before
    assert "criteria" not in account([point(0, WARM_START, WARM), point(2, "main", RL)]).line(
        "q", 1.0
    )
