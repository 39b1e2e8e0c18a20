"""Reading a run's store back: as `Trajectory` records, or with SQL through DuckDB.

    read_trajectories(run_dir)                  every trajectory, in the order written
    iter_trajectories(run_dir, offset=1000)     shard by shard, skipping the first 1000 rows
    query(run_dir, "SELECT domain, avg(reward) FROM trajectories GROUP BY 1")  -> QueryResult
    describe(run_dir)                           the views and their columns (format_views)
    format_text(result) / rich_table(result)    a result for the terminal

Two views over all complete shards, `trajectories` and `turns`, united by column name so older
shards still read (docs/rollout.md, "The store in detail", lists their columns and how to query
maps and tool calls). A missing store, a corrupted shard and a failed query raise `StoreError`
saying what was expected, which file, or which views and columns exist. Not covered here:
writing (`honing.store.writer`), summaries (`honing.eval.summary`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from rich.table import Table
from rich.text import Text

from honing.errors import StoreError
from honing.records import Trajectory
from honing.store.files import Shard, complete_shards
from honing.store.schema import from_table

VIEWS = ("trajectories", "turns")


# -- records -----------------------------------------------------------------------------------
def iter_trajectories(run_dir: str | Path, *, offset: int = 0) -> Iterator[Trajectory]:
    """The trajectories of `run_dir` in the order they were written, from row `offset` on, one
    shard in memory at a time."""
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    for shard in complete_shards(run_dir):
        if offset >= shard.rows:
            offset -= shard.rows
            continue
        table = read_shard(shard)
        if offset:
            table, offset = table.slice(offset), 0
        try:
            yield from from_table(table)
        except (StoreError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{shard.path}: not a readable trajectory shard ({exc})") from exc


def read_trajectories(
    run_dir: str | Path, *, offset: int = 0, limit: int | None = None
) -> list[Trajectory]:
    """The trajectories of `run_dir` from row `offset` on (at most `limit` of them)."""
    out: list[Trajectory] = []
    for trajectory in iter_trajectories(run_dir, offset=offset):
        if limit is not None and len(out) >= limit:
            break
        out.append(trajectory)
    return out


def read_shard(shard: Shard, columns: Sequence[str] | None = None) -> pa.Table:
    """One shard as an Arrow table; a corrupted one raises `StoreError` naming the file."""
    try:
        return pq.read_table(shard.path, columns=list(columns) if columns else None)
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"{shard.path}: corrupted trajectory shard ({exc})") from exc


# -- SQL ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    types: list[str]  # DuckDB type names
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass(frozen=True)
class View:
    name: str
    columns: list[Column]

    def signature(self, type_width: int = 24) -> str:
        """`name(col TYPE, …)` with long types (structs, maps) shortened."""
        cols = ", ".join(f"{c.name} {_short_type(c.type, type_width)}" for c in self.columns)
        return f"{self.name}({cols})"


def query(run_dir: str | Path, sql: str) -> QueryResult:
    """Run `sql` against the views `trajectories` and `turns` of `run_dir`."""
    shards = complete_shards(run_dir)
    with _connect(run_dir, shards) as con:
        try:
            cursor = con.execute(sql)
        except duckdb.Error as exc:
            # DuckDB does not say which file a damaged page is in: find it (on this path only).
            if not isinstance(exc, duckdb.ProgrammingError | duckdb.DataError):
                _raise_if_corrupted(con, shards, exc)
            views = "\n".join(f"  {v.signature()}" for v in _describe(con))
            raise StoreError(f"query failed: {exc}\nthe views of {run_dir}:\n{views}") from exc
        if cursor.description is None:  # a statement that returns nothing
            return QueryResult([], [], [])
        columns = [d[0] for d in cursor.description]
        types = [str(d[1]) for d in cursor.description]
        return QueryResult(columns, types, cursor.fetchall())


def describe(run_dir: str | Path) -> list[View]:
    """The views of `run_dir` and their columns (names and DuckDB types)."""
    with _connect(run_dir, complete_shards(run_dir)) as con:
        return _describe(con)


def _connect(run_dir: str | Path, shards: Sequence[Shard]) -> duckdb.DuckDBPyConnection:
    files = ", ".join(_sql_string(str(s.path)) for s in shards)
    con = duckdb.connect(":memory:")
    try:
        con.execute(
            "CREATE VIEW trajectories AS "
            f"SELECT * FROM read_parquet([{files}], union_by_name = true)"
        )
        con.execute(
            "CREATE VIEW turns AS "
            "SELECT trajectory_id, task_id, domain, sample, group_id, turn_index, unnest(turn) "
            "FROM (SELECT id AS trajectory_id, task_id, domain, sample, group_id, "
            "unnest(turns) AS turn, generate_subscripts(turns, 1) - 1 AS turn_index "
            "FROM trajectories)"
        )
        con.execute("SELECT * FROM turns LIMIT 0")  # binds the views: reads every footer
    except duckdb.Error as exc:
        con.close()
        raise StoreError(f"{run_dir}: cannot read the trajectory shards ({exc})") from exc
    return con


def _raise_if_corrupted(
    con: duckdb.DuckDBPyConnection, shards: Sequence[Shard], error: duckdb.Error
) -> None:
    for shard in shards:
        try:
            relation = con.sql(f"SELECT * FROM read_parquet({_sql_string(str(shard.path))})")
            for _ in relation.to_arrow_reader():  # batch by batch: bounded memory
                pass
        except (duckdb.Error, OSError, pa.ArrowException) as exc:
            raise StoreError(f"{shard.path}: corrupted trajectory shard ({exc})") from error


def _describe(con: duckdb.DuckDBPyConnection) -> list[View]:
    return [
        View(name, [Column(r[0], r[1]) for r in con.execute(f"DESCRIBE {name}").fetchall()])
        for name in VIEWS
    ]


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _short_type(name: str, width: int) -> str:
    """`STRUCT(…)[]` for a long struct type, so the list suffix stays visible."""
    if len(name) <= width:
        return name
    base = name.rstrip("[]")
    return f"{base.split('(', 1)[0]}(…){name[len(base) :]}"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# -- formatting --------------------------------------------------------------------------------
def format_cell(value: Any, width: int = 40) -> str:
    """One value for the terminal: NULL for None, floats to 6 significant digits, lists past 8
    items counted, everything cut to `width` characters on one line."""
    text = value if isinstance(value, str) else _render(value)
    return _short(text.replace("\n", "⏎"), width)


def _render(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str):
        return repr(value)  # inside a list or struct: quoted, so "" shows
    if isinstance(value, list | tuple):
        items = ", ".join(_render(v) for v in value[:8])
        more = f", … {len(value)} items" if len(value) > 8 else ""
        return f"[{items}{more}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_render(v)}" for k, v in value.items()) + "}"
    return str(value)


def format_text(result: QueryResult, *, max_rows: int = 100, width: int = 40) -> str:
    """Aligned plain-text columns, a header line, and a count of rows left out."""
    header = result.columns
    body = [[format_cell(v, width) for v in row] for row in result.rows[:max_rows]]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
    lines.append(_rows_line(result, max_rows))
    return "\n".join(lines)


def rich_table(result: QueryResult, *, max_rows: int = 100, width: int = 40) -> Table:
    """The result as a rich `Table`, the row count (and rows left out) as its caption."""
    table = Table(caption=_rows_line(result, max_rows))
    for name, type_name in zip(result.columns, result.types, strict=True):
        numeric = any(t in type_name for t in ("INT", "DOUBLE", "FLOAT", "DECIMAL"))
        table.add_column(name, justify="right" if numeric else "left", overflow="fold")
    for row in result.rows[:max_rows]:
        table.add_row(*(Text(format_cell(v, width)) for v in row))  # no markup
    return table


def format_views(views: Sequence[View]) -> str:
    """`honing store query RUN --describe`-style text: each view, then its columns and types."""
    lines = []
    for view in views:
        lines.append(view.name)
        width = max(len(c.name) for c in view.columns)
        lines += [f"  {c.name.ljust(width)}  {c.type}" for c in view.columns]
    return "\n".join(lines)


def _rows_line(result: QueryResult, max_rows: int) -> str:
    n = len(result.rows)
    shown = f" ({n - max_rows} not shown)" if n > max_rows else ""
    return f"{n} row{'s' if n != 1 else ''}{shown}"
