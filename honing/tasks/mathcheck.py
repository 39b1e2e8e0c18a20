"""Math answers compared inside the sandbox, with math-verify (symbolic and numeric equality).

math-verify parses text with sympy, whose parser evaluates Python: a model's answer must never be
parsed on the host. Comparisons therefore run as small programs in a sibling pool of the caller's
pool whose runtime is math-verify as installed beside honing (built offline on first use, and
preloaded so a comparison costs milliseconds, not a sympy import).

    equal = await math_equal(pool, "391", "17*23 = 391")  # True, False, or None (no verdict)

An answer is a value, not a formula to evaluate: when the expected answer is a number, the given
one must state a number too (its last \\boxed{...}, or what follows its last "="), so `483*446`,
`483 \\times 446` or `215000 + 418` never earn the answer to "Multiply 483 by 446"; a fraction is
a value only where a fraction (or a decimal) is expected. An expected expression (`(x+1)^2`) is
compared symbolically, as math-verify does. The gate is regular expressions on the host: no
parser sees model text outside the sandbox. Two integers (the gate's digit strings) are compared
on the host, digit by digit, as math-verify would conclude, without a sandbox run.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from honing.sandbox import ExecRequest, ExecStatus, RuntimeStore, SandboxPool

RUNTIME = "honing-math"
DISTRIBUTIONS = ["math-verify"]
PRELOAD = ["math_verify", "sympy"]
TIMEOUT_S = 20.0

PROGRAM = """\
import json, sys
from math_verify import parse, verify

def read(text):
    wrapped = text if ("$" in text or "\\\\boxed" in text) else "$" + text + "$"
    return parse(wrapped) or parse(text)

pairs = json.loads(sys.stdin.read())
out = []
for expected, given in pairs:
    gold = read(expected)
    out.append(bool(gold) and bool(verify(gold, read(given))))
print(json.dumps(out))
"""


NumberKind = Literal["integer", "decimal", "fraction"]
_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
_UNWRAP = [  # LaTeX that does not change the value: text wrappers, spaces, sizing
    (re.compile(r"\\(?:text|mathrm|textbf|mathbf)\{([^{}]*)\}"), r"\1"),
    (re.compile(r"\\[,;:! ]|~|\{,\}|\\left|\\right|\\displaystyle|\$"), ""),
    (re.compile(r"\\[dt]frac"), r"\\frac"),
]
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)"  # 215418 or 215,418
_KINDS: list[tuple[NumberKind, re.Pattern[str]]] = [
    ("integer", re.compile(rf"[-+]?{_DIGITS}")),
    ("decimal", re.compile(rf"[-+]?(?:{_DIGITS}?\.\d+|{_DIGITS}\.)")),
    ("fraction", re.compile(r"[-+]?(?:\d+/\d+|\\frac\{[-+]?\d+\}\{\d+\})")),
]


def final_value(text: str) -> str:
    """What an answer states as its value: its last \\boxed{...} (else the whole text), after its
    last "=", without LaTeX wrappers, spaces, a trailing period or enclosing parentheses."""
    boxed = _BOXED.findall(text)
    value = str(boxed[-1]) if boxed else text
    for pattern, replacement in _UNWRAP:
        value = pattern.sub(replacement, value)
    value = value.rsplit("=", 1)[-1].strip().rstrip(".").replace(" ", "")
    while value.startswith("(") and value.endswith(")"):
        value = value[1:-1]
    return value.removesuffix("\\%").removesuffix("%")


def number_kind(text: str) -> NumberKind | None:
    """The kind of number `text` states (`final_value`), or None for anything else: a formula,
    an expression, prose."""
    value = final_value(text)
    return next((kind for kind, pattern in _KINDS if pattern.fullmatch(value)), None)


def states_a_value(expected: str, given: str) -> bool:
    """Whether `given` may be compared with `expected` at all: always for an expected
    expression; for an expected number, only a number (a fraction only where a fraction or a
    decimal is expected: `8/2` is a division, not the integer 4)."""
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


async def math_equal_many(pool: SandboxPool, pairs: list[tuple[str, str]]) -> list[bool] | None:
    """For each (expected, given): whether they state the same value (a formula where a number
    is expected never does). None if the sandbox failed. Two integers are compared on the host
    (`integer_verdict`, what math-verify concludes for them); the rest run in the sandbox."""
    verdicts: list[bool | None] = [
        integer_verdict(e, g) if states_a_value(e, g) else False for e, g in pairs
    ]
    gated = [
        (expected, _comparable(given) if number_kind(expected) else given)
        for (expected, given), verdict in zip(pairs, verdicts, strict=True)
        if verdict is None
    ]
    if gated:
        checker = await checker_pool(pool)
        result = await checker.run(
            ExecRequest(code=PROGRAM, stdin=json.dumps(gated), timeout_s=TIMEOUT_S, memory_mb=1024)
        )
        if result.status in (ExecStatus.TIMEOUT, ExecStatus.MEMORY_LIMIT, ExecStatus.OUTPUT_LIMIT):
            checked = iter([False] * len(gated))  # an answer that blows the checker's limits
        elif result.status is not ExecStatus.OK:  # is not equal
            return None  # the checker crashed or the sandbox failed: no verdict, not "unequal"
        else:
            checked = iter(bool(v) for v in json.loads(result.stdout))
        verdicts = [next(checked) if v is None else v for v in verdicts]
    return [bool(v) for v in verdicts]


async def math_equal(pool: SandboxPool, expected: str, given: str) -> bool | None:
    found = await math_equal_many(pool, [(expected, given)])
    return None if found is None else found[0]
