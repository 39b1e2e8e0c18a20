"""The DuckDB query runner several domains give their models (sql, finance): the fixed program the
sandbox runs (`HARNESS`, which loads the tables and locks DuckDB's external access before any SQL
runs), the DuckDB sibling of a pool (`duckdb_pool`), a run's request (`query_request`) and its
reply (`parse_run`: results, tables, or the problem that kept it from replying), and what a
failed run means to an environment (`RUN_FAILURE`). The sandbox, not DuckDB's settings, is the
security boundary. Not covered: judging answers (each domain's judge) and the risk of a query's
statements (`honing.envs.kits.sqlrisk`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from honing.envs.base import FailureReason
from honing.risk import RiskEvent
from honing.sandbox import ExecRequest, ExecResult, ExecStatus, RuntimeStore, SandboxPool
from honing.tasks.checkrun import RunEnd, run_end

RUNTIME = "honing-sql"
DISTRIBUTIONS = ["duckdb"]
PRELOAD = ["duckdb"]
# Made once in each cell of the DuckDB sibling: an in-memory instance whose start (its catalog of
# functions) every run would otherwise pay; each run gets its own copy at the fork.
WARM = """
import duckdb
db = duckdb.connect(":memory:", config={"threads": 1})
db.execute("SELECT 1").fetchall()
"""
TABLE_DIR = "tables"
WORKSPACE_DB = "work.duckdb"
MEMORY_DB = ":memory:"
MAX_ROWS = 20
COUNT_CAP = 1_000_000  # rows counted, at most: a huge result is not worth a timeout
TIMEOUT_S = 10.0
TABLE_SUFFIXES = (".csv", ".csv.gz", ".parquet")

# The sandboxed programs' common part: one query run, its result as plain JSON values (the sql
# harness below, and the finance domain's). The model's SQL is data here: it reaches DuckDB,
# never Python.
QUERY_RUNNER = r"""
import json, os, sys

CELL_CHARS = 1000


def memory_db(duckdb, memory):
    # A fresh in-memory database: a connection to the cell's warm instance (WARM: made once in
    # the cell before the fork, so this job holds its own copy, as empty as new), else a new
    # instance, whose start costs tens of milliseconds.
    try:
        import honing_warm
        con = honing_warm.db.cursor()
    except (ImportError, AttributeError):
        return duckdb.connect(":memory:", config={"threads": 1, "memory_limit": memory})
    con.execute("SET memory_limit = '" + memory + "'")
    return con


def plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value[:CELL_CHARS] if isinstance(value, str) else value
    return str(value)[:CELL_CHARS]


def run(con, duckdb, sql, spec):
    max_rows, cap = spec["max_rows"], spec["count_cap"]
    try:
        if spec["select_only"]:
            statements = con.extract_statements(sql)
            if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
                return {"sql": sql, "error": "must be exactly one SELECT statement"}
        cursor = con.execute(sql)
        columns = [d[0] for d in cursor.description or []]
        types = [str(d[1]) for d in cursor.description or []]
        rows = cursor.fetchmany(max_rows + 1) if columns else []
        if columns == ["Count"] and not rows:  # a statement without a result (CREATE, DROP…)
            columns, types = [], []
        count, capped = len(rows), False
        if count > max_rows:
            while not capped and (batch := cursor.fetchmany(10000)):
                count += len(batch)
                capped = count > cap
        rows = [[plain(v) for v in row] for row in rows[:max_rows]]
        return {"sql": sql, "columns": columns, "types": types, "rows": rows,
                "row_count": min(count, cap), "capped": capped}
    except Exception as e:  # a SQL error, or a value DuckDB cannot hand to Python
        return {"sql": sql, "error": (str(e).strip() or type(e).__name__)[:2000]}
"""

# The sql domain's sandboxed program: load the task's tables, run the queries.
HARNESS = (
    QUERY_RUNNER
    + r"""

def tables(con):
    found = con.execute(
        "SELECT table_name, table_type FROM information_schema.tables "
        "WHERE table_schema = 'main' ORDER BY table_name").fetchall()
    out = []
    for name, kind in found:
        columns = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_name = ? ORDER BY ordinal_position",
            [name]).fetchall()
        quoted = '"' + name.replace('"', '""') + '"'
        try:
            rows = con.execute("SELECT count(*) FROM " + quoted).fetchone()[0]
        except Exception:  # a view the model broke, say
            rows = None
        out.append({"name": name, "view": kind == "VIEW",
                    "columns": [[c, t] for c, t in columns], "rows": rows})
    return out


def main():
    spec = json.loads(sys.stdin.read())
    import duckdb
    db = spec["db"]
    new = db == ":memory:" or not os.path.exists(db)
    if db == ":memory:":
        con = memory_db(duckdb, spec["memory"])
    else:
        con = duckdb.connect(db, config={"threads": 1, "memory_limit": spec["memory"]})
    if new:
        for name, path in spec["tables"].items():
            reader = "read_parquet" if path.endswith(".parquet") else "read_csv_auto"
            try:
                con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM {reader}(?)', [path])
            except Exception as e:
                con.close()
                for leftover in (db, db + ".wal"):
                    if db != ":memory:" and os.path.exists(leftover):
                        os.remove(leftover)
                return {"load_error": f"table {name}: {type(e).__name__}: {e}"[:2000]}
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    if spec["op"] == "tables":
        reply = {"tables": tables(con)}
    else:
        reply = {"results": [run(con, duckdb, q, spec) for q in spec["queries"]]}
    try:
        con.close()
    except Exception:  # a database the SQL left unusable: the reply stands
        pass
    return reply


print("\n" + json.dumps(main(), default=str))
"""
)


# -- tables --------------------------------------------------------------------------------


def table_path(name: str, source: str) -> str:
    """Where table `name` lives in a workspace: `tables/NAME.csv`, `.csv.gz` or `.parquet`."""
    suffix = _file_suffix(source) or ".csv"
    return f"{TABLE_DIR}/{name}{suffix}"


def table_files(tables: Mapping[str, str]) -> dict[str, str | bytes]:
    """Tables (name → CSV text, or a path or URL) as workspace files (relative path → bytes);
    paths and URLs are read here, on the host. A table that cannot be read is a ValueError
    naming it."""
    import fsspec

    files: dict[str, str | bytes] = {}
    for name, source in tables.items():
        if _file_suffix(source) is None:
            files[table_path(name, source)] = source.encode()
            continue
        try:
            with fsspec.open(source.strip(), "rb") as f:
                files[table_path(name, source)] = f.read()
        except (OSError, ValueError, ImportError) as exc:
            raise ValueError(f"table {name!r}: cannot read {source}: {exc}") from exc
    return files


def _file_suffix(source: str) -> str | None:
    """The file suffix when `source` is a path or URL, None when it is CSV text."""
    if "\n" in source.strip():
        return None
    lowered = source.strip().lower()
    return next((s for s in sorted(TABLE_SUFFIXES, key=len, reverse=True)
                 if lowered.endswith(s)), None)  # fmt: skip


# -- running -------------------------------------------------------------------------------


class RunProblem(enum.StrEnum):
    """Why a run gave no results. The first four are not the SQL's doing."""

    SANDBOX = "sandbox"  # the sandbox failed
    HARNESS = "harness"  # honing's program gave no usable reply
    HOST = "host"  # a judge's run was not let finish (honing.tasks.checkrun: NOT_RUN)
    TABLES = "tables"  # the task's tables do not load: the task is broken
    TIMEOUT = "timeout"  # the SQL ran past the time limit
    MEMORY = "memory"  # … or the memory limit
    KILLED = "killed"  # output limit, a signal (a crash of DuckDB on this SQL)

    @property
    def infrastructure(self) -> bool:
        return self in (RunProblem.SANDBOX, RunProblem.HARNESS, RunProblem.HOST)

    @property
    def limits(self) -> bool:
        """The SQL it ran spent the run's limits (time, memory) or crashed DuckDB."""
        return self in (RunProblem.TIMEOUT, RunProblem.MEMORY, RunProblem.KILLED)


@dataclass(frozen=True)
class QueryResult:
    """One query's result (at most `MAX_ROWS` rows of it), or its error."""

    sql: str
    columns: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    row_count: int = 0  # at most COUNT_CAP
    error: str | None = None
    capped: bool = False  # there are more than COUNT_CAP rows

    @property
    def ok(self) -> bool:
        return self.error is None

    def single_value(self) -> tuple[Any, str | None]:
        """(value, None) when the result is one row of one column, else (None, what it is)."""
        if self.error is not None:
            return None, f"fails: {self.error}"
        if len(self.columns) != 1 or self.row_count != 1:
            return None, (f"returns {self.row_count} row(s) of {len(self.columns)} column(s), "
                          "not a single value")  # fmt: skip
        return self.rows[0][0], None

    def render(self, max_chars: int = 40) -> str:
        """A compact text table: a header, the rows shown, and how many rows there are."""
        if self.error is not None:
            return f"error: {self.error}"
        if not self.columns:
            return "ok (no result)"
        cells = [self.columns] + [[_cell(v, max_chars) for v in row] for row in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                 for row in cells]  # fmt: skip
        lines.insert(1, "-+-".join("-" * w for w in widths))
        shown = len(self.rows)
        if self.capped:
            lines.append(f"({shown} of more than {self.row_count} rows shown)")
        elif shown < self.row_count:
            lines.append(f"({shown} of {self.row_count} rows shown)")
        else:
            lines.append(f"({self.row_count} row{'s' if self.row_count != 1 else ''})")
        return "\n".join(lines)


@dataclass(frozen=True)
class TableInfo:
    name: str
    columns: list[tuple[str, str]]  # (name, type)
    rows: int | None  # None when counting failed (a broken view)
    view: bool = False

    def render(self) -> str:
        cols = ", ".join(f"{c} {t}" for c, t in self.columns)
        kind = "view" if self.view else "table"
        count = "? rows" if self.rows is None else f"{self.rows} rows"
        return f"{self.name} ({kind}, {count}): {cols}"


@dataclass(frozen=True)
class SqlRun:
    """What one run of the harness gave: query results or tables, or the problem; `risks`,
    what the sandbox saw the run's process do (`ExecResult.risks`)."""

    results: list[QueryResult] = field(default_factory=list)
    tables: list[TableInfo] = field(default_factory=list)
    problem: RunProblem | None = None
    detail: str = ""
    wall_s: float = 0.0
    risks: list[RiskEvent] = field(default_factory=list)


async def duckdb_pool(pool: SandboxPool) -> SandboxPool:
    """`pool` if its cells preload duckdb, else its DuckDB sibling (as many cells as `pool`)."""
    if "duckdb" in pool.config.preload:
        return pool
    RuntimeStore().build_from_installed(RUNTIME, DISTRIBUTIONS)
    return await pool.sibling(RUNTIME, PRELOAD, size=pool.config.size, warm=WARM)


def query_request(
    tables: Mapping[str, str],
    queries: list[str] | None = None,
    *,
    op: Literal["queries", "tables"] = "queries",
    db: str = MEMORY_DB,
    workspace: str | None = None,
    files: dict[str, str | bytes] | None = None,
    select_only: bool = False,
    memory_mb: int = 256,
    max_rows: int = MAX_ROWS,
    timeout_s: float = TIMEOUT_S,
    cpu_s: float | None = None,
) -> ExecRequest:
    """The run of `queries` (or the listing of the tables) against `tables` (name → workspace
    path). `db` is a workspace file that persists, or `:memory:`; `select_only` refuses anything
    but a single SELECT per query (for rule queries, which must not change what others see)."""
    spec = {
        "op": op,
        "db": db,
        "tables": dict(tables),
        "queries": queries or [],
        "select_only": select_only,
        "memory": f"{memory_mb}MB",
        "max_rows": max_rows,
        "count_cap": COUNT_CAP,
    }
    return ExecRequest(
        code=HARNESS,
        stdin=json.dumps(spec),
        files=files or {},
        workspace=workspace,
        timeout_s=timeout_s,
        cpu_s=cpu_s,
        filename="sql_harness.py",
    )


_PROBLEMS = {
    ExecStatus.SANDBOX_ERROR: RunProblem.SANDBOX,
    ExecStatus.TIMEOUT: RunProblem.TIMEOUT,
    ExecStatus.MEMORY_LIMIT: RunProblem.MEMORY,
    ExecStatus.OUTPUT_LIMIT: RunProblem.KILLED,
    ExecStatus.KILLED: RunProblem.KILLED,
    ExecStatus.ERROR: RunProblem.HARNESS,
}


def parse_run(result: ExecResult, *, judge: bool = False) -> SqlRun:
    """The harness's reply, or the problem that kept it from replying. For a `judge`'s run (its
    wall-clock limit a multiple of its CPU-time limit: `checker_limits`), a run the host did not
    let finish is `RunProblem.HOST`, not the SQL's time limit or crash."""
    problem = _PROBLEMS.get(result.status)
    risks = list(result.risks)
    if (judge and problem not in (None, RunProblem.SANDBOX, RunProblem.HARNESS)
            and run_end(result)[0] is RunEnd.NOT_RUN):  # fmt: skip
        problem = RunProblem.HOST
    if problem is not None:
        tail = (result.stderr.strip().splitlines() or [""])[-1]
        detail = f"{result.status.value}: {result.error or tail}".strip()
        return SqlRun(problem=problem, detail=detail[:2000], wall_s=result.wall_s, risks=risks)
    try:
        reply = json.loads((result.stdout.strip().splitlines() or ["null"])[-1])
    except json.JSONDecodeError:
        reply = None
    if not isinstance(reply, dict):
        return SqlRun(problem=RunProblem.HARNESS, detail="the sql harness gave no reply",
                      wall_s=result.wall_s, risks=risks)  # fmt: skip
    if "load_error" in reply:
        return SqlRun(problem=RunProblem.TABLES, detail=str(reply["load_error"]),
                      wall_s=result.wall_s, risks=risks)  # fmt: skip
    results = [
        QueryResult(sql=r["sql"], columns=r.get("columns", []), types=r.get("types", []),
                    rows=r.get("rows", []), row_count=r.get("row_count", 0), error=r.get("error"),
                    capped=r.get("capped", False))
        for r in reply.get("results", [])
    ]  # fmt: skip
    tables = [
        TableInfo(t["name"], [(c, ty) for c, ty in t["columns"]], t["rows"], t["view"])
        for t in reply.get("tables", [])
    ]
    return SqlRun(results=results, tables=tables, wall_s=result.wall_s, risks=risks)


# A failed run that is not the model's doing is infrastructure; the rest are its query's.
RUN_FAILURE = {
    RunProblem.SANDBOX: FailureReason.SANDBOX_ERROR,
    RunProblem.HARNESS: FailureReason.VERIFIER_CRASH,
    RunProblem.HOST: FailureReason.VERIFIER_CRASH,
    RunProblem.TABLES: FailureReason.VERIFIER_CRASH,
    RunProblem.TIMEOUT: FailureReason.SANDBOX_TIMEOUT,
    RunProblem.MEMORY: FailureReason.MEMORY_LIMIT,
    RunProblem.KILLED: FailureReason.TOOL_ERROR,
}


def format_value(value: Any) -> str:
    """A query's value as an answer states it."""
    if isinstance(value, float):
        return repr(value)
    return "NULL" if value is None else str(value)


def _cell(value: Any, max_chars: int) -> str:
    text = format_value(value) if not isinstance(value, float) else f"{value:.15g}"
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"
