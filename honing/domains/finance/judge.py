"""Judging a finance answer: the value or the set of items, the citations, the calculation.

    verdict = judge(task, parse_documents(task.documents), parse_submission(arguments))
    verdict.passed, verdict.cited_ok, verdict.reasons

Outcome 1 needs all of: the value one number (`read_value`) within the task's tolerance (or
exactly the task's items); every citation holding (`cite.trace`); the citations covering the
expected ones, one to one, with nothing more for a value (an items answer may add up to
`EXTRA_CITATIONS`); and, for a value, a calculation over the cited values (c1, c2, … in citation
order) that passes `calculation_problem`: it gives the answer, every part over cited values
changes with them, the result moves with each one, and it is the formula of the task's reference
(when that gives one) at randomly moved cited values. Host-side, bounded and total: whatever an
answer holds is a reason, never an exception. Not covered: without a reference calculation, a
formula that meets the answer only at the cited values (docs/envs.md, "Reward hacking").
"""

from __future__ import annotations

import ast
import json
import math
import random
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from pydantic import ValidationError

from honing.domains.finance.cite import Citation, Trace, same_source, trace
from honing.domains.finance.docs import MAX_LINES, Document, key, number
from honing.domains.finance.task import FinanceTask

MAX_CITATIONS = 64
EXTRA_CITATIONS = 4  # an items answer may cite this many figures beyond the expected ones
MAX_VALUE_CHARS = 200
MAX_CALC_CHARS = 400
MAX_NODES = 200
MAX_BITS = 2048
MAX_CONSTANT = 1000
MAX_EXPONENT = 12
POINTS = 3  # random points at which every cited value is moved at once
MOVES = 2  # of those points, at which each cited value is also moved alone
SEED = 37  # the same points for every answer: a verdict can be reproduced
ARGUMENTS = ("value", "items", "citations", "calculation")
_NUMBERS = re.compile(r"\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Submission:
    """The `answer` tool's arguments, checked for shape."""

    citations: list[Citation]
    value: str | None = None
    items: list[str] | None = None
    calculation: str | None = None


def parse_submission(arguments: Mapping[str, Any]) -> Submission:
    """The answer's arguments checked for shape (names, types, counts, line numbers); ValueError
    naming the argument when one is malformed. The value is kept whole, as written: what it says
    is the judge's to read (`read_value`)."""
    unknown = sorted(str(name) for name in set(arguments) - set(ARGUMENTS))
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
            citation = Citation.model_validate(one)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(
                f"citations[{i}]{'.' + where if where else ''}: {first['msg']}"
            ) from None
        if citation.line is not None and citation.line > MAX_LINES:
            raise ValueError(f"citations[{i}].line: a document has at most {MAX_LINES} lines")
        citations.append(citation)
    value = arguments.get("value")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError("'value' must be a number or a string")
        if isinstance(value, int) and value.bit_length() > 4 * MAX_VALUE_CHARS:
            raise ValueError(f"'value' must be one number of at most {MAX_VALUE_CHARS} characters")
        value = value if isinstance(value, str) else repr(value)
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


def read_value(text: str) -> Fraction | str:
    """The answer's value: one number as written ("13.6", "46,310", "12.9%", "$48.2"), or why it
    is not one: longer than `MAX_VALUE_CHARS`, several values (a second number anywhere, after
    any whitespace), or no number at all."""
    if len(text) > MAX_VALUE_CHARS:
        return f"the value is {len(text)} characters long: give one number, such as 12.34"
    found = _NUMBERS.findall(text)
    if len(found) > 1:
        shown = ", ".join(n[:20] for n in found[:3]) + (", …" if len(found) > 3 else "")
        return f"several values ({shown}): the answer is one number"
    given = number(text)
    return given if given is not None else "the answer must be one number, such as 12.34"


# -- the calculation -----------------------------------------------------------------------


class CalcError(ValueError):
    """The calculation is not an arithmetic expression over the cited values."""


class CalcTooLarge(CalcError):
    """The calculation goes past the judge's bounds (its size, its numbers' size)."""


Node = tuple[Any, ...]
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


def compile_calculation(expression: str, values: Sequence[Fraction | None]) -> Node:
    """The calculation as a tree over the citations' indices: ("var", i), ("const", v),
    ("op", symbol, left, right), ("neg", x). A literal equal to a cited value is that citation;
    other literals are whole numbers up to `MAX_CONSTANT`; an exponent holds no cited value."""
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
        constant = node.value if isinstance(node, ast.Constant) else None
        if isinstance(constant, int | float) and not isinstance(constant, bool):
            if isinstance(constant, float) and not math.isfinite(constant):
                raise CalcError(f"{ast.unparse(node)[:60]} is not a finite number")
            # an int as it is; a float as written (0.1 is 1/10)
            literal = Fraction(constant) if isinstance(constant, int) else Fraction(repr(constant))
            for i, v in enumerate(values):
                if v is not None and v == literal:
                    return ("var", i)
            if literal.denominator == 1 and abs(literal) <= MAX_CONSTANT:
                return ("const", literal)
            raise CalcError(
                f"{ast.unparse(node)[:60]} is neither a cited value nor a whole number up "
                f"to {MAX_CONSTANT}: name cited values c1, c2, …"
            )
        if isinstance(node, ast.Name):
            name = node.id
            if name[:1] == "c" and name[1:].isdecimal() and 1 <= int(name[1:]) <= len(values):
                index = int(name[1:]) - 1
                if values[index] is None:
                    raise CalcError(f"{name} is not a number")
                return ("var", index)
            raise CalcError(
                f"unknown name {name[:60]!r}: the cited values are c1 to c{len(values)}"
            )
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = build(node.left), build(node.right)
            if isinstance(node.op, ast.Pow) and _cites(right):
                raise CalcError(
                    f"the exponent of {ast.unparse(node)[:60]} holds a cited value: an exponent "
                    f"is a whole number from -{MAX_EXPONENT} to {MAX_EXPONENT}"
                )
            return ("op", _OPS[type(node.op)], left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            inner = build(node.operand)
            return ("neg", inner) if isinstance(node.op, ast.USub) else inner
        raise CalcError(f"not allowed: {ast.unparse(node)[:60]} (use + - * / ** and parentheses)")

    return build(tree)


def run_calculation(tree: Node, values: Sequence[Fraction | None]) -> Fraction:
    """The calculation's exact value for `values`; CalcError when it has none, CalcTooLarge when
    a number on the way goes past `MAX_BITS`."""
    return _run(tree, values, [])


def _run(tree: Node, values: Sequence[Fraction | None], parts: list[Fraction]) -> Fraction:
    """`run_calculation`, appending the value of every part to `parts` (in `parts_of`'s order)."""
    kind = tree[0]
    if kind == "var":
        found = values[tree[1]]
        if found is None:
            raise CalcError(f"c{tree[1] + 1} is not a number")
        out = found
    elif kind == "const":
        out = Fraction(tree[1])
    elif kind == "neg":
        out = -_run(tree[1], values, parts)
    else:
        out = _apply(tree[1], _run(tree[2], values, parts), _run(tree[3], values, parts))
    parts.append(out)
    return out


def _apply(symbol: str, left: Fraction, right: Fraction) -> Fraction:
    """One operation, exactly, within the judge's bounds."""
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


def parts_of(tree: Node) -> list[Node]:
    """Every part of the calculation, itself last, in the order `run_calculation` finishes
    them."""
    if tree[0] in ("var", "const"):
        return [tree]
    if tree[0] == "neg":
        return [*parts_of(tree[1]), tree]
    return [*parts_of(tree[2]), *parts_of(tree[3]), tree]


def show_calculation(tree: Node) -> str:
    """The calculation written back: c1, c2, … for the cited values, every operation inside
    another in parentheses."""

    def show(node: Node, inner: bool) -> str:
        if node[0] == "var":
            return f"c{node[1] + 1}"
        if node[0] == "const":
            return str(node[1])
        text = (
            f"-{show(node[1], True)}"
            if node[0] == "neg"
            else f"{show(node[2], True)} {node[1]} {show(node[3], True)}"
        )
        return f"({text})" if inner else text

    return show(tree, False)


def _cites(tree: Node) -> bool:
    """Whether a cited value is part of `tree`."""
    return any(part[0] == "var" for part in parts_of(tree))


def _factor(rng: random.Random) -> Fraction:
    """A factor from 0.5 to 1.5, never 1, in millionths."""
    step = rng.randint(1, 500_000) * rng.choice((-1, 1))
    return Fraction(1_000_000 + step, 1_000_000)


def _move(value: Fraction, rng: random.Random) -> Fraction:
    """`value` moved by a random factor (a zero to a whole number up to 1000)."""
    return value * _factor(rng) if value else Fraction(rng.randint(1, 1000))


def moved_values(values: Sequence[Fraction | None], point: int) -> list[Fraction | None]:
    """Every cited value moved at once, each by its own factor: the `point`-th of the judge's
    random points (the same for every answer)."""
    rng = random.Random(SEED + point)
    return [None if v is None else _move(v, rng) for v in values]


def _at_point(tree: Node, values: Sequence[Fraction | None], point: int) -> list[Fraction]:
    """The value of every part at `moved_values(values, point)`; CalcError saying the
    calculation fails once the cited values change."""
    parts: list[Fraction] = []
    try:
        _run(tree, moved_values(values, point), parts)
    except CalcTooLarge:
        raise
    except CalcError as exc:
        raise CalcError(
            f"it fails when the cited values change ({exc}): a calculation holds for any values"
        ) from None
    return parts


def constant_parts(tree: Node, values: Sequence[Fraction | None]) -> list[Node]:
    """The parts over cited values that keep their value when every cited value moves at once
    (at `POINTS` random points): `c1 / c1`, `c1 - c1`, `0 * c1`, `c1 ** 0`, innermost first.
    CalcError when the calculation fails at a point."""
    parts = parts_of(tree)
    base: list[Fraction] = []
    _run(tree, values, base)
    still = [i for i, part in enumerate(parts) if _cites(part)]
    for point in range(1, POINTS + 1):
        moved = _at_point(tree, values, point)
        still = [i for i in still if moved[i] == base[i]]
    return [parts[i] for i in still]


def unused_citations(tree: Node, values: Sequence[Fraction | None]) -> list[int]:
    """The indices of the citations the result does not move with: each cited value is moved
    alone, to its value at each of the first `MOVES` random points, and each time the result
    must change. CalcError, naming the value, when the calculation fails there: it must hold for
    any cited values."""
    base = run_calculation(tree, values)
    points = [moved_values(values, point) for point in range(1, MOVES + 1)]
    out = []
    for i, value in enumerate(values):
        if value is None:
            out.append(i)
            continue
        results = []
        for point in points:
            moved = list(values)
            moved[i] = point[i]
            try:
                results.append(run_calculation(tree, moved))
            except CalcTooLarge:
                raise
            except CalcError as exc:
                raise CalcError(
                    f"it fails when c{i + 1} changes ({exc}): a calculation holds for any values"
                ) from None
        if base in results:
            out.append(i)
    return out


@dataclass(frozen=True)
class Formula:
    """A calculation compiled over the values of its citations (`traces`, in order): the task
    reference's, to compare an answer's with."""

    tree: Node
    traces: list[Trace]

    @property
    def values(self) -> list[Fraction | None]:
        return cited_numbers(self.traces)


def cited_numbers(traces: Sequence[Trace]) -> list[Fraction | None]:
    """The cited values a calculation names c1, c2, …: None for a citation that is not a
    number."""
    return [t.value if isinstance(t.value, Fraction) else None for t in traces]


def reference_formula(task: FinanceTask, documents: Mapping[str, Document]) -> Formula | None:
    """The calculation of the task's reference over the reference's own citations; None when
    the reference gives none that compiles (its own check, `honing tasks check`, says why)."""
    if task.reference is None:
        return None
    try:
        arguments = json.loads(task.reference)
        if not isinstance(arguments, dict):
            return None
        submission = parse_submission(arguments)
        if submission.calculation is None:
            return None
        traces = [trace(documents, c) for c in submission.citations]
        return Formula(compile_calculation(submission.calculation, cited_numbers(traces)), traces)
    except (ValueError, RecursionError):  # not JSON, malformed, a calculation that is refused
        return None


def formula_problem(
    tree: Node,
    values: Sequence[Fraction | None],
    reference: Formula,
    pairs: Mapping[int, int],
    tolerance: float,
) -> str:
    """'' when the calculation is the reference's formula: at `POINTS` random points (every
    cited value moved at once, each reference value with the answer's value it is paired with
    by `pairs`) both give the same result within the tolerance; else what differs. A point
    where the reference itself has no value is skipped; CalcError when the answer has none."""
    for point in range(1, POINTS + 1):
        moved = moved_values(values, point)
        theirs = list(reference.values)
        for mine, its in pairs.items():
            theirs[its] = moved[mine]
        try:
            expected = run_calculation(reference.tree, theirs)
        except CalcError:
            continue
        got = _at_point(tree, values, point)[-1]
        if not close(got, expected, tolerance):
            return (
                "the calculation is not the formula the question asks for: it meets the "
                f"answer at these figures, but with other figures it gives {_show(got)} where "
                f"the question's formula gives {_show(expected)}"
            )
    return ""


def calculation_problem(
    calculation: str | None,
    values: Sequence[Fraction | None],
    wanted: Fraction,
    tolerance: float,
    reference: Formula | None = None,
    pairs: Mapping[int, int] | None = None,
) -> str:
    """What is wrong with the calculation over `values` ('' when nothing), the rules in order:
    it compiles and gives `wanted`; no part over cited values is constant; the result moves
    with each cited value; and, when `reference` is given with `pairs` (answer citation ->
    reference citation) pairing all of both, it is the reference's formula. Whatever the
    calculation raises, past the judge's bounds included, is a reason, never an exception."""
    if calculation is None or not calculation.strip():
        return "no calculation: state it over the cited values, e.g. (c2 - c1) / c1 * 100"
    try:
        tree = compile_calculation(calculation, values)
        result = run_calculation(tree, values)
        if not close(result, wanted, tolerance):
            return f"the calculation gives {_show(result)}, which is not the answer"
        constant = constant_parts(tree, values)
        if constant:
            return (
                f"the calculation's part {show_calculation(constant[0])[:80]} does not change "
                "with the cited values: every part over cited values must"
            )
        unused = unused_citations(tree, values)
        if unused:
            named = ", ".join(f"c{i + 1}" for i in unused)
            return f"the calculation does not depend on {named}: every cited value must enter it"
        if reference is not None and pairs is not None and _pairs_all(pairs, values, reference):
            return formula_problem(tree, values, reference, pairs, tolerance)
    except CalcTooLarge as exc:
        return f"calculation refused: {exc}"
    except CalcError as exc:
        return f"calculation: {exc}"
    except (ArithmeticError, ValueError, RecursionError, MemoryError) as exc:
        return f"calculation refused: {type(exc).__name__}"
    return ""


def _pairs_all(pairs: Mapping[int, int], values: Sequence[object], reference: Formula) -> bool:
    """Whether `pairs` pairs every answer citation with a reference citation, one to one."""
    everyone = sorted(pairs) == list(range(len(values)))
    return everyone and sorted(pairs.values()) == list(range(len(reference.traces)))


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


def pairing(given: Sequence[Trace], expected: Sequence[Trace]) -> dict[int, int]:
    """The expected citation each given one covers (given index -> expected index), each used
    once: a maximum bipartite matching."""
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

    for g in range(len(given)):
        place(g, set())
    return {g: e for e, g in owner.items()}


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
    pairs = pairing(traces, expected)
    covered = len(pairs)
    if task.kind == "value":
        assert task.answer is not None
        wanted = number(task.answer)
        assert wanted is not None
        given = read_value(answer.value) if answer.value is not None else None
        if not isinstance(given, Fraction):
            reasons.append(given or "the answer must be one number, such as 12.34")
        elif not close(given, wanted, task.tolerance):
            reasons.append("the value is not right")
        if covered < len(expected) or len(traces) > len(expected):
            reasons.append(
                f"the citations are not the figures the answer needs ({covered} of "
                f"{len(expected)} found, {len(traces)} cited)"
            )
        reference = reference_formula(task, documents)
        theirs = pairing(reference.traces, expected) if reference is not None else {}
        owner = {e: j for j, e in theirs.items()}
        to_reference = {i: owner[e] for i, e in pairs.items() if e in owner}
        problem = calculation_problem(
            answer.calculation,
            cited_numbers(traces),
            wanted,
            task.tolerance,
            reference,
            to_reference,
        )
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
    """A result as a short decimal; one too large for a float by its size."""
    try:
        return f"{float(value):.6g}"
    except (OverflowError, ValueError):
        digits = abs(value.numerator).bit_length() - value.denominator.bit_length()
        return f"a number of about {round(digits * math.log10(2))} digits"
