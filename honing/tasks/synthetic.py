"""Seeded synthetic task sets: where a small model is weak, but tools and feedback can help.

    generate_code_tasks(n, seed)    short Python functions checked by top-level `assert` tests
    generate_math_tasks(n, seed)    multi-digit arithmetic with exact integer answers; with
                                    phrasings="heldout", half worded as training never words them
    generate_tools_tasks(n, seed)   executable-tool tasks: unit conversion, calendar, lookup over a
                                    small facts table, calculator, and chains of them

The same `(n, seed)` gives the same tasks with the same ids on any machine; every task has a
reference whose expected values are computed here, independently of the environments (tasks do
not import `honing.envs`). docs/tasks.md ("The modules in detail") has the rest. Not covered:
checking the references (the tests run them through the real environments).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import random
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, TypeVar

from honing.tasks.load import AnyTask, TaskSet, question_key, tasks_from_rows
from honing.tasks.schema import CodeTask, MathTask, ToolsTask
from honing.tasks.toolcalls import TOOL_FUNCTIONS

T = TypeVar("T", CodeTask, MathTask, ToolsTask)

WORDS = (
    "apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "rocket", "garden", "silver",
    "window", "forest", "candle", "bridge", "planet", "orange", "yellow", "market", "basket",
    "engine", "island", "mirror", "pencil", "summer", "winter", "violet", "harbor", "meadow",
    "copper", "falcon", "quiet", "brave", "swift", "gentle", "ocean", "desert", "lantern", "maple",
)  # fmt: skip


# -- shared ----------------------------------------------------------------------------------
def _rng(domain: str, seed: int) -> random.Random:
    # A string seed is hashed with SHA-512 by `random`: stable across runs and machines.
    return random.Random(f"honing.tasks.synthetic/{domain}/{seed}")


def _content_key(task: AnyTask) -> str:
    """Two tasks with the same key are one problem: a math task's calculation, whatever its
    wording (`question_key`); any other task's content."""
    if task.domain == "math":
        return question_key(task)
    return json.dumps(
        task.model_dump(mode="json", exclude={"id", "tags", "metadata", "reference"}),
        sort_keys=True,
    )


def _generate(
    domain: str, n: int, seed: int, families: list[Callable[[random.Random, str, int], T]]
) -> list[T]:
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    rng = _rng(domain, seed)
    tasks: list[T] = []
    seen: set[str] = set()
    redraws = 0
    while len(tasks) < n:
        family = families[len(tasks) % len(families)]
        task = family(rng, f"synth-{domain}/{seed}/{len(tasks)}", seed)
        key = _content_key(task)
        if key in seen:  # the same problem twice: draw again (still deterministic)
            redraws += 1
            if redraws > 100 * (n + 1):
                raise RuntimeError(f"synthetic {domain}: cannot draw {n} distinct tasks")
            continue
        seen.add(key)
        tasks.append(task)
    return tasks


def _tags(family: str, difficulty: str) -> list[str]:
    return ["synthetic", family, difficulty]


def _metadata(family: str, seed: int) -> dict[str, Any]:
    return {"generator": "honing.tasks.synthetic", "family": family, "seed": seed}


def as_taskset(name: str, tasks: Iterable[AnyTask]) -> TaskSet:
    """Typed tasks as a `TaskSet`, through the same validation and de-duplication as files."""
    rows = ((name, i, t.model_dump(mode="json")) for i, t in enumerate(tasks, start=1))
    return tasks_from_rows(name, rows)


# -- code ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Function:
    """A function to write: its signature, docstring, a correct body and test cases."""

    family: str
    difficulty: str
    entry_point: str
    signature: str  # the `def` line, without the colon
    doc: str
    body: str  # indented by four spaces
    cases: list[tuple[tuple[Any, ...], Any]]  # (arguments, expected result)

    def call(self, args: tuple[Any, ...]) -> str:
        return f"{self.entry_point}({', '.join(map(repr, args))})"

    def prompt(self) -> str:
        doc = textwrap.fill(self.doc, width=92, initial_indent="    ", subsequent_indent="    ")
        args, expected = self.cases[0]
        return (
            f"{self.signature}:\n"
            f'    """\n{doc}\n\n'
            f"    >>> {self.call(args)}\n"
            f"    {expected!r}\n"
            f'    """\n'
        )

    def task(self, task_id: str, seed: int) -> CodeTask:
        prompt = self.prompt()
        tests = "".join(f"assert {self.call(a)} == {e!r}\n" for a, e in self.cases)
        return CodeTask(
            id=task_id,
            prompt=prompt,
            entry_point=self.entry_point,
            tests=tests,
            reference=prompt + self.body,
            tags=_tags(self.family, self.difficulty),
            metadata=_metadata(self.family, seed),
        )


def _sentence(rng: random.Random, low: int = 2, high: int = 5) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _sum_of_digits(rng: random.Random) -> _Function:
    values = [rng.randint(10 ** (k - 1), 10**k - 1) for k in rng.sample(range(2, 12), 5)]
    values.insert(rng.randint(1, 5), rng.randint(0, 9))
    return _Function(
        "sum_of_digits",
        "easy",
        "sum_of_digits",
        "def sum_of_digits(n: int) -> int",
        "Return the sum of the decimal digits of the non-negative integer n.",
        "    return sum(int(digit) for digit in str(n))\n",
        [((v,), sum(int(d) for d in str(v))) for v in values],
    )


def _reverse_words(rng: random.Random) -> _Function:
    sentences = [_sentence(rng) for _ in range(4)]
    sentences.append("  " + _sentence(rng).replace(" ", "   ") + " ")  # runs of whitespace
    sentences.append(rng.choice(WORDS))
    return _Function(
        "reverse_words",
        "easy",
        "reverse_words",
        "def reverse_words(sentence: str) -> str",
        "Return the words of sentence in reverse order, joined by single spaces. Words are "
        "separated by runs of whitespace; leading and trailing whitespace is dropped.",
        "    return ' '.join(reversed(sentence.split()))\n",
        [((s,), " ".join(reversed(s.split()))) for s in sentences],
    )


def _clamp(rng: random.Random) -> _Function:
    lo = rng.randint(-50, 50)
    hi = lo + rng.randint(5, 100)
    values = [
        rng.randint(lo, hi),
        lo - rng.randint(1, 100),
        hi + rng.randint(1, 100),
        lo,
        hi,
        rng.randint(lo, hi),
    ]
    rng.shuffle(values)
    return _Function(
        "clamp",
        "easy",
        "clamp",
        "def clamp(x: int) -> int",
        f"Return x limited to the range [{lo}, {hi}]: {lo} when x is below it, {hi} when x is "
        "above it, and x itself otherwise.",
        f"    return max({lo}, min({hi}, x))\n",
        [((v,), max(lo, min(hi, v))) for v in values],
    )


def _count_vowels(rng: random.Random) -> _Function:
    vowels = "aeiouy" if rng.random() < 0.5 else "aeiou"
    listed = ", ".join(vowels)

    def mixed_case(text: str) -> str:
        return "".join(c.upper() if rng.random() < 0.3 else c for c in text)

    texts = [mixed_case(_sentence(rng, 1, 4)) for _ in range(5)] + [
        "rhythm" if rng.random() < 0.5 else ""
    ]
    return _Function(
        "count_vowels",
        "easy",
        "count_vowels",
        "def count_vowels(text: str) -> int",
        f"Return how many characters of text are vowels ({listed}), in upper or lower case.",
        f"    return sum(1 for c in text.lower() if c in {vowels!r})\n",
        [((t,), sum(1 for c in t.lower() if c in vowels)) for t in texts],
    )


def _fizzbuzz(rng: random.Random) -> _Function:
    first, second = rng.choice(
        [("Fizz", "Buzz"), ("Foo", "Bar"), ("Ping", "Pong"), ("Tick", "Tock"), ("Zig", "Zag")]
    )
    a, b = rng.choice([(a, b) for a in range(2, 10) for b in range(a + 1, 12) if b % a])
    lcm = a * b // math.gcd(a, b)

    def draw(accept: Callable[[int], bool]) -> int:
        while True:
            n = rng.randint(1, 500)
            if accept(n):
                return n

    values = [
        lcm * rng.randint(1, 5),
        draw(lambda n: n % a == 0 and n % b != 0),
        draw(lambda n: n % b == 0 and n % a != 0),
        draw(lambda n: n % a != 0 and n % b != 0),
        draw(lambda n: n % a != 0 and n % b != 0),
        draw(lambda n: n % a == 0),
    ]
    rng.shuffle(values)

    def expected(n: int) -> str:
        return (first if n % a == 0 else "") + (second if n % b == 0 else "") or str(n)

    body = (
        f"    if n % {a} == 0 and n % {b} == 0:\n        return {first + second!r}\n"
        f"    if n % {a} == 0:\n        return {first!r}\n"
        f"    if n % {b} == 0:\n        return {second!r}\n"
        "    return str(n)\n"
    )
    return _Function(
        "fizzbuzz",
        "medium",
        "fizzbuzz",
        "def fizzbuzz(n: int) -> str",
        f'Return "{first}{second}" when n is divisible by both {a} and {b}, "{first}" when it is '
        f'divisible by {a} only, "{second}" when it is divisible by {b} only, and otherwise n '
        "written in decimal.",
        body,
        [((v,), expected(v)) for v in values],
    )


def _is_palindrome(rng: random.Random) -> _Function:
    letters = "abcdefghijklmnopqrstuvwxyz"

    def decorate(core: str) -> str:
        out = []
        for c in core:
            out.append(c.upper() if rng.random() < 0.3 else c)
            if rng.random() < 0.3:
                out.append(rng.choice([" ", ", ", "!", "'", " - "]))
        return "".join(out)

    def palindrome() -> str:
        half = "".join(rng.choice(letters) for _ in range(rng.randint(2, 6)))
        middle = rng.choice(["", rng.choice(letters + "0123456789")])
        return half + middle + half[::-1]

    texts = [decorate(palindrome()) for _ in range(3)]
    near = list(palindrome())
    near[0] = letters[(letters.index(near[0]) + 1) % 26]  # one letter off: not a palindrome
    texts += [decorate("".join(near)), decorate(_sentence(rng, 1, 2)), rng.choice(["", "a"])]
    rng.shuffle(texts)

    def expected(text: str) -> bool:
        cleaned = [c.lower() for c in text if c.isalnum()]
        return cleaned == cleaned[::-1]

    return _Function(
        "is_palindrome",
        "medium",
        "is_palindrome",
        "def is_palindrome(text: str) -> bool",
        "Return whether text reads the same forwards and backwards, ignoring case and every "
        "character that is not a letter or a digit. The empty string is a palindrome.",
        "    cleaned = [c.lower() for c in text if c.isalnum()]\n"
        "    return cleaned == cleaned[::-1]\n",
        [((t,), expected(t)) for t in texts],
    )


def _shift_letters(rng: random.Random) -> _Function:
    k = rng.randint(1, 25)

    def shift(text: str) -> str:
        out = []
        for c in text:
            if "a" <= c <= "z":
                out.append(chr((ord(c) - 97 + k) % 26 + 97))
            elif "A" <= c <= "Z":
                out.append(chr((ord(c) - 65 + k) % 26 + 65))
            else:
                out.append(c)
        return "".join(out)

    texts = [
        _sentence(rng, 1, 3).capitalize() + rng.choice(["", "!", ".", "?", ", ok"])
        for _ in range(4)
    ] + ["xyz", "Zebra 42"]
    body = (
        "    out = []\n"
        "    for c in text:\n"
        "        if 'a' <= c <= 'z':\n"
        f"            out.append(chr((ord(c) - ord('a') + {k}) % 26 + ord('a')))\n"
        "        elif 'A' <= c <= 'Z':\n"
        f"            out.append(chr((ord(c) - ord('A') + {k}) % 26 + ord('A')))\n"
        "        else:\n"
        "            out.append(c)\n"
        "    return ''.join(out)\n"
    )
    return _Function(
        "shift_letters",
        "medium",
        "shift_letters",
        "def shift_letters(text: str) -> str",
        f"Return text with every ASCII letter moved {k} places forward in the alphabet, wrapping "
        "around from z to a and keeping its case; every other character stays as it is.",
        body,
        [((t,), shift(t)) for t in texts],
    )


def _second_largest(rng: random.Random) -> _Function:
    lists = []
    for _ in range(5):
        values = [rng.randint(-50, 99) for _ in range(rng.randint(2, 8))]
        if len(set(values)) < 2:
            values.append(values[0] + rng.randint(1, 9))
        if rng.random() < 0.5:
            values.append(max(values))  # the largest twice
        rng.shuffle(values)
        lists.append(values)
    return _Function(
        "second_largest",
        "medium",
        "second_largest",
        "def second_largest(numbers: list[int]) -> int",
        "Return the second largest distinct value in numbers, which holds at least two distinct "
        "values (a repeated largest value counts once).",
        "    return sorted(set(numbers))[-2]\n",
        [((v,), sorted(set(v))[-2]) for v in lists],
    )


def _count_multiples(rng: random.Random) -> _Function:
    k = rng.randint(2, 13)
    bounds = []
    for _ in range(5):
        lo = rng.randint(-60, 150)
        bounds.append((lo, lo + rng.randint(0, 250)))
    bounds.append((k, k))
    rng.shuffle(bounds)
    return _Function(
        "count_multiples",
        "medium",
        "count_multiples",
        "def count_multiples(lo: int, hi: int) -> int",
        f"Return how many integers x with lo <= x <= hi are divisible by {k} (lo <= hi; zero and "
        "negative numbers count too).",
        f"    return sum(1 for x in range(lo, hi + 1) if x % {k} == 0)\n",
        [((lo, hi), hi // k - (lo - 1) // k) for lo, hi in bounds],
    )


def _rotate_right(rng: random.Random) -> _Function:
    k = rng.randint(1, 6)
    lists = [[rng.randint(0, 99) for _ in range(n)] for n in rng.sample(range(1, 10), 5)] + [[]]
    rng.shuffle(lists)

    def rotate(items: list[int]) -> list[int]:
        if not items:
            return []
        cut = len(items) - k % len(items)
        return items[cut:] + items[:cut]

    return _Function(
        "rotate_right",
        "medium",
        "rotate_right",
        "def rotate_right(items: list[int]) -> list[int]",
        f"Return a new list: items rotated {k} places to the right, each element moving {k} "
        "positions later and wrapping around to the front (so a list shorter than "
        f"{k} goes round more than once). An empty list gives an empty list.",
        "    if not items:\n        return []\n"
        f"    cut = len(items) - {k} % len(items)\n"
        "    return items[cut:] + items[:cut]\n",
        [((v,), rotate(v)) for v in lists],
    )


def _run_length(rng: random.Random) -> _Function:
    alphabet = rng.sample("abcdexyz", 3)
    texts = []
    for _ in range(5):
        runs: list[str] = []
        for _ in range(rng.randint(1, 5)):
            letter = rng.choice([c for c in alphabet if not runs or c != runs[-1][0]])
            runs.append(letter * rng.randint(1, 12))
        texts.append("".join(runs))
    texts.append("")
    rng.shuffle(texts)

    def encode(text: str) -> str:
        return "".join(f"{len(list(group))}{c}" for c, group in itertools.groupby(text))

    body = (
        "    out = []\n"
        "    i = 0\n"
        "    while i < len(text):\n"
        "        j = i\n"
        "        while j < len(text) and text[j] == text[i]:\n"
        "            j += 1\n"
        "        out.append(f'{j - i}{text[i]}')\n"
        "        i = j\n"
        "    return ''.join(out)\n"
    )
    return _Function(
        "run_length",
        "hard",
        "run_length",
        "def run_length(text: str) -> str",
        "Return the run-length encoding of text: each maximal run of one character becomes the "
        'run\'s length followed by the character, so "aaab" becomes "3a1b" and "" stays "".',
        body,
        [((t,), encode(t)) for t in texts],
    )


def _collatz_steps(rng: random.Random) -> _Function:
    def steps(n: int) -> int:
        count = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            count += 1
        return count

    values = [rng.randint(2, 10**k) for k in (1, 2, 3, 4, 5)] + [1]
    rng.shuffle(values)
    return _Function(
        "collatz_steps",
        "hard",
        "collatz_steps",
        "def collatz_steps(n: int) -> int",
        "Return how many steps take the positive integer n to 1, where one step halves an even "
        "number and turns an odd number m into 3 * m + 1 (so collatz_steps(1) is 0).",
        "    count = 0\n    while n != 1:\n"
        "        n = n // 2 if n % 2 == 0 else 3 * n + 1\n        count += 1\n    return count\n",
        [((v,), steps(v)) for v in values],
    )


CODE_FAMILIES: list[Callable[[random.Random], _Function]] = [
    _sum_of_digits, _reverse_words, _clamp, _count_vowels, _fizzbuzz, _is_palindrome,
    _shift_letters, _second_largest, _count_multiples, _rotate_right, _run_length, _collatz_steps,
]  # fmt: skip


def generate_code_tasks(n: int, seed: int) -> list[CodeTask]:
    """`n` short-function tasks (12 families, easy to hard) with assert tests and references."""

    def make(family: Callable[[random.Random], _Function]) -> Callable[..., CodeTask]:
        return lambda rng, task_id, seed: family(rng).task(task_id, seed)

    return _generate("code", n, seed, [make(f) for f in CODE_FAMILIES])


# -- math ------------------------------------------------------------------------------------
TWO_DIGITS = [b for b in range(11, 100) if b % 10]  # a multiple of 10 makes it too easy

Phrasings = Literal["train", "heldout"]
UNSEEN_TAG = "phrasing-unseen"  # a held-out task phrased in a way no training task is
UNSEEN_SHARE = 0.5  # of a held-out set's tasks


@dataclass(frozen=True)
class _Wording:
    """One problem's phrasings: those training draws from, and those kept for held-out sets."""

    seen: tuple[str, ...]
    unseen: tuple[str, ...]


def _math(
    rng: random.Random,
    task_id: str,
    seed: int,
    phrasings: Phrasings,
    family: str,
    difficulty: str,
    wording: _Wording,
    expression: str,
    answer: int,
    **numbers: int,
) -> MathTask:
    """The task, worded by one of `wording`'s phrasings filled in with `numbers`; `expression`
    (the same names) is the calculation, kept in the metadata for reference traces."""
    unseen = phrasings == "heldout" and rng.random() < UNSEEN_SHARE
    prompt = rng.choice(wording.unseen if unseen else wording.seen).format(**numbers)
    return MathTask(
        id=task_id,
        prompt=prompt,
        answer=str(answer),
        reference=str(answer),
        tags=["synthetic", "arithmetic", family, difficulty] + ([UNSEEN_TAG] if unseen else []),
        metadata=_metadata(family, seed) | {"expression": expression.format(**numbers)},
    )


_SUM = _Wording(
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
_DIFFERENCE = _Wording(
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
_PRODUCT = _Wording(
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
_QUOTIENT_EXACT = _Wording(
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
_QUOTIENT_FLOOR = _Wording(
    seen=(
        "What is the quotient when {n} is divided by {d}, ignoring the remainder?",
        "What is {n} // {d} (integer division)?",
        "How many full boxes of {d} can be packed from {n} items?",
    ),
    unseen=("How many whole times does {d} go into {n}?",),
)
_REMAINDER = _Wording(
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
_PRODUCT_LARGE = _Wording(
    seen=("What is {a} * {b}?", "Compute {a} × {b}.", "Calculate {a} times {b}."),
    unseen=("What is {a} multiplied by {b}?", "How much do {b} tickets at {a} dollars each cost?"),
)
_PROFIT = _Wording(
    seen=(
        "A store sells {a} items at {b} dollars each and pays {c} dollars in rent. What is its "
        "profit in dollars?",
    ),
    unseen=(
        "A bakery makes {b} trays of {a} rolls, and {c} rolls go stale. How many rolls are "
        "still fresh?",
    ),
)
_PRODUCT_PLUS = _Wording(
    seen=("What is {a} * {b} + {c}?", "Compute {a} × {b} + {c}."),
    unseen=("Multiply {a} by {b}, then add {c}. What is the result?",),
)
_SUM_TIMES = _Wording(
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

    def worded(
        family: Callable[[random.Random, str, int, Phrasings], MathTask],
    ) -> Callable[[random.Random, str, int], MathTask]:
        return lambda rng, task_id, seed: family(rng, task_id, seed, phrasings)

    return _generate("math", n, seed, [worded(f) for f in MATH_FAMILIES])


# -- tools -----------------------------------------------------------------------------------

# Exact factors (as decimal strings) to the first unit of each dimension.
UNIT_FACTORS: dict[str, dict[str, str]] = {
    "length": {"m": "1", "km": "1000", "cm": "0.01", "mm": "0.001", "mi": "1609.344",
               "ft": "0.3048", "in": "0.0254", "yd": "0.9144"},
    "mass": {"kg": "1", "g": "0.001", "lb": "0.45359237", "oz": "0.028349523125", "t": "1000"},
    "time": {"s": "1", "min": "60", "h": "3600", "day": "86400", "week": "604800"},
    "volume": {"l": "1", "ml": "0.001", "gal": "3.785411784", "m3": "1000"},
}  # fmt: skip
UNIT_NAMES = {
    "m": "metres", "km": "kilometres", "cm": "centimetres", "mm": "millimetres", "mi": "miles",
    "ft": "feet", "in": "inches", "yd": "yards", "kg": "kilograms", "g": "grams", "lb": "pounds",
    "oz": "ounces", "t": "tonnes", "s": "seconds", "min": "minutes", "h": "hours", "day": "days",
    "week": "weeks", "l": "litres", "ml": "millilitres", "gal": "gallons", "m3": "cubic metres",
    "C": "degrees Celsius", "F": "degrees Fahrenheit", "K": "kelvin",
}  # fmt: skip
DECIMALS = 4  # answers never need more decimals than this
SCALE: int = 10**DECIMALS
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def convert_exactly(value: Fraction, from_unit: str, to_unit: str) -> Fraction:
    """`value` in `to_unit`, exactly (the tools environment computes the same in floats)."""
    kelvin = Fraction("273.15")
    celsius_of: dict[str, Callable[[Fraction], Fraction]] = {
        "C": lambda v: v,
        "F": lambda v: (v - 32) * Fraction(5, 9),
        "K": lambda v: v - kelvin,
    }
    from_celsius: dict[str, Callable[[Fraction], Fraction]] = {
        "C": lambda c: c,
        "F": lambda c: c * Fraction(9, 5) + 32,
        "K": lambda c: c + kelvin,
    }
    if from_unit in celsius_of and to_unit in from_celsius:
        return from_celsius[to_unit](celsius_of[from_unit](value))
    for table in UNIT_FACTORS.values():
        if from_unit in table and to_unit in table:
            return value * Fraction(table[from_unit]) / Fraction(table[to_unit])
    raise ValueError(f"cannot convert {from_unit!r} to {to_unit!r}")


def decimal_text(value: Fraction) -> str:
    """A terminating fraction as plain decimal text: 4.8, 1250, -40, 310.15."""
    scaled = value * SCALE
    if scaled.denominator != 1:
        raise ValueError(f"{value} has more than {DECIMALS} decimals")
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if scaled < 0 else ""
    whole, frac = divmod(abs(scaled.numerator), SCALE)
    return f"{sign}{whole}.{frac:0{DECIMALS}d}".rstrip("0")


def _exact_multiplier(ratio: Fraction) -> int:
    """The smallest integer m such that m * ratio has at most DECIMALS decimals."""
    return (ratio * SCALE).denominator


def _number(value: Fraction) -> int | float:
    """A JSON number for a tool argument."""
    return value.numerator if value.denominator == 1 else float(value)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _tools(
    task_id: str, seed: int, family: str, difficulty: str, prompt: str, *,
    functions: list[str], calls: list[dict[str, Any]], answer: str,
    forbidden: list[str] | None = None, facts: dict[str, str] | None = None,
) -> ToolsTask:  # fmt: skip
    calls = [*calls, _call("answer", value=answer)]
    return ToolsTask(
        id=task_id,
        prompt=prompt,
        functions=[TOOL_FUNCTIONS[name] for name in functions],
        answer=answer,
        max_calls=len(calls) + 1,  # the reference's calls (answer included) and one to spare
        forbidden_tools=forbidden or [],
        facts=facts or {},
        reference=json.dumps(calls),
        tags=_tags(family, difficulty),
        metadata=_metadata(family, seed),
    )


def _t_arithmetic(rng: random.Random, task_id: str, seed: int) -> ToolsTask:
    a, b = rng.randint(100, 999), rng.choice(TWO_DIGITS)
    kind = rng.randrange(3)
    if kind == 0:
        expression, value = f"{a}*{b}", a * b
        prompt = rng.choice([f"What is {a} * {b}?", f"Multiply {a} by {b}."])
    elif kind == 1:
        a = rng.randint(1000, 99999)
        expression, value = f"{a}//{b}", a // b
        prompt = f"What is {a} divided by {b}, rounded down to a whole number?"
    else:
        a = rng.randint(1000, 99999)
        expression, value = f"{a}%{b}", a % b
        prompt = f"What is the remainder when {a} is divided by {b}?"
    return _tools(
        task_id,
        seed,
        "arithmetic",
        "medium",
        prompt,
        functions=["calculator"],
        calls=[_call("calculator", expression=expression)],
        answer=str(value),
    )


def _t_units(rng: random.Random, task_id: str, seed: int) -> ToolsTask:
    while True:
        table = UNIT_FACTORS[rng.choice(sorted(UNIT_FACTORS))]
        from_unit, to_unit = rng.sample(sorted(table), 2)
        ratio = Fraction(table[from_unit]) / Fraction(table[to_unit])
        step = _exact_multiplier(ratio)
        if step <= 400:  # else the smallest exact value is an odd-looking number
            break
    value = step * rng.randint(1, max(1, 2000 // step))
    result = convert_exactly(Fraction(value), from_unit, to_unit)
    prompt = rng.choice(
        [
            f"Convert {value} {UNIT_NAMES[from_unit]} to {UNIT_NAMES[to_unit]}.",
            f"How many {UNIT_NAMES[to_unit]} are {value} {UNIT_NAMES[from_unit]}?",
        ]
    )
    forbidden = ["calculator"] if rng.random() < 0.5 else []
    call = _call("convert_units", value=value, from_unit=from_unit, to_unit=to_unit)
    return _tools(
        task_id,
        seed,
        "units",
        "easy",
        prompt,
        functions=["convert_units", "calculator"],
        calls=[call],
        answer=decimal_text(result),
        forbidden=forbidden,
    )


def _t_temperature(rng: random.Random, task_id: str, seed: int) -> ToolsTask:
    from_unit, to_unit = rng.choice([("C", "F"), ("F", "C"), ("C", "K"), ("K", "C"), ("F", "K")])
    if from_unit == "C":
        value = Fraction(5 * rng.randint(-8, 40))
    elif from_unit == "F":
        value = Fraction(32 + 9 * rng.randint(-8, 24))
    else:
        value = Fraction(rng.randint(200, 400)) + Fraction("0.15")
    result = convert_exactly(value, from_unit, to_unit)
    shown = decimal_text(value)
    prompt = rng.choice(
        [
            f"What is {shown} {UNIT_NAMES[from_unit]} in {UNIT_NAMES[to_unit]}?",
            f"Convert a temperature of {shown} {UNIT_NAMES[from_unit]} to {UNIT_NAMES[to_unit]}.",
        ]
    )
    forbidden = ["calculator"] if rng.random() < 0.5 else []
    call = _call("convert_units", value=_number(value), from_unit=from_unit, to_unit=to_unit)
    return _tools(
        task_id,
        seed,
        "temperature",
        "easy",
        prompt,
        functions=["convert_units", "calculator"],
        calls=[call],
        answer=decimal_text(result),
        forbidden=forbidden,
    )


def _random_date(rng: random.Random) -> dt.date:
    return dt.date(2000, 1, 1) + dt.timedelta(days=rng.randint(0, 365 * 35))


def _t_calendar(rng: random.Random, task_id: str, seed: int) -> ToolsTask:
    day = _random_date(rng)
    operation = rng.choice(["weekday", "add_days", "days_between", "weekday_after"])
    functions = ["calendar"]
    if operation == "weekday":
        prompt = f"On which day of the week does {day.isoformat()} fall?"
        calls = [_call("calendar", operation="weekday", date=day.isoformat())]
        return _tools(
            task_id,
            seed,
            "calendar",
            "easy",
            prompt,
            functions=functions,
            calls=calls,
            answer=WEEKDAYS[day.weekday()],
        )
    days = rng.randint(2, 400)
    later = day + dt.timedelta(days=days)
    if operation == "add_days":
        prompt = rng.choice(
            [
                f"What date is {days} days after {day.isoformat()}? Answer as YYYY-MM-DD.",
                f"A parcel is shipped on {day.isoformat()} and arrives {days} days "
                "later. On what date (YYYY-MM-DD) does it arrive?",
            ]
        )
        calls = [_call("calendar", operation="add_days", date=day.isoformat(), days=days)]
        return _tools(
            task_id,
            seed,
            "calendar",
            "medium",
            prompt,
            functions=functions,
            calls=calls,
            answer=later.isoformat(),
        )
    if operation == "days_between":
        prompt = f"How many days are there from {day.isoformat()} to {later.isoformat()}?"
        calls = [
            _call(
                "calendar", operation="days_between", date=day.isoformat(), other=later.isoformat()
            )
        ]
        return _tools(
            task_id,
            seed,
            "calendar",
            "medium",
            prompt,
            functions=functions,
            calls=calls,
            answer=str(days),
        )
    prompt = f"Which day of the week is it {days} days after {day.isoformat()}?"
    calls = [
        _call("calendar", operation="add_days", date=day.isoformat(), days=days),
        _call("calendar", operation="weekday", date=later.isoformat()),
    ]
    return _tools(
        task_id,
        seed,
        "calendar",
        "hard",
        prompt,
        functions=functions,
        calls=calls,
        answer=WEEKDAYS[later.weekday()],
    )


ITEMS = (
    "widget",
    "gasket",
    "sprocket",
    "flange",
    "bearing",
    "valve",
    "hinge",
    "bracket",
    "spring",
    "pulley",
    "washer",
    "rivet",
)
PHASES = ("design", "review", "testing", "deployment", "training", "setup", "audit", "migration")


def _t_lookup(rng: random.Random, task_id: str, seed: int) -> ToolsTask:
    items = rng.sample(ITEMS, 5)
    prices = {item: rng.randint(3, 250) for item in items}
    facts = {item: str(price) for item, price in prices.items()}
    first, second = rng.sample(items, 2)
    if rng.random() < 0.4:
        prompt = (
            f"Unit prices in dollars can be looked up by item name. What does one {first} cost?"
        )
        return _tools(
            task_id,
            seed,
            "lookup",
            "easy",
            prompt,
            functions=["lookup", "calculator"],
            calls=[_call("lookup", key=first)],
            answer=facts[first],
            facts=facts,
        )
    q1, q2 = rng.randint(2, 60), rng.randint(2, 60)
    prompt = (
        f"Unit prices in dollars can be looked up by item name. A customer buys {q1} of "
        f"item {first} and {q2} of item {second}. What is the total cost in dollars?"
    )
    calls = [
        _call("lookup", key=first),
        _call("lookup", key=second),
        _call("calculator", expression=f"{q1}*{prices[first]}+{q2}*{prices[second]}"),
    ]
    return _tools(
        task_id,
        seed,
        "lookup",
        "medium",
        prompt,
        functions=["lookup", "calculator"],
        calls=calls,
        answer=str(q1 * prices[first] + q2 * prices[second]),
        facts=facts,
    )


def _t_lookup_convert(rng: random.Random, task_id: str, seed: int) -> ToolsTask:
    phases = rng.sample(PHASES, 4)
    while True:
        minutes = {phase: rng.randint(10, 240) for phase in phases}
        asked = rng.sample(phases, 2)
        total = sum(minutes[p] for p in asked)
        if total % 3 == 0:  # total / 60 then has at most 4 decimals
            break
    facts = {phase: f"{m} min" for phase, m in minutes.items()}
    prompt = (
        f"The duration of each project phase can be looked up by its name. How many hours "
        f"do the {asked[0]} and {asked[1]} phases take together?"
    )
    calls = [
        _call("lookup", key=asked[0]),
        _call("lookup", key=asked[1]),
        _call("calculator", expression=f"{minutes[asked[0]]}+{minutes[asked[1]]}"),
        _call("convert_units", value=total, from_unit="min", to_unit="h"),
    ]
    hours = convert_exactly(Fraction(total), "min", "h")
    return _tools(
        task_id,
        seed,
        "lookup-convert",
        "hard",
        prompt,
        functions=["lookup", "calculator", "convert_units"],
        calls=calls,
        answer=decimal_text(hours),
        facts=facts,
    )


# (template, unit per piece, unit asked for, sizes per piece)
_CHAINS = (
    ("A runner does {n} laps of a {size} m track. How many kilometres is that?", "m", "km",
     (200, 250, 400, 800)),
    ("{n} bottles hold {size} ml each. How many litres is that in all?", "ml", "l",
     (250, 330, 500, 750, 1500)),
    ("{n} parcels weigh {size} g each. What is their total weight in kilograms?", "g", "kg",
     (120, 250, 375, 480, 900)),
    ("{n} boards are {size} ft long each. What is their total length in metres?", "ft", "m",
     (6, 8, 10, 12, 16)),
    ("A recipe needs {size} oz of flour per batch. How many pounds of flour do {n} batches need?",
     "oz", "lb", (3, 5, 6, 10, 12)),
    ("A machine runs {n} cycles of {size} seconds each. How many minutes is that?", "s", "min",
     (15, 30, 45, 75, 90)),
)  # fmt: skip


def _t_chain(rng: random.Random, task_id: str, seed: int) -> ToolsTask:
    template, piece_unit, to_unit, sizes = rng.choice(_CHAINS)
    n, size = rng.randint(2, 48), rng.choice(sizes)
    total = n * size
    result = convert_exactly(Fraction(total), piece_unit, to_unit)
    calls = [
        _call("calculator", expression=f"{n}*{size}"),
        _call("convert_units", value=total, from_unit=piece_unit, to_unit=to_unit),
    ]
    return _tools(
        task_id,
        seed,
        "calculator-units",
        "hard",
        template.format(n=n, size=size),
        functions=["calculator", "convert_units"],
        calls=calls,
        answer=decimal_text(result),
    )


TOOLS_FAMILIES: list[Callable[[random.Random, str, int], ToolsTask]] = [
    _t_arithmetic, _t_units, _t_temperature, _t_calendar, _t_lookup, _t_lookup_convert, _t_chain,
]  # fmt: skip


def generate_tools_tasks(n: int, seed: int) -> list[ToolsTask]:
    """`n` executable-tool tasks (arithmetic with the calculator, unit and temperature
    conversion, calendar questions, lookups over a small facts table, and chains of these), each
    with `answer`, a call budget, sometimes a forbidden tool, and a reference list of calls."""
    return _generate("tools", n, seed, TOOLS_FAMILIES)
