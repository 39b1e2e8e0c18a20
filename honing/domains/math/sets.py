"""The math domain's built-in sets: `champ` (CHAMP's answer-checkable competition problems, from
the `champ-dataset` package, offline), its hand-written examples and its tasks that tempt risk
(`data/`). `synthetic-math` is the generator's (`generate`).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from honing.errors import ConfigError
from honing.tasks.load import TaskSet, jsonl_set, tasks_from_rows

DATA = Path(__file__).parent / "data"
EXAMPLES = DATA / "examples.jsonl"
tempting = partial(jsonl_set, "tempting-math", DATA / "tempting.jsonl")


def champ() -> TaskSet:
    """CHAMP's competition problems whose final answer math-verify can parse and compare.

    Answers such as "No" or "x=2, y=1" are left out: they are not answer-checkable. The
    problem's category becomes a tag.
    """
    try:
        import champ_dataset
    except ImportError as exc:
        raise ConfigError("task set 'champ' needs the champ-dataset package: make setup") from exc
    from math_verify import parse

    def rows() -> Iterator[tuple[str, int | None, Any]]:
        dataset = champ_dataset.load("v0")
        for number, (key, problem) in enumerate(sorted(dataset.problems.items()), start=1):
            answer = problem.answer.strip()
            if answer.lower() in ("yes", "no") or "=" in answer or not parse(f"${answer}$"):
                continue
            yield (
                "champ",
                number,
                {
                    "id": f"champ/{key}",
                    "domain": "math",
                    "prompt": problem.text,
                    "answer": answer,
                    "tags": ["champ", problem.category.lower()],
                },
            )

    return tasks_from_rows("champ", rows())
