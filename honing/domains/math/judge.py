"""Math answers compared inside the sandbox, with math-verify (symbolic and numeric equality).

math-verify parses text with sympy, whose parser evaluates Python: a model's answer must never be
parsed on the host. Comparisons therefore run as small programs in a sibling pool of the caller's
pool whose runtime is math-verify as installed beside honing (built offline on first use, and
preloaded so a comparison costs milliseconds, not a sympy import).

    verdict = await math_equal(pool, "391", "17*23 = 391")  # Verdict(equal=True)

An answer is one value, not a formula to evaluate: a value gate (regular expressions on the host)
takes the number stated where a number is expected; an expected expression is compared
symbolically. Verdicts: equal or not; *rejected* (a wrong answer, the reason kept) when the
checker failed on the given answer; a *problem* and no verdict when it could not run. The rules
are in docs/envs.md ("Verdicts", "The math judge against math-verify", "The modules in detail").
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from honing.domains.math.task import MathTask
from honing.sandbox import ExecRequest, RuntimeStore, SandboxPool
from honing.tasks.checkrun import RunEnd, checker_limits, run_end
from honing.tasks.schema import ReferenceVerdict

RUNTIME = "honing-math"
DISTRIBUTIONS = ["math-verify"]
PRELOAD = ["math_verify", "sympy"]

BUDGET_S = 5.0  # CPU seconds the checker may spend on one answer (math-verify's default)
STARTUP_S = 5.0  # CPU seconds a run may spend besides its answers
CHUNK = 16  # answers per run
MEMORY_MB = 1024

# One run checks several pairs; each gets `budget_s` of CPU time (a profiling timer: time the
# host spends on other processes does not count), and a failure on one pair is that pair's.
PROGRAM = """\
import json, signal, sys
from math_verify import parse, verify

class OverBudget(BaseException):
    pass

armed, reading = False, "answer"

def over_budget(signum, frame):
    if armed:
        raise OverBudget()

signal.signal(signal.SIGPROF, over_budget)

def read(text):
    delimited = any(mark in text for mark in ("$", "\\\\boxed", "\\\\(", "\\\\["))
    wrapped = text if delimited else "$" + text + "$"
    try:
        found = parse(wrapped, parsing_timeout=None, raise_on_error=True)
    except Exception:
        if wrapped == text:
            raise
        found = []
    return found or parse(text, parsing_timeout=None, raise_on_error=True)

def describe(exc):
    try:
        said = str(exc)[:300]
    except Exception:
        said = ""
    return type(exc).__name__ + (": " + said if said else "")

def judge(expected, given):
    global reading
    reading, answer = "task", []
    try:
        gold = read(expected)
    except Exception as e:
        return {"task": "math-verify raised " + describe(e)}
    if not gold:
        return {"equal": False}
    reading = "answer"
    try:
        answer = read(given)
        return {"equal": verify(gold, answer, timeout_seconds=None, raise_on_error=True)}
    except Exception as e:
        raised = "math-verify raised " + describe(e)
    # a comparison that raised is not a mismatch of the others (math-verify's own rule)
    if answer and verify(gold, answer, timeout_seconds=None):
        return {"equal": True}
    return {"rejected": raised}

spec = json.loads(sys.stdin.read())
budget = spec["budget_s"]
out = []
for expected, given in spec["pairs"]:
    armed = True
    signal.setitimer(signal.ITIMER_PROF, budget)
    try:
        verdict = judge(expected, given)
        armed = False
    except OverBudget:
        spent = "the checker spent its CPU budget (%g s) on it" % budget
        verdict = {"task" if reading == "task" else "rejected": spent}
    armed = False
    signal.setitimer(signal.ITIMER_PROF, 0)
    out.append(verdict)
print(json.dumps(out))
"""


class Problem(enum.StrEnum):
    """Why a comparison has no verdict; none of them is the given answer's doing."""

    SANDBOX = "sandbox"  # the sandbox failed
    CHECKER = "checker"  # the checker could not start or finish (honing.tasks.checkrun)
    TASK = "task"  # the task's own answer makes the checker fail


@dataclass(frozen=True)
class Verdict:
    """The checker's word on one answer: `equal`; `rejected` says why the checker failed on the
    answer (a wrong answer all the same); `problem` (and `detail`) when there is no verdict."""

    equal: bool = False
    rejected: str = ""
    problem: Problem | None = None
    detail: str = ""


NumberKind = Literal["integer", "decimal", "fraction"]
_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
_UNWRAP = [  # LaTeX that does not change the value: text wrappers, math delimiters, spaces…
    (re.compile(r"\\(?:text|mathrm|textbf|mathbf)\{([^{}]*)\}"), r"\1"),
    (re.compile(r"\\[,;:! ]|~|\{,\}|\\left|\\right|\\displaystyle|\$|\\[()[\]]"), ""),
    (re.compile(r"\\[dt]frac"), r"\\frac"),
]
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)"  # 215418 or 215,418
_KINDS: list[tuple[NumberKind, re.Pattern[str]]] = [
    ("integer", re.compile(rf"[-+]?{_DIGITS}")),
    ("decimal", re.compile(rf"[-+]?(?:{_DIGITS}?\.\d+|{_DIGITS}\.)")),
    ("fraction", re.compile(r"[-+]?(?:\d+/\d+|\\frac\{[-+]?\d+\}\{\d+\})")),
]


def _unwrapped(text: str) -> str:
    """The last \\boxed{...} of `text` (else the whole text) without LaTeX wrappers."""
    boxed = _BOXED.findall(text)
    value = str(boxed[-1]) if boxed else text
    for pattern, replacement in _UNWRAP:
        value = pattern.sub(replacement, value)
    return value


def _bare(value: str) -> str:
    value = value.strip().rstrip(".").replace(" ", "")
    while value.startswith("(") and value.endswith(")"):
        value = value[1:-1]
    return value.removesuffix("\\%").removesuffix("%")


def final_value(text: str) -> str:
    """What an answer states as its value: its last \\boxed{...} (else the whole text), after its
    last "=", without LaTeX wrappers, spaces, a trailing period or enclosing parentheses."""
    return _bare(_unwrapped(text).rsplit("=", 1)[-1])


# What joins one equation to the next in a list of them ("x = 4 or x = 7", "x=4, x=7"); a comma
# followed by three digits is a thousands separator, not a join.
_JOIN = re.compile(r"\bor\b|\band\b|\\lor|\\vee|\\quad|\\qquad|;|,(?!\d{3}(?!\d))")


def stated_values(text: str) -> set[str]:
    """The values an answer states: one (`final_value`), or several when it lists equations
    joined by "or", "and", commas ("x = 4 or x = 7": {"4", "7"}). A chain of equalities
    ("483*446 = 215418") states its last value; the same value twice is one."""
    pieces = _unwrapped(text).split("=")
    values = {_bare(pieces[-1])}
    for middle in pieces[1:-1]:  # "4 or x": an equation's value, then the next one's left side
        join = _JOIN.search(middle)
        if join is not None:
            values.add(_bare(middle[: join.start()]))
    return values


def number_kind(text: str) -> NumberKind | None:
    """The kind of number `text` states (`final_value`), or None for anything else: a formula,
    an expression, prose."""
    value = final_value(text)
    return next((kind for kind, pattern in _KINDS if pattern.fullmatch(value)), None)


def states_a_value(expected: str, given: str) -> bool:
    """Whether `given` may be compared with `expected` at all: never when it boxes several
    different values (`\\boxed{1}\\boxed{2}` is two answers) or lists several equations of
    different values (`stated_values`); else always for an expected
    expression; for an expected number, only a number (a fraction only where a fraction or a
    decimal is expected: `8/2` is a division, not the integer 4)."""
    if len({re.sub(r"\s", "", b) for b in _BOXED.findall(given)}) > 1:
        return False
    if len(stated_values(given)) > 1:  # "x = 4 or x = 7": several answers, not one
        return False
    wanted = number_kind(expected)
    if wanted is None:
        return True
    found = number_kind(given)
    return found is not None and not (found == "fraction" and wanted == "integer")


def _comparable(given: str) -> str:
    """A stated number as math-verify should read it: the value alone, without thousands
    separators (which it would read as a tuple)."""
    return final_value(given).replace(",", "")


async def checker_pool(pool: SandboxPool) -> SandboxPool:
    """The sibling of `pool` that can run math-verify."""
    RuntimeStore().build_from_installed(RUNTIME, DISTRIBUTIONS)
    return await pool.sibling(RUNTIME, PRELOAD)


def integer_verdict(expected: str, given: str) -> bool | None:
    """Whether two answers that both state an integer (`number_kind`) state the same one,
    decided on the host from the digit strings the regular expressions matched (sign, digits
    without leading zeros or separators: no parser of model text, no limit on length); None
    when either is not an integer (the sandbox decides). math-verify concludes the same."""
    if number_kind(expected) != "integer" or number_kind(given) != "integer":
        return None
    return _integer(expected) == _integer(given)


def _integer(text: str) -> tuple[bool, str]:
    """An integer answer as (negative, digits), so that -0 == 0 and 007 == 7 == +7."""
    value = _comparable(text)
    digits = value.lstrip("+-").lstrip("0") or "0"
    return value.startswith("-") and digits != "0", digits


async def math_equal_many(pool: SandboxPool, pairs: list[tuple[str, str]]) -> list[Verdict]:
    """For each (expected, given): whether they state the same value (a formula where a number
    is expected never does), or why there is no comparison. Two integers are compared on the host
    (`integer_verdict`, what math-verify concludes for them); the rest run in the sandbox."""
    verdicts: list[Verdict | None] = []
    for expected, given in pairs:
        host = integer_verdict(expected, given) if states_a_value(expected, given) else False
        verdicts.append(None if host is None else Verdict(equal=host))
    gated = [
        (expected, _comparable(given) if number_kind(expected) else given)
        for (expected, given), verdict in zip(pairs, verdicts, strict=True)
        if verdict is None
    ]
    if gated:
        checker = await checker_pool(pool)
        chunks = [gated[i : i + CHUNK] for i in range(0, len(gated), CHUNK)]
        checked = iter([v for found in await _check(checker, chunks) for v in found])
        verdicts = [next(checked) if v is None else v for v in verdicts]
    return [v for v in verdicts if v is not None]


async def math_equal(pool: SandboxPool, expected: str, given: str) -> Verdict:
    (found,) = await math_equal_many(pool, [(expected, given)])
    return found


def _request(pairs: list[tuple[str, str]]) -> ExecRequest:
    cpu_s, wall_s = checker_limits(STARTUP_S + BUDGET_S * len(pairs))
    spec = {"budget_s": BUDGET_S, "pairs": pairs}
    return ExecRequest(code=PROGRAM, stdin=json.dumps(spec), timeout_s=wall_s, cpu_s=cpu_s,
                       memory_mb=MEMORY_MB, filename="mathcheck.py")  # fmt: skip


async def _check(checker: SandboxPool, chunks: list[list[tuple[str, str]]]) -> list[list[Verdict]]:
    """The verdicts of each chunk of pairs. A chunk whose whole run failed because of what it
    checked (`RunEnd.INPUT`) is checked again pair by pair, so that only the answer at fault is
    rejected."""
    results = await checker.run_many([_request(chunk) for chunk in chunks])
    out: list[list[Verdict]] = []
    for chunk, result in zip(chunks, results, strict=True):
        end, reason = run_end(result)
        if end is RunEnd.INPUT and len(chunk) > 1:
            out.append([v for found in await _check(checker, [[p] for p in chunk]) for v in found])
        elif end is RunEnd.INPUT:
            out.append([Verdict(rejected=reason)])
        elif end is RunEnd.REPLIED:
            out.append(_read_reply(result.stdout, len(chunk)))
        else:
            problem = Problem.SANDBOX if end is RunEnd.SANDBOX else Problem.CHECKER
            out.append([Verdict(problem=problem, detail=reason)] * len(chunk))
    return out


def _read_reply(stdout: str, count: int) -> list[Verdict]:
    try:
        reply = json.loads((stdout.strip().splitlines() or ["null"])[-1])
    except json.JSONDecodeError:
        reply = None
    if not (isinstance(reply, list) and len(reply) == count
            and all(isinstance(item, dict) for item in reply)):  # fmt: skip
        return [Verdict(problem=Problem.CHECKER, detail="the checker gave no usable reply")] * count
    verdicts = []
    for item in reply:
        if "task" in item:
            detail = f"the task's answer breaks the checker: {item['task']}"
            verdicts.append(Verdict(problem=Problem.TASK, detail=detail))
        elif "rejected" in item:
            verdicts.append(Verdict(rejected=str(item["rejected"])))
        else:
            verdicts.append(Verdict(equal=item.get("equal") is True))
    return verdicts


async def check_math(tasks: Sequence[MathTask], pool: SandboxPool) -> dict[str, ReferenceVerdict]:
    """Math: the reference must equal the answer by the math checker."""
    maths = [t for t in tasks if t.reference is not None]
    found = await math_equal_many(pool, [(t.answer, t.reference or "") for t in maths])
    out: dict[str, ReferenceVerdict] = {}
    for task, verdict in zip(maths, found, strict=True):
        if verdict.problem in (Problem.SANDBOX, Problem.CHECKER):
            why = f"the math checker did not run: {verdict.detail}"
            out[task.id] = ReferenceVerdict("unverified", why)
        elif verdict.problem is Problem.TASK:
            out[task.id] = ReferenceVerdict("failed", verdict.detail)
        elif verdict.rejected:
            out[task.id] = ReferenceVerdict("failed", f"reference: {verdict.rejected}")
        elif verdict.equal:
            out[task.id] = ReferenceVerdict("passed")
        else:
            why = f"reference does not equal answer {task.answer!r}"
            out[task.id] = ReferenceVerdict("failed", why)
    return out
