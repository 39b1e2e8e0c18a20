"""Code tasks: short Python functions checked by top-level `assert` tests.

    generate_code_tasks(n, seed)   12 families, easy to hard; the reference is the prompt plus a
                                   correct body

`Function` (a function to write: signature, docstring, body, cases) and `CODE_FAMILIES` are
shared with `honing.domains.code.repair`, which breaks one token of each body.
"""

from __future__ import annotations

import itertools
import math
import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from honing.domains.code.task import CodeTask
from honing.tasks.synthetic.common import family_metadata, family_tags, generate

WORDS = (
    "apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "rocket", "garden", "silver",
    "window", "forest", "candle", "bridge", "planet", "orange", "yellow", "market", "basket",
    "engine", "island", "mirror", "pencil", "summer", "winter", "violet", "harbor", "meadow",
    "copper", "falcon", "quiet", "brave", "swift", "gentle", "ocean", "desert", "lantern", "maple",
)  # fmt: skip


@dataclass(frozen=True)
class Function:
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
            tags=family_tags(self.family, self.difficulty),
            metadata=family_metadata(self.family, seed),
        )


def _sentence(rng: random.Random, low: int = 2, high: int = 5) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _sum_of_digits(rng: random.Random) -> Function:
    values = [rng.randint(10 ** (k - 1), 10**k - 1) for k in rng.sample(range(2, 12), 5)]
    values.insert(rng.randint(1, 5), rng.randint(0, 9))
    return Function(
        "sum_of_digits",
        "easy",
        "sum_of_digits",
        "def sum_of_digits(n: int) -> int",
        "Return the sum of the decimal digits of the non-negative integer n.",
        "    return sum(int(digit) for digit in str(n))\n",
        [((v,), sum(int(d) for d in str(v))) for v in values],
    )


def _reverse_words(rng: random.Random) -> Function:
    sentences = [_sentence(rng) for _ in range(4)]
    sentences.append("  " + _sentence(rng).replace(" ", "   ") + " ")  # runs of whitespace
    sentences.append(rng.choice(WORDS))
    return Function(
        "reverse_words",
        "easy",
        "reverse_words",
        "def reverse_words(sentence: str) -> str",
        "Return the words of sentence in reverse order, joined by single spaces. Words are "
        "separated by runs of whitespace; leading and trailing whitespace is dropped.",
        "    return ' '.join(reversed(sentence.split()))\n",
        [((s,), " ".join(reversed(s.split()))) for s in sentences],
    )


def _clamp(rng: random.Random) -> Function:
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
    return Function(
        "clamp",
        "easy",
        "clamp",
        "def clamp(x: int) -> int",
        f"Return x limited to the range [{lo}, {hi}]: {lo} when x is below it, {hi} when x is "
        "above it, and x itself otherwise.",
        f"    return max({lo}, min({hi}, x))\n",
        [((v,), max(lo, min(hi, v))) for v in values],
    )


def _count_vowels(rng: random.Random) -> Function:
    vowels = "aeiouy" if rng.random() < 0.5 else "aeiou"
    listed = ", ".join(vowels)

    def mixed_case(text: str) -> str:
        return "".join(c.upper() if rng.random() < 0.3 else c for c in text)

    texts = [mixed_case(_sentence(rng, 1, 4)) for _ in range(5)] + [
        "rhythm" if rng.random() < 0.5 else ""
    ]
    return Function(
        "count_vowels",
        "easy",
        "count_vowels",
        "def count_vowels(text: str) -> int",
        f"Return how many characters of text are vowels ({listed}), in upper or lower case.",
        f"    return sum(1 for c in text.lower() if c in {vowels!r})\n",
        [((t,), sum(1 for c in t.lower() if c in vowels)) for t in texts],
    )


def _fizzbuzz(rng: random.Random) -> Function:
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
    return Function(
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


def _is_palindrome(rng: random.Random) -> Function:
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

    return Function(
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


def _shift_letters(rng: random.Random) -> Function:
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
    return Function(
        "shift_letters",
        "medium",
        "shift_letters",
        "def shift_letters(text: str) -> str",
        f"Return text with every ASCII letter moved {k} places forward in the alphabet, wrapping "
        "around from z to a and keeping its case; every other character stays as it is.",
        body,
        [((t,), shift(t)) for t in texts],
    )


def _second_largest(rng: random.Random) -> Function:
    lists = []
    for _ in range(5):
        values = [rng.randint(-50, 99) for _ in range(rng.randint(2, 8))]
        if len(set(values)) < 2:
            values.append(values[0] + rng.randint(1, 9))
        if rng.random() < 0.5:
            values.append(max(values))  # the largest twice
        rng.shuffle(values)
        lists.append(values)
    return Function(
        "second_largest",
        "medium",
        "second_largest",
        "def second_largest(numbers: list[int]) -> int",
        "Return the second largest distinct value in numbers, which holds at least two distinct "
        "values (a repeated largest value counts once).",
        "    return sorted(set(numbers))[-2]\n",
        [((v,), sorted(set(v))[-2]) for v in lists],
    )


def _count_multiples(rng: random.Random) -> Function:
    k = rng.randint(2, 13)
    bounds = []
    for _ in range(5):
        lo = rng.randint(-60, 150)
        bounds.append((lo, lo + rng.randint(0, 250)))
    bounds.append((k, k))
    rng.shuffle(bounds)
    return Function(
        "count_multiples",
        "medium",
        "count_multiples",
        "def count_multiples(lo: int, hi: int) -> int",
        f"Return how many integers x with lo <= x <= hi are divisible by {k} (lo <= hi; zero and "
        "negative numbers count too).",
        f"    return sum(1 for x in range(lo, hi + 1) if x % {k} == 0)\n",
        [((lo, hi), hi // k - (lo - 1) // k) for lo, hi in bounds],
    )


def _rotate_right(rng: random.Random) -> Function:
    k = rng.randint(1, 6)
    lists = [[rng.randint(0, 99) for _ in range(n)] for n in rng.sample(range(1, 10), 5)] + [[]]
    rng.shuffle(lists)

    def rotate(items: list[int]) -> list[int]:
        if not items:
            return []
        cut = len(items) - k % len(items)
        return items[cut:] + items[:cut]

    return Function(
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


def _run_length(rng: random.Random) -> Function:
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
    return Function(
        "run_length",
        "hard",
        "run_length",
        "def run_length(text: str) -> str",
        "Return the run-length encoding of text: each maximal run of one character becomes the "
        'run\'s length followed by the character, so "aaab" becomes "3a1b" and "" stays "".',
        body,
        [((t,), encode(t)) for t in texts],
    )


def _collatz_steps(rng: random.Random) -> Function:
    def steps(n: int) -> int:
        count = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            count += 1
        return count

    values = [rng.randint(2, 10**k) for k in (1, 2, 3, 4, 5)] + [1]
    rng.shuffle(values)
    return Function(
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


CODE_FAMILIES: list[Callable[[random.Random], Function]] = [
    _sum_of_digits, _reverse_words, _clamp, _count_vowels, _fizzbuzz, _is_palindrome,
    _shift_letters, _second_largest, _count_multiples, _rotate_right, _run_length, _collatz_steps,
]  # fmt: skip


def generate_code_tasks(n: int, seed: int) -> list[CodeTask]:
    """`n` short-function tasks (12 families, easy to hard) with assert tests and references."""

    def make(family: Callable[[random.Random], Function]) -> Callable[..., CodeTask]:
        return lambda rng, task_id, seed: family(rng).task(task_id, seed)

    return generate("code", n, seed, [make(f) for f in CODE_FAMILIES])
