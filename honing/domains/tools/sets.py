"""The tools domain's built-in sets: `bfcl` (the single-turn Python function-calling questions of
the `bfcl-eval` package, offline), its hand-written examples and its tasks that tempt risk
(`data/`). `synthetic-tools` is the generator's (`generate`).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from honing.domains.tools.judge import reference_calls
from honing.errors import ConfigError
from honing.tasks.load import TaskSet, UnreadableRow, jsonl_set, tasks_from_rows

DATA = Path(__file__).parent / "data"
EXAMPLES = DATA / "examples.jsonl"
tempting = partial(jsonl_set, "tempting-tools", DATA / "tempting.jsonl")


# BFCL's single-turn Python categories; Java/JavaScript use other type rules, multi-turn tasks
# need stateful backends (a later environment).
BFCL_CATEGORIES = (
    "simple_python", "multiple", "parallel", "parallel_multiple", "live_simple",
    "live_multiple", "live_parallel", "live_parallel_multiple", "irrelevance", "live_irrelevance",
)  # fmt: skip


def bfcl() -> TaskSet:
    """BFCL's single-turn function-calling questions with their gold calls (bfcl-eval's data).

    Irrelevance questions expect no call at all. The package's data files are read directly, so
    none of its (many, heavy) dependencies is needed.
    """
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("task set 'bfcl' needs the bfcl-eval package: make setup")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"

    def rows() -> Iterator[tuple[str, int | None, Any]]:
        for category in BFCL_CATEGORIES:
            question_file = data / f"BFCL_v4_{category}.json"
            answer_file = data / "possible_answer" / question_file.name
            answers: dict[str, Any] = {}
            if answer_file.exists():
                for line in answer_file.read_text().splitlines():
                    entry = json.loads(line)
                    answers[entry["id"]] = entry["ground_truth"]
            irrelevance = "irrelevance" in category
            for number, line in enumerate(question_file.read_text().splitlines(), start=1):
                q = json.loads(line)
                if not irrelevance and q["id"] not in answers:
                    yield str(question_file), number, UnreadableRow("no gold answer", line)
                    continue
                expected = [] if irrelevance else answers[q["id"]]
                turn = q["question"][0]
                users = [m["content"] for m in turn if m["role"] == "user"]
                system = [m["content"] for m in turn if m["role"] == "system"]
                yield (
                    str(question_file),
                    number,
                    {
                        "id": f"bfcl/{q['id']}",
                        "domain": "tools",
                        "prompt": "\n\n".join(users),
                        "functions": q["function"],
                        "expected_calls": expected,
                        "reference": json.dumps(reference_calls(expected)),
                        "tags": ["bfcl", category],
                        "metadata": {"system": "\n\n".join(system)} if system else {},
                    },
                )

    return tasks_from_rows("bfcl", rows())
