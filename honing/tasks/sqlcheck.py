"""Checking sql tasks: the DuckDB program the sandbox runs, and the judge of an answer's text.

Shared by the sql environment (`honing.envs.sql`) and the quality filter (`honing.tasks.quality`).
Covered: reading a task's tables on the host, the fixed DuckDB program (`HARNESS`) that loads
them and locks DuckDB's external access before any SQL runs, the DuckDB sibling of a pool
(`duckdb_pool`), the judge of an answer's number by the task's rules (numeric, mentions,
traceable, consistent), and its verdicts (docs/tasks.md, "The modules in detail"). The sandbox,
not DuckDB's settings, is the security boundary. Not covered: numbers in words ("two million")
or with scales ("1.2m"), accounting negatives ("(1,234)"); a traceable query that names a table
but returns a constant (`SELECT 150 FROM sales LIMIT 1`) passes its rule — the numeric rule is
what checks the value.
"""

from __future__ import annotations

import asyncio
import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from honing.errors import HoningError
from honing.risk import RiskEvent
from honing.sandbox import ExecRequest, ExecResult, ExecStatus, RuntimeStore, SandboxPool
from honing.tasks.checkrun import RunEnd, checker_limits, run_end
from honing.tasks.schema import AnswerRule, ReferenceVerdict, SqlTask

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
MAX_SNIPPETS = 3
FLOAT_REL = 1e-9  # "equal up to float rounding"
FLOAT_ABS = 1e-12
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


def table_files(task: SqlTask) -> dict[str, str | bytes]:
    """The task's tables as workspace files (relative path → bytes); paths and URLs are read
    here, on the host. A table that cannot be read is a ValueError naming it."""
    import fsspec

    files: dict[str, str | bytes] = {}
    for name, source in task.tables.items():
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


async def run_rule_queries(
    pool: SandboxPool, task: SqlTask, queries: list[str], files: dict[str, str | bytes]
) -> SqlRun:
    """Run `queries` (single SELECTs) on a fresh database loaded from the task's tables.
    `pool` must have DuckDB (see `duckdb_pool`); `files` are the task's `table_files`."""
    layout = {name: table_path(name, source) for name, source in task.tables.items()}
    cpu_s, wall_s = checker_limits(TIMEOUT_S)
    request = query_request(layout, queries, files=files, select_only=True,
                            memory_mb=max(64, pool.config.memory_mb // 2), timeout_s=wall_s,
                            cpu_s=cpu_s)  # fmt: skip
    return parse_run(await pool.run(request), judge=True)


# -- reading answers -----------------------------------------------------------------------

_FENCED = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_INLINE = re.compile(r"`([^`\n]+)`")
_NUMBER = re.compile(
    r"(?<![\w.\-−/,])(?<!\d:)(?P<sign>[-+−]?)[$€£]?"
    r"(?P<digits>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:[eE](?P<exp>[-+]?\d+))?(?![\w/]|[-.:,]\d)"
)
_MARKER = re.compile(r"\banswer\b(?:\s*(?:is|:|=))?", re.I)


@dataclass(frozen=True)
class Number:
    """A number as written: its value, and the unit of its last digit (0.01 for 1234.50)."""

    value: float
    unit: float


def without_code(text: str) -> str:
    """`text` with fenced blocks and inline code spans blanked out."""
    text = _FENCED.sub(" ", text)
    return _INLINE.sub(" ", text)


def numbers(text: str) -> list[Number]:
    """The numbers `text` states outside code, in order. One past a float's range (1e999) has
    the value ±inf, and states nothing (`states`)."""
    found = []
    for m in _NUMBER.finditer(without_code(text)):
        digits = m["digits"].replace(",", "")
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        exponent = _exponent(m["exp"])
        sign = -1.0 if m["sign"] in ("-", "−") else 1.0
        value = sign * float(f"{digits}e{exponent}")  # float() saturates to inf: never raises
        # A zero shows no significant digit: its exponent must not widen its rounding (0e9
        # would state anything under 5e8). Digits that are not zero keep theirs, even where the
        # value underflows (1e-400 states about 0, not anything under 0.5).
        zero = not digits.strip("0.")
        unit = float(f"1e{(0 if zero else exponent) - decimals}")
        found.append(Number(value, unit))
    return found


def _exponent(written: str | None) -> int:
    """An exponent as written, those past ±9999 as ±10000 (past a float's range either way;
    int() refuses more than 4,300 digits)."""
    digits = (written or "0").lstrip("+-").lstrip("0") or "0"
    size = int(digits) if len(digits) <= 4 else 10_000
    return -size if (written or "").startswith("-") else size


def answer_number(text: str) -> Number | None:
    """The number an answer gives: the first after its last "answer", else its only number."""
    plain = without_code(text)
    markers = list(_MARKER.finditer(plain))
    if markers:
        after = numbers(plain[markers[-1].end() :])
        if after:
            return after[0]
    found = numbers(plain)
    return found[0] if len(found) == 1 else None


def sql_snippets(text: str) -> list[str]:
    """The SQL an answer shows: ```sql blocks (or unlabelled ones that start like SQL), then
    inline `SELECT …` spans; the first `MAX_SNIPPETS`."""
    found = []
    for lang, body in _FENCED.findall(text):
        body = body.strip()
        if body and (lang.lower() in ("sql", "duckdb") or (not lang and _looks_like_sql(body))):
            found.append(body)
    for span in _INLINE.findall(_FENCED.sub(" ", text)):
        if _looks_like_sql(span.strip()):
            found.append(span.strip())
    return found[:MAX_SNIPPETS]


def _looks_like_sql(text: str) -> bool:
    return re.match(r"(?i)(select|with|from)\b", text) is not None


def value_number(value: Any) -> Number | None:
    """A query's value as a number: numbers as they are, text by the number it states."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return Number(float(value), 0.0) if math.isfinite(value) else None
    return answer_number(str(value))


def close(given: float, expected: float, tolerance: float) -> bool:
    """|given − expected| ≤ tolerance × |expected|, with float rounding always allowed."""
    limit = max(tolerance, FLOAT_REL) * abs(expected) + FLOAT_ABS
    return abs(given - expected) <= limit


def states(answer: Number, value: float, tolerance: float) -> bool:
    """Whether the answer's number states `value`: equal up to the rounding the number shows
    (1234.57 states 1234.5678), or within `tolerance`; a number past a float's range states
    nothing (its rounding would be infinite)."""
    if not math.isfinite(answer.value):
        return False
    rounding = answer.unit / 2 * (1 + FLOAT_REL) + FLOAT_ABS
    return abs(answer.value - value) <= rounding or close(answer.value, value, tolerance)


def mentions(text: str, name: str) -> bool:
    """Whether `text` names `name` outside code: case-insensitive, as a whole word."""
    pattern = rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])"
    return re.search(pattern, without_code(text), re.I) is not None


def format_value(value: Any) -> str:
    """A query's value as an answer states it."""
    if isinstance(value, float):
        return repr(value)
    return "NULL" if value is None else str(value)


def reference_answer(task: SqlTask, value: Any) -> str:
    """The answer text the reference gives: `Answer: VALUE`, with its SQL shown."""
    text = f"Answer: {format_value(value)}"
    if task.reference is not None:
        text += f"\n\n```sql\n{task.reference.strip()}\n```"
    return text


# -- judging -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleCheck:
    kind: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Judgement:
    """The rules' verdicts on one answer; `rejected` when the answer's SQL made the judge's run
    fail at its limits (why: its rules failed); `problem` when the rule queries could not run
    for a reason that is not the answer's (the sandbox, honing, the host, or the task);
    `risks`, what the sandbox saw a run of the answer's own SQL do."""

    checks: list[RuleCheck]
    problem: RunProblem | None = None
    detail: str = ""
    rejected: str = ""
    risks: list[RiskEvent] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.problem is None and all(c.passed for c in self.checks)

    @property
    def share(self) -> float:
        return sum(c.passed for c in self.checks) / max(len(self.checks), 1)

    def render(self) -> str:
        return "\n".join(f"{'pass' if c.passed else 'FAIL'} {c.kind}: {c.detail}"
                         for c in self.checks)  # fmt: skip


def rule_queries(task: SqlTask, text: str) -> list[str]:
    """The queries the rules need run to judge `text`: its snippets (if a rule traces them) and
    the consistent rules' queries, each once."""
    wanted: list[str] = []
    for rule in task.rules:
        if rule.kind == "traceable":
            wanted += [s for s in sql_snippets(text) if names_a_table(task, s)]
        elif rule.kind == "consistent":
            wanted += rule.queries
    return list(dict.fromkeys(wanted))


def names_a_table(task: SqlTask, sql: str) -> bool:
    return any(re.search(rf"(?i)\b{re.escape(name)}\b", sql) for name in task.tables)


def check_rules(task: SqlTask, text: str, results: Mapping[str, QueryResult]) -> list[RuleCheck]:
    """Each rule's verdict on `text`; `results` holds the `rule_queries` already run."""
    given = answer_number(text)
    return [_check(rule, task, text, given, results) for rule in task.rules]


def _check(
    rule: AnswerRule,
    task: SqlTask,
    text: str,
    given: Number | None,
    results: Mapping[str, QueryResult],
) -> RuleCheck:
    no_number = "the answer states no number (write `Answer: <number>`)"
    if rule.kind == "mentions":
        assert rule.text is not None
        if not mentions(text, rule.text):
            return RuleCheck(rule.kind, False, "the answer does not name what it must")
        wrong = [x for x in rule.excludes if mentions(text, x)]
        if wrong:
            return RuleCheck(rule.kind, False, f"the answer also names {', '.join(wrong)}")
        return RuleCheck(rule.kind, True, f"names {rule.text}")
    if given is None:
        return RuleCheck(rule.kind, False, no_number)
    if rule.kind == "numeric":
        expected = answer_number(task.answer)
        if expected is None:
            return RuleCheck(rule.kind, False, f"the task's answer {task.answer!r} has no number")
        ok = close(given.value, expected.value, rule.tolerance)
        return RuleCheck(rule.kind, ok, f"{given.value:g} {'=' if ok else '≠'} expected "
                         f"(tolerance {rule.tolerance:g})")  # fmt: skip
    if rule.kind == "traceable":
        snippets = [s for s in sql_snippets(text) if names_a_table(task, s)]
        if not snippets:
            return RuleCheck(rule.kind, False, "the answer shows no SQL over the task's tables "
                             "(put it in a ```sql block)")  # fmt: skip
        problems = []
        for sql in snippets:
            reason = _value_problem(results.get(sql), given, rule.tolerance)
            if reason is None:
                return RuleCheck(rule.kind, True, f"{_short(sql)} yields {given.value:g}")
            problems.append(f"{_short(sql)} {reason}")
        return RuleCheck(rule.kind, False, "; ".join(problems))
    for sql in rule.queries:  # consistent
        reason = _value_problem(results.get(sql), given, rule.tolerance)
        if reason is not None:
            return RuleCheck(rule.kind, False, f"does not reconcile: {_short(sql)} {reason}")
    return RuleCheck(rule.kind, True, f"{len(rule.queries)} queries agree with {given.value:g}")


def _value_problem(result: QueryResult | None, given: Number, tolerance: float) -> str | None:
    if result is None:
        return "did not run"
    value, problem = result.single_value()
    if problem is not None:
        return problem
    number = value_number(value)
    if number is None:
        return f"yields {format_value(value)!r}, not a number"
    if not states(given, number.value, tolerance):
        return f"yields {number.value:g}, not {given.value:g}"
    return None


def _short(sql: str) -> str:
    one_line = " ".join(sql.split())
    return f"`{one_line[:80]}{'…' if len(one_line) > 80 else ''}`"


async def judge_answer(
    pool: SandboxPool,
    task: SqlTask,
    text: str,
    files: dict[str, str | bytes],
    known: Mapping[str, QueryResult] | None = None,
) -> Judgement:
    """Judge `text` by the task's rules, running the rule queries not in `known` on a fresh
    database (`pool` must have DuckDB; `files` are the task's `table_files`). A run that the
    answer's SQL makes spend its limits fails the rules of that SQL and sets `rejected`; a
    sandbox, harness, host or table failure, or the task's own rule queries failing at their
    limits, is the judgement's `problem`, with no verdict. The sandbox's `risks` of a run that
    held the answer's SQL are the judgement's (the task's own queries are not the model's)."""
    results = dict(known or {})
    needed = [q for q in rule_queries(task, text) if q not in results]
    rejected = ""
    risks: list[RiskEvent] = []
    if needed:
        run = await run_rule_queries(pool, task, needed, files)
        own = {q for rule in task.rules if rule.kind == "consistent" for q in rule.queries}
        answer_sql = [q for q in needed if q not in own]
        if answer_sql:
            risks = run.risks
        if run.problem is not None and not run.problem.limits:
            return Judgement([], run.problem, run.detail, risks=risks)
        if run.problem is None:
            results.update({r.sql: r for r in run.results})
        else:
            if not answer_sql:
                return Judgement([], run.problem, f"the task's rule queries: {run.detail}")
            task_sql = [q for q in needed if q in own]
            if task_sql:  # the task's own queries, again without the answer's SQL
                again = await run_rule_queries(pool, task, task_sql, files)
                if again.problem is not None:
                    detail = f"the task's rule queries: {again.detail}"
                    return Judgement([], again.problem, detail, risks=risks)
                results.update({r.sql: r for r in again.results})
            results.update({q: QueryResult(sql=q, error=run.detail) for q in answer_sql})
            rejected = f"the answer's SQL made the judge's run fail: {run.detail}"
    return Judgement(check_rules(task, text, results), rejected=rejected, risks=risks)


# -- references ----------------------------------------------------------------------------


async def check_reference(pool: SandboxPool, task: SqlTask) -> ReferenceVerdict:
    """The reference must be one SELECT yielding a single value, and both the answer it gives
    (`reference_answer` of that value) and the one the environment's reference actions submit
    (`reference_answer` of `task.answer`) must pass every rule."""
    if task.reference is None:
        return ReferenceVerdict("passed")
    try:
        files = table_files(task)
    except ValueError as exc:
        return ReferenceVerdict("failed", str(exc))
    consistent = [q for r in task.rules if r.kind == "consistent" for q in r.queries]
    queries = list(dict.fromkeys([task.reference, *consistent]))
    run = await run_rule_queries(pool, task, queries, files)
    if run.problem is not None and run.problem.infrastructure:
        return ReferenceVerdict("unverified", f"sandbox error: {run.detail}")
    if run.problem is not None:
        return ReferenceVerdict("failed", f"reference query: {run.detail}")
    known = {r.sql: r for r in run.results}
    value, problem = known[task.reference].single_value()
    if problem is not None:
        return ReferenceVerdict("failed", f"reference query {problem}"[:500])
    for text in (reference_answer(task, value), reference_answer(task, task.answer)):
        judgement = await judge_answer(pool, task, text, files, known)
        if judgement.problem is not None:
            status: Literal["failed", "unverified"] = (
                "unverified" if judgement.problem.infrastructure else "failed"
            )
            return ReferenceVerdict(status, f"rule queries: {judgement.detail}")
        failing = [c for c in judgement.checks if not c.passed]
        if failing:
            said = text.splitlines()[0]
            reasons = "; ".join(f"{c.kind}: {c.detail}" for c in failing)
            return ReferenceVerdict("failed", f"reference answer {said!r} fails {reasons}"[:500])
    return ReferenceVerdict("passed")


async def check_references(pool: SandboxPool, tasks: list[SqlTask]) -> dict[str, ReferenceVerdict]:
    """`check_reference` for each task (by id), in the DuckDB pool of `pool`; a DuckDB sandbox
    that cannot be built or started leaves every task unverified."""
    if not tasks:
        return {}
    try:
        sql_pool = await duckdb_pool(pool)
    except HoningError as exc:
        return {t.id: ReferenceVerdict("unverified", f"no DuckDB sandbox: {exc}") for t in tasks}
    limit = asyncio.Semaphore(sql_pool.config.size)

    async def one(task: SqlTask) -> ReferenceVerdict:
        async with limit:
            return await check_reference(sql_pool, task)

    found = await asyncio.gather(*(one(t) for t in tasks))
    return {t.id: c for t, c in zip(tasks, found, strict=True)}


def _cell(value: Any, max_chars: int) -> str:
    text = format_value(value) if not isinstance(value, float) else f"{value:.15g}"
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"
