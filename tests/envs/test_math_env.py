"""The math environment: exact calculator in the sandbox, answers judged in the sandbox."""

from __future__ import annotations

import json
from typing import Any

import pytest

from honing.domains.math import judge as mathcheck
from honing.domains.math.env import MathEnv
from honing.domains.math.task import MathTask
from honing.envs import Action, EnvConfig, FailureReason
from honing.envs.kits.answers import stated_answer
from honing.sandbox import ExecResult, ExecStatus, SandboxPool

PRODUCT = MathTask(id="mul", prompt="What is 17*23?", answer="391", reference="17*23 = 391")


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": f"c-{name}", "function": {"name": name, "arguments": json.dumps(arguments)}}


def calls(*items: dict[str, Any]) -> Action:
    return Action.from_openai({"tool_calls": list(items)})


@pytest.fixture
def env(pool: SandboxPool) -> MathEnv:
    return MathEnv(pool, EnvConfig(max_steps=4))


@pytest.mark.parametrize(
    ("content", "stated"),
    [
        ("so \\boxed{391}.", "391"),
        ("first \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\boxed{1}\\boxed{\\frac{1}{2}}"),  # two
        ("\\boxed{391}, that is \\boxed{ 391 }", "391"),  # one value, boxed twice
        ("Work...\nAnswer: 391", "391"),
        ("Final answer = x+1", "x+1"),
        ("I think it is 391", None),
    ],
)
def test_stated_answer(content: str, stated: str | None) -> None:
    assert stated_answer(content) == stated


async def test_reference_solves_and_noop_fails(env: MathEnv) -> None:
    await env.reset(PRODUCT)
    for action in env.reference_actions(PRODUCT):
        result = await env.step(action)
    assert result.done and result.components["outcome"] == 1.0 and result.reward == 1.0
    await env.reset(PRODUCT)
    noop = await env.step(Action(content="Hmm."))
    assert noop.info.failure is FailureReason.MALFORMED_ACTION
    assert noop.components == {"well_formed": 0.0} and not noop.done


MULTIPLY = MathTask(id="mul-483", prompt="Multiply 483 by 446.", answer="215418")


@pytest.mark.parametrize(
    ("value", "outcome"),
    [
        ("483*446", 0.0),  # a formula is not an answer: the calculator is there to evaluate it
        ("483 \\times 446", 0.0),
        ("215000 + 418", 0.0),
        ("\\boxed{483 \\cdot 446}", 0.0),
        ("215418 = 483*446", 0.0),  # the value stated last is what counts
        ("215418", 1.0),
        ("215,418", 1.0),
        ("483*446 = 215418", 1.0),  # the working, then the value
        ("\\boxed{215418}", 1.0),
        ("x = 215000 or x = 215418", 0.0),  # several answers listed: none of them counts
        ("x = 215000, x = 215418", 0.0),
        ("x = 215000 \\text{ or } x = 215418", 0.0),
        ("x = 215418, so x = 215418", 1.0),  # the same value twice is one answer
    ],
)
async def test_an_answer_is_a_value_not_a_formula_to_evaluate(
    env: MathEnv, value: str, outcome: float
) -> None:
    await env.reset(MULTIPLY)
    result = await env.step(calls(call("answer", value=value)))
    assert result.done and result.components["outcome"] == outcome
    assert not result.info.infrastructure  # a verdict, not a checker failure


async def test_calculator_is_exact_and_refuses_code(env: MathEnv) -> None:
    await env.reset(PRODUCT)
    result = await env.step(calls(
        call("calculator", expression="17*23"),
        call("calculator", expression="1/3 + 2^10"),
    ))  # fmt: skip
    texts = [r.content for r in result.observation.tool_results]
    assert texts == ["17*23 = 391", "1/3 + 2^10 = 3073/3 (= 1024.33333333)"]
    assert result.components["tool_ok"] == 1.0
    hostile = await env.step(calls(call("calculator", expression="__import__('os').getcwd()")))
    assert "not allowed" in hostile.observation.tool_results[0].content
    assert hostile.components["tool_ok"] == 0.0
    assert hostile.info.failure is FailureReason.TOOL_ERROR


async def test_wrong_answer_scores_zero_and_ends(env: MathEnv) -> None:
    await env.reset(PRODUCT)
    result = await env.step(Action(content="17*23 = \\boxed{381}"))
    assert result.done and result.components["outcome"] == 0.0
    assert result.info.failure is None  # a wrong answer is the model's, not an error


async def test_unknown_tool_is_a_format_failure(env: MathEnv) -> None:
    await env.reset(PRODUCT)
    result = await env.step(calls(call("wolfram", query="17*23")))
    assert result.info.failure is FailureReason.UNKNOWN_TOOL
    assert result.components["well_formed"] == 0.0


HALF = MathTask(id="half", prompt="What is 1/2 as a fraction?", answer="\\frac{1}{2}")
POLY = MathTask(id="poly", prompt="Expand (x+1)^2 - x^2 - x.", answer="x+1")
HUGE = "1" * 5000  # past Python's 4300-digit limit for int(str): math-verify raises on it
TOWER = "x" + "^x" * 2000  # keeps math-verify's parser busy for seconds of CPU


async def test_an_answer_the_checker_raises_on_is_wrong_with_the_reason(env: MathEnv) -> None:
    await env.reset(HALF)
    result = await env.step(calls(call("answer", value=HUGE)))
    assert result.done and result.components["outcome"] == 0.0 and result.reward == 0.0
    assert result.info.failure is FailureReason.CHECKER_REJECTED
    assert not result.info.infrastructure  # a wrong answer: it stays in the denominator
    assert "math-verify raised SympifyError" in result.info.detail  # the reason, kept
    assert result.observation.tool_results[0].content.startswith("incorrect: math-verify raised")


async def test_an_answer_that_spends_the_checkers_cpu_budget_is_wrong(
    env: MathEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mathcheck, "BUDGET_S", 1.0)  # (5 s by default)
    await env.reset(POLY)
    result = await env.step(Action(content=f"\\boxed{{{TOWER}}}"))
    assert result.components["outcome"] == 0.0 and not result.info.infrastructure
    assert result.info.failure is FailureReason.CHECKER_REJECTED
    assert "the checker spent its CPU budget (1 s) on it" in result.info.detail


async def test_a_checker_that_cannot_start_is_infrastructure(
    env: MathEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checker in plain cells, where math-verify cannot be imported: no verdict at all."""

    async def plain(pool: SandboxPool) -> SandboxPool:
        return pool

    monkeypatch.setattr(mathcheck, "checker_pool", plain)
    await env.reset(POLY)
    result = await env.step(calls(call("answer", value="1+x")))
    assert result.info.failure is FailureReason.VERIFIER_CRASH and result.info.infrastructure
    assert "No module named 'math_verify'" in result.info.detail
    assert "outcome" not in result.components and result.reward == 0.0


async def test_a_checker_the_host_does_not_run_in_time_is_infrastructure(
    env: MathEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock reached before the CPU-time limit was spent (as on an overloaded host,
    here by a wall-clock limit shorter than the work): not the answer's doing, so no verdict."""
    monkeypatch.setattr(mathcheck, "checker_limits", lambda cpu_s: (60.0, 0.5))
    await env.reset(POLY)
    result = await env.step(calls(call("answer", value=TOWER)))
    assert result.info.failure is FailureReason.VERIFIER_CRASH and result.info.infrastructure
    assert "wall-clock limit" in result.info.detail and "outcome" not in result.components


async def test_a_sandbox_failure_is_infrastructure(
    env: MathEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    await env.reset(PRODUCT)
    checker = await env.pool.sibling("honing-math", ["math_verify", "sympy"])

    async def broken(request: object) -> ExecResult:
        return ExecResult(ExecStatus.SANDBOX_ERROR, error="cell crashed")

    monkeypatch.setattr(checker, "run", broken)
    result = await env.step(Action(content="\\boxed{391.0}"))  # not an integer: the sandbox
    assert result.info.failure is FailureReason.SANDBOX_ERROR and result.info.infrastructure
    assert "outcome" not in result.components


async def test_checkpoint_and_rollback_restore_the_state(env: MathEnv) -> None:
    await env.reset(PRODUCT)
    token = await env.checkpoint()
    await env.step(calls(call("calculator", expression="2+2")))
    assert env.steps == 1 and env.state is not None and env.state.actions
    await env.rollback(token)
    assert env.steps == 0 and env.state is not None and env.state.actions == []


async def test_each_observation_also_says_only_what_changed(env: MathEnv) -> None:
    """`Observation.update` (for an agent that does not restate the state): nothing after a
    step that went as planned; an error once (a tool result that shows it is not repeated)."""
    first = await env.reset(PRODUCT)
    assert first.update is None and first.text.endswith("Goal: What is 17*23?")
    ok = await env.step(calls(call("calculator", expression="17*23")))
    assert ok.observation.update == "" and "Goal:" in ok.observation.text
    bad = await env.step(calls(call("wolfram", query="17*23")))
    [result] = bad.observation.tool_results
    assert "unknown tool 'wolfram'" in result.content and bad.observation.update == ""
    assert "Latest errors:\n- unknown tool 'wolfram'" in bad.observation.text  # the full state
    rejected = await env.reject("no tool call in the message")  # no tool result shows it
    assert rejected.observation.update == "Latest errors:\n- no tool call in the message"
