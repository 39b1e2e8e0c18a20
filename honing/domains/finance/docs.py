"""Reading a finance task's documents: numbered lines, Markdown sections and pipe tables, CSV
tables, and the numbers they state.

    docs = parse_documents({"report.md": text, "quarterly.csv": csv_text})
    docs["report.md"].tables[0].cell("Revenue", "FY2025")   # ('46,310', 24): as written, line

Every Markdown pipe table and every CSV document is a `Table` with a stable SQL name
(`<document stem>_<heading>`, or the stem for a CSV), SQL column names (`key` of the header) and
its rows by key (the first cell). `number` reads one figure as written ("46,310", "-3.5%",
"$48.2", "(1,234)") exactly, as a Fraction. `create_sql` is the DDL that loads the tables (all,
or those named) into DuckDB. Pure and host-side: no model output is run here. Not covered:
escaped pipes (`\\|`) inside Markdown cells, multi-line CSV fields (a row's line is where it
ends).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,78}\.(md|csv)$")
MAX_LINES = 5000  # of one document
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
SEPARATOR = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_CELL_NUMBER = re.compile(
    r"^(?P<open>\()?(?P<sign>[-+−])?[$€£]?(?P<digits>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
    r"|\.\d+)%?(?(open)\))$"
)
_LINE_NUMBER = re.compile(
    r"(?<![\w.,])(?P<sign>[-−])?[$€£]?(?P<digits>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?![\w]|[.,]\d)"
)
EMPTY = {"", "-", "—", "–", "n/a", "na"}


def key(text: str) -> str:
    """A label as a key: case-folded, every run of other characters than letters and digits one
    underscore ("Cost of revenue" and "cost_of_revenue" are the same key)."""
    return re.sub(r"[^0-9a-z]+", "_", text.casefold()).strip("_")


def number(text: str) -> Fraction | None:
    """A figure as written ("46,310", "-3.5", "12.9%", "$48.2", "(1,234)" for -1234), exactly;
    None when `text` is not one number."""
    match = _CELL_NUMBER.match(text.strip().replace(" ", ""))
    if match is None:
        return None
    value = Fraction(match["digits"].replace(",", ""))
    negative = bool(match["open"]) != (match["sign"] in ("-", "−"))
    return -value if negative else value


def numbers_in(line: str) -> list[Fraction]:
    """Every number a line of prose states, as written (not the digits inside words: Q3, FY2025)."""
    found = []
    for match in _LINE_NUMBER.finditer(line):
        value = Fraction(match["digits"].replace(",", ""))
        found.append(-value if match["sign"] else value)
    return found


@dataclass(frozen=True)
class Table:
    """One table of a document: its cells as written, each row's line, its SQL names."""

    name: str  # the SQL table name
    document: str
    title: str  # the heading above it (Markdown) or the document's name (CSV)
    headers: tuple[str, ...]  # as written
    columns: tuple[str, ...]  # SQL column names: the headers' keys, made unique
    rows: tuple[tuple[str, ...], ...]  # cells as written
    lines: tuple[int, ...]  # the 1-based line of each row
    header_line: int

    def row_index(self, row: str) -> int | None:
        """The row whose first cell has the key of `row`; None when none or several do."""
        found = [i for i, r in enumerate(self.rows) if r and key(r[0]) == key(row)]
        return found[0] if len(found) == 1 else None

    def column_index(self, column: str) -> int | None:
        """The column whose header or SQL name has the key of `column`."""
        wanted = key(column)
        for i, (header, sql) in enumerate(zip(self.headers, self.columns, strict=True)):
            if wanted in (key(header), sql):
                return i
        return None

    def cell(self, row: str, column: str) -> tuple[str, int] | None:
        """(the cell as written, its line), or None when the row or the column is not there."""
        r, c = self.row_index(row), self.column_index(column)
        if r is None or c is None:
            return None
        return self.rows[r][c], self.lines[r]

    def types(self) -> list[str]:
        """DuckDB types: BIGINT when every non-empty cell is a whole number, DOUBLE when every one
        is a number, VARCHAR otherwise."""
        out = []
        for i in range(len(self.columns)):
            cells = [r[i] for r in self.rows if r[i].strip().casefold() not in EMPTY]
            values = [number(c) for c in cells]
            if not cells or any(v is None or abs(v) >= 10**300 for v in values):
                out.append("VARCHAR")
            elif all(v is not None and v.denominator == 1 and abs(v) < 2**63 for v in values):
                out.append("BIGINT")
            else:
                out.append("DOUBLE")
        return out

    def describe(self, max_keys: int = 12) -> str:
        """One line for list_documents: name, lines, columns with types, row keys."""
        keys = [r[0] for r in self.rows[:max_keys]]
        more = f", … ({len(self.rows)} rows)" if len(self.rows) > max_keys else ""
        columns = ", ".join(f"{c} {t}" for c, t in zip(self.columns, self.types(), strict=True))
        last = self.lines[-1] if self.lines else self.header_line
        return (
            f"table {self.name} ('{self.title}', lines {self.header_line}-{last}): columns "
            f"{columns}; rows: {', '.join(keys)}{more}"
        )


@dataclass(frozen=True)
class Document:
    name: str
    kind: Literal["markdown", "csv"]
    lines: tuple[str, ...]
    sections: tuple[tuple[str, int, int], ...]  # (heading, first line, last line)
    tables: tuple[Table, ...]

    def line(self, number: int) -> str | None:
        return self.lines[number - 1] if 1 <= number <= len(self.lines) else None

    def table(self, name: str) -> Table | None:
        return next((t for t in self.tables if key(t.name) == key(name)), None)


def parse_documents(documents: Mapping[str, str]) -> dict[str, Document]:
    """Every document parsed, its tables named uniquely across the task; ValueError naming the
    document when one cannot be read (a bad name, no text, a CSV without rows)."""
    out: dict[str, Document] = {}
    taken: set[str] = set()
    for name, text in documents.items():
        if not NAME.match(name):
            raise ValueError(
                f"document name {name!r}: use letters, digits, '_', '.', '-' and end in .md or .csv"
            )
        try:
            out[name] = _parse(name, text, taken)
        except ValueError as exc:
            raise ValueError(f"document {name!r}: {exc}") from exc
    return out


def _unique(name: str, taken: set[str]) -> str:
    name = name or "table"
    found, n = name, 1
    while found in taken:
        n += 1
        found = f"{name}_{n}"
    taken.add(found)
    return found


def _parse(name: str, text: str, taken: set[str]) -> Document:
    if not text.strip():
        raise ValueError("is empty")
    lines = tuple(text.splitlines())
    if len(lines) > MAX_LINES:
        raise ValueError(f"has {len(lines)} lines; at most {MAX_LINES}")
    stem = key(name.rsplit(".", 1)[0]) or "doc"
    if name.endswith(".csv"):
        return Document(name, "csv", lines, (), (_csv_table(name, stem, text, taken),))
    sections: list[tuple[str, int, int]] = []
    tables: list[Table] = []
    heading = ""
    i = 0
    while i < len(lines):
        found = HEADING.match(lines[i])
        if found and not lines[i].lstrip().startswith("|"):
            heading = found.group(2)
            if sections:
                title, first, _ = sections[-1]
                sections[-1] = (title, first, i)
            sections.append((heading, i + 1, len(lines)))
        if (
            lines[i].lstrip().startswith("|")
            and i + 1 < len(lines)
            and SEPARATOR.match(lines[i + 1].strip())
        ):
            end = i + 2
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            table_name = _unique(f"{stem}_{key(heading)[:32]}".rstrip("_"), taken)
            tables.append(_markdown_table(name, table_name, heading or name, lines, i, end))
            i = end
            continue
        i += 1
    return Document(name, "markdown", lines, tuple(sections), tuple(tables))


def _split_row(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return [c.strip() for c in inner.split("|")]


def _columns(headers: list[str]) -> tuple[str, ...]:
    taken: set[str] = set()
    return tuple(_unique(key(h) or f"col{i + 1}", taken) for i, h in enumerate(headers))


def _markdown_table(
    document: str, name: str, title: str, lines: tuple[str, ...], start: int, end: int
) -> Table:
    headers = _split_row(lines[start])
    width = len(headers)
    rows, numbers = [], []
    for i in range(start + 2, end):
        cells = (_split_row(lines[i]) + [""] * width)[:width]
        rows.append(tuple(cells))
        numbers.append(i + 1)
    return Table(
        name,
        document,
        title,
        tuple(headers),
        _columns(headers),
        tuple(rows),
        tuple(numbers),
        start + 1,
    )


def _csv_table(document: str, stem: str, text: str, taken: set[str]) -> Table:
    reader = csv.reader(io.StringIO(text))
    headers: list[str] | None = None
    header_line = 0
    rows, numbers = [], []
    try:
        for record in reader:
            if not any(c.strip() for c in record):
                continue
            if headers is None:
                headers, header_line = [c.strip() for c in record], reader.line_num
                continue
            width = len(headers)
            rows.append(tuple(([c.strip() for c in record] + [""] * width)[:width]))
            numbers.append(reader.line_num)
    except csv.Error as exc:
        raise ValueError(f"is not CSV: {exc}") from exc
    if headers is None or not rows:
        raise ValueError("a CSV document needs a header line and at least one row")
    return Table(
        _unique(stem, taken),
        document,
        document,
        tuple(headers),
        _columns(headers),
        tuple(rows),
        tuple(numbers),
        header_line,
    )


def sql_literal(cell: str, kind: str) -> str:
    """A cell as written, as a SQL literal of its column's DuckDB type (`Table.types`)."""
    if cell.strip().casefold() in EMPTY:
        return "NULL"
    if kind != "VARCHAR":
        value = number(cell)
        assert value is not None
        return str(value.numerator) if kind == "BIGINT" else repr(float(value))
    return "'" + cell.replace("'", "''") + "'"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_sql(table: Table) -> str:
    """The statements that create `table` in DuckDB, with its rows (typed: `Table.types`)."""
    types = table.types()
    columns = ", ".join(f"{_quoted(c)} {t}" for c, t in zip(table.columns, types, strict=True))
    statements = [f"CREATE TABLE {_quoted(table.name)} ({columns})"]
    if table.rows:
        values = ", ".join(
            "(" + ", ".join(sql_literal(c, t) for c, t in zip(row, types, strict=True)) + ")"
            for row in table.rows
        )
        statements.append(f"INSERT INTO {_quoted(table.name)} VALUES {values}")
    return ";\n".join(statements)


def create_sql(documents: Mapping[str, Document], names: Collection[str] | None = None) -> str:
    """The statements that create the tables of `documents` (those in `names`, else all)."""
    return ";\n".join(
        table_sql(table)
        for document in documents.values()
        for table in document.tables
        if names is None or table.name in names
    )
