"""The math judge against math-verify's own verdicts, on CHAMP's answers given back perturbed.

Each CHAMP answer (`champ()`) is given back in equivalent forms and in wrong ones
(`perturbations`). honing judges every pair as the math environment does (`math_equal_many`, in
the sandbox); math-verify judges it in this process, as its README shows (`verify(parse(gold),
parse(given))`, the gold read as `champ()` reads it, in `$...$`). Where the two differ, the
difference must be one honing intends (`INTENDED`: its judge is stricter on purpose, or reads a
bare answer as math) or an allow-listed quirk (`ALLOWED`); elsewhere they must agree. The default
run checks the most telling forms of every answer (`CORE`); the slow one, every form.
docs/envs.md ("The math judge against math-verify") keeps the figures that `pytest -s` prints.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import pytest

from honing.domains.math.judge import Verdict, final_value, math_equal_many, states_a_value
from honing.domains.math.sets import champ
from honing.domains.math.task import MathTask
from honing.sandbox import SandboxPool

pytestmark = pytest.mark.asyncio(loop_scope="module")

AGREEMENT = 0.999  # outside the intended differences (the BFCL check's bar)

INTENDED = {
    "formula": "a formula where a number is expected (`119 + 120`, `2*60`, `478/2`): honing does "
    "not evaluate it for the model; math-verify does",
    "words": "words around an expected number (`The answer is 239.`, `240 or 239`): honing takes "
    "the value alone (bare, boxed or after the last `=`); math-verify takes the last number of "
    "the text",
    "two answers": "several different boxed values (`\\boxed{2}, \\boxed{001}, \\boxed{000}`): "
    "honing takes none; math-verify joins them with commas and reads one number (2,001,000)",
    "bare math": "an answer without math delimiters ($, \\(, \\[, \\boxed): honing reads all of it "
    "as math, in $...$; math-verify's default reads only a number or a lone \\frac in plain text "
    "(`2^(n-1)` as 2): on the answer in $...$ it gives honing's verdict",
}
# (expected, given) → why honing and math-verify may differ on it; each entry costs agreement
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Pair:
    expected: str
    given: str
    form: str  # which perturbation: "boxed", "plus-one", ...


# -- the perturbations ------------------------------------------------------------------------
_INTEGER = re.compile(r"-?\d+")
_FRACTION = re.compile(r"(-?)(\d+)/(\d+)")
_WORD = re.compile(r"[A-Za-z]{3,}")
_FUNCTIONS = {"sqrt", "floor"}


def shape(expected: str) -> str:
    """integer, fraction, expression (math in CHAMP's plain syntax) or prose (words around it)."""
    if _INTEGER.fullmatch(expected):
        return "integer"
    if _FRACTION.fullmatch(expected):
        return "fraction"
    words = [w for w in _WORD.findall(expected) if w not in _FUNCTIONS]
    return "prose" if words or "±" in expected or "..." in expected else "expression"


def _top_level(text: str, separators: str) -> list[str]:
    """`text` cut before each separator outside brackets (a part starts with its separator)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if depth == 0 and char in separators and i > start:
            parts.append(text[start:i])
            start = i
    return [*parts, text[start:]]


def reordered(expr: str) -> str | None:
    """`expr` with the terms of its sum (or of its first group) or its factors reversed."""
    terms = _top_level(expr, "+-")
    if len(terms) > 1:
        return "".join(t if t[0] in "+-" else "+" + t for t in reversed(terms)).removeprefix("+")
    group = re.fullmatch(r"\(([^()]*)\)(.*)", expr)
    if group and (inner := reordered(group[1])):
        return f"({inner}){group[2]}"
    factors = re.findall(r"\([^()]*\)(?:\^\w+)?", expr)
    if len(factors) > 1 and "".join(factors) == expr:
        return "".join(reversed(factors))
    return None


def latex(expr: str) -> str:
    """CHAMP's plain syntax as LaTeX: `sqrt(3)` → `\\sqrt{3}`, `(a)/(b)` → `\\frac{a}{b}`, …"""
    text = re.sub(r"sqrt\(([^()]*)\)", r"\\sqrt{\1}", expr)
    text = re.sub(r"\^\(([^()]*)\)", r"^{\1}", text)
    split = _top_level(text, "/")
    if len(split) == 2 and len(_top_level(split[0], "+-")) == 1:
        top, bottom = (_unwrap(part) for part in (split[0], split[1][1:]))
        text = f"\\frac{{{top}}}{{{bottom}}}"
    return text.replace("*", " \\cdot ")


def _unwrap(text: str) -> str:
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text


def _bump(text: str) -> str | None:
    """`text` with its first digit one higher (a 9 becomes 8): one coefficient changed."""
    found = re.search(r"\d", text)
    if found is None:
        return None
    digit = int(found[0])
    return f"{text[: found.start()]}{digit + 1 if digit < 9 else 8}{text[found.end() :]}"


Forms = dict[str, str]


def _wrapped(value: str) -> Forms:
    """The same value, written as answers write it."""
    return {
        "plain": value,
        "boxed": f"\\boxed{{{value}}}",
        "boxed-twice": f"\\boxed{{{value}}}, that is \\boxed{{ {value} }}",
        "sentence": f"The answer is {value}.",
        "boxed-sentence": f"So the answer is $\\boxed{{{value}}}$.",
        "spaces": f"  {value}  ",
        "dollars": f"${value}$",
        "inline-math": f"\\({value}\\)",
        "display-math": f"\\[ {value} \\]",
        "assignment": f"x = {value}",
    }


def _wrong(value: str, other: str) -> Forms:
    """Answers that never state `value` alone (`other` is a wrong value)."""
    return {
        "boxed-other": f"\\boxed{{{other}}}",
        "two-boxed": f"\\boxed{{{other}}} or \\boxed{{{value}}}",
        "two-values": f"{other} or {value}",
        "empty": "",
        "garbage": "\\frac{1}{",
        "garbage-braces": "}{\\sqrt",
    }


def integer_forms(expected: str) -> Forms:
    n = int(expected)
    forms = _wrapped(expected) | {"trailing-zero": f"{n}.0"}
    forms["leading-zero"] = f"-0{-n}" if n < 0 else f"0{n}"
    if abs(n) >= 1000:
        forms["thousands"] = f"{n:,}"
        # each group of three digits boxed: three answers (math-verify joins them: one number)
        forms["boxed-groups"] = ", ".join(f"\\boxed{{{group}}}" for group in f"{n:,}".split(","))
    forms |= {"plus-one": str(n + 1), "minus-one": str(n - 1)}
    if n:
        forms |= {"sign": str(-n), "double": str(2 * n)}
    digits = str(abs(n))
    if len(digits) > 1 and digits[-1] != digits[-2]:
        forms["digit-swap"] = expected[:-2] + expected[-1] + expected[-2]
    half = n // 2
    forms["formula-sum"] = f"{half} + {n - half}"
    divisor = next((d for d in range(2, int(abs(n) ** 0.5) + 1) if n % d == 0), None)
    if divisor:
        forms["formula-product"] = f"{divisor}*{n // divisor}"
        forms["formula-times"] = f"${divisor} \\times {n // divisor}$"
    forms |= {"formula-division": f"{2 * n}/2", "unit-fraction": f"{n}/1"}
    return forms | _wrong(expected, str(n + 1))


def fraction_forms(expected: str) -> Forms:
    found = _FRACTION.fullmatch(expected)
    assert found is not None
    sign, p, q = found.groups()
    value = Fraction(int(sign + p), int(q))
    frac = f"{sign}\\frac{{{p}}}{{{q}}}"
    forms = _wrapped(expected) | {
        "frac": frac,
        "dfrac": f"{sign}\\dfrac{{{p}}}{{{q}}}",
        "boxed-frac": f"\\boxed{{{frac}}}",
        "dollars-frac": f"${frac}$",
        "unreduced": f"{sign}{2 * int(p)}/{2 * int(q)}",
    }
    if _terminates(value.denominator):
        forms["decimal"] = _decimal(value)
    else:
        forms["rounded-decimal"] = f"{float(value):.4f}"
    half = f"{sign}\\frac{{{p}}}{{{2 * int(q)}}}"
    forms |= {
        "numerator-plus-one": f"{sign}{int(p) + 1}/{q}",
        "denominator-plus-one": f"{sign}{p}/{int(q) + 1}",
        "sign": f"{'' if sign else '-'}{p}/{q}",
        "inverse": f"{sign}{q}/{p}",
        "double": str(2 * value),
        "formula-sum": f"${half} + {half}$",
        "formula-product": f"${sign}{p} \\cdot \\frac{{1}}{{{q}}}$",
    }
    return forms | _wrong(expected, str(value + Fraction(1, int(q) + 1)))


def expression_forms(expected: str) -> Forms:
    forms = _wrapped(expected) | {"latex": latex(expected),
                                  "dollars-latex": f"${latex(expected)}$"}  # fmt: skip
    if (swapped := reordered(expected)) is not None:
        forms |= {"reordered": swapped, "dollars-reordered": f"${swapped}$"}
    forms |= {"sign": f"$-({expected})$", "double": f"$2({expected})$"}
    if (bumped := _bump(expected)) is not None:
        forms |= {"coefficient": bumped, "dollars-coefficient": f"${bumped}$"}
    return forms | _wrong(expected, f"2({expected})")


def prose_forms(expected: str) -> Forms:
    kept = ("plain", "boxed", "dollars", "spaces", "sentence")
    forms = {form: given for form, given in _wrapped(expected).items() if form in kept}
    if (bumped := _bump(expected)) is not None:
        forms["coefficient"] = bumped
    return forms | {k: v for k, v in _wrong(expected, "1234").items() if k in
                    ("boxed-other", "empty", "garbage")}  # fmt: skip


def _terminates(denominator: int) -> bool:
    """Whether a fraction with this (reduced) denominator is a finite decimal: only 2s and 5s."""
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    return denominator == 1


def _decimal(value: Fraction) -> str:
    text = f"{float(value):.10f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


FORMS: dict[str, Callable[[str], Forms]] = {
    "integer": integer_forms,
    "fraction": fraction_forms,
    "expression": expression_forms,
    "prose": prose_forms,
}
# The default run: every form of a number (most are judged on the host, cheaply); of an
# expression, the forms that tell the judges apart and one more, taken in turn, so that every
# form is met on some answer; of prose, the plain answer. A sandbox comparison costs seconds.
CORE: dict[str, tuple[set[str], int] | None] = {  # shape → (forms, how many others) or every form
    "integer": None,
    "fraction": None,
    "expression": ({"plain"}, 1),
    "prose": ({"plain"}, 0),
}


def perturbations(expected: str, turn: int | None = None) -> list[Pair]:
    """Every form of `expected` (turn None), or its core forms and the turn-th of the others."""
    forms = FORMS[shape(expected)](expected)
    if turn is not None and (core := CORE[shape(expected)]) is not None:
        kept, extra = set(core[0]), core[1]
        others = [form for form in forms if form not in kept]
        kept |= {others[(turn * extra + i) % len(others)] for i in range(extra)}
        forms = {form: given for form, given in forms.items() if form in kept}
    return [Pair(expected, given, form) for form, given in forms.items()]


# -- the two judges ---------------------------------------------------------------------------
def math_verify_equal(expected: str, given: str) -> bool:
    """math-verify's verdict, as its README calls it (its timeouts off: no signals in a thread)."""
    from math_verify import parse, verify

    gold = parse(f"${expected}$", parsing_timeout=None)
    return bool(verify(gold, parse(given, parsing_timeout=None), timeout_seconds=None))


_DELIMITERS = ("$", "\\(", "\\[", "\\boxed")
_ARITHMETIC = re.compile(r".[-+*/^]|\\times|\\cdot|\\div|\\frac")


def intended(pair: Pair, honing: bool, reference: bool) -> str | None:
    """The intended difference that explains honing's verdict differing from math-verify's."""
    if reference and not honing and not states_a_value(pair.expected, pair.given):
        # honing's value gate refused the answer: why?
        if len(set(re.findall(r"\\boxed\{([^{}]*)\}", pair.given.replace(" ", "")))) > 1:
            return "two answers"
        stated = final_value(pair.given)
        if re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", stated)):
            return "words"
        if _ARITHMETIC.search(stated):
            return "formula"
    bare = not any(mark in pair.given for mark in _DELIMITERS)
    if bare and math_verify_equal(pair.expected, f"${pair.given}$") == honing:
        return "bare math"
    return None


async def compare(pool: SandboxPool, every: bool) -> None:
    answers = list(dict.fromkeys(t.answer for t in champ().tasks if isinstance(t, MathTask)))
    turns: Counter[str] = Counter()
    pairs = []
    for answer in answers:
        pairs += perturbations(answer, None if every else turns[shape(answer)])
        turns[shape(answer)] += 1
    references = asyncio.to_thread(lambda: [math_verify_equal(p.expected, p.given) for p in pairs])
    verdicts: list[Verdict]
    verdicts, reference = await asyncio.gather(
        math_equal_many(pool, [(p.expected, p.given) for p in pairs]), references
    )
    problems = [(p, v.detail) for p, v in zip(pairs, verdicts, strict=True) if v.problem]
    assert not problems, problems[:5]
    classes: Counter[str] = Counter()
    unexplained = []
    for pair, verdict, mv in zip(pairs, verdicts, reference, strict=True):
        if verdict.equal == mv:
            continue
        why = ALLOWED.get((pair.expected, pair.given)) and "allowed"
        why = why or intended(pair, verdict.equal, mv)
        classes[why or "unexplained"] += 1
        if why is None:
            unexplained.append((pair, f"honing {verdict.equal}, math-verify {mv}"))
    outside = len(pairs) - sum(classes[name] for name in INTENDED)
    agreement = (outside - classes["allowed"] - classes["unexplained"]) / outside
    overall = 1 - sum(classes.values()) / len(pairs)
    print(f"\nmath judge vs math-verify: {len(pairs)} pairs on {len(answers)} CHAMP answers, "
          f"agreement {agreement:.2%} on the {outside} outside the intended differences "
          f"({overall:.1%} on all); "
          f"differences: {dict(classes.most_common()) or 'none'}")  # fmt: skip
    assert not unexplained, unexplained[:10]
    assert agreement >= AGREEMENT
    # every answer was checked, and every intended difference was met
    assert {p.expected for p in pairs} == set(answers)
    assert set(classes) - {"allowed"} == set(INTENDED)


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool  # one checker pool (and math-verify runtime start) for the module


async def test_math_delimiters_other_than_dollars_hold_an_answer(pool: SandboxPool) -> None:
    """\\(…\\) and \\[…\\] wrap an answer as $…$ does. They used to hide an expected number
    from the value gate (`\\(391\\)` was not a number), and an expression from math-verify
    (`\\[ x^2 + 2x + 1 \\]` was read in $…$ again, as 1)."""
    right = [
        ("391", "\\(391\\)"),
        ("\\frac{1}{2}", "\\[ 0.5 \\]"),
        ("-1/2", "\\(-\\dfrac{1}{2}\\)"),
        ("(x+1)^2", "\\[ x^2 + 2x + 1 \\]"),
        ("(x+1)^2", "\\(x^2+2x+1\\)"),
    ]
    wrong = [("391", "\\(390\\)"), ("391", "\\(17 \\times 23\\)"), ("(x+1)^2", "\\[ x^2 + 1 \\]")]
    found = await math_equal_many(pool, right + wrong)
    assert [v.equal for v in found] == [True] * len(right) + [False] * len(wrong)
    assert [final_value(given) for _, given in right[:3]] == ["391", "0.5", "-\\frac{1}{2}"]


async def test_the_judge_agrees_with_math_verify_on_champ(pool: SandboxPool) -> None:
    await compare(pool, every=False)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # about 5 minutes on 2 shared cores
async def test_the_judge_agrees_with_math_verify_on_every_perturbation(pool: SandboxPool) -> None:
    await compare(pool, every=True)
