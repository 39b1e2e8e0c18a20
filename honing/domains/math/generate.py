"""Math tasks: multi-digit arithmetic with exact integer answers.

    generate_math_tasks(n, seed)                       phrasings training draws from
    generate_math_tasks(n, seed, phrasings="heldout")  about half worded as training never is,
                                                       tagged `UNSEEN_TAG`

Each task's metadata holds its calculation (`expression`), which reference traces and
`question_key` read.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from honing.domains.math.task import MathTask
from honing.tasks.synthetic.common import (
    TWO_DIGITS,
    UNSEEN_TAG,
    Phrasings,
    Wording,
    family_metadata,
    generate_phrased,
    phrase,
)


def _math(
    rng: random.Random,
    task_id: str,
    seed: int,
    phrasings: Phrasings,
    family: str,
    difficulty: str,
    wording: Wording,
    expression: str,
    answer: int,
    **numbers: int,
) -> MathTask:
    """The task, worded by one of `wording`'s phrasings filled in with `numbers`; `expression`
    (the same names) is the calculation, kept in the metadata for reference traces."""
    prompt, unseen = phrase(rng, phrasings, wording, **numbers)
    return MathTask(
        id=task_id,
        prompt=prompt,
        answer=str(answer),
        reference=str(answer),
        tags=["synthetic", "arithmetic", family, difficulty] + ([UNSEEN_TAG] if unseen else []),
        metadata=family_metadata(family, seed) | {"expression": expression.format(**numbers)},
    )


_SUM = Wording(
    seen=(
        "What is {a} + {b}?",
        "Add {a} and {b}.",
        "Find the sum of {a} and {b}.",
        "Calculate the total of {a} and {b}.",
        "A library had {a} books and bought {b} more. How many books does it have now?",
        "{a} people came on Monday and {b} on Tuesday. How many came on the two days together?",
    ),
    unseen=(
        "What is {a} plus {b}?",
        "A farm picked {a} apples in the morning and {b} in the afternoon. How many apples were "
        "picked in all?",
    ),
)
_DIFFERENCE = Wording(
    seen=(
        "What is {a} - {b}?",
        "Subtract {b} from {a}.",
        "Find the difference between {a} and {b}.",
        "A tank held {a} litres and {b} litres were drained. How many litres are left?",
        "A shop had {a} cans and sold {b} of them. How many cans does it have now?",
    ),
    unseen=(
        "What is {a} minus {b}?",
        "How much larger is {a} than {b}?",
        "A runner has covered {b} metres of a {a} metre race. How many metres are left to run?",
    ),
)
_PRODUCT = Wording(
    seen=(
        "What is {a} * {b}?",
        "Compute {a} × {b}.",
        "Calculate {a} times {b}.",
        "Multiply {a} by {b}.",
        "A warehouse has {b} shelves with {a} boxes on each. How many boxes are there in all?",
        "Each crate holds {a} pens. How many pens are in {b} crates?",
    ),
    unseen=(
        "What is the product of {a} and {b}?",
        "Each of {b} trains carries {a} passengers. How many passengers is that altogether?",
    ),
)
_QUOTIENT_EXACT = Wording(
    seen=(
        "What is {n} / {d}?",
        "Divide {n} by {d}.",
        "Calculate {n} ÷ {d}.",
        "A rope {n} cm long is cut into {d} equal pieces. How long is each piece in cm?",
    ),
    unseen=(
        "What is {n} divided by {d}?",
        "{n} sweets are shared equally among {d} children. How many sweets does each child get?",
    ),
)
_QUOTIENT_FLOOR = Wording(
    seen=(
        "What is the quotient when {n} is divided by {d}, ignoring the remainder?",
        "What is {n} // {d} (integer division)?",
        "How many full boxes of {d} can be packed from {n} items?",
    ),
    unseen=("How many whole times does {d} go into {n}?",),
)
_REMAINDER = Wording(
    seen=(
        "What is the remainder when {n} is divided by {d}?",
        "What is {n} mod {d}?",
        "Calculate {n} % {d}.",
        "{n} cards are dealt into piles of {d}, as many full piles as possible. How many cards "
        "are not in a pile?",
    ),
    unseen=(
        "What is {n} modulo {d}?",
        "{n} eggs are packed into boxes of {d}. How many eggs are left over?",
    ),
)
_PRODUCT_LARGE = Wording(
    seen=("What is {a} * {b}?", "Compute {a} × {b}.", "Calculate {a} times {b}."),
    unseen=("What is {a} multiplied by {b}?", "How much do {b} tickets at {a} dollars each cost?"),
)
_PROFIT = Wording(
    seen=(
        "A store sells {a} items at {b} dollars each and pays {c} dollars in rent. What is its "
        "profit in dollars?",
    ),
    unseen=(
        "A bakery makes {b} trays of {a} rolls, and {c} rolls go stale. How many rolls are "
        "still fresh?",
    ),
)
_PRODUCT_PLUS = Wording(
    seen=("What is {a} * {b} + {c}?", "Compute {a} × {b} + {c}."),
    unseen=("Multiply {a} by {b}, then add {c}. What is the result?",),
)
_SUM_TIMES = Wording(
    seen=("What is ({a} + {c}) * {b}?", "Compute ({a} + {c}) × {b}."),
    unseen=("Add {a} and {c}, then multiply the sum by {b}.",),
)


def _m_sum(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> MathTask:
    a, b = rng.randint(100, 9999), rng.randint(100, 9999)
    return _math(rng, task_id, seed, phrasings, "sum", "easy", _SUM, "{a} + {b}", a + b, a=a, b=b)


def _m_difference(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> MathTask:
    a = rng.randint(1000, 9999)
    b = rng.randint(100, a - 1)
    return _math(
        rng, task_id, seed, phrasings, "difference", "easy", _DIFFERENCE, "{a} - {b}", a - b,
        a=a, b=b,
    )  # fmt: skip


def _m_product(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> MathTask:
    a, b = rng.randint(100, 999), rng.choice(TWO_DIGITS)  # 3-digit × 2-digit
    return _math(
        rng, task_id, seed, phrasings, "product", "medium", _PRODUCT, "{a} * {b}", a * b,
        a=a, b=b,
    )  # fmt: skip


def _m_quotient(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> MathTask:
    d, q = rng.randint(12, 99), rng.randint(10, 999)
    if rng.random() < 0.4:
        return _math(
            rng, task_id, seed, phrasings, "quotient", "medium", _QUOTIENT_EXACT, "{n} / {d}",
            q, n=d * q, d=d,
        )  # fmt: skip
    n = d * q + rng.randint(1, d - 1)
    return _math(
        rng, task_id, seed, phrasings, "quotient", "medium", _QUOTIENT_FLOOR, "{n} // {d}", q,
        n=n, d=d,
    )  # fmt: skip


def _m_remainder(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> MathTask:
    d = rng.randint(12, 99)
    r = rng.randint(1, d - 1)
    n = d * rng.randint(10, 999) + r
    return _math(
        rng, task_id, seed, phrasings, "remainder", "medium", _REMAINDER, "{n} % {d}", r,
        n=n, d=d,
    )  # fmt: skip


def _m_product_large(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> MathTask:
    if rng.random() < 0.5:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
    else:
        a, b = rng.randint(1000, 9999), rng.choice(TWO_DIGITS)
    return _math(
        rng, task_id, seed, phrasings, "product-large", "hard", _PRODUCT_LARGE, "{a} * {b}",
        a * b, a=a, b=b,
    )  # fmt: skip


def _m_two_step(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> MathTask:
    a, b, c = rng.randint(100, 999), rng.randint(10, 99), rng.randint(100, 9999)
    kind = rng.randrange(3)
    if kind == 0:
        c = rng.randint(100, a * b - 1)
        wording, expression, answer = _PROFIT, "{a} * {b} - {c}", a * b - c
    elif kind == 1:
        wording, expression, answer = _PRODUCT_PLUS, "{a} * {b} + {c}", a * b + c
    else:
        wording, expression, answer = _SUM_TIMES, "({a} + {c}) * {b}", (a + c) * b
    return _math(
        rng, task_id, seed, phrasings, "two-step", "hard", wording, expression, answer,
        a=a, b=b, c=c,
    )  # fmt: skip


MATH_FAMILIES: list[Callable[[random.Random, str, int, Phrasings], MathTask]] = [
    _m_sum, _m_difference, _m_product, _m_quotient, _m_remainder, _m_product_large, _m_two_step,
]  # fmt: skip


def generate_math_tasks(n: int, seed: int, phrasings: Phrasings = "train") -> list[MathTask]:
    """`n` multi-digit arithmetic problems (sums, differences, 3-digit × 2-digit products,
    quotients, remainders, larger products, two-step problems); the reference is the answer.

    Each family has phrasings for training and phrasings kept out of it: `phrasings="train"`
    draws the first kind only; `"heldout"` words about half of the tasks (`UNSEEN_SHARE`) in a
    way no training task is, tagged `phrasing-unseen`, so an evaluation can tell a learned skill
    from a learned template. Each task's metadata holds its calculation (`expression`)."""

    return generate_phrased("math", n, seed, MATH_FAMILIES, phrasings)
