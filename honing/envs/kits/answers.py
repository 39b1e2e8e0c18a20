"""The answer a plain reply states, for domains that take one without a tool call."""

from __future__ import annotations

import re

BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
ANSWER_LINE = re.compile(r"^\s*(?:final\s+)?answer\s*[:=]\s*(.+?)\s*$", re.I | re.M)


def stated_answer(content: str) -> str | None:
    """The answer a plain reply states: its last \\boxed{...}, else a last `Answer: ...` line.
    A reply that boxes several different values states them all (as `\\boxed{a}\\boxed{b}`,
    which no checker takes for one value)."""
    boxed = list(dict.fromkeys(str(b).strip() for b in BOXED.findall(content)))
    if len(boxed) > 1:
        return "".join(f"\\boxed{{{b}}}" for b in boxed)
    if boxed:
        return boxed[0]
    lines = ANSWER_LINE.findall(content)
    return str(lines[-1]) if lines else None
