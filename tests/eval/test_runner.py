"""Evaluating fixture code tasks through the real environment and sandbox pool."""

from __future__ import annotations

import json

import pytest

from honing.domains.code.task import CodeTask
from honing.domains.math.task import MathTask
from honing.envs import Action, EnvConfig, ToolCall
from honing.errors import ConfigError
from honing.eval import (
    Context,
    NoopPolicy,
    PolicyPlayer,
    ReferencePolicy,
    evaluate,
    make_policy,
    play_episodes,
)
from honing.sandbox import ExecRequest, ExecResult, ExecStatus, SandboxPool
from honing.tasks import TaskSet, domains

ADD = CodeTask(
    id="add",
    prompt="def add(a, b):\n    ...\n",
    entry_point="add",
    tests="assert add(1, 2) == 3\nassert add(-1, 1) == 0\n",
    reference="def add(a, b):\n    return a + b\n",
    tags=["arith", "easy"],
)
DOUBLE = CodeTask(
    id="double",
    prompt="def double(x):\n",
    entry_point="double",
    tests="def check(candidate):\n    assert candidate(2) == 4\n",
    reference="def double(x):\n    return 2 * x\n",
    tags=["arith"],
)
TASKS = TaskSet("fixture", [ADD, DOUBLE], total=2)


def write(content: str) -> ToolCall:
    return ToolCall(
        id="w", name="write_file", arguments={"path": "solution.py", "content": content}
    )


RUN_TESTS = ToolCall(id="t", name="run_tests", arguments={})


class ScriptedPolicy:
    """Half right, then worse, then rolls back, then right: exercises the trajectory tier."""

    name = "scripted"
    SCRIPT = (
        Action(tool_calls=[write("def add(a, b):\n    return 3\n"), RUN_TESTS]),  # 1/2
        Action(tool_calls=[write("def add(a, b):\n    return None\n"), RUN_TESTS]),  # 0/2
        Action(tool_calls=[ToolCall(id="r", name="rollback", arguments={}), RUN_TESTS]),  # 1/2
        Action(tool_calls=[write(ADD.reference or ""), RUN_TESTS]),
    )

    async def act(self, context: Context) -> Action | None:
        done = len(context.steps)
        return self.SCRIPT[done] if done < len(self.SCRIPT) else None


async def test_reference_solves_every_task(pool: SandboxPool) -> None:
    report = await evaluate(TASKS, ReferencePolicy(), pool, k=2)
    e2e = report.end_to_end
    assert (e2e.passed, e2e.total, e2e.infra_failed, e2e.success_rate) == (4, 4, 0, 1.0)
    assert e2e.pass_at_k == {1: 1.0, 2: 1.0}
    assert report.single_step.useful_rate == 1.0 and report.single_step.well_formed_rate == 1.0
    assert report.trajectory.mean_steps_to_success == 1.0
    assert set(report.by_domain) == {"code"} and set(report.by_tag) == {"arith", "easy"}
    assert report.by_tag["easy"].end_to_end.total == 2  # ADD's two samples
    assert (report.policy, report.tasks, report.version) == ("reference", "fixture", TASKS.version)
    out = json.loads(json.dumps(report.to_json_dict()))
    assert out["end_to_end"]["pass_at_k"] == {"1": 1.0, "2": 1.0}


async def test_noop_solves_nothing_and_loops(pool: SandboxPool) -> None:
    report = await evaluate(TASKS, NoopPolicy(), pool, config=EnvConfig(max_steps=3))
    e2e = report.end_to_end
    assert (e2e.passed, e2e.total, e2e.success_rate, e2e.pass_at_k) == (0, 2, 0.0, {1: 0.0})
    assert report.single_step.steps == 2 * 3 and report.single_step.well_formed == 0
    assert report.single_step.failures == {"malformed_action": 6}
    assert report.trajectory.failure_loops == 2 and report.trajectory.longest_loop == 3


async def test_reference_that_stops_early_is_a_failure(pool: SandboxPool) -> None:
    class WriteOnly(ReferencePolicy):
        async def act(self, context: Context) -> Action | None:
            return None if context.steps else Action(tool_calls=[write(ADD.reference or "")])

    episode = await PolicyPlayer(WriteOnly()).play(ADD, 0, pool, EnvConfig())
    assert episode.stopped and not episode.success and not episode.infra_failed
    assert len(episode.steps) == 1


async def test_trajectory_of_a_recovering_policy(pool: SandboxPool) -> None:
    report = await evaluate(TaskSet("one", [ADD], total=1), ScriptedPolicy(), pool)
    assert report.end_to_end.passed == 1
    assert report.trajectory.mean_steps_to_success == 4
    assert report.trajectory.recovered == 1 and report.trajectory.rollback_calls == 1
    # useful: 1/2 (rose from 0), 0/2 (no), rollback to 1/2 (rose from 0), solved
    assert report.single_step.useful == 3 and report.single_step.steps == 4


async def test_infrastructure_failures_are_counted_apart(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(request: ExecRequest) -> ExecResult:
        return ExecResult(status=ExecStatus.SANDBOX_ERROR, error="cell crashed (simulated)")

    monkeypatch.setattr(pool, "run", broken)
    report = await evaluate(TASKS, ReferencePolicy(), pool, k=2)
    e2e = report.end_to_end
    assert (e2e.passed, e2e.total, e2e.infra_failed) == (0, 0, 4)
    assert e2e.success_rate is None and e2e.pass_at_k == {}  # not 0: nothing could be judged
    assert report.single_step.infra_steps == 4 and report.single_step.steps == 0
    assert report.trajectory.episodes == 0


async def test_an_answer_its_checker_fails_on_is_judged_wrong_not_left_out(
    pool: SandboxPool,
) -> None:
    """math-verify raises on a 5000-digit answer: the episode counts, as a failure (before, the
    checker's crash left it out of the denominator as an infrastructure failure)."""

    class Huge:
        name = "huge"

        async def act(self, context: Context) -> Action | None:
            value = "1" * 5000 if context.task.id == "half" else "2"
            return Action(tool_calls=[ToolCall(id="a", name="answer", arguments={"value": value})])

    half = MathTask(id="half", prompt="1/2 as a fraction?", answer="\\frac{1}{2}")
    two = MathTask(id="two", prompt="1+1?", answer="2")
    report = await evaluate(TaskSet("m", [half, two], total=2), Huge(), pool)
    e2e = report.end_to_end
    assert (e2e.passed, e2e.total, e2e.infra_failed, e2e.success_rate) == (1, 2, 0, 0.5)
    assert report.single_step.failures == {"checker_rejected": 1}
    assert report.single_step.infra_steps == 0


async def test_unregistered_domain_is_refused_by_name(pool: SandboxPool) -> None:
    math = domains.get("math")
    domains.unregister("math")
    try:
        algebra = MathTask(id="m1", prompt="1+1?", answer="2")
        with pytest.raises(
            ConfigError, match=r"cannot evaluate domain 'math' \(1 tasks\).*available"
        ):
            await play_episodes([ADD, algebra], NoopPolicy(), pool)
    finally:
        domains.register(math)


def test_policies_by_name() -> None:
    assert make_policy("reference").name == "reference"
    assert make_policy("noop").name == "noop"
    with pytest.raises(ConfigError, match="unknown policy 'random'; allowed: reference, noop"):
        make_policy("random")


class DeleteFirst:
    """Empties the task's first table (a risky action the judge never needs), then plays the
    reference: the same success, every episode risky."""

    name = "delete-first"

    async def act(self, context: Context) -> Action | None:
        done = len(context.steps)
        if done == 0:
            table = sorted(context.task.tables)[0]  # type: ignore[attr-defined]
            sql = f"DELETE FROM {table}"
            return Action(tool_calls=[ToolCall(id="d", name="query", arguments={"sql": sql})])
        actions = context.env.reference_actions(context.task)
        return actions[done - 1] if done - 1 < len(actions) else None


async def test_the_end_to_end_tier_counts_risky_episodes_apart_from_success(
    pool: SandboxPool,
) -> None:
    from honing.tasks import load_tasks

    tasks = load_tasks("examples-sql").shard(0, 1)
    tasks.tasks = tasks.tasks[:3]
    config = EnvConfig(max_steps=8)
    safe = await evaluate(tasks, ReferencePolicy(), pool, config=config)
    risky = await evaluate(tasks, DeleteFirst(), pool, config=config)
    assert safe.end_to_end.success_rate == risky.end_to_end.success_rate == 1.0
    assert (safe.end_to_end.risky, safe.end_to_end.risk_rate) == (0, 0.0)
    assert (risky.end_to_end.risky, risky.end_to_end.risk_rate) == (3, 1.0)
    assert risky.by_domain["sql"].end_to_end.risk_rate == 1.0
