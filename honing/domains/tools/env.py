"""The tools domain: call the right tools with the right arguments, within constraints.

Covered: function-calling tasks (`answer` unset, e.g. BFCL: the first reply's calls are judged
against `expected_calls`, and the episode ends there) and executable-tool tasks (`answer` set:
`calculator`, `convert_units`, `lookup`, `pop_record`, `calendar` really run, within a call budget
and without forbidden tools, until `answer`; `pop_record` removes a fact for the rest of the
episode, rollbacks included); the reward components are outcome, constraints and
well_formed (docs/envs.md, "Domains"); risk events: `forbidden_tool` for a call to one of the
task's `forbidden_tools` (refused all the same), `irreversible_tool` for a call that reaches one
of its `irreversible_tools` (in function calling: any call to one), and what the sandbox saw a
calculator run do. A refused call says what would be accepted (what the tool takes, the units
there are). `tools_slip` is the domain's slip for recovery traces. Not covered: the call matcher
(`honing.domains.tools.judge`) and the task schema (`honing.domains.tools.task.ToolsTask`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from honing.domains.tools.functions import TOOL_FUNCTIONS
from honing.domains.tools.generate import UNIT_NAMES
from honing.domains.tools.judge import answers_match, match_calls
from honing.domains.tools.task import ToolsTask
from honing.envs.base import (
    Action,
    CallOutcome,
    EnvConfig,
    Environment,
    FailureReason,
    StepInfo,
    StepOutput,
    ToolCall,
    ToolResult,
    argument_text,
    malformed,
    tool_schema,
)
from honing.envs.kits.answers import stated_answer
from honing.envs.kits.calculator import calculate
from honing.errors import HoningError
from honing.risk import RiskEvent, event
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask

# Linear units by dimension, as multiples of the first unit of each table.
UNITS: dict[str, dict[str, float]] = {
    "length": {"m": 1, "km": 1000, "cm": 0.01, "mm": 0.001, "mi": 1609.344, "ft": 0.3048,
               "in": 0.0254, "yd": 0.9144},
    "mass": {"kg": 1, "g": 0.001, "lb": 0.45359237, "oz": 0.028349523125, "t": 1000},
    "time": {"s": 1, "min": 60, "h": 3600, "day": 86400, "week": 604800},
    "volume": {"l": 1, "ml": 0.001, "gal": 3.785411784, "m3": 1000},
}  # fmt: skip
TEMPERATURES = ("C", "F", "K")
ANSWER_TOOL = tool_schema("answer", "Submit the final answer; ends the episode.",
                          {"value": {"type": "string"}}, ["value"])  # fmt: skip
BUILTIN_SCHEMAS = {name: {"type": "function", "function": f} for name, f in TOOL_FUNCTIONS.items()}
T = TypeVar("T")


class ToolError(Exception):
    """A tool refused its arguments; the message is shown to the model."""


def checked(judge: Callable[[], T]) -> tuple[T | None, str]:
    """(`judge()`, '') or, when it raises on what the model gave, (None, why): the judges run on
    the host on the model's calls and answers, so an exception there is the checker failing on
    that input (a wrong answer, the reason kept), not an infrastructure failure."""
    try:
        return judge(), ""
    except Exception as exc:  # any failure of the judge on this input
        said = str(exc)[:300]
        return None, f"the checker failed on it: {type(exc).__name__}" + (f": {said}" * bool(said))


def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("`value` must be a number")
    if not (isinstance(from_unit, str) and isinstance(to_unit, str)):
        raise TypeError("`from_unit` and `to_unit` must be strings")
    try:
        value = float(value)  # from here on, float arithmetic: an overflow is inf, never raised
    except OverflowError as exc:
        raise ToolError("`value` is out of range") from exc
    if from_unit in TEMPERATURES and to_unit in TEMPERATURES:
        celsius = {"C": value, "F": (value - 32) * 5 / 9, "K": value - 273.15}[from_unit]
        return {"C": celsius, "F": celsius * 9 / 5 + 32, "K": celsius + 273.15}[to_unit]
    for table in UNITS.values():
        if from_unit in table and to_unit in table:
            return value * table[from_unit] / table[to_unit]
    unknown = [u for u in (from_unit, to_unit) if _dimension(u) is None]
    if unknown:
        raise ToolError(f"cannot convert {from_unit!r} to {to_unit!r}: unknown unit "
                        f"{unknown[0]!r}; the units are {_UNIT_LIST}")  # fmt: skip
    raise ToolError(f"cannot convert {from_unit!r} to {to_unit!r}: {_dimension(from_unit)} "
                    f"is not {_dimension(to_unit)}")  # fmt: skip


def _dimension(unit: str) -> str | None:
    """The table a unit belongs to ('length', ..., 'temperature'), or None."""
    if unit in TEMPERATURES:
        return "temperature"
    return next((name for name, table in UNITS.items() if unit in table), None)


_UNIT_LIST = "; ".join(
    f"{name} {', '.join(table)}" for name, table in [*UNITS.items(), ("temperature", TEMPERATURES)]
)


def tools_slip(task: AnyTask, actions: list[Action]) -> Action | None:
    """The first `convert_units` or `calendar` call of `actions` written as the warm-started
    tools policy wrote them wrong most (validation, 2026-12-07: 63 of its 104 failures had a
    refused call, and it mostly answered after it): `convert_units` without its units, or (every
    other task, by a hash of its id) with its first unit spelled out as the generator's prompts
    spell it (`feet` for `ft`; the policy wrote `feet`, `hours`, `inch`, `kilometers`);
    `calendar` with the operation `days`. None when the reference calls neither. The slip of a
    recovery trace (`Domain.slip`)."""
    for action in actions:
        for call in action.tool_calls:
            given = dict(call.arguments)
            if call.name == "calendar":
                wrong = {**given, "operation": "days"}
            elif call.name == "convert_units":
                spelled = UNIT_NAMES.get(str(given.get("from_unit")))
                odd = hashlib.sha256(f"slip:{task.id}".encode()).digest()[0] % 2 == 1
                wrong = ({**given, "from_unit": spelled} if odd and spelled is not None
                         else {"value": given.get("value")})  # fmt: skip
            else:
                continue
            return Action(tool_calls=[ToolCall(id=f"slip-{call.name}", name=call.name,
                                               arguments=wrong)])  # fmt: skip
    return None


def takes(name: str) -> str:
    """What a built-in tool takes, from its description: `it takes value (number), from_unit
    (string), to_unit (string)`; optional arguments said so."""
    parameters = TOOL_FUNCTIONS[name]["parameters"]
    required = set(parameters["required"])
    said = [f"{arg} ({spec['type']}{'' if arg in required else ', optional'})"
            for arg, spec in parameters["properties"].items()]  # fmt: skip
    return "it takes " + ", ".join(said)


def calendar(operation: str, date: str, days: int | None = None, other: str | None = None) -> str:
    if not isinstance(operation, str):
        raise TypeError("`operation` must be a string")
    try:
        day = dt.date.fromisoformat(date)
        if operation == "weekday":
            return day.strftime("%A")
        if operation == "add_days":
            if not isinstance(days, int):
                raise ToolError("add_days needs an integer `days`")
            return (day + dt.timedelta(days=days)).isoformat()
        if operation == "days_between":
            if not isinstance(other, str):
                raise ToolError("days_between needs `other`, a date")
            return str((dt.date.fromisoformat(other) - day).days)
    except (ValueError, OverflowError) as exc:
        raise ToolError(f"bad date: {exc}") from exc
    raise ToolError(f"unknown operation {operation!r}; use weekday, add_days or days_between")


def _openai_schema(function: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function description as an OpenAI tool (BFCL writes "dict" for "object")."""
    params = json.loads(json.dumps(function.get("parameters", {})).replace('"dict"', '"object"'))
    return {"type": "function", "function": {**function, "parameters": params}}


class ToolsEnv(Environment):
    domain = "tools"

    def __init__(self, pool: SandboxPool, config: EnvConfig | None = None) -> None:
        super().__init__(pool, config)
        self.calls_made = 0
        self.constraints_ok = True
        self.removed: frozenset[str] = frozenset()  # facts' keys (lower case) pop_record took

    def _task(self) -> ToolsTask:
        if not isinstance(self.task, ToolsTask):
            raise HoningError("call reset(task) first")
        return self.task

    @property
    def executable(self) -> bool:
        return self._task().answer is not None

    @property
    def tools(self) -> list[dict[str, Any]]:
        task = self._task()
        if not self.executable:
            return [_openai_schema(f) for f in task.functions]
        declared = [BUILTIN_SCHEMAS[f["name"]] for f in task.functions]
        return [*declared, ANSWER_TOOL]

    async def _reset(self, task: AnyTask) -> None:
        assert isinstance(task, ToolsTask) and self.state is not None
        self.calls_made, self.constraints_ok, self.removed = 0, True, frozenset()
        if task.answer is not None:
            unknown = [
                f.get("name") for f in task.functions if f.get("name") not in BUILTIN_SCHEMAS
            ]
            if unknown:
                raise HoningError(f"task {task.id}: no implementation for tools {unknown}; "
                                  f"executable tools are {', '.join(BUILTIN_SCHEMAS)}")  # fmt: skip
            if task.max_calls is not None:
                self.state.constraints.append(f"At most {task.max_calls} tool calls.")
            if task.forbidden_tools:
                self.state.constraints.append("Do not call: " + ", ".join(task.forbidden_tools))
            self.state.next_steps = ["call the tools you need", "answer"]
        else:
            self.state.next_steps = ["call the right function(s), or none if none fits"]

    def reference_actions(self, task: AnyTask) -> list[Action]:
        assert isinstance(task, ToolsTask)
        calls = [ToolCall(id=f"ref-{i}", name=c["name"], arguments=c.get("arguments") or {})
                 for i, c in enumerate(json.loads(task.reference or "[]"))]  # fmt: skip
        if task.answer is None:
            return [Action(tool_calls=calls)]
        return [Action(tool_calls=[c]) for c in calls]

    async def _save(self) -> tuple[int, bool, frozenset[str]]:
        return self.calls_made, self.constraints_ok, self.removed

    async def _restore(self, saved: Any) -> None:
        self.calls_made, self.constraints_ok, self.removed = saved

    async def _step(self, action: Action) -> StepOutput:
        return await (self._execute(action) if self.executable else self._judge(action))

    async def _judge(self, action: Action) -> StepOutput:
        task = self._task()
        self.done = True  # single turn
        calls = [{"name": c.name, "arguments": c.arguments} for c in action.tool_calls]
        mismatch, rejected = checked(
            lambda: match_calls(calls, task.expected_calls, task.functions)
        )
        results = [ToolResult(call_id=c.id, name=c.name, content="recorded", ok=True)
                   for c in action.tool_calls]  # fmt: skip
        # The calls are the action here: one to a forbidden or irreversible tool is made.
        risks = [e for c in action.tool_calls for e in tool_risks(task, c, reached=True)]
        assert self.state is not None
        self.state.actions.append(", ".join(c.name for c in action.tool_calls) or "no call")
        components = {"outcome": 0.0 if mismatch or rejected else 1.0, "well_formed": 1.0}
        if rejected:
            return components, results, StepInfo(failure=FailureReason.CHECKER_REJECTED,
                                                 detail=rejected, risks=risks)  # fmt: skip
        return components, results, StepInfo(detail=mismatch or "", risks=risks)

    async def _execute(self, action: Action) -> StepOutput:
        calls = list(action.tool_calls)
        if not calls:
            stated = stated_answer(action.content)
            if stated is None:
                return malformed("no tool call and no answer: call a tool, or answer")
            calls = [ToolCall(id="inline", name="answer", arguments={"value": stated})]
        components, results, info = await self.run_calls(calls, self._run)
        components["constraints"] = 1.0 if self.constraints_ok else 0.0
        assert self.state is not None
        self.state.actions.append(
            "; ".join(f"{r.name}: {r.content.splitlines()[0][:60]}" for r in results)
        )
        return components, results, info

    async def _run(self, call: ToolCall) -> CallOutcome:
        made = self.calls_made
        outcome = await self._dispatch(call)
        # A call reached its tool when it was counted against the budget.
        outcome.risks += tool_risks(self._task(), call, reached=self.calls_made > made)
        return outcome

    async def _dispatch(self, call: ToolCall) -> CallOutcome:
        task = self._task()
        if call.name == "answer":
            self.done = True
            given = argument_text(call.arguments.get("value"))
            if given is None:
                return CallOutcome(False, "argument 'value' must be a string",
                                   FailureReason.MALFORMED_ACTION)  # fmt: skip
            right, rejected = checked(lambda: answers_match(task.answer or "", given))
            if rejected:
                return CallOutcome(False, f"incorrect: {rejected}",
                                   FailureReason.CHECKER_REJECTED,
                                   components={"outcome": 0.0})  # fmt: skip
            return CallOutcome(bool(right), "correct" if right else "incorrect",
                               components={"outcome": 1.0 if right else 0.0})  # fmt: skip
        declared = {f["name"] for f in task.functions}
        if call.name not in declared:
            known = ", ".join(sorted(declared | {"answer"}))
            return CallOutcome(False, f"unknown tool {call.name!r}; available: {known}",
                               FailureReason.UNKNOWN_TOOL)  # fmt: skip
        if call.name in task.forbidden_tools:
            self.constraints_ok = False
            return CallOutcome(False, f"{call.name} is forbidden for this task",
                               FailureReason.TOOL_ERROR)  # fmt: skip
        if task.max_calls is not None and self.calls_made >= task.max_calls:
            self.constraints_ok = False
            return CallOutcome(False, f"the budget of {task.max_calls} calls is spent",
                               FailureReason.TOOL_ERROR)  # fmt: skip
        self.calls_made += 1
        if call.name == "calculator":
            return await calculate(self.pool, call.arguments.get("expression"))
        handlers: dict[str, Callable[..., object]] = {
            "convert_units": convert_units, "lookup": self._lookup,
            "pop_record": self._pop_record, "calendar": calendar,
        }  # fmt: skip
        try:
            value = handlers[call.name](**call.arguments)
        except TypeError as exc:
            return CallOutcome(False, f"{call.name}: bad arguments ({exc}); {takes(call.name)}",
                               FailureReason.MALFORMED_ACTION)  # fmt: skip
        except ToolError as exc:
            return CallOutcome(False, f"{call.name}: {exc}", FailureReason.TOOL_ERROR)
        return CallOutcome(True, f"{call.name} -> {value}")

    def _lookup(self, key: str) -> str:
        if not isinstance(key, str):
            raise TypeError("`key` must be a string")
        facts = {k.lower(): v for k, v in self._task().facts.items()}
        if key.lower() not in facts:
            raise ToolError(f"no entry for {key!r}")
        if key.lower() in self.removed:
            raise ToolError(f"no entry for {key!r} (pop_record removed it)")
        return facts[key.lower()]

    def _pop_record(self, key: str) -> str:
        value = self._lookup(key)
        self.removed |= {key.lower()}
        return value


def tool_risks(task: ToolsTask, call: ToolCall, *, reached: bool) -> list[RiskEvent]:
    """The risk events of one call: `forbidden_tool` whether or not it was refused,
    `irreversible_tool` when it `reached` its tool."""
    names = []
    if call.name in task.forbidden_tools:
        names.append("forbidden_tool")
    if reached and call.name in task.irreversible_tools:
        names.append("irreversible_tool")
    if not names:
        return []
    try:
        detail = f"{call.name}({json.dumps(call.arguments, default=str)[1:-1]})"
    except (RecursionError, ValueError):  # arguments a model nested past JSON's limits
        detail = call.name
    return [event(name, detail) for name in names]
