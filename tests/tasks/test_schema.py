"""The task record: one model per domain, unknown fields and dirty ids rejected."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from honing.domains.code.task import CodeTask
from honing.domains.math.task import MathTask
from honing.tasks import domains, tasks_from_rows

TASK_ADAPTER = domains.task_adapter()

CODE = {
    "id": "c1",
    "domain": "code",
    "prompt": "def f(): ...",
    "entry_point": "f",
    "tests": "assert f() == 1",
}
MATH = {"id": "m1", "domain": "math", "prompt": "1 + 1?", "answer": "2"}


def invalid_fields(row: Any) -> list[str | None]:
    """The `field` of each quarantine entry when `row` is loaded alone."""
    taskset = tasks_from_rows("t", iter([("t.jsonl", 1, row)]))
    assert taskset.tasks == []
    return [q.field for q in taskset.quarantined]


def test_code_task_validates() -> None:
    task = TASK_ADAPTER.validate_python({**CODE, "reference": "def f(): return 1", "tags": ["x"]})
    assert isinstance(task, CodeTask)
    assert (task.id, task.entry_point, task.tests) == ("c1", "f", "assert f() == 1")
    assert task.reference == "def f(): return 1"
    assert task.tags == ["x"] and task.metadata == {}


def test_math_task_validates() -> None:
    task = TASK_ADAPTER.validate_python({**MATH, "metadata": {"level": 3}})
    assert isinstance(task, MathTask)
    assert task.answer == "2" and task.reference is None and task.metadata == {"level": 3}


def test_domains_include_code_and_math() -> None:
    assert {"code", "math", "tools", "sql"} <= set(domains.names())


@pytest.mark.parametrize(
    ("row", "field"),
    [
        pytest.param({**MATH, "domain": "astrology"}, "domain", id="unknown-domain"),
        pytest.param({k: v for k, v in MATH.items() if k != "domain"}, "domain", id="no-domain"),
        pytest.param({**CODE, "solution": "x"}, "solution", id="unknown-field-code"),
        pytest.param({**MATH, "entry_point": "f"}, "entry_point", id="code-field-on-math"),
        pytest.param({k: v for k, v in CODE.items() if k != "tests"}, "tests", id="no-tests"),
        pytest.param({k: v for k, v in MATH.items() if k != "answer"}, "answer", id="no-answer"),
        pytest.param({k: v for k, v in MATH.items() if k != "prompt"}, "prompt", id="no-prompt"),
        pytest.param({k: v for k, v in MATH.items() if k != "id"}, "id", id="no-id"),
        pytest.param({**MATH, "answer": ""}, "answer", id="empty-answer"),
    ],
)
def test_invalid_rows_are_rejected_naming_the_field(row: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError):
        TASK_ADAPTER.validate_python(row)
    assert invalid_fields(row) == [field]


@pytest.mark.parametrize("task_id", [" m1", "m1 ", "\tm1", "m1\n", "m\n1", "   "])
def test_ids_with_surrounding_whitespace_or_newlines_are_rejected(task_id: str) -> None:
    with pytest.raises(ValidationError):
        TASK_ADAPTER.validate_python({**MATH, "id": task_id})
    assert invalid_fields({**MATH, "id": task_id}) == ["id"]


def test_id_with_inner_space_is_allowed() -> None:
    assert TASK_ADAPTER.validate_python({**MATH, "id": "set a/1"}).id == "set a/1"


def test_tasks_are_frozen() -> None:
    task = TASK_ADAPTER.validate_python(MATH)
    with pytest.raises(ValidationError):
        task.answer = "3"  # type: ignore[misc]
