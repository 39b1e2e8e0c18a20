"""Seeded code-repair tasks: a short function with one small bug, to find and fix.

    generate_code_repair_tasks(n, seed)   code tasks whose workspace starts with a buggy
                                          solution.py (`CodeTask.files`); the reference is the fix
    generate_code_repair_tasks(n, seed, phrasings="heldout")   about half worded as training
                                          never is, tagged `UNSEEN_TAG`

Each task changes one token of a function of `honing.domains.code.generate`'s families (a
comparison, an operator, an integer one off, …), used only if the function then fails a test
case; the candidates run in process, which is safe because the code is ours. Same `(n, seed)`,
same tasks (docs/tasks.md, "The modules in detail"). Not covered: checking the tasks (the tests
run every starter and reference in the sandbox).
"""

from __future__ import annotations

import copy
import io
import random
import sys
import textwrap
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from honing.domains.code.generate import CODE_FAMILIES, Function
from honing.domains.code.task import CODE_SOLUTION, CodeTask
from honing.tasks.synthetic.common import (
    UNSEEN_TAG,
    Phrasings,
    Wording,
    family_metadata,
    generate_phrased,
    phrase,
)

DOMAIN = "code-repair"
GENERATOR = "honing.tasks.synthetic_repair"  # the module's old name: tasks (and versions) keep it
LINE_BUDGET = 20_000  # traced lines per candidate; the families' references need far fewer
SWAPS: dict[str, tuple[str, str]] = {  # token → (its replacement, the kind of bug)
    "<": ("<=", "comparison"), "<=": ("<", "comparison"), ">": (">=", "comparison"),
    ">=": (">", "comparison"), "==": ("!=", "comparison"), "!=": ("==", "comparison"),
    "+": ("-", "operator"), "-": ("+", "operator"), "*": ("+", "operator"),
    "+=": ("-=", "operator"), "-=": ("+=", "operator"),
    "//": ("%", "operator"), "%": ("//", "operator"),
    "max": ("min", "name"), "min": ("max", "name"), "and": ("or", "name"), "or": ("and", "name"),
    "lower": ("upper", "name"), "upper": ("lower", "name"),
}  # fmt: skip
UNARY_BEFORE = {"(", "[", ",", ":", "=", "return"}  # a `-` after these is a sign, not a minus
CALLS = {".split()": (".split(' ')", "call")}  # splitting on one space, not on runs of whitespace
BODIES = {  # families whose one-line reference has no token to change: the same, step by step
    "sum_of_digits": "    total = 0\n    for digit in str(n):\n        total += int(digit)\n"
    "    return total\n",
}


@dataclass(frozen=True)
class Mutation:
    """One token of a source replaced: where (character offsets), by what, and the bug's kind."""

    start: int
    end: int
    replacement: str
    kind: str  # comparison, operator, off-by-one, name

    def apply(self, source: str) -> str:
        return source[: self.start] + self.replacement + source[self.end :]


def mutations(source: str, first_line: int = 2) -> list[Mutation]:
    """Every one-token change of `source` from line `first_line` on (1-based), in source order."""
    offsets = [0]
    for line in source.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    found: list[Mutation] = []
    for text, (replacement, kind) in CALLS.items():
        at = source.find(text, offsets[first_line - 1])
        if at >= 0:
            found.append(Mutation(at, at + len(text), replacement, kind))
    previous = ""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        text, (row, col) = tok.string, tok.start
        start = offsets[row - 1] + col
        if row >= first_line:
            if tok.type == tokenize.NUMBER and text.isdigit():
                value = int(text)
                for changed in (value + 1, value - 1):
                    if changed > 0 or (changed == 0 and previous != "-"):
                        found.append(Mutation(start, start + len(text), str(changed), "off-by-one"))
            elif text in SWAPS and not (text == "-" and previous in UNARY_BEFORE):
                replacement, kind = SWAPS[text]
                found.append(Mutation(start, start + len(text), replacement, kind))
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            previous = text
    return sorted(found, key=lambda m: m.start)


class _OutOfBudget(BaseException):
    """Raised by the tracer when a candidate runs past `LINE_BUDGET` lines."""


def fails_a_case(source: str, function: Function) -> bool | None:
    """Whether `source` fails at least one of the function's cases (an exception is a failure);
    None when it does not define the function or runs past `LINE_BUDGET` traced lines."""
    lines = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
            if lines > LINE_BUDGET:
                raise _OutOfBudget
        return tracer

    namespace: dict[str, Any] = {}
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        exec(compile(source, "<candidate>", "exec"), namespace)  # our code, see the docstring
        candidate = namespace.get(function.entry_point)
        if not callable(candidate):
            return None
        for args, expected in function.cases:
            try:
                if candidate(*copy.deepcopy(args)) != expected:
                    return True
            except Exception:
                return True
        return False
    except _OutOfBudget:
        return None
    finally:
        sys.settrace(previous)


def source_of(function: Function) -> str:
    """The correct solution.py: the signature and the reference body (no docstring)."""
    return f"{function.signature}:\n{BODIES.get(function.family, function.body)}"


# The prompt: what is wrong, the signature and doc (as they are in every wording), an example.
# Training words every task as it always has (one string: no draw); `unseen` is what only
# held-out sets ask, in another sentence structure and register.
_REPAIR = Wording(
    seen="Fix the bug in {solution}: some tests of `{name}` fail.\n\n{signature}:\n{doc}\n\n"
    "For example, {call} == {expected}.",
    unseen=(
        "`{name}` in {solution} returns wrong results for some inputs; find the mistake and "
        "correct it.\n\n{signature}:\n{doc}\n\nOne of the checks: {call} should give {expected}.",
        "Someone slipped while editing {solution}, and `{name}` no longer passes all of its "
        "tests. Make it do what this says again:\n\n{signature}:\n{doc}\n\nA test it has to "
        "pass: calling {call} must return {expected}.",
        "There is one small error in `{name}` ({solution}). Track it down and put it right.\n\n"
        "{signature}:\n{doc}\n\nOnce it works, {call} evaluates to {expected}.",
        "The tests of {solution} catch a mistake in `{name}`. What the function is meant to "
        "do:\n\n{signature}:\n{doc}\n\nSo, for instance, the result of {call} ought to be "
        "{expected}. Correct the code.",
    ),
)


def repair_prompt(function: Function, rng: random.Random, phrasings: Phrasings) -> tuple[str, bool]:
    """The task's prompt and whether it is worded as training never is (`phrase`: "train" draws
    nothing from `rng`)."""
    args, expected = function.cases[0]
    fields = {
        "solution": CODE_SOLUTION,
        "name": function.entry_point,
        "signature": function.signature,
        "doc": textwrap.fill(function.doc, width=92),
        "call": function.call(args),
        "expected": repr(expected),
    }
    return phrase(rng, phrasings, _REPAIR, **fields)


def repair_task(
    function: Function,
    rng: random.Random,
    task_id: str,
    seed: int,
    phrasings: Phrasings = "train",
) -> CodeTask | None:
    """A task with one failing mutation of `function` (drawn with `rng`, then its wording with
    `phrasings`); None if none fails."""
    correct = source_of(function)
    candidates = mutations(correct)
    rng.shuffle(candidates)
    for mutation in candidates:
        buggy = mutation.apply(correct)
        if fails_a_case(buggy, function):
            tests = "".join(f"assert {function.call(a)} == {e!r}\n" for a, e in function.cases)
            prompt, unseen = repair_prompt(function, rng, phrasings)
            tags = ["synthetic", "repair", function.family, mutation.kind, function.difficulty]
            return CodeTask(
                id=task_id,
                prompt=prompt,
                entry_point=function.entry_point,
                tests=tests,
                files={CODE_SOLUTION: buggy},
                reference=correct,
                tags=tags + ([UNSEEN_TAG] if unseen else []),
                metadata={
                    **family_metadata(function.family, seed),
                    "generator": GENERATOR,
                    "bug": mutation.kind,
                },
            )
    return None


def _family(
    make: Callable[[random.Random], Function],
) -> Callable[[random.Random, str, int, Phrasings], CodeTask]:
    def draw(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> CodeTask:
        while True:  # a function with no failing mutation is drawn again (none is known)
            task = repair_task(make(rng), rng, task_id, seed, phrasings)
            if task is not None:
                return task

    return draw


REPAIR_FAMILIES = [_family(make) for make in CODE_FAMILIES]


def generate_code_repair_tasks(n: int, seed: int, phrasings: Phrasings = "train") -> list[CodeTask]:
    """`n` code-repair tasks (the 12 code families, one token of each changed so that a test
    fails): solution.py starts buggy, the reference is the correct file.

    `phrasings="train"` words every prompt as training always has; `"heldout"` words about half
    (`UNSEEN_SHARE`) in a way no training task is, tagged `phrasing-unseen`: what is wrong and
    the example are worded otherwise, the signature and doc are as they are. Its wording draws
    use the seed's stream too, so the same seed's tasks differ from the training ones'."""
    return generate_phrased(DOMAIN, n, seed, REPAIR_FAMILIES, phrasings)
