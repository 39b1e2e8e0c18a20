"""Judging a finance answer: the value or the set of items, the citations, the calculation.

    verdict = judge(task, parse_documents(task.documents), parse_submission(arguments))
    verdict.passed, verdict.cited_ok, verdict.reasons

Outcome 1 needs all of: the value within the task's tolerance (or exactly the task's items);
every citation holding (`cite.trace`); the citations covering the expected ones, one to one,
with nothing more for a value (an items answer may add up to `EXTRA_CITATIONS`); and, for a
value, a calculation over the cited values (c1, c2, … in citation order; a literal equal to a
cited value stands for it; other literals are whole numbers up to 1000) that evaluates exactly
to the answer and depends on every citation (each one is moved and the result must move).
Host-side and bounded (400 characters, 2,048-bit numbers, exponents up to 12); a calculation
past those bounds is refused. Not covered: contrived formulas that depend on every cited
value and still reach the answer through small constants (docs/envs.md, "Reward hacking").
"""

from __future__ import annotations

import ast
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from pydantic import ValidationError

from honing.tasks.finance.cite import Citation, Trace, same_source, trace
from honing.tasks.finance.docs import Document, key, number
from honing.tasks.finance.task import FinanceTask

MAX_CITATIONS = 64
EXTRA_CITATIONS = 4  # an items answer may cite this many figures beyond the expected ones
MAX_CALC_CHARS = 400
MAX_NODES = 200
MAX_BITS = 2048
MAX_CONSTANT = 1000
MAX_EXPONENT = 12
ARGUMENTS = ("value", "items", "citations", "calculation")


@dataclass(frozen=True)
class Submission:
    """The `answer` tool's arguments, checked for shape."""

    citations: list[Citation]
    value: str | None = None
    items: list[str] | None = None
    calculation: str | None = None


def parse_submission(arguments: Mapping[str, Any]) -> Submission:
    """The answer's arguments; ValueError naming the argument when one is malformed."""
    unknown = sorted(set(arguments) - set(ARGUMENTS))
    if unknown:
        raise ValueError(f"unknown argument(s) {unknown}; the answer takes {', '.join(ARGUMENTS)}")
    raw = arguments.get("citations")
    if not isinstance(raw, list) or len(raw) > MAX_CITATIONS:
        raise ValueError(
            f"'citations' must be a list of at most {MAX_CITATIONS} citations: "
            "{document, table, row, column, value} or {document, line, value}"
        )
    citations = []
    for i, one in enumerate(raw):
        if not isinstance(one, dict):
            raise ValueError(f"citations[{i}] must be an object")
        try:
            citations.append(Citation.model_validate(one))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(
                f"citations[{i}]{'.' + where if where else ''}: {first['msg']}"
            ) from None
    value = arguments.get("value")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError("'value' must be a number or a string")
        value = str(value)[:200]
    items = arguments.get("items")
    if items is not None and (
        not isinstance(items, list)
        or len(items) > MAX_CITATIONS
        or not all(isinstance(i, str) for i in items)
    ):
        raise ValueError(f"'items' must be a list of at most {MAX_CITATIONS} strings")
    calculation = arguments.get("calculation")
    if calculation is not None and not isinstance(calculation, str):
        raise ValueError("'calculation' must be a string, such as '(c2 - c1) / c1 * 100'")
    return Submission(citations, value, items, calculation)


# -- the calculation -----------------------------------------------------------------------


class CalcError(ValueError):
    """The calculation is not an arithmetic expression over the cited values."""


class CalcTooLarge(CalcError):
    """The calculation goes past the judge's bounds (its size, its numbers' size)."""


Node = tuple[Any, ...]
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


def compile_calculation(expression: str, values: Sequence[Fraction | None]) -> Node:
    """The calculation as a tree over the citations' indices: ("var", i), ("const", v),
    ("op", symbol, left, right), ("neg", x). A literal equal to a cited value is that citation."""
    if len(expression) > MAX_CALC_CHARS:
        raise CalcTooLarge(f"longer than {MAX_CALC_CHARS} characters")
    try:
        with warnings.catch_warnings():  # "invalid decimal literal" and the like: our refusal
            warnings.simplefilter("ignore")
            tree = ast.parse(expression.replace("^", "**").strip(), mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise CalcError(f"not an arithmetic expression ({type(exc).__name__})") from None
    except (RecursionError, MemoryError):
        raise CalcTooLarge("nested too deep") from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise CalcTooLarge(f"more than {MAX_NODES} parts")

    def build(node: ast.AST) -> Node:
        if isinstance(node, ast.Expression):
            return build(node.body)
        number = node.value if isinstance(node, ast.Constant) else None
        if isinstance(number, int | float) and not isinstance(number, bool):
            if not math.isfinite(number):
                raise CalcError(f"{ast.unparse(node)} is not a finite number")
            literal = Fraction(repr(number))  # a float as written: 0.1 is 1/10
            for i, v in enumerate(values):
                if v is not None and v == literal:
                    return ("var", i)
            if literal.denominator == 1 and abs(literal) <= MAX_CONSTANT:
                return ("const", literal)
            raise CalcError(
                f"{ast.unparse(node)} is neither a cited value nor a whole number up "
                f"to {MAX_CONSTANT}: name cited values c1, c2, …"
            )
        if isinstance(node, ast.Name):
            name = node.id
            if name[:1] == "c" and name[1:].isdecimal() and 1 <= int(name[1:]) <= len(values):
                index = int(name[1:]) - 1
                if values[index] is None:
                    raise CalcError(f"{name} is not a number")
                return ("var", index)
            raise CalcError(f"unknown name {name!r}: the cited values are c1 to c{len(values)}")
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return ("op", _OPS[type(node.op)], build(node.left), build(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            inner = build(node.operand)
            return ("neg", inner) if isinstance(node.op, ast.USub) else inner
        raise CalcError(f"not allowed: {ast.unparse(node)[:60]} (use + - * / ** and parentheses)")

    return build(tree)


def run_calculation(tree: Node, values: Sequence[Fraction | None]) -> Fraction:
    """The calculation's exact value for `values`; CalcError when it has none."""
    kind = tree[0]
    if kind == "var":
        found = values[tree[1]]
        assert found is not None
        return found
    if kind == "const":
        return Fraction(tree[1])
    if kind == "neg":
        return -run_calculation(tree[1], values)
    symbol, left, right = (
        tree[1],
        run_calculation(tree[2], values),
        run_calculation(tree[3], values),
    )
    if symbol == "+":
        out = left + right
    elif symbol == "-":
        out = left - right
    elif symbol == "*":
        out = left * right
    elif symbol == "/":
        if right == 0:
            raise CalcError("division by zero")
        out = left / right
    else:
        if right.denominator != 1 or abs(right) > MAX_EXPONENT:
            raise CalcError(
                f"an exponent must be a whole number from -{MAX_EXPONENT} to {MAX_EXPONENT}"
            )
        if left == 0 and right < 0:
            raise CalcError("division by zero")
        out = left ** int(right)
    if max(out.numerator.bit_length(), out.denominator.bit_length()) > MAX_BITS:
        raise CalcTooLarge(f"a number past {MAX_BITS} bits")
    return out


def unused_citations(tree: Node, values: Sequence[Fraction | None]) -> list[int]:
    """The indices of the citations the result does not depend on: moving the value leaves the
    result as it was."""
    base = run_calculation(tree, values)
    out = []
    for i, value in enumerate(values):
        if value is None:
            out.append(i)
            continue
        moved = list(values)
        moved[i] = value * Fraction(10007, 10000) if value else Fraction(1)
        try:
            same = run_calculation(tree, moved) == base
        except CalcError:
            same = False  # it reacts (it breaks), so it depends on the value
        if same:
            out.append(i)
    return out


# -- the verdict ---------------------------------------------------------------------------


def close(given: Fraction, expected: Fraction, tolerance: float) -> bool:
    """|given - expected| <= tolerance * |expected| (float rounding always allowed)."""
    limit = Fraction(max(tolerance, 1e-9)) * abs(expected) + Fraction(1, 10**12)
    return abs(given - expected) <= limit


@dataclass(frozen=True)
class Verdict:
    passed: bool
    traces: list[Trace]
    reasons: list[str] = field(default_factory=list)

    @property
    def cited_ok(self) -> float:
        """The share of the citations that hold (0 with none)."""
        return sum(t.holds for t in self.traces) / len(self.traces) if self.traces else 0.0


def matched(given: Sequence[Trace], expected: Sequence[Trace]) -> int:
    """How many expected citations the given ones cover, each given one used once (a maximum
    bipartite matching)."""
    owner: dict[int, int] = {}  # expected index -> given index

    def place(g: int, seen: set[int]) -> bool:
        for e, wanted in enumerate(expected):
            if e in seen or not same_source(given[g], wanted):
                continue
            seen.add(e)
            if e not in owner or place(owner[e], seen):
                owner[e] = g
                return True
        return False

    return sum(place(g, set()) for g in range(len(given)))


def judge(task: FinanceTask, documents: Mapping[str, Document], answer: Submission) -> Verdict:
    """The verdict on `answer` (see the module docstring); `reasons` say what failed."""
    traces = [trace(documents, c) for c in answer.citations]
    reasons: list[str] = []
    broken = [
        f"citation {i + 1} ({t.citation.label()}): {t.reason}"
        for i, t in enumerate(traces)
        if not t.holds
    ]
    reasons += broken[:3] + ([f"… and {len(broken) - 3} more citations"] if len(broken) > 3 else [])
    if not traces:
        reasons.append("no citations: cite the cells or lines holding the figures you used")
    expected = [trace(documents, c) for c in task.expected_citations]
    covered = matched(traces, expected)
    if task.kind == "value":
        assert task.answer is not None
        wanted = number(task.answer)
        assert wanted is not None
        given = number(answer.value) if answer.value is not None else None
        if given is None:
            reasons.append("the answer must be one number, such as 12.34")
        elif not close(given, wanted, task.tolerance):
            reasons.append("the value is not right")
        if covered < len(expected) or len(traces) > len(expected):
            reasons.append(
                f"the citations are not the figures the answer needs ({covered} of "
                f"{len(expected)} found, {len(traces)} cited)"
            )
        try:
            problem = _calculation_problem(answer.calculation, traces, wanted, task.tolerance)
        except CalcTooLarge as exc:
            problem = f"calculation refused: {exc}"
        if problem:
            reasons.append(problem)
    else:
        offered = {key(c) for c in task.candidates}
        items = answer.items or []
        keys = [key(i) for i in items]
        unknown = [i for i, k in zip(items, keys, strict=True) if k not in offered]
        if unknown:
            reasons.append(f"not among the candidates: {', '.join(map(repr, unknown[:5]))}")
        if len(set(keys)) != len(keys) or set(keys) != {key(i) for i in task.items}:
            reasons.append("the set of items is not right")
        if covered < len(expected):
            reasons.append(
                f"the citations do not show the figures at issue ({covered} of "
                f"{len(expected)} found)"
            )
        if len(traces) > len(expected) + EXTRA_CITATIONS:
            reasons.append(f"too many citations ({len(traces)}): cite the figures at issue")
    return Verdict(not reasons, traces, reasons)


def _show(value: Fraction) -> str:
    try:
        return f"{float(value):.6g}"
    except OverflowError:
        return "a number too large to show"


def _calculation_problem(
    calculation: str | None, traces: Sequence[Trace], wanted: Fraction, tolerance: float
) -> str:
    """What is wrong with the calculation ('' when nothing); CalcTooLarge past the bounds."""
    if calculation is None or not calculation.strip():
        return "no calculation: state it over the cited values, e.g. (c2 - c1) / c1 * 100"
    values = [t.value if isinstance(t.value, Fraction) else None for t in traces]
    try:
        tree = compile_calculation(calculation, values)
        result = run_calculation(tree, values)
        unused = unused_citations(tree, values)
    except CalcTooLarge:
        raise
    except CalcError as exc:
        return f"calculation: {exc}"
    if not close(result, wanted, tolerance):
        return f"the calculation gives {_show(result)}, which is not the answer"
    if unused:
        named = ", ".join(f"c{i + 1}" for i in unused)
        return f"the calculation does not depend on {named}: every cited value must enter it"
    return ""
