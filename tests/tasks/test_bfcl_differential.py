"""The tools judge against `bfcl-eval`'s own AST checker, on mutations of every ground truth.

Every question of BFCL's Python categories (as honing's `bfcl` task set loads it) gives its
reference calls and a few dozen mutations of them: each other accepted value, each argument
dropped, type changes (10 → 10.0 → "10", a bool for a number, None, a list for a string, …),
string spellings (case, punctuation, quotes), list and dict edits, an extra argument, a wrong
function name, and for several calls: reordered, missing and duplicated calls and arguments
swapped between calls. Each mutation is judged by `honing.domains.tools.judge.match_calls` and by
BFCL's `ast_checker`, imported from the installed package (its model table, which imports every
provider's SDK, is replaced by one entry: a model that keeps dots in function names).

The verdicts must agree on >= 99.9% of the mutations, and every difference must be the one
documented in `honing.domains.tools.judge` and docs/envs.md: a parallel order that BFCL's greedy
pairing rejects although a one-to-one pairing accepts it. A BFCL crash on a mutation counts as
its rejection (its runner would stop). Seven ground truths contradict their own function's
schema (an argument it does not declare, or a required one left out): both judges reject them,
and honing's quality filter quarantines those tasks.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import itertools
import sys
import types
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from honing.domains.tools.judge import Call, match_calls, reference_calls
from honing.domains.tools.sets import bfcl
from honing.domains.tools.task import ToolsTask

pytest.importorskip("bfcl_eval")

MODEL = "honing"
AGREEMENT = 0.999
Checker = Callable[..., dict[str, Any]]


@pytest.fixture(scope="module")
def bfcl_checker() -> Iterator[types.ModuleType]:
    """bfcl-eval's AST checker module, imported with a one-model table (see the docstring)."""
    table = types.ModuleType("bfcl_eval.constants.model_config")
    table.MODEL_CONFIG_MAPPING = {MODEL: types.SimpleNamespace(underscore_to_dot=False)}  # type: ignore[attr-defined]
    name = "bfcl_eval.eval_checker.ast_eval.ast_checker"
    saved = {k: sys.modules.get(k) for k in (table.__name__, name)}
    sys.modules[table.__name__] = table
    sys.modules.pop(name, None)
    try:
        yield importlib.import_module(name)
    finally:
        for key, module in saved.items():
            if module is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = module


def category(task: ToolsTask) -> str:
    return task.tags[1]


def python_tasks() -> list[ToolsTask]:
    return [t for t in bfcl().tasks if isinstance(t, ToolsTask) and t.expected_calls]


# --- mutations ---------------------------------------------------------------------------------


def changed_values(value: Any) -> Iterator[tuple[str, Any]]:
    """(kind, value) variants of one argument value: other types and other spellings."""
    yield "none", None
    if isinstance(value, bool):
        yield "bool-as-int", int(value)
        yield "bool-as-str", str(value).lower()
        yield "bool-flipped", not value
    elif isinstance(value, int):
        yield "int-as-float", float(value)
        yield "int-as-str", str(value)
        yield "int-plus-one", value + 1
        yield "int-as-bool", bool(value)
    elif isinstance(value, float):
        if value.is_integer():
            yield "float-as-int", int(value)
        yield "float-as-str", repr(value)
        yield "float-changed", value * 1.5 + 1
    elif isinstance(value, str):
        yield "str-upper", value.upper()
        yield "str-punctuated", f"{value}."
        yield "str-spaced", value.replace(" ", "  ") + " "
        yield "str-quoted", value.replace('"', "'") + "'"
        yield "str-longer", f"{value} x"
        yield "str-in-list", [value]
        yield "str-empty", ""
        with contextlib.suppress(ValueError):
            yield "str-as-number", float(value) if "." in value else int(value)
    elif isinstance(value, list):
        yield "list-as-tuple", tuple(value)
        yield "list-reversed", value[::-1]
        yield "list-shorter", value[:-1]
        yield "list-empty", []
        yield "list-upper", [v.upper() if isinstance(v, str) else v for v in value]
        yield "list-floats", [float(v) if type(v) is int else v for v in value]
        yield "list-as-str", str(value)
    elif isinstance(value, dict):
        if value:
            first = next(iter(value))
            yield "dict-missing-key", {k: v for k, v in value.items() if k != first}
            for kind, changed in itertools.islice(changed_values(value[first]), 3):
                yield f"dict-value-{kind}", {**value, first: changed}
        yield "dict-extra-key", {**value, "extra_key": 1}
        yield "dict-as-list", [value]


def call_mutations(
    task: ToolsTask, call: Call, params: dict[str, list[Any]]
) -> Iterator[tuple[str, Call]]:
    """(kind, call) variants of one reference call; `params` its expected arguments."""
    arguments = call["arguments"]
    for key, options in params.items():
        for option in options if isinstance(options, list) else []:
            if option != "":
                concrete = reference_calls([{call["name"]: {key: [option]}}])[0]["arguments"]
                yield "accepted", {**call, "arguments": {**arguments, **concrete}}
        if key not in arguments:
            yield "optional-given-empty", {**call, "arguments": {**arguments, key: ""}}
    for key in arguments:
        dropped = {k: v for k, v in arguments.items() if k != key}
        yield "dropped", {**call, "arguments": dropped}
        for kind, value in changed_values(arguments[key]):
            yield kind, {**call, "arguments": {**arguments, key: value}}
    yield "extra-argument", {**call, "arguments": {**arguments, "extra_arg": 1}}
    declared: dict[str, Any] = next(
        (
            f["parameters"].get("properties", {})
            for f in task.functions
            if f["name"] == call["name"]
        ),
        {},
    )
    for key in declared:
        if key not in params:
            yield "declared-not-expected", {**call, "arguments": {**arguments, key: "x"}}
            break
    yield "wrong-name", {**call, "name": call["name"] + "_v2"}
    for function in task.functions:
        if function["name"] != call["name"]:
            yield "other-function", {**call, "name": function["name"]}
            break


def mutations(task: ToolsTask) -> Iterator[tuple[str, list[Call]]]:
    """(kind, calls) for one task: its reference calls, then mutations of them."""
    reference = reference_calls(task.expected_calls)
    yield "reference", reference
    for index, (call, entry) in enumerate(zip(reference, task.expected_calls, strict=True)):
        for kind, mutated in call_mutations(task, call, entry[call["name"]]):
            yield kind, [*reference[:index], copy.deepcopy(mutated), *reference[index + 1 :]]
    yield "no-call", []
    yield "duplicated", [*reference, reference[0]]
    if len(reference) > 1:
        yield "reversed", reference[::-1]
        yield "rotated", [*reference[1:], reference[0]]
        yield "missing-call", reference[1:]
        yield "one-call-twice", [reference[0], *reference[:-1]]
        first, second = reference[0], reference[1]
        shared = set(first["arguments"]) & set(second["arguments"])
        if first["name"] == second["name"] and shared:
            key = sorted(shared)[0]
            swapped = [
                {**first, "arguments": {**first["arguments"], key: second["arguments"][key]}},
                {**second, "arguments": {**second["arguments"], key: first["arguments"][key]}},
                *reference[2:],
            ]
            yield "values-swapped", swapped
            yield "values-swapped-reversed", swapped[::-1]


# --- the two checkers ---------------------------------------------------------------------------


def bfcl_verdict(checker: types.ModuleType, task: ToolsTask, calls: list[Call]) -> bool:
    output = [{c["name"]: c["arguments"]} for c in calls]
    try:
        result = checker.ast_checker(
            task.functions,
            output,
            task.expected_calls,
            checker.Language.PYTHON,
            category(task),
            MODEL,
        )
    except Exception:  # BFCL's checker crashed on this output: its rejection
        return False
    return bool(result["valid"])


def greedy_misses_a_pairing(checker: types.ModuleType, task: ToolsTask, calls: list[Call]) -> bool:
    """BFCL's greedy pairing rejected calls that a one-to-one pairing accepts: every expected
    call fits some call (by BFCL's own single-call check) and some permutation fits them all."""
    if "parallel" not in category(task) or len(calls) != len(task.expected_calls):
        return False

    def fits(call: Call, entry: dict[str, Any]) -> bool:
        (name,) = entry
        description = next(f for f in task.functions if f["name"] == name)
        result = checker.simple_function_checker(
            description,
            {call["name"]: call["arguments"]},
            entry,
            checker.Language.PYTHON,
            MODEL,
        )
        return bool(result["valid"])

    grid = [[fits(c, e) for c in calls] for e in task.expected_calls]
    return any(
        all(grid[i][j] for i, j in enumerate(order))
        for order in itertools.permutations(range(len(calls)))
    )


def test_the_tools_judge_agrees_with_bfcl_checker(bfcl_checker: types.ModuleType) -> None:
    tasks = python_tasks()
    assert len(tasks) > 2000, "bfcl-eval's Python categories should hold over 2,000 questions"
    kinds: Counter[str] = Counter()
    agreed = 0
    explained: Counter[str] = Counter()
    unexplained: list[str] = []
    unsolvable: list[str] = []  # ground truths that contradict their schema
    for task in tasks:
        for kind, calls in mutations(task):
            kinds[kind] += 1
            ours = match_calls(calls, task.expected_calls, task.functions) is None
            theirs = bfcl_verdict(bfcl_checker, task, calls)
            if ours == theirs:
                agreed += 1
            elif ours and greedy_misses_a_pairing(bfcl_checker, task, calls):
                explained["greedy pairing"] += 1
            else:
                unexplained.append(
                    f"{task.id} {kind}: honing {'accepts' if ours else 'rejects'}, bfcl "
                    f"{'accepts' if theirs else 'rejects'}: {calls}"
                )
            if kind == "reference" and not ours:
                unsolvable.append(
                    f"{task.id}: {match_calls(calls, task.expected_calls, task.functions)}"
                )
    total = sum(kinds.values())
    print(
        f"\nbfcl differential: {len(tasks)} questions, {total} mutations, "
        f"{agreed / total:.4%} agree; differences {dict(explained)}; "
        f"unexplained {len(unexplained)}; references rejected {len(unsolvable)}"
    )
    assert len(unsolvable) == 7, unsolvable  # the seven listed in docs/envs.md
    assert not unexplained, "\n".join(unexplained[:20])
    assert agreed / total >= AGREEMENT
    # The mutations reach every rule: each kind below occurs hundreds of times at least.
    for kind in ("accepted", "dropped", "int-as-float", "str-upper", "extra-argument", "reversed"):
        assert kinds[kind] >= 100, kind
