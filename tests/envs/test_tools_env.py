"""The tools environment: function calling judged by call matching; executable tools with
constraints."""

from __future__ import annotations

import json
from typing import Any

import pytest

from honing.domains.tools.env import ToolError, ToolsEnv, calendar, convert_units, takes
from honing.domains.tools.task import ToolsTask
from honing.envs import Action, EnvConfig, FailureReason, ToolCall
from honing.sandbox import SandboxPool

AREA = ToolsTask(
    id="area",
    prompt="Area of a triangle with base 10 and height 5?",
    functions=[
        {
            "name": "area",
            "description": "Triangle area.",
            "parameters": {
                "type": "dict",
                "properties": {"base": {"type": "integer"}, "height": {"type": "integer"}},
                "required": ["base", "height"],
            },
        }
    ],
    expected_calls=[{"area": {"base": [10], "height": [5]}}],
    reference=json.dumps([{"name": "area", "arguments": {"base": 10, "height": 5}}]),
)
TRIP = ToolsTask(
    id="trip",
    prompt="How many km are 26.2 miles, doubled?",
    functions=[{"name": "convert_units"}, {"name": "calculator"}, {"name": "lookup"}],
    answer="84.3296256",
    max_calls=2,
    forbidden_tools=["lookup"],
    facts={"marathon": "26.2 mi"},
    reference=json.dumps(
        [
            {"name": "calculator", "arguments": {"expression": "26.2*1.609344*2"}},
            {"name": "answer", "arguments": {"value": "84.3296256"}},
        ]
    ),
)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": f"c-{name}", "function": {"name": name, "arguments": json.dumps(arguments)}}


def calls(*items: dict[str, Any]) -> Action:
    return Action.from_openai({"tool_calls": list(items)})


@pytest.fixture
def env(pool: SandboxPool) -> ToolsEnv:
    return ToolsEnv(pool, EnvConfig(max_steps=6))


def test_convert_units_and_calendar() -> None:
    assert convert_units(1, "mi", "km") == pytest.approx(1.609344)
    assert convert_units(212, "F", "C") == pytest.approx(100)
    assert convert_units(2, "h", "min") == pytest.approx(120)
    with pytest.raises(ToolError, match="cannot convert 'kg' to 'm': mass is not length"):
        convert_units(1, "kg", "m")
    # an unknown unit: the error lists the ones there are, so the next call can use one
    with pytest.raises(ToolError, match="unknown unit 'inch'; the units are length m, km") as err:
        convert_units(882, "inch", "mm")
    assert "in, yd;" in str(err.value) and str(err.value).endswith("temperature C, F, K")
    assert calendar("weekday", "2026-11-29") == "Sunday"
    assert calendar("add_days", "2026-12-30", days=3) == "2027-01-02"
    assert calendar("days_between", "2026-01-01", other="2026-03-01") == "59"
    with pytest.raises(ToolError, match="bad date"):
        calendar("weekday", "2026-02-30")


async def test_function_calling_is_judged_on_the_first_reply(env: ToolsEnv) -> None:
    obs = await env.reset(AREA)
    assert obs.tools[0]["function"]["parameters"]["type"] == "object"  # BFCL's "dict"
    (action,) = env.reference_actions(AREA)
    right = await env.step(action)
    assert right.done and right.components["outcome"] == 1.0
    await env.reset(AREA)
    wrong = await env.step(calls(call("area", base=10, height=6)))
    assert wrong.done and wrong.components["outcome"] == 0.0
    assert "height=6 is not accepted" in wrong.info.detail
    await env.reset(AREA)
    silent = await env.step(Action(content="I can't help with that."))
    assert silent.components["outcome"] == 0.0  # a call was expected


async def test_calls_the_matcher_raises_on_are_wrong_with_the_reason(env: ToolsEnv) -> None:
    """A value nested deeper than Python can recurse makes the matcher raise: a wrong answer,
    the exception kept, not an infrastructure failure (the judges run on the host). JSON text
    cannot nest that deep; an action built by other means can."""
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    await env.reset(AREA)
    deep_call = ToolCall(id="c-area", name="area", arguments={"base": deep, "height": 5})
    result = await env.step(Action(tool_calls=[deep_call]))
    assert result.done and result.components["outcome"] == 0.0
    assert result.info.failure is FailureReason.CHECKER_REJECTED and not result.info.infrastructure
    assert result.info.detail.startswith("the checker failed on it: RecursionError")


async def test_abstaining_is_right_when_no_call_is_expected(env: ToolsEnv) -> None:
    irrelevant = AREA.model_copy(update={"expected_calls": [], "reference": "[]"})
    await env.reset(irrelevant)
    result = await env.step(Action(content="None of these functions fits."))
    assert result.components["outcome"] == 1.0


async def test_executable_reference_solves_within_constraints(env: ToolsEnv) -> None:
    obs = await env.reset(TRIP)
    assert [t["function"]["name"] for t in obs.tools] == [
        "convert_units", "calculator", "lookup", "answer"]  # fmt: skip
    assert "At most 2 tool calls." in obs.text and "Do not call: lookup" in obs.text
    for action in env.reference_actions(TRIP):
        result = await env.step(action)
    assert result.done
    assert result.components == {"well_formed": 1.0, "outcome": 1.0, "constraints": 1.0}


async def test_forbidden_tools_and_budget_break_constraints(env: ToolsEnv) -> None:
    await env.reset(TRIP)
    forbidden = await env.step(calls(call("lookup", key="marathon")))
    assert forbidden.components["constraints"] == 0.0
    assert "forbidden" in forbidden.observation.tool_results[0].content
    await env.reset(TRIP)
    await env.step(calls(call("convert_units", value=26.2, from_unit="mi", to_unit="km"),
                         call("calculator", expression="42.1648128*2")))  # fmt: skip
    over = await env.step(calls(call("calculator", expression="1+1")))
    assert "budget of 2 calls is spent" in over.observation.tool_results[0].content
    answered = await env.step(Action(content="Answer: 84.3296256"))
    assert answered.components["outcome"] == 1.0 and answered.components["constraints"] == 0.0


async def test_bad_arguments_and_unknown_tools(env: ToolsEnv) -> None:
    await env.reset(TRIP)
    result = await env.step(calls(call("convert_units", value=3)))
    assert result.info.failure is FailureReason.MALFORMED_ACTION
    said = result.observation.tool_results[0].content
    assert "missing 2 required positional arguments" in said
    assert said.endswith("it takes value (number), from_unit (string), to_unit (string)")
    assert takes("calendar") == (
        "it takes operation (string), date (string), days (integer, optional), other (string, "
        "optional)"
    )
    result = await env.step(calls(call("web_search", q="marathon")))
    assert result.info.failure is FailureReason.UNKNOWN_TOOL
    assert result.components["well_formed"] == 0.0
