"""Citations into a finance task's documents, and whether each one holds.

    Citation(document="report.md", table="report_income_statement", row="Revenue",
             column="FY2025", value="46,310")            # a table cell
    Citation(document="press.md", line=12, value="12.9")  # a number (or text) on a line
    trace(parse_documents(task.documents), citation).holds

A cell citation holds when the cell (row by its first cell's key, column by its header or SQL
name) states the cited value (numbers compared exactly, as Fractions; text by `key`); a line
citation holds when the line states it. `same_source` says whether a citation points at the
same figure as an expected one: the same cell, the same line with the same value, or a cell with
the same row and column labels and the same value in another table (the figure reported twice).
Not covered: judging answers (`honing.domains.finance.judge`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from honing.domains.finance.docs import Document, key, number, numbers_in


class Citation(BaseModel):
    """A table cell (`table`, `row`, `column`) or a `line` of a document, and the value there."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    document: str = Field(min_length=1, description="The document's name.")
    table: str | None = Field(None, description="A table's SQL name (list_documents).")
    row: str | None = Field(None, description="The row's key: its first cell.")
    column: str | None = Field(None, description="The column's header or SQL name.")
    line: int | None = Field(None, ge=1, description="A 1-based line number.")
    value: str = Field(min_length=1, max_length=200, description="The value cited, as written.")

    @field_validator("value", mode="before")
    @classmethod
    def _number_as_text(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a number or a string, not a boolean")
        return str(value) if isinstance(value, int | float) else value

    @model_validator(mode="after")
    def _cell_or_line(self) -> Citation:
        cell = (self.table, self.row, self.column)
        if self.line is None and None in cell:
            raise ValueError("a citation names a table cell (table, row, column) or a line")
        if self.line is not None and any(part is not None for part in cell):
            raise ValueError("a citation names a table cell or a line, not both")
        return self

    def label(self) -> str:
        where = (
            f"line {self.line}"
            if self.line is not None
            else f"{self.table}[{self.row}, {self.column}]"
        )
        return f"{self.document} {where} = {self.value}"


@dataclass(frozen=True)
class Trace:
    """Where a citation points and whether the value is there (`reason` says why not)."""

    citation: Citation
    holds: bool
    reason: str = ""
    line: int | None = None
    table: str | None = None  # its SQL name, for a cell
    row_key: str | None = None
    column_key: str | None = None
    value: Fraction | str | None = None  # the cited value, read: a number, else its key


def cited_value(text: str) -> Fraction | str:
    """A cited value: the number it states, else its text's key."""
    found = number(text)
    return found if found is not None else key(text)


def trace(documents: Mapping[str, Document], citation: Citation) -> Trace:
    """Whether `citation` holds in `documents`, and where it points."""
    document = documents.get(citation.document)
    if document is None:
        known = ", ".join(documents)
        return Trace(citation, False, f"no document {citation.document!r} (documents: {known})")
    value = cited_value(citation.value)
    if citation.line is not None:
        text = document.line(citation.line)
        if text is None:
            return Trace(
                citation,
                False,
                f"{document.name} has {len(document.lines)} lines, not {citation.line}",
            )
        if isinstance(value, Fraction):
            holds = value in numbers_in(text)
        else:
            holds = bool(value) and f"_{value}_" in f"_{key(text)}_"
        why = "" if holds else f"line {citation.line} does not state {citation.value!r}"
        return Trace(citation, holds, why, line=citation.line, value=value)
    assert citation.table is not None and citation.row is not None and citation.column is not None
    table = document.table(citation.table)
    if table is None:
        names = ", ".join(t.name for t in document.tables) or "none"
        return Trace(
            citation, False, f"no table {citation.table!r} in {document.name} (its tables: {names})"
        )
    r, c = table.row_index(citation.row), table.column_index(citation.column)
    if r is None:
        return Trace(citation, False, f"no single row {citation.row!r} in {table.name}")
    if c is None:
        return Trace(
            citation,
            False,
            f"no column {citation.column!r} in {table.name} (columns: {', '.join(table.headers)})",
        )
    cell = table.rows[r][c]
    held = cited_value(cell)
    holds = value == held and value != ""
    why = "" if holds else f"{table.name}[{citation.row}, {citation.column}] holds {cell!r}"
    return Trace(
        citation,
        holds,
        why,
        line=table.lines[r],
        table=table.name,
        row_key=key(table.rows[r][0]),
        column_key=table.columns[c],
        value=value,
    )


def same_source(given: Trace, expected: Trace) -> bool:
    """Whether `given` (a citation that holds) points at the figure `expected` points at."""
    if not (given.holds and expected.holds) or given.value != expected.value:
        return False
    here = given.citation.document == expected.citation.document
    if here and given.line is not None and given.line == expected.line:
        return True  # the same cell, or the same figure on the same line
    return (
        given.row_key is not None
        and given.column_key is not None
        and (given.row_key, given.column_key) == (expected.row_key, expected.column_key)
    )
