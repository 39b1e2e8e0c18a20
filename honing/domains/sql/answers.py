"""Reading a sql answer's text: the numbers it states outside code (`numbers`), the one it gives
as its answer (`answer_number`), the SQL it shows (`sql_snippets`), and a query value as a number
(`value_number`). Not covered: numbers in words ("two million") or with scales ("1.2m"),
accounting negatives ("(1,234)").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

MAX_SNIPPETS = 3

# -- reading answers -----------------------------------------------------------------------

_FENCED = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_INLINE = re.compile(r"`([^`\n]+)`")
_NUMBER = re.compile(
    r"(?<![\w.\-−/,])(?<!\d:)(?P<sign>[-+−]?)[$€£]?"
    r"(?P<digits>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:[eE](?P<exp>[-+]?\d+))?(?![\w/]|[-.:,]\d)"
)
_MARKER = re.compile(r"\banswer\b(?:\s*(?:is|:|=))?", re.I)


@dataclass(frozen=True)
class Number:
    """A number as written: its value, and the unit of its last digit (0.01 for 1234.50)."""

    value: float
    unit: float


def without_code(text: str) -> str:
    """`text` with fenced blocks and inline code spans blanked out."""
    text = _FENCED.sub(" ", text)
    return _INLINE.sub(" ", text)


def numbers(text: str) -> list[Number]:
    """The numbers `text` states outside code, in order. One past a float's range (1e999) has
    the value ±inf, and states nothing (`states`)."""
    found = []
    for m in _NUMBER.finditer(without_code(text)):
        digits = m["digits"].replace(",", "")
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        exponent = _exponent(m["exp"])
        sign = -1.0 if m["sign"] in ("-", "−") else 1.0
        value = sign * float(f"{digits}e{exponent}")  # float() saturates to inf: never raises
        # A zero shows no significant digit: its exponent must not widen its rounding (0e9
        # would state anything under 5e8). Digits that are not zero keep theirs, even where the
        # value underflows (1e-400 states about 0, not anything under 0.5).
        zero = not digits.strip("0.")
        unit = float(f"1e{(0 if zero else exponent) - decimals}")
        found.append(Number(value, unit))
    return found


def _exponent(written: str | None) -> int:
    """An exponent as written, those past ±9999 as ±10000 (past a float's range either way;
    int() refuses more than 4,300 digits)."""
    digits = (written or "0").lstrip("+-").lstrip("0") or "0"
    size = int(digits) if len(digits) <= 4 else 10_000
    return -size if (written or "").startswith("-") else size


def answer_number(text: str) -> Number | None:
    """The number an answer gives: the first after its last "answer", else its only number."""
    plain = without_code(text)
    markers = list(_MARKER.finditer(plain))
    if markers:
        after = numbers(plain[markers[-1].end() :])
        if after:
            return after[0]
    found = numbers(plain)
    return found[0] if len(found) == 1 else None


def sql_snippets(text: str) -> list[str]:
    """The SQL an answer shows: ```sql blocks (or unlabelled ones that start like SQL), then
    inline `SELECT …` spans; the first `MAX_SNIPPETS`."""
    found = []
    for lang, body in _FENCED.findall(text):
        body = body.strip()
        if body and (lang.lower() in ("sql", "duckdb") or (not lang and _looks_like_sql(body))):
            found.append(body)
    for span in _INLINE.findall(_FENCED.sub(" ", text)):
        if _looks_like_sql(span.strip()):
            found.append(span.strip())
    return found[:MAX_SNIPPETS]


def _looks_like_sql(text: str) -> bool:
    return re.match(r"(?i)(select|with|from)\b", text) is not None


def value_number(value: Any) -> Number | None:
    """A query's value as a number: numbers as they are, text by the number it states."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return Number(float(value), 0.0) if math.isfinite(value) else None
    return answer_number(str(value))
