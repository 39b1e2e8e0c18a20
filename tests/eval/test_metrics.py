"""The evaluation's pure metrics on hand-built episodes; expected values written as arithmetic."""

from __future__ import annotations

import math

import pytest

from honing.envs import Action, FailureReason, Observation, StepInfo, StepResult, ToolCall
from honing.eval.metrics import (
    Episode,
    Step,
    by_domain,
    by_tag,
    criteria_met,
    end_to_end,
    failure_loops,
    pass_at_k,
    pass_at_k_values,
    recovered,
    single_step,
    trajectory,
    useful,
    well_formed,
)

OBS = Observation(text="state")
MALFORMED = FailureReason.MALFORMED_ACTION
TOOL_ERROR = FailureReason.TOOL_ERROR
SANDBOX = FailureReason.SANDBOX_ERROR


def step(
    components: dict[str, float] | None = None,
    failure: FailureReason | None = None,
    detail: str = "",
    tools: tuple[str, ...] = (),
) -> Step:
    calls = [ToolCall(id=f"c{i}", name=name, arguments={}) for i, name in enumerate(tools)]
    outcome = (components or {}).get("outcome") == 1.0
    result = StepResult(
        observation=OBS,
        reward=0.0,
        components=components or {},
        done=outcome,
        info=StepInfo(failure=failure, detail=detail),
    )
    return Step(OBS, Action(tool_calls=calls), result)


def episode(*steps: Step, task: str = "t", domain: str = "code", tags: tuple[str, ...] = (),
            sample: int = 0, stopped: bool = False, error: str = "") -> Episode:  # fmt: skip
    return Episode(task, domain, tags, sample, steps, stopped, error)


WIN = step({"well_formed": 1.0, "outcome": 1.0, "tests_passed": 1.0})
LOSE = step({"well_formed": 1.0, "outcome": 0.0, "tests_passed": 0.5}, TOOL_ERROR, "1/2 passed")
NOOP = step({"well_formed": 0.0}, MALFORMED, "no tool call")
INFRA = step({}, SANDBOX, "cell crashed")


# -- pass@k ------------------------------------------------------------------------------------
def test_pass_at_k_matches_the_binomial_form() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)
    # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    # 1 - C(7,3)/C(10,3) = 1 - 35/120
    assert pass_at_k(10, 3, 3) == pytest.approx(1 - 35 / 120)
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # n - c = 1 < k: every k-subset holds a pass
    assert pass_at_k(4, 4, 4) == 1.0
    assert pass_at_k(200, 13, 100) == pytest.approx(1 - math.comb(187, 100) / math.comb(200, 100))


def test_pass_at_k_refuses_impossible_counts() -> None:
    for n, c, k in [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)]:
        with pytest.raises(ValueError, match="pass@k needs"):
            pass_at_k(n, c, k)


def test_reported_k() -> None:
    assert pass_at_k_values(1) == [1]
    assert pass_at_k_values(5) == [1, 5]
    assert pass_at_k_values(20) == [1, 10, 20]


# -- end to end --------------------------------------------------------------------------------
def test_end_to_end_leaves_infrastructure_failures_out_of_the_rate() -> None:
    episodes = [
        episode(WIN, task="a", sample=0),
        episode(LOSE, task="a", sample=1),
        episode(NOOP, task="b", sample=0),
        episode(INFRA, task="b", sample=1),  # infra: not a failure of the policy
        episode(error="CellCrashed: gone", task="c"),  # the sandbox raised
        episode(INFRA, WIN, task="c", sample=1),  # a success stands despite an earlier infra step
    ]
    found = end_to_end(episodes, [1, 2])
    assert (found.passed, found.total, found.infra_failed, found.tasks) == (2, 4, 2, 3)
    assert found.success_rate == pytest.approx(2 / 4)
    # judged samples: a = [pass, fail], b = [fail], c = [pass]
    assert found.pass_at_k[1] == pytest.approx((1 / 2 + 0 / 1 + 1 / 1) / 3)
    assert found.pass_at_k[2] == pytest.approx(1.0)  # only a has 2 judged samples: 1 - 0/1
    nothing = end_to_end([episode(INFRA)], [1])
    assert (nothing.total, nothing.success_rate, nothing.pass_at_k) == (0, None, {})


# -- single step -------------------------------------------------------------------------------
def test_well_formed_reads_the_failure_and_the_format_component() -> None:
    assert well_formed(WIN) and well_formed(LOSE)
    assert not well_formed(NOOP)
    assert not well_formed(step({}, FailureReason.UNKNOWN_TOOL))
    # the failure names an earlier call's error, but a later call was malformed
    assert not well_formed(step({"well_formed": 0.0, "tests_passed": 0.5}, TOOL_ERROR))


def test_useful_means_a_progress_component_rose_or_the_task_was_solved() -> None:
    write = step({"well_formed": 1.0})  # only the format component: no progress
    half = step({"well_formed": 1.0, "tests_passed": 0.5, "compiles": 1.0}, TOOL_ERROR, "e")
    worse = step({"well_formed": 1.0, "tests_passed": 0.25, "compiles": 1.0}, TOOL_ERROR, "e2")
    back = step({"well_formed": 1.0, "tests_passed": 0.5, "compiles": 1.0}, TOOL_ERROR, "e")
    assert useful([write, half, write, worse, back, WIN]) == [
        False, True, False, False, True, True,  # back: 0.5 > 0.25, the last recorded value
    ]  # fmt: skip


def test_single_step_counts_judged_steps_and_failures() -> None:
    episodes = [episode(NOOP, NOOP, LOSE, WIN), episode(INFRA, NOOP)]
    found = single_step(episodes)
    assert (found.steps, found.infra_steps) == (5, 1)
    assert found.well_formed == 2  # LOSE and WIN
    assert found.useful == 2  # LOSE (tests 0 -> 0.5) and WIN
    assert found.well_formed_rate == pytest.approx(2 / 5)
    assert found.useful_rate == pytest.approx(2 / 5)
    assert found.failures == {"malformed_action": 3, "tool_error": 1}
    assert single_step([]).well_formed_rate is None


# -- trajectory --------------------------------------------------------------------------------
def test_failure_loops_are_runs_of_the_same_failure() -> None:
    other = step({}, TOOL_ERROR, "another error")
    assert failure_loops([NOOP, NOOP, NOOP, WIN, LOSE, LOSE, other, LOSE]) == [3, 2]
    assert failure_loops([NOOP, LOSE, NOOP, LOSE]) == []
    assert failure_loops([INFRA, INFRA]) == []  # the infrastructure's, not the policy's


def test_recovery_needs_a_success_after_an_error() -> None:
    limit = step({"well_formed": 1.0}, FailureReason.STEP_LIMIT)
    assert recovered([NOOP, LOSE, WIN])
    assert not recovered([WIN])
    assert not recovered([NOOP, LOSE])
    assert not recovered([limit, WIN])  # a limit is not an error of the action


def test_trajectory_over_judged_episodes() -> None:
    rollback = step({"well_formed": 1.0}, tools=("rollback",))
    episodes = [
        episode(WIN),
        episode(LOSE, LOSE, rollback, WIN),
        episode(NOOP, NOOP, NOOP, stopped=True),
        episode(NOOP, INFRA),  # left out: the infrastructure failed it
    ]
    found = trajectory(episodes)
    assert found.episodes == 3
    assert found.mean_steps == pytest.approx((1 + 4 + 3) / 3)
    assert found.mean_steps_to_success == pytest.approx((1 + 4) / 2)
    assert found.max_steps_to_success == 4
    assert (found.failure_loops, found.episodes_with_loops, found.longest_loop) == (2, 2, 3)
    assert (found.episodes_with_errors, found.recovered) == (2, 1)
    assert found.recovery_rate == pytest.approx(1 / 2)
    assert (found.rollback_calls, found.episodes_with_rollback, found.stopped) == (1, 1, 1)
    empty = trajectory([])
    assert (empty.mean_steps, empty.recovery_rate, empty.longest_loop) == (None, None, 0)


# -- grouping ----------------------------------------------------------------------------------
def test_groups_by_domain_and_tag() -> None:
    a = episode(WIN, task="a", domain="code", tags=("easy", "py"))
    b = episode(LOSE, task="b", domain="sql", tags=("py", "py"))
    c = episode(NOOP, task="c", domain="code")
    assert by_domain([a, b, c]) == {"code": [a, c], "sql": [b]}
    assert by_tag([a, b, c]) == {"easy": [a], "py": [a, b]}  # b once, c has no tag


def test_criteria_met_reads_the_last_judgement_and_skips_steps_without_one() -> None:
    first = step({"met:iou": 0.0, "met:dims": 0.0})
    built = step({"built": 1.0, "watertight": 1.0})  # no verdict: skipped, not read as unmet
    second = step({"met:iou": 1.0, "met:dims": 0.0, "outcome": 0.0})
    assert criteria_met([first, built, second]) == {"iou": True, "dims": False}
    assert criteria_met([second, built]) == {"iou": True, "dims": False}
    assert criteria_met([first]) == {"iou": False, "dims": False}


def test_criteria_met_is_empty_for_a_domain_without_criteria_or_an_unjudged_episode() -> None:
    assert criteria_met([WIN, LOSE]) == {}
    assert criteria_met([]) == {}
    # a partial value is not a criterion met (a verdict is 1.0 or it is not met)
    assert criteria_met([step({"met:iou": 0.5})]) == {"iou": False}
