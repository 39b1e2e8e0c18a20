"""Tool calls as data: parsing them from Python call syntax, and matching them to expected calls.

A call is `{"name": str, "arguments": dict}`. Expected calls use BFCL's "possible answer" form:
`{function_name: {parameter: [accepted values...]}}`, where an accepted value of `""` means the
parameter may be left out. Matching follows BFCL's AST checker in spirit:

* the calls and the expected calls are paired one to one, in any order (parallel calls);
* an argument whose accepted values are only `""` (or none at all) may be left out;
* names must be equal; every given argument must be expected, and every expected argument either
  given or allowed to be absent;
* numbers compare by value (an int may stand for a float, a bool never for a number), strings
  compare after lower-casing and dropping spaces and ``,./-_*^`` punctuation, lists element by
  element, and dicts key by key against their own lists of accepted values.

Not covered: BFCL's Java and JavaScript type rules (those categories are not loaded).
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import re
from typing import Any

Call = dict[str, Any]
Expected = dict[str, dict[str, list[Any]]]
_DROPPED = str.maketrans("", "", " ,./-_*^")


def parse_python_calls(text: str) -> list[Call]:
    """Calls written as Python, e.g. `[f(a=1), g(b="x")]` or `f(a=1)`; ValueError if not."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not Python call syntax: {exc.msg}") from exc
    nodes = tree.body.elts if isinstance(tree.body, ast.List | ast.Tuple) else [tree.body]
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            raise ValueError(f"not a call: {ast.unparse(node)[:80]}")
        if node.args:
            raise ValueError(f"{ast.unparse(node.func)}: arguments must be given by name")
        try:
            arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
        except ValueError as exc:
            raise ValueError(f"{ast.unparse(node.func)}: arguments must be literals") from exc
        calls.append({"name": ast.unparse(node.func), "arguments": arguments})
    return calls


def reference_calls(expected: list[Expected]) -> list[Call]:
    """One correct set of calls: the first accepted value of every argument that is needed."""
    calls = []
    for entry in expected:
        ((name, params),) = entry.items()
        arguments = {k: _concrete(_first(v)) for k, v in params.items() if _has_value(v)}
        calls.append({"name": name, "arguments": arguments})
    return calls


def _has_value(options: Any) -> bool:
    """Whether an option list offers a value to give (anything but "")."""
    return not isinstance(options, list) or any(o != "" for o in options)


def _optional(options: Any) -> bool:
    """Whether an argument may be left out: "" is accepted, or nothing is."""
    return isinstance(options, list) and ("" in options or not options)


def _first(options: Any) -> Any:
    return next(o for o in options if o != "") if isinstance(options, list) else options


def _concrete(value: Any) -> Any:
    """An accepted value with nested option lists (BFCL's dicts) resolved to their first choice."""
    if isinstance(value, dict):
        return {k: _concrete(_first(v)) for k, v in value.items() if _has_value(v)}
    if isinstance(value, list):
        return [_concrete(v) for v in value]
    return value


def match_calls(calls: list[Call], expected: list[Expected]) -> str | None:
    """None when `calls` satisfy `expected` (paired in any order), else the reason they do not."""
    if len(calls) != len(expected):
        return f"expected {len(expected)} call(s), got {len(calls)}"
    if not calls:
        return None
    reasons: list[str] = []
    for order in itertools.permutations(range(len(calls))):
        mismatch = None
        for call, idx in zip(calls, order, strict=True):
            mismatch = _match_one(call, expected[idx])
            if mismatch:
                break
        if mismatch is None:
            return None
        reasons.append(mismatch)
        if len(reasons) > 720:  # 6 parallel calls; more is not a realistic task
            break
    return reasons[0]


def _match_one(call: Call, expected: Expected) -> str | None:
    ((name, params),) = expected.items()
    if call.get("name") != name:
        return f"called {call.get('name')!r}, expected {name!r}"
    given = call.get("arguments") or {}
    for key in given:
        if key not in params:
            return f"{name}: unexpected argument {key!r}"
    for key, accepted in params.items():
        if key not in given:
            if not _optional(accepted):
                return f"{name}: missing argument {key!r}"
            continue
        if not any(_same(given[key], value) for value in accepted if value != ""):
            return f"{name}: {key}={json.dumps(given[key], default=str)[:80]} is not accepted"
    return None


def _same(given: Any, accepted: Any) -> bool:
    if isinstance(accepted, bool) or isinstance(given, bool):
        return isinstance(given, bool) and isinstance(accepted, bool) and given == accepted
    if isinstance(accepted, int | float) and isinstance(given, int | float):
        return float(given) == float(accepted)
    if isinstance(accepted, str) and isinstance(given, str):
        return given.lower().translate(_DROPPED) == accepted.lower().translate(_DROPPED)
    if isinstance(accepted, list) and isinstance(given, list | tuple):
        return len(given) == len(accepted) and all(map(_same, given, accepted))
    if isinstance(accepted, dict) and isinstance(given, dict):
        for key, options in accepted.items():
            if key not in given:
                if not _optional(options):
                    return False
                continue
            options = options if isinstance(options, list) else [options]
            if not any(_same(given[key], o) for o in options if o != ""):
                return False
        return set(given) <= set(accepted)
    return bool(given == accepted)


def answers_match(expected: str, given: str, rel_tol: float = 1e-6) -> bool:
    """Final answers of executable tool tasks. A numeric answer (`_number`) is matched only by a
    number, by value (relative tolerance): never by text, since dropping punctuation would make
    `4*2`, `4 2` or `4,2` read as 42. Anything else as text ignoring case, spaces and
    ``,./-_*^`` punctuation."""
    a, b = _number(expected), _number(given)
    if a is not None:
        return b is not None and abs(a - b) <= rel_tol * max(abs(a), abs(b), 1.0)
    return expected.lower().translate(_DROPPED) == given.lower().translate(_DROPPED)


_DECIMAL = re.compile(r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def _number(text: str) -> float | None:
    """The finite value of a decimal number (`-1,234.5`, `3e8`); None for anything else: `inf`,
    `nan`, `4_2`, a comma out of a thousands separator's place, a formula."""
    text = text.strip()
    if not _DECIMAL.fullmatch(text):
        return None
    value = float(text.replace(",", ""))
    return value if math.isfinite(value) else None


def judge_reference(
    calls: list[Call],
    expected: list[Expected],
    answer: str | None,
    max_calls: int | None,
    forbidden: list[str],
) -> str | None:
    """None when a tools task's reference calls solve it, else why not."""
    if answer is None:
        return match_calls(calls, expected)
    if not calls or calls[-1].get("name") != "answer":
        return "the reference must end with an `answer` call"
    if max_calls is not None and len(calls) > max_calls:
        return f"the reference makes {len(calls)} calls, over the budget of {max_calls}"
    used = [c.get("name") for c in calls if c.get("name") in forbidden]
    if used:
        return f"the reference calls forbidden tools: {', '.join(map(str, used))}"
    value = str((calls[-1].get("arguments") or {}).get("value", ""))
    return None if answers_match(answer, value) else f"its answer {value!r} is not {answer!r}"


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


# The executable tools' descriptions, as the tools environment offers them.
# The executable tools of the tools domain, described as a task declares them (the environment
# offers them as OpenAI tools; the synthetic generator declares them in its tasks).
TOOL_FUNCTIONS: dict[str, dict[str, Any]] = {
    "calculator": _function("calculator", "Evaluate arithmetic exactly, e.g. 12*(3+4).",
                            {"expression": {"type": "string"}}, ["expression"]),
    "convert_units": _function(
        "convert_units", "Convert a quantity between units (m, km, mi, ft, kg, lb, h, l, C, F…).",
        {"value": {"type": "number"}, "from_unit": {"type": "string"},
         "to_unit": {"type": "string"}}, ["value", "from_unit", "to_unit"]),
    "lookup": _function("lookup", "Look up a fact by key.", {"key": {"type": "string"}}, ["key"]),
    "calendar": _function(
        "calendar", "Dates (YYYY-MM-DD): weekday of `date`; `date` plus `days`; days between "
        "`date` and `other`.",
        {"operation": {"type": "string", "enum": ["weekday", "add_days", "days_between"]},
         "date": {"type": "string"}, "days": {"type": "integer"}, "other": {"type": "string"}},
        ["operation", "date"]),
}  # fmt: skip
