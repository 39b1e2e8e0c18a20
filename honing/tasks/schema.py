"""The typed task record, one model per domain, told apart by the `domain` field.

Covered: `TaskBase` and the `CodeTask` and `SqlTask` of domains not yet in a package of their own
(math's and tools' are in `honing.domains.<name>.task`), with their fields; every task has `domain`,
`id`, `prompt`, `tags`, an optional `reference` and free `metadata`, and an unknown field is an
error that names it. The union of every registered domain's model is
`honing.tasks.domains.task_adapter()`. docs/tasks.md ("One example per domain", "The modules in
detail") shows and describes each domain. Not covered: loading (`honing.tasks.load`) and checking
references (`honing.tasks.quality`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)


@dataclass(frozen=True)
class ReferenceVerdict:
    """The quality filter's verdict on one task: its reference (or a repair task's starting
    code) checked by the domain's own judge. `unverified`: the sandbox could not check it."""

    status: Literal["passed", "failed", "unverified"]
    reason: str = ""


class TaskBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: str = Field(description="Which domain's model reads the row (its `Literal`).")
    id: str = Field(min_length=1, description="Unique within a task set.")
    prompt: str = Field(min_length=1, description="What the model is asked.")
    tags: list[str] = Field(default_factory=list, description="Free labels; metrics group by them.")
    reference: str | None = Field(None, description="A known-good solution, checked on load.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Carried, never read.")

    @field_validator("id")
    @classmethod
    def _id_is_clean(cls, value: str) -> str:
        if value != value.strip() or "\n" in value:
            raise ValueError("must not start or end with whitespace or contain a newline")
        return value


CODE_SOLUTION = "solution.py"  # where a code task's solution lives in the workspace


class CodeTask(TaskBase):
    domain: Literal["code"] = "code"
    entry_point: str = Field(min_length=1, description="The function the solution must define.")
    tests: str = Field(min_length=1, description="Python that raises when the solution is wrong.")
    files: dict[str, str] = Field(
        default_factory=dict,
        description="Workspace files at the start of an episode: relative path → text. A "
        "`solution.py` among them is the code to fix (else solution.py starts as the prompt).",
    )

    @field_validator("files")
    @classmethod
    def _files_stay_in_the_workspace(cls, value: dict[str, str]) -> dict[str, str]:
        for path in value:
            parts = PurePosixPath(path).parts
            if not path.strip() or path.startswith("/") or "\\" in path or ".." in parts:
                raise ValueError(
                    f"file path {path!r} must be relative to the workspace (no leading '/', "
                    "no '..', no backslash)"
                )
        return value

    @property
    def repair(self) -> bool:
        """The task ships the solution to fix (`files` holds solution.py)."""
        return CODE_SOLUTION in self.files


class AnswerRule(BaseModel):
    """One check of a sql task's answer (judged by `honing.tasks.sqlcheck`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["numeric", "mentions", "traceable", "consistent"] = Field(
        description="numeric: the answer's number equals the number of the task's `answer` within "
        "`tolerance`; mentions: the answer names `text` (e.g. the id of an anomalous row) and none "
        "of `excludes`; traceable: the answer shows a SQL query over the tables that yields its "
        "number; consistent: each of `queries` (e.g. a total from two tables) yields the answer's "
        "number, so the answer reconciles across tables."
    )
    tolerance: float = Field(
        0.0, ge=0, description="Relative tolerance of numeric, traceable and consistent rules; "
        "0 means equal up to float rounding."
    )  # fmt: skip
    text: str | None = Field(None, min_length=1, description="mentions: what must be named.")
    excludes: list[str] = Field(
        default_factory=list,
        description="mentions: what must not be named (e.g. the ids of the normal rows, so that "
        "an answer listing every row does not pass).",
    )
    queries: list[str] = Field(
        default_factory=list, description="consistent: SQL queries, each yielding one value."
    )

    @model_validator(mode="after")
    def _fields_fit_the_kind(self) -> AnswerRule:
        if (self.kind == "mentions") != (self.text is not None):
            raise ValueError("`text` is required by mentions rules, and only allowed there")
        if self.excludes and self.kind != "mentions":
            raise ValueError("`excludes` applies to mentions rules only")
        if self.kind == "mentions" and self.tolerance:
            raise ValueError("`tolerance` does not apply to mentions rules")
        if (self.kind == "consistent") != bool(self.queries):
            raise ValueError("`queries` is required by consistent rules, and only allowed there")
        if self.kind == "consistent" and len(self.queries) < 2:
            raise ValueError("a consistent rule compares at least two `queries`")
        return self


TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class SqlTask(TaskBase):
    domain: Literal["sql"] = "sql"
    tables: dict[str, str] = Field(
        min_length=1,
        description="Table name (a SQL identifier) → CSV text, or the path/URL of a .csv, "
        ".csv.gz or .parquet file (a relative path is read from the current directory).",
    )
    answer: str = Field(min_length=1, description="The expected final answer.")
    rules: list[AnswerRule] = Field(
        default_factory=lambda: [AnswerRule(kind="numeric")],
        min_length=1,
        description="How an answer is judged; by default its number must equal `answer`'s.",
    )

    @field_validator("tables")
    @classmethod
    def _tables_are_named_and_filled(cls, value: dict[str, str]) -> dict[str, str]:
        for name, source in value.items():
            if not TABLE_NAME.match(name):
                raise ValueError(
                    f"table name {name!r} is not a SQL identifier ([A-Za-z_][A-Za-z0-9_]*)"
                )
            if not source.strip():
                raise ValueError(f"table {name!r} is empty")
        return value

    @model_validator(mode="after")
    def _numeric_rules_have_a_number(self) -> SqlTask:
        from honing.tasks.sqlcheck import answer_number  # the one definition of "the number"

        if any(r.kind == "numeric" for r in self.rules) and answer_number(self.answer) is None:
            raise ValueError(
                f"answer {self.answer!r} states no number, but a numeric rule needs one"
            )
        return self
