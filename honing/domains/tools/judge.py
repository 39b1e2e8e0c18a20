"""Tool calls as data: parsing them from Python call syntax, and judging them against expected
calls by the rules of BFCL's AST checker.

A call is `{"name": str, "arguments": dict}`; expected calls use BFCL's "possible answer" form,
`{function_name: {parameter: [accepted values...]}}`. `match_calls` accepts calls when
`bfcl-eval`'s checker does (tests/tasks/test_bfcl_differential.py runs both on mutations of every
ground truth of the Python categories), except that parallel calls are paired by a perfect
matching where BFCL pairs greedily. docs/tasks.md ("The modules in detail") states the rules.
The reference check (`check_tools`) judges a task's reference calls by the same rules. Not
covered: BFCL's Java and JavaScript type rules (those categories are not loaded), and the tools
themselves (`functions`, `env`).
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from honing.domains.tools.task import ToolsTask
from honing.tasks.schema import ReferenceVerdict

if TYPE_CHECKING:
    from honing.sandbox import SandboxPool

Call = dict[str, Any]
Expected = dict[str, dict[str, list[Any]]]
Function = dict[str, Any]

# Parameter types as Python types: BFCL's names, and JSON Schema's for two of them.
PYTHON_TYPES: dict[str, type] = {
    "string": str, "any": str, "integer": int, "float": float, "number": float,
    "boolean": bool, "array": list, "tuple": list, "dict": dict, "object": dict,
}  # fmt: skip
_STANDARDISED_AWAY = re.compile(r"[ ,./\-_*^]")
_DROPPED = str.maketrans("", "", " ,./-_*^")


@functools.lru_cache(maxsize=4096)
def standardise(text: str) -> str:
    """A string as BFCL compares it: spaces and ``,./-_*^`` dropped, lower case, `'` as `"`."""
    return _STANDARDISED_AWAY.sub("", text).lower().replace("'", '"')


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


def _first(options: Any) -> Any:
    return next(o for o in options if o != "") if isinstance(options, list) else options


def _concrete(value: Any) -> Any:
    """An accepted value with nested option lists (BFCL's dicts) resolved to their first choice."""
    if isinstance(value, dict):
        return {k: _concrete(_first(v)) for k, v in value.items() if _has_value(v)}
    if isinstance(value, list):
        return [_concrete(v) for v in value]
    return value


def _optional(options: Any) -> bool:
    """Whether an argument may be left out: "" is among its accepted values."""
    return isinstance(options, list | str) and "" in options


def match_calls(
    calls: list[Call], expected: list[Expected], functions: list[Function]
) -> str | None:
    """None when `calls` satisfy `expected` (paired in any order), else the reason they do not.

    `functions` are the task's function descriptions: they give each argument's type and the
    required ones."""
    if len(calls) != len(expected):
        return f"expected {len(expected)} call(s), got {len(calls)}"
    schemas = {f.get("name"): f for f in functions if isinstance(f, dict)}
    misfits: dict[tuple[int, int], str | None] = {}

    def misfit(i: int, j: int) -> str | None:  # why call j does not fit expected call i
        if (i, j) not in misfits:
            misfits[i, j] = _match_one(calls[j], expected[i], schemas)
        return misfits[i, j]

    unpaired = _unpaired(len(calls), lambda i, j: misfit(i, j) is None)
    if unpaired is None:
        return None
    reasons = [r for r in (misfit(unpaired, j) for j in range(len(calls))) if r is not None]
    same_name = [r for r in reasons if not r.startswith("called ")]
    return (same_name or reasons or ["no call is left for it"])[0]


def _unpaired(count: int, fits: Callable[[int, int], bool]) -> int | None:
    """The index of an expected call that no one-to-one pairing can serve, or None when each of
    the `count` expected calls gets a call of its own (`fits(i, j)`: call j fits expected call
    i). Kuhn's augmenting paths: a perfect matching whenever one exists."""
    owner: dict[int, int] = {}  # call -> the expected call it serves

    def serve(i: int, tried: set[int]) -> bool:
        for j in range(count):
            if j not in tried and fits(i, j):
                tried.add(j)
                if j not in owner or serve(owner[j], tried):
                    owner[j] = i
                    return True
        return False

    return next((i for i in range(count) if not serve(i, set())), None)


def _match_one(call: Call, expected: Expected, schemas: dict[Any, Function]) -> str | None:
    ((name, accepted),) = expected.items()
    if call.get("name") != name:
        return f"called {call.get('name')!r}, expected {name!r}"
    given = call.get("arguments") or {}
    parameters = (schemas.get(name) or {}).get("parameters") or {}
    declared = parameters.get("properties") or {}
    for key in parameters.get("required") or []:
        if key not in given:
            return f"{name}: missing required argument {key!r}"
    for key, value in given.items():
        if key not in declared or key not in accepted:
            return f"{name}: unexpected argument {key!r}"
        mismatch = _argument(value, accepted[key], declared[key])
        if mismatch:
            return f"{name}: {key}={json.dumps(value, default=str)[:80]} {mismatch}"
    for key, options in accepted.items():
        if key not in given and not _optional(options):
            return f"{name}: missing argument {key!r}"
    return None


def _argument(value: Any, options: list[Any], schema: Any) -> str | None:
    """None when one argument's value has its schema's type and is accepted, else why not."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    want = PYTHON_TYPES.get(kind) if isinstance(kind, str) else None
    if want is None:  # a type the judge does not know: the value alone decides
        return None if _listed(value, options) else "is not accepted"
    if kind == "tuple" and type(value) is tuple:
        value = list(value)
    if want is float and type(value) is int:
        value = float(value)
    items = schema.get("items") if kind in ("array", "tuple") else None
    item_kind = items.get("type") if isinstance(items, dict) else None
    item = PYTHON_TYPES.get(item_kind) if isinstance(item_kind, str) else None
    variable = _type_fits(value, options, want, item)
    if variable is None:
        return f"is a {type(value).__name__}, not {kind}"
    if variable:
        accepted = _listed(value, options)
    elif want is dict:
        accepted = _dict_fits(value, options)
    elif want is list and item is dict:
        accepted = _dicts_fit(value, options)
    elif want is str:
        accepted = standardise(value) in [standardise(o) for o in options if type(o) is str]
    elif want is list:
        accepted = _list_fits(value, options)
    else:
        accepted = _listed(value, options)
    return None if accepted else "is not accepted"


def _answer_type(options: list[Any]) -> type | None:
    """The type of the first accepted value that is not "" (None when there is none)."""
    return next((type(o) for o in options if o != ""), None)


def _type_fits(value: Any, options: list[Any], want: type, item: type | None) -> bool | None:
    """BFCL's type rule. None when `value` has the wrong type; otherwise whether it stands as a
    "variable": its accepted values are of another type than the schema's, so it is compared as
    it is, not standardised. A list's elements must have the item type (or the type of the
    accepted list's elements) for one accepted list; an accepted value that is not a list, like
    "", lets any elements pass."""
    answer_type = _answer_type(options)
    variable = answer_type is not None and answer_type is not want
    if type(value) is want:
        elements = value if isinstance(value, list) else []
        if item is None or any(
            type(option) is not list
            or all(_type_fits(element, option, item, None) is not None for element in elements)
            for option in options
        ):
            return variable
        return None
    if answer_type is not None and type(value) is answer_type:
        return True
    return None


def _listed(value: Any, options: list[Any]) -> bool:
    return value in options


def _list_fits(value: list[Any], options: list[Any]) -> bool:
    """A list whose top-level strings, standardised, equal an accepted list's so standardised.
    An accepted "" reads as the empty list (an optional list may be given empty)."""
    given = [standardise(v) if type(v) is str else v for v in value]
    return any(
        given == [standardise(o) if type(o) is str else o for o in option]
        for option in options
        if isinstance(option, list | str)
    )


def _dict_fits(value: dict[str, Any], options: list[Any]) -> bool:
    """A dict that one accepted dict (of `{key: [accepted values]}`) accepts key by key."""
    for option in options:
        if not isinstance(option, dict):
            continue
        if all(
            key in option
            and (standardise(v) if type(v) is str else v)
            in [standardise(o) if type(o) is str else o for o in option[key]]
            for key, v in value.items()
        ) and all(key in value or _optional(opts) for key, opts in option.items()):
            return True
    return False


def _dicts_fit(value: list[Any], options: list[Any]) -> bool:
    """A list of dicts that one accepted list accepts element by element."""
    return any(
        len(value) == len(option)
        and all(
            isinstance(v, dict) and isinstance(o, dict) and _dict_fits(v, [o])
            for v, o in zip(value, option, strict=True)
        )
        for option in options
        if isinstance(option, list | str)
    )


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
    functions: list[Function],
    answer: str | None,
    max_calls: int | None,
    forbidden: list[str],
) -> str | None:
    """None when a tools task's reference calls solve it, else why not."""
    if answer is None:
        return match_calls(calls, expected, functions)
    if not calls or calls[-1].get("name") != "answer":
        return "the reference must end with an `answer` call"
    if max_calls is not None and len(calls) > max_calls:
        return f"the reference makes {len(calls)} calls, over the budget of {max_calls}"
    used = [c.get("name") for c in calls if c.get("name") in forbidden]
    if used:
        return f"the reference calls forbidden tools: {', '.join(map(str, used))}"
    value = str((calls[-1].get("arguments") or {}).get("value", ""))
    return None if answers_match(answer, value) else f"its answer {value!r} is not {answer!r}"


def tools_reference_mismatch(task: ToolsTask) -> str | None:
    """None when the reference (a JSON list of calls) solves the task."""
    try:
        calls = json.loads(task.reference or "")
    except json.JSONDecodeError as exc:
        return f"reference is not a JSON list of calls: {exc.msg}"
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        return "reference is not a JSON list of calls"
    mismatch = judge_reference(
        calls,
        task.expected_calls,
        task.functions,
        task.answer,
        task.max_calls,
        task.forbidden_tools,
    )
    return None if mismatch is None else f"reference does not solve the task: {mismatch}"


async def check_tools(tasks: Sequence[ToolsTask], pool: SandboxPool) -> dict[str, ReferenceVerdict]:
    """Tools: the reference calls must satisfy the call matcher (no sandbox needed)."""
    out: dict[str, ReferenceVerdict] = {}
    for task in tasks:
        if task.reference is not None:
            reason = tools_reference_mismatch(task)
            out[task.id] = (
                ReferenceVerdict("passed") if reason is None else ReferenceVerdict("failed", reason)
            )
    return out
