"""What the synthetic domains share: drawing `n` distinct tasks from families in turn, the
tags and metadata every task carries, the held-out phrasings (`Wording`, `phrase`,
`UNSEEN_TAG`).

The random stream of a domain is seeded by `honing.tasks.synthetic/<domain>/<seed>`, a string
kept as it was when everything lived in one module: changing it would change every task.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

from honing.tasks.load import AnyTask, question_key
from honing.tasks.schema import TaskBase

T = TypeVar("T", bound=TaskBase)

TWO_DIGITS = [b for b in range(11, 100) if b % 10]  # a multiple of 10 makes it too easy

Phrasings = Literal["train", "heldout"]
UNSEEN_TAG = "phrasing-unseen"  # a held-out task phrased in a way no training task is
UNSEEN_SHARE = 0.5  # of a held-out set's tasks


@dataclass(frozen=True)
class Wording:
    """One problem's phrasings: those training draws from, and those kept for held-out sets.
    `seen` as one string is the one training wording, taken without a draw: a family worded
    one way before it had held-out wordings keeps its training tasks as they were (a tuple of
    one is drawn from, as `rng.choice` over it always was)."""

    seen: str | tuple[str, ...]
    unseen: tuple[str, ...]


def phrase(
    rng: random.Random, phrasings: Phrasings, wording: Wording, **fields: Any
) -> tuple[str, bool]:
    """A prompt from `wording` filled in with `fields`, and whether it is unseen: with
    `phrasings="heldout"`, `UNSEEN_SHARE` of them are (no draw at all for "train")."""
    unseen = phrasings == "heldout" and rng.random() < UNSEEN_SHARE
    if unseen:
        template = rng.choice(wording.unseen)
    elif isinstance(wording.seen, str):
        template = wording.seen
    else:
        template = rng.choice(wording.seen)
    return template.format(**fields), unseen


def _rng(domain: str, seed: int) -> random.Random:
    # A string seed is hashed with SHA-512 by `random`: stable across runs and machines.
    return random.Random(f"honing.tasks.synthetic/{domain}/{seed}")


def _content_key(task: AnyTask) -> str:
    """Two tasks with the same key are one problem: what a task of a domain with its own
    `question_key` asks, whatever its wording; any other task's content."""
    from honing.tasks.domains import registry

    domain = registry().get(task.domain)
    if domain is not None and domain.question_key is not None:
        return question_key(task)
    return json.dumps(
        task.model_dump(mode="json", exclude={"id", "tags", "metadata", "reference"}),
        sort_keys=True,
    )


def check_phrasings(phrasings: str) -> None:
    """ValueError unless `phrasings` is one of `Phrasings`."""
    if phrasings not in get_args(Phrasings):
        raise ValueError(f"phrasings must be one of {get_args(Phrasings)}, not {phrasings!r}")


def generate_phrased(
    domain: str,
    n: int,
    seed: int,
    families: list[Callable[[random.Random, str, int, Phrasings], T]],
    phrasings: Phrasings,
) -> list[T]:
    """`generate` over families that take the phrasings too, all called with `phrasings`."""
    check_phrasings(phrasings)

    def worded(
        family: Callable[[random.Random, str, int, Phrasings], T],
    ) -> Callable[[random.Random, str, int], T]:
        return lambda rng, task_id, seed: family(rng, task_id, seed, phrasings)

    return generate(domain, n, seed, [worded(f) for f in families])


def generate(
    domain: str, n: int, seed: int, families: list[Callable[[random.Random, str, int], T]]
) -> list[T]:
    """`n` distinct tasks of `domain` for `seed`, the families taking turns; a task that repeats
    an earlier one's content (`_content_key`) is drawn again."""
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


def family_tags(family: str, difficulty: str) -> list[str]:
    return ["synthetic", family, difficulty]


def family_metadata(family: str, seed: int) -> dict[str, Any]:
    return {"generator": "honing.tasks.synthetic", "family": family, "seed": seed}
