"""No judge failure is an escape: hostile actions, played through each domain's real environment.

What the model's action causes (its program exits, kills itself or its parent, closes its
output, prints garbage or a forged reply, never ends, eats memory; its tool arguments have the
wrong types, missing or extra keys, 1 MB strings, 10,000 levels of nesting, NaN or huge numbers;
its answers overflow) is the model's failure: `env.step` returns, the failure is one of the
model's reasons with a detail, never infrastructure, and no outcome is earned (docs/envs.md,
"The contract" and "Verdicts").

To cover another domain, add its cases to `BATTERY`: a `Hostile` names a task and the actions
to play; `test_no_hostile_action_escapes` plays them through `make_env` and the real sandbox.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from honing.domains.code import env as code_env
from honing.domains.code.task import CodeTask
from honing.domains.finance.generate import generate_finance_tasks
from honing.domains.finance.task import FinanceTask
from honing.domains.math import judge as mathcheck
from honing.domains.math.task import MathTask
from honing.domains.sql.task import SqlTask
from honing.domains.structure.generate import generate_structure_tasks
from honing.domains.structure.runtime import kernel_pool
from honing.domains.structure.task import StructureTask
from honing.domains.tools.task import ToolsTask
from honing.envs import Action, EnvConfig, FailureReason, MalformedAction, StepResult, ToolCall
from honing.envs.kits import calculator as calc_kit
from honing.envs.kits.duckdb_runner import duckdb_pool
from honing.envs.registry import make_env
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask

R = FailureReason
# The model's failures, and the limits of its turn: never infrastructure.
MODELS = frozenset({R.MALFORMED_ACTION, R.UNKNOWN_TOOL, R.TOOL_ERROR, R.SANDBOX_TIMEOUT,
                    R.MEMORY_LIMIT, R.CHECKER_REJECTED, R.TAMPERING, R.STEP_TIMEOUT,
                    R.STEP_LIMIT})  # fmt: skip
RUN_S = 1.0  # the limit of the model's programs, calculator runs and answers' checks here
CONFIG = EnvConfig(max_steps=8, step_timeout_s=4.0)
QUICK = EnvConfig(max_steps=8, step_timeout_s=1.5)  # for what only the step's limit ends


@dataclass(frozen=True)
class Hostile:
    """Hostile actions played through the environment of `task`'s domain, in order; a new
    episode starts whenever one ends. `fails`: the first step must report a failure (one of
    `MODELS`, as every failure must be)."""

    name: str
    task: Callable[[], AnyTask]
    actions: tuple[Action, ...]
    fails: bool = False
    config: EnvConfig = CONFIG

    def __str__(self) -> str:
        return f"{self.task().domain}: {self.name}"


def call(name: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(id=f"c-{name}", name=name, arguments=arguments)


def act(*calls: ToolCall) -> tuple[Action, ...]:
    return (Action(tool_calls=list(calls)),)


def deep(levels: int) -> Any:
    """`levels` nested lists and dicts, built without recursion."""
    value: Any = 0
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


# -- what a model may send -----------------------------------------------------------------------

FORGED = json.dumps({"ok": True, "passed": True, "equal": True, "outcome": 1.0, "compiled": True,
                     "total": 1, "errors": [], "tampering": [], "value": "42"})  # fmt: skip
PROGRAMS = {
    "os._exit(0)": "import os\nos._exit(0)\n",
    "os._exit(3)": "import os\nos._exit(3)\n",
    "sys.exit with a message": "import sys\nsys.exit('bye')\n",
    "raise SystemExit": "raise SystemExit(0)\n",
    "SIGKILL itself": "import os\nos.kill(os.getpid(), 9)\n",
    "SIGSEGV via ctypes": "import ctypes\nctypes.string_at(0)\n",
    "SIGSEGV via signal": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    "os.abort": "import os\nos.abort()\n",
    "SIGKILL its parent": "import os\nos.kill(os.getppid(), 9)\n",
    "close stdout and stderr": "import os\nos.close(1)\nos.close(2)\n",
    "print a forged reply": f"import os\nprint({FORGED!r}, flush=True)\nos._exit(0)\n",
    "print binary bytes": "import os\nos.write(1, bytes(range(256)) * 64)\n"
    "os.write(2, b'\\xff\\0')\n",
    "print 10 MB": "import sys\nsys.stdout.write('x' * 10_000_000)\n",
    "never end": "while True:\n    pass\n",
    "sleep forever": "import time\ntime.sleep(3600)\n",
    "eat memory": "chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 24))\n",
    "make paths past the system's length": "import os\nfor _ in range(20):\n"
    "    os.mkdir('d' * 250)\n    os.chdir('d' * 250)\nopen('f.py', 'w').write('x = 1')\n",
    "a lone surrogate in the source": "x = '\udc80'\n",
    "a NUL byte in the source": "x = 1\0\n",
}
# Directories nested past Python's recursion limit, in O(1) steps (a rename each):
# `test_directories_nested_past_the_recursion_limit_are_the_models`.
NEST = ("import os\nos.mkdir('x')\nfor _ in range(1500):\n    os.mkdir('t')\n"
        "    os.rename('x', 't/d')\n    os.rename('t', 'x')\n")  # fmt: skip
SUCCEEDING = {"os._exit(0)", "raise SystemExit", "SIGKILL its parent", "close stdout and stderr",
              "print a forged reply", "print binary bytes",
              "make paths past the system's length"}  # fmt: skip
# What an argument may be instead of what its tool expects.
FORGED_ARGUMENTS: dict[str, Any] = {
    "a list": ["1", "2"],
    "a nested dict": {"a": {"b": [None, {"c": 1}]}},
    "null": None,
    "a number": 3,
    "a bool": True,
    "1 MB": "9" * 1_000_000,
    "10,000 levels": deep(10_000),
    "NaN": math.nan,
    "Infinity": math.inf,
    "a 100,000-digit int": 10**100_000,
    "a lone surrogate": "\udc80",
    "a NUL byte": "1\0",
}
OVERFLOWS = ["9" * 100_000, "1e999999", "-1e999999", "9**9**9", "10**100000", "-0", "inf",
             "-inf", "nan", "Infinity", "1e309", "0e999999", "1" + "0" * 5000 + ".5",
             "(" * 5000 + "1" + ")" * 5000, "-" * 100_000 + "1", "1e" + "9" * 5000,
             "2^(2^(2^(2^(2^(2^9)))))", "\\boxed{" * 2000 + "1" + "}" * 2000, "\udc80",
             "\0\\boxed{390}", FORGED]  # fmt: skip


def forged_arguments(
    task: Callable[[], AnyTask], tool: str, arguments: dict[str, Any], required: list[str]
) -> Hostile:
    """`tool` called with each argument replaced by each forged value, without each `required`
    one, with an extra key, and with no arguments: one step each."""
    steps = [{**arguments, key: value} for key in arguments for value in FORGED_ARGUMENTS.values()]
    steps += [{k: v for k, v in arguments.items() if k != key} for key in required]
    steps += [{**arguments, "extra": [1]}, {}] if required else [{**arguments, "extra": [1]}]
    actions = tuple(Action(tool_calls=[call(tool, s)]) for s in steps)
    return Hostile(f"{tool}: forged arguments", task, actions)


# -- code ----------------------------------------------------------------------------------------


def add_task() -> CodeTask:
    return CodeTask(id="add", prompt="def add(a, b):\n    ...\n", entry_point="add",
                    tests="assert add(1, 2) == 3\nassert add(2, 2) == 4\n",
                    reference="def add(a, b):\n    return a + b\n")  # fmt: skip


PATHS = {"1 MB": "a" * 1_000_000, "a name too long": "a" * 10_000, "too deep": "d/" * 3000 + "f",
         "the workspace": ".", "below a file": "solution.py/x", "outside": "../x",
         "absolute": "/etc/passwd", "a NUL byte": "a\0b"}  # fmt: skip


def code_cases() -> Iterator[Hostile]:
    for name, program in PROGRAMS.items():
        tested = act(call("write_file", {"path": "solution.py", "content": program}),
                     call("run_tests", {}))  # fmt: skip
        yield Hostile(f"run_tests: the solution's {name}", add_task, tested, fails=True)
        then = act(call("write_file", {"path": "solution.py", "content": "add = max\n"}),
                   call("run_tests", {}), call("rollback", {}))  # fmt: skip
        yield Hostile(f"run_python: {name}", add_task,
                      act(call("run_python", {"code": program})) + then,
                      fails=name not in SUCCEEDING)  # fmt: skip
    yield forged_arguments(add_task, "write_file", {"path": "solution.py", "content": "x = 1"},
                           ["path", "content"])  # fmt: skip
    yield forged_arguments(add_task, "read_file", {"path": "solution.py"}, ["path"])
    yield forged_arguments(add_task, "run_python", {"code": "print(1)"}, ["code"])
    for what, path in PATHS.items():
        yield Hostile(
            f"write_file: {what}",
            add_task,
            act(call("write_file", {"path": path, "content": "x"})),
            fails=True,
        )
        yield Hostile(f"read_file: {what}", add_task, act(call("read_file", {"path": path})),
                      fails=True)  # fmt: skip
    yield Hostile("write_file over a directory", add_task,
                  act(call("write_file", {"path": "d/x.py", "content": "x"}),
                      call("write_file", {"path": "d", "content": "x"})))  # fmt: skip
    yield Hostile("a ```python block that exits", add_task,
                  (Action(content="```python\nimport os\nos._exit(0)\n```"),))  # fmt: skip


# -- math ----------------------------------------------------------------------------------------


def product_task() -> MathTask:
    return MathTask(id="product", prompt="What is 17 * 23?", answer="391")


def root_task() -> MathTask:  # an expected expression: any answer reaches math-verify
    return MathTask(id="root", prompt="The positive root of x^2 = 2?", answer="\\sqrt{2}")


EXPRESSIONS = [
    "__import__('os')._exit(0)", "exit(3)", "__import__('os').kill(__import__('os').getpid(), 9)",
    "open('/etc/passwd').read()", "(lambda: 1)()", "[1] * 10**9", "9**9**9", "10**100000",
    "1e999999", "exp(710)", "log(0)", "1/0", "sqrt(-1)", "1e308*10 - 1e308*10",
    "1" + "+1" * 200_000, "(" * 5000 + "1" + ")" * 5000, "-" * 100_000 + "1", "\udc80", "1\0",
    FORGED,
]  # fmt: skip


def math_cases() -> Iterator[Hostile]:
    for expression in EXPRESSIONS:
        calc = act(call("calculator", {"expression": expression}))
        fails = expression not in ("1e999999", "1e308*10 - 1e308*10")  # inf and nan: values
        yield Hostile(f"calculator: {expression[:40]!r}", product_task, calc, fails=fails)
    for task in (product_task, root_task):
        for value in OVERFLOWS:
            yield Hostile(f"answer {task().id}: {value[:40]!r}", task,
                          act(call("answer", {"value": value})))  # fmt: skip
        yield Hostile(f"a reply boxing an overflow ({task().id})", task,
                      (Action(content="\\boxed{" + "9" * 100_000 + "}"),))  # fmt: skip
    yield forged_arguments(product_task, "calculator", {"expression": "1+1"}, ["expression"])
    yield forged_arguments(product_task, "answer", {"value": "390"}, ["value"])


# -- tools ---------------------------------------------------------------------------------------


def area_task() -> ToolsTask:  # function calling: the calls are judged, nothing runs
    parameters = {"type": "dict", "properties": {"base": {"type": "integer"},
                  "height": {"type": "integer"}, "unit": {"type": "string"},
                  "sides": {"type": "array", "items": {"type": "integer"}},
                  "shape": {"type": "dict", "properties": {}}},
                  "required": ["base", "height"]}  # fmt: skip
    return ToolsTask(
        id="area",
        prompt="Area of a triangle with base 10 and height 5?",
        functions=[{"name": "area", "description": "Triangle area.", "parameters": parameters}],
        expected_calls=[{"area": {"base": [10], "height": [5], "unit": ["cm", ""],
                                  "sides": [[3, 4], ""], "shape": [{"kind": ["t"]}, ""]}}],
        reference=json.dumps([{"name": "area", "arguments": {"base": 10, "height": 5}}]),
    )  # fmt: skip


def answer_task() -> ToolsTask:  # executable tools: they run, then the answer is judged
    return ToolsTask(
        id="forty-two",
        prompt="What is 6 times 7?",
        functions=[{"name": n} for n in ("calculator", "convert_units", "lookup", "pop_record",
                                         "calendar")],
        answer="42",
        facts={"six": "6"},
        reference=json.dumps([{"name": "answer", "arguments": {"value": "42"}}]),
    )  # fmt: skip


HUGE = {"10**400": 10**400, "-10**400": -(10**400), "10**100000": 10**100_000, "1e308": 1e308}


def tools_cases() -> Iterator[Hostile]:
    area = {"base": 10, "height": 5, "unit": "cm", "sides": [3, 4], "shape": {"kind": "t"}}
    yield forged_arguments(area_task, "area", area, ["base", "height"])
    yield Hostile(
        "area: a call per forged value",
        area_task,
        act(*(call("area", {**area, "base": v}) for v in FORGED_ARGUMENTS.values())),
    )
    for expression in (FORGED, "\udc80", "__import__('os')._exit(0)"):
        calc = act(call("calculator", {"expression": expression}))
        yield Hostile(f"calculator: {expression[:40]!r}", answer_task, calc, fails=True)
    yield forged_arguments(answer_task, "calculator", {"expression": "6*7"}, ["expression"])
    convert = {"value": 1, "from_unit": "km", "to_unit": "m"}
    yield forged_arguments(answer_task, "convert_units", convert, list(convert))
    overflows = tuple(
        Action(tool_calls=[call("convert_units", {"value": value, "from_unit": a, "to_unit": b})])
        for value in HUGE.values() for a, b in (("km", "m"), ("m", "km"), ("C", "F"), ("K", "C"))
    )  # fmt: skip
    yield Hostile("convert_units: huge values", answer_task, overflows)
    yield forged_arguments(answer_task, "lookup", {"key": "six"}, ["key"])
    yield forged_arguments(answer_task, "pop_record", {"key": "six"}, ["key"])
    yield forged_arguments(answer_task, "calendar",
                           {"operation": "add_days", "date": "2024-01-01", "days": 1},
                           ["operation", "date", "days"])  # fmt: skip
    yield forged_arguments(answer_task, "calendar",
                           {"operation": "days_between", "date": "2024-01-01",
                            "other": "9999-12-31"}, ["other"])  # fmt: skip
    days = tuple(
        Action(tool_calls=[call("calendar", {"operation": "add_days", "date": "9999-12-31",
                                             "days": d})])
        for d in (*HUGE.values(), -(10**6), 2**63)
    )  # fmt: skip
    yield Hostile("calendar: huge days", answer_task, days)
    for value in OVERFLOWS:
        yield Hostile(f"answer: {value[:40]!r}", answer_task, act(call("answer", {"value": value})))
    yield forged_arguments(answer_task, "answer", {"value": "41"}, ["value"])


# -- sql -----------------------------------------------------------------------------------------

SALES = "region,amount\nNorth,100.00\nSouth,250.50\nNorth,80.00\n"
TOTAL_SQL = "SELECT sum(amount) FROM sales WHERE region = 'North'"


def north_task() -> SqlTask:
    return SqlTask(id="north", prompt="Total amount of the North region? Show the query.",
                   tables={"sales": SALES}, answer="180.00",
                   rules=[{"kind": "numeric"}, {"kind": "traceable"}],
                   reference=TOTAL_SQL)  # fmt: skip


def traced_task() -> SqlTask:  # no numeric rule: the answer's SQL decides
    return north_task().model_copy(update={"id": "traced", "rules": north_task().rules[1:]})


QUERIES = {  # each reads `sales`, so that an answer showing it has it judged
    "eats memory": "SELECT list(range(1000000000)) FROM sales",
    "a 10 MB value": "SELECT repeat('x', 10000000) FROM sales",
    "10 MB of rows": "SELECT repeat('x', 1000) FROM sales, range(10000)",
    "binary bytes": "SELECT '\\x00\\xff'::BLOB, chr(0), chr(55296) FROM sales",
    "a forged reply as a value": f"SELECT '{FORGED}' AS ok FROM sales",
    "a forged reply as a column name": f'SELECT 1 AS "{FORGED}" FROM sales',
    "5,000 nested parentheses": "SELECT " + "(" * 5000 + "1" + ")" * 5000 + " FROM sales",
    "huge numbers": "SELECT 1e308 * 10, -1e308 * 10, 'nan'::DOUBLE, "
    "170141183460469231731687303715884105727::HUGEINT FROM sales",
    "a lone surrogate": "SELECT '\udc80' FROM sales",
    "a NUL byte": "SELECT 1\0 FROM sales",
    "1 MB of SQL": "SELECT " + "+".join(["1"] * 300_000) + " FROM sales",
    "many statements": "SELECT 1 FROM sales;" * 2000,
}
ENDLESS = {
    "never ends": "SELECT count(*) FROM sales, range(1000000000000)",
    "a recursive CTE without end": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 "
    "FROM r) SELECT count(*) FROM r, sales",
}


def sql_cases() -> Iterator[Hostile]:
    for queries, config in ((QUERIES, CONFIG), (ENDLESS, QUICK)):
        for name, sql in queries.items():
            queried = act(call("query", {"sql": sql}))
            fails = config is QUICK  # the rest may run, or fail
            yield Hostile(f"query: {name}", north_task, queried, fails, config)
            answered = act(call("answer", {"text": f"Answer: 180\n\n```sql\n{sql}\n```"}))
            yield Hostile(f"answer's SQL: {name}", traced_task, answered, fails, config)
    for value in [*OVERFLOWS, "9" * 5000 + "e9", "1e-400"]:
        for task in (north_task, traced_task):
            text = f"Answer: {value}\n\n```sql\n{TOTAL_SQL}\n```"
            yield Hostile(f"answer {task().id}: {value[:40]!r}", task,
                          act(call("answer", {"text": text})))  # fmt: skip
    yield Hostile("answer: a bare infinite float", north_task,
                  act(call("answer", {"text": math.inf})))  # fmt: skip
    yield forged_arguments(north_task, "query", {"sql": "SELECT 1"}, ["sql"])
    yield forged_arguments(north_task, "answer", {"text": "Answer: 1"}, ["text"])


# -- structure -----------------------------------------------------------------------------------


def bracket_task() -> StructureTask:
    return next(t for t in generate_structure_tasks(6, 3) if "family:bracket" in t.tags)


def plate() -> dict[str, Any]:
    """The bracket's plate without its holes: a scene that builds."""
    return {"objects": [bracket_task().target["objects"][0]["children"][0]]}


SCENES: dict[str, Any] = {
    "a box 1e308 wide": {"objects": [{"type": "box", "size": [1e308, 1, 1]}]},
    "a NaN radius": {"objects": [{"type": "sphere", "radius": math.nan}]},
    "an infinite translate": {"objects": [{"type": "box", "size": [1, 1, 1],
                                           "translate": [math.inf, 0, 0]}]},
    "a 100,000-digit size": {"objects": [{"type": "box", "size": [10**100_000, 1, 1]}]},
    "10,000 levels of unions": {"objects": [deep(10_000)]},
    "5,000 boxes": {"objects": [{"type": "box", "size": [1, 1, 1]}] * 5000},
    "a scene that is a script": {"script": "add(box([1, 1, 1]))"},
}  # fmt: skip


def structure_cases() -> Iterator[Hostile]:
    submit = call("submit", {})
    for name, program in PROGRAMS.items():
        built = (Action(tool_calls=[call("build", {"scene": plate()})]),
                 Action(tool_calls=[call("build", {"script": program})]),
                 Action(tool_calls=[submit]))  # fmt: skip
        yield Hostile(f"build: a script that tries to {name}", bracket_task, built)
    for name, scene in SCENES.items():
        yield Hostile(f"build: {name}", bracket_task,
                      (Action(tool_calls=[call("build", {"scene": scene})]),
                       Action(tool_calls=[submit])), fails=True)  # fmt: skip
    yield forged_arguments(bracket_task, "build", {"scene": plate()}, [])
    yield forged_arguments(bracket_task, "build", {"script": "add(box([1, 1, 1]))"}, [])
    first = (Action(tool_calls=[call("build", {"scene": plate()})]),)
    render = forged_arguments(bracket_task, "render", {"view": "iso"}, [])
    yield Hostile(render.name, bracket_task, first + render.actions)
    named = {"objects": [{"type": "box", "size": [1, 1, 1], "name": "\udc80"}]}
    yield Hostile("build: a lone surrogate for a name", bracket_task,
                  (Action(tool_calls=[call("build", {"scene": named})]),))  # fmt: skip
    forged = call("submit", {"scene": {"objects": []}, "outcome": 1})
    yield Hostile("submit: forged arguments", bracket_task, (*first, Action(tool_calls=[forged])))


# -- finance -------------------------------------------------------------------------------------


def finance_task() -> FinanceTask:
    return next(t for t in generate_finance_tasks(8, 5) if t.kind == "value")


def finance_cases() -> Iterator[Hostile]:
    task = finance_task()
    document = next(iter(task.documents))
    for value in OVERFLOWS:
        yield Hostile(f"answer: {value[:40]!r}", finance_task,
                      act(call("answer", {"value": value, "citations": [],
                                          "calculation": value})))  # fmt: skip
        yield Hostile(f"calculator: {value[:40]!r}", finance_task,
                      act(call("calculator", {"expression": value})))  # fmt: skip
    for name, sql in QUERIES.items():
        yield Hostile(f"query: {name}", finance_task, act(call("query", {"sql": sql})))
    reference = json.loads(task.reference or "{}")
    yield forged_arguments(finance_task, "read", {"document": document, "page": 1}, ["document"])
    yield forged_arguments(finance_task, "query", {"sql": "SELECT 1"}, ["sql"])
    yield forged_arguments(finance_task, "calculator", {"expression": "1 + 1"}, ["expression"])
    yield forged_arguments(finance_task, "answer", reference, [])


BATTERY = [*code_cases(), *math_cases(), *tools_cases(), *sql_cases(), *structure_cases(),
           *finance_cases()]  # fmt: skip


# -- the tests -----------------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(module_pool: SandboxPool) -> SandboxPool:
    """The module's pool, its checkers' siblings started (outside any step's time limit)."""
    await mathcheck.checker_pool(module_pool)
    await duckdb_pool(module_pool)
    await kernel_pool(module_pool)
    return module_pool


@pytest.fixture(autouse=True)
def short_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's programs and calculator runs stop after `RUN_S`, and math-verify spends at
    most `RUN_S` of CPU on an answer: what never ends meets its own limit, within the step's."""
    monkeypatch.setattr(code_env, "RUN_TIMEOUT_S", RUN_S)
    monkeypatch.setattr(calc_kit, "CALC_TIMEOUT_S", RUN_S)
    monkeypatch.setattr(mathcheck, "BUDGET_S", RUN_S)


def escaped(result: StepResult) -> str:
    """How `result` lets a hostile action escape ('' when it does not)."""
    info = result.info
    if info.infrastructure:
        return f"infrastructure failure {info.failure}: {info.detail}"
    if result.components.get("outcome", 0.0) != 0.0 or result.reward > 0.0:
        return f"earned {result.components}"
    if info.failure is not None and info.failure not in MODELS:
        return f"failure {info.failure} is not the model's"
    if info.failure is not None and not info.detail.strip():
        return f"failure {info.failure} without a detail"
    return ""


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("hostile", BATTERY, ids=str)
async def test_no_hostile_action_escapes(pool: SandboxPool, hostile: Hostile) -> None:
    task = hostile.task()
    env = make_env(task.domain, pool, hostile.config)
    try:
        for i, action in enumerate(hostile.actions):
            if i == 0 or env.done:
                await env.reset(task)
            result = await env.step(action)
            shown = [r.content[:200] for r in result.observation.tool_results]
            problem = escaped(result)
            assert not problem, f"step {i}: {problem}\n{shown}"
            assert i > 0 or not hostile.fails or result.info.failure is not None, result.info
    finally:
        await env.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_directories_nested_past_the_recursion_limit_are_the_models(
    pool: SandboxPool,
) -> None:
    """The host reads, copies, restores and removes a workspace without recursion and without
    long paths (`honing.sandbox.fs`): a tree the model nested 1,500 deep is judged like any
    other workspace, and goes with the episode. (Removal through `shutil.rmtree` recursed: the
    tree stayed in /tmp, and every later pool start failed.)"""
    (nest,) = act(call("run_python", {"code": NEST}))
    env = make_env("code", pool, CONFIG)
    await env.reset(add_task())
    assert isinstance(env, code_env.CodeEnv) and env.workspace is not None
    where = env.workspace.path
    try:
        assert (await env.step(nest)).info.failure is None
        judged = await env.step(Action(tool_calls=[call("run_tests", {})]))
        assert not escaped(judged), judged.info
        assert "0/2 tests passed" in judged.info.detail  # judged, the tree notwithstanding
        back = await env.step(Action(tool_calls=[call("rollback", {})]))
        assert not escaped(back), back.info
    finally:
        await env.close()
    assert not where.exists()


TASKS = [add_task, product_task, root_task, area_task, answer_task, north_task, traced_task]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t().id)
async def test_the_battery_tasks_are_solvable(
    pool: SandboxPool, task: Callable[[], AnyTask]
) -> None:
    """An outcome of 0 means something: each task's reference earns 1 through the same tools."""
    made = task()
    env = make_env(made.domain, pool, CONFIG)
    await env.reset(made)
    for action in env.reference_actions(made):
        result = await env.step(action)
    await env.close()
    assert result.components["outcome"] == 1.0, result.info.detail


GARBAGE_MESSAGES: dict[str, Any] = {
    "None": None, "a number": 5, "a string": "text", "a list": [],
    "calls a number": {"tool_calls": 5}, "calls a string": {"tool_calls": "abc"},
    "a call None": {"tool_calls": [None]}, "calls a dict": {"tool_calls": {"function": {}}},
    "function a string": {"tool_calls": [{"function": "f"}]},
    "name a number": {"tool_calls": [{"function": {"name": 5}}]},
    "arguments a JSON list": {"tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]},
    "arguments JSON null": {"tool_calls": [{"function": {"name": "f", "arguments": "null"}}]},
    "arguments a number": {"tool_calls": [{"function": {"name": "f", "arguments": 5}}]},
    "arguments with a number key": {"tool_calls": [{"function": {"name": "f",
                                                                 "arguments": {1: "x"}}}]},
    "arguments 100,000 open braces": {"tool_calls": [{"function": {"name": "f",
                                                                   "arguments": "{" * 100_000}}]},
    "arguments 100,000 levels": {"tool_calls": [{"function": {
        "name": "f", "arguments": "[" * 100_000 + "]" * 100_000}}]},
    "arguments a 5,000-digit number": {"tool_calls": [{"function": {
        "name": "f", "arguments": '{"a": ' + "9" * 5000 + "}"}}]},
    "arguments bytes": {"tool_calls": [{"function": {"name": "f", "arguments": b'{"a": 1}'}}]},
    "a 5,000-digit id": {"tool_calls": [{"id": 10**5000, "function": {"name": "f"}}]},
    "content a number": {"content": 5}, "content a dict": {"content": {"text": "x"}},
    "a content part's text a number": {"content": [{"type": "text", "text": 5}]},
}  # fmt: skip


@pytest.mark.parametrize("name", GARBAGE_MESSAGES)
def test_from_openai_refuses_garbage_with_malformed_action(name: str) -> None:
    """A message that is no action raises MalformedAction (which the agent turns into a
    rejected step), never another exception; a message that parses is a valid Action."""
    try:
        action = Action.from_openai(GARBAGE_MESSAGES[name])
    except MalformedAction as exc:
        assert str(exc)
    else:
        assert isinstance(action, Action)


def test_from_openai_reads_what_parses() -> None:
    """Arguments JSON allows (NaN, lone surrogates) and text content parts are an action."""
    message = {"content": [{"type": "text", "text": "a"}, {"type": "image_url"}],
               "tool_calls": [{"id": "x", "function": {"name": "f", "arguments":
                              '{"a": NaN, "b": -Infinity, "c": "\\udc80"}'}}]}  # fmt: skip
    action = Action.from_openai(message)
    assert action.content == "a"
    (parsed,) = action.tool_calls
    assert math.isnan(parsed.arguments["a"]) and parsed.arguments["c"] == "\udc80"
