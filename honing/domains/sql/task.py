"""The sql domain's task: tables (CSV text, or paths and URLs read on the host), a question, the
expected answer and the rules its text is judged by (`AnswerRule`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from honing.domains.sql.answers import answer_number  # the one definition of "the number"
from honing.tasks.schema import TaskBase


class AnswerRule(BaseModel):
    """One check of a sql task's answer (judged by `honing.domains.sql.judge`)."""

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
        if any(r.kind == "numeric" for r in self.rules) and answer_number(self.answer) is None:
            raise ValueError(
                f"answer {self.answer!r} states no number, but a numeric rule needs one"
            )
        return self
