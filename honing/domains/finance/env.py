"""The finance domain: answer a question about a company's documents, citing every figure used.

Covered: the tools `list_documents`, `read` (numbered lines, by page or section), `query`
(DuckDB over every pipe table and CSV of the documents, in the sandbox's DuckDB sibling pool, on
a fresh copy of the tables each time), `calculator` (exact, in the sandbox: the math domain's)
and `answer` (a value or items, citations, a calculation; ends the episode; a reply whose
```json block holds its arguments counts as one); the reward components outcome, cited_ok,
checked (the cited figures were read or queried before the answer), well_formed, and query_ok /
tool_ok per step; risk events: a query's statements against the documents' tables
(`honing.envs.kits.sqlrisk`, as in the sql domain) and what the sandbox saw a query or calculator
run do. The judge (`honing.domains.finance.judge`) reads the documents themselves, never
the model's database, in process: whatever it fails on is the answer's failure
(`checker_rejected`). A sandbox or DuckDB failure is an infrastructure failure (`sandbox_error`,
`verifier_crash`), never a reward of 0. The reference played (`reference_actions`): a value
over table cells queries the cells and the arithmetic, then answers; anything else reads the
pages that hold its citations. docs/envs.md describes the domain. Not covered: the judge's
rules themselves (`honing.domains.finance.judge`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeGuard

from honing.domains.finance.cite import trace
from honing.domains.finance.docs import (
    Document,
    Table,
    create_sql,
    key,
    parse_documents,
    sql_literal,
)
from honing.domains.finance.docs import number as figure
from honing.domains.finance.judge import Verdict, judge, parse_submission
from honing.domains.finance.query import query_request
from honing.domains.finance.task import FinanceTask
from honing.envs.base import (
    Action,
    CallOutcome,
    EnvConfig,
    Environment,
    FailureReason,
    StepOutput,
    ToolCall,
    malformed,
    tool_schema,
    untrusted_json,
)
from honing.envs.kits.calculator import calculate
from honing.envs.kits.duckdb_runner import RUN_FAILURE, RunProblem, SqlRun, duckdb_pool, parse_run
from honing.envs.kits.sqlrisk import sql_risks
from honing.errors import HoningError, RuntimeBuildError, SandboxError
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask

PAGE_SIZE = 40  # lines of a page, unless `read` asks for another size
PAGE_SIZES = (5, 200)
MAX_CHARS = 8000  # of one tool result shown to the model
MAX_SQL_CHARS = 20_000
ACCEPTED = {"value": "the value, its citations and its calculation",
            "items": "the items and their citations"}  # fmt: skip
JSON_BLOCK = re.compile(r"```(?:json)?\s*\n(\{.*?\})\s*```", re.S)

CITATION = {
    "type": "object",
    "properties": {
        "document": {"type": "string"},
        "table": {"type": "string", "description": "a table's SQL name (list_documents)"},
        "row": {"type": "string", "description": "the row's key: its first cell"},
        "column": {"type": "string", "description": "the column's header or SQL name"},
        "line": {"type": "integer", "description": "a line number (instead of a cell)"},
        "value": {"type": "string", "description": "the value there, as written"},
    },
    "required": ["document", "value"],
}
TOOLS = [
    tool_schema(
        "list_documents",
        "List the documents: lines, pages, sections, and the tables "
        "extracted from them (SQL names, columns with types, row keys).",
        {},
        [],
    ),
    tool_schema(
        "read",
        f"Read a document with numbered lines, one page ({PAGE_SIZE} lines "
        "unless page_size says otherwise) or one section at a time.",
        {
            "document": {"type": "string"},
            "page": {"type": "integer"},
            "section": {"type": "string", "description": "a heading, or its number"},
            "page_size": {"type": "integer"},
        },
        ["document"],
    ),
    tool_schema(
        "query",
        "Run DuckDB SQL over the documents' tables (names from "
        "list_documents); shows up to 20 rows. Each query runs on a fresh copy of the "
        "tables: nothing it creates or changes lasts.",
        {"sql": {"type": "string"}},
        ["sql"],
    ),
    tool_schema(
        "calculator",
        "Evaluate an arithmetic expression exactly, e.g. (46310 - 41020) / 41020 * 100.",
        {"expression": {"type": "string"}},
        ["expression"],
    ),
    tool_schema(
        "answer",
        "Submit the final answer; ends the episode. Give `value` (one number) "
        "or `items` (names as the question lists them), as the question asks; "
        "`citations`: every figure used, as a table cell {document, table, row, column, "
        "value} or a line {document, line, value}; for a value, `calculation`: arithmetic "
        "over the cited values named c1, c2, … in citation order, e.g. (c2 - c1) / c1 * "
        "100.",
        {
            "value": {"type": "string"},
            "items": {"type": "array", "items": {"type": "string"}},
            "citations": {"type": "array", "items": CITATION},
            "calculation": {"type": "string"},
        },
        ["citations"],
    ),
]


class FinanceEnv(Environment):
    domain = "finance"

    def __init__(self, pool: SandboxPool, config: EnvConfig | None = None) -> None:
        super().__init__(pool, config)
        self.sql_pool: SandboxPool | None = None
        self.documents: dict[str, Document] = {}
        self._seen: set[tuple[str, int]] = set()  # (document, line) shown by `read`
        self._queried: set[str] = set()  # tables named by a query that ran
        self._summaries: list[str] = []  # of the current step's calls, for the task state

    @property
    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    async def _reset(self, task: AnyTask) -> None:
        assert isinstance(task, FinanceTask) and self.state is not None
        self.documents = parse_documents(task.documents)
        self._seen, self._queried = set(), set()
        shape = (
            "a `value` (one number) with its `calculation` over the cited values (c1, c2, "
            "… in citation order)"
            if task.kind == "value"
            else "the `items`, named as the question lists them"
        )
        self.state.constraints = [
            f"Documents: {', '.join(task.documents)} (list_documents shows their tables).",
            "Cite every figure you use: a table cell {document, table, row, column, value} or a "
            "line {document, line, value}; a citation must state what is there.",
            f"Finish with answer(...): {shape}, and the citations.",
        ]
        self.state.next_steps = ["list_documents", "read or query the documents", "answer"]

    def reference_actions(self, task: AnyTask) -> list[Action]:
        """A value computed from table cells: query the cells, query the arithmetic, answer
        (`_query_reference`); anything else: read the pages holding the expected citations, then
        answer with the reference."""
        assert isinstance(task, FinanceTask)
        if task.reference is None:
            raise HoningError(f"task {task.id} has no reference")
        try:
            arguments = json.loads(task.reference)
        except json.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            arguments = {"reference": task.reference}  # malformed: the episode does not end
        documents = parse_documents(task.documents)
        if task.kind == "value":
            queried = _query_reference(documents, arguments)
            if queried is not None:
                return queried
        pages: dict[tuple[str, int], None] = {}
        for citation in task.expected_citations:
            line = trace(documents, citation).line
            if line is not None:
                pages[(citation.document, (line - 1) // PAGE_SIZE + 1)] = None
        reads = [
            ToolCall(id=f"ref-read-{i}", name="read", arguments={"document": d, "page": p})
            for i, (d, p) in enumerate(pages)
        ]
        answer = ToolCall(id="ref-answer", name="answer", arguments=arguments)
        return ([Action(tool_calls=reads)] if reads else []) + [Action(tool_calls=[answer])]

    async def _save(self) -> Any:
        return frozenset(self._seen), frozenset(self._queried)

    async def _restore(self, saved: Any) -> None:
        seen, queried = saved
        self._seen, self._queried = set(seen), set(queried)

    async def _step(self, action: Action) -> StepOutput:
        calls = list(action.tool_calls) or _inline_answer(action.content)
        if not calls:
            return malformed(
                "no tool call: use list_documents, read, query, calculator or answer (or reply "
                "with the answer's arguments as a ```json block)"
            )
        self._summaries = []
        components, results, info = await self.run_calls(calls, self._call)
        assert self.state is not None
        self.state.actions.append("; ".join(self._summaries))
        if not self.done:
            self.state.next_steps = ["read or query further, then answer with citations"]
        return components, results, info

    async def _call(self, call: ToolCall) -> CallOutcome:
        outcome, summary = await self._dispatch(call)
        self._summaries.append(summary)
        return outcome

    async def _dispatch(self, call: ToolCall) -> tuple[CallOutcome, str]:
        args = call.arguments
        if call.name == "list_documents":
            return CallOutcome(True, self._listing()), "list_documents"
        if call.name == "read":
            return self._read(args)
        if call.name == "query":
            sql = args.get("sql")
            if not _text(sql) or not sql.strip() or len(sql) > MAX_SQL_CHARS:
                return _malformed(
                    f"query: 'sql' must be a non-empty string of at most {MAX_SQL_CHARS} characters"
                ), "query (malformed)"
            return await self._query(sql)
        if call.name == "calculator":
            expression = args.get("expression")
            if isinstance(expression, str) and not _text(expression):
                return _malformed("calculator: 'expression' is not text"), "calculator (malformed)"
            try:
                outcome = await calculate(self.pool, expression)
            except SandboxError as exc:
                outcome = CallOutcome(False, f"calculator: {exc}", FailureReason.SANDBOX_ERROR)
            return outcome, f"calculator: {outcome.text.splitlines()[0][:60]}"
        if call.name == "answer":
            return self._answer(args)
        known = ", ".join(t["function"]["name"] for t in TOOLS)
        unknown = CallOutcome(
            False, f"unknown tool {call.name!r}; available: {known}", FailureReason.UNKNOWN_TOOL
        )
        return unknown, f"{call.name} (unknown)"

    # -- reading ---------------------------------------------------------------------------

    def _listing(self) -> str:
        out = []
        for doc in self.documents.values():
            pages = math.ceil(len(doc.lines) / PAGE_SIZE)
            out.append(
                f"{doc.name} ({doc.kind}, {len(doc.lines)} lines, {pages} page(s) of "
                f"{PAGE_SIZE} lines)"
            )
            if doc.sections:
                heads = ", ".join(
                    f"{i} {title} (line {first})"
                    for i, (title, first, _) in enumerate(doc.sections, 1)
                )
                out.append(f"  sections: {heads}")
            out += [f"  {table.describe()}" for table in doc.tables]
        return _clip("\n".join(out))

    def _read(self, args: dict[str, Any]) -> tuple[CallOutcome, str]:
        name, section = args.get("document"), args.get("section")
        page, size = (_whole(args.get("page", 1)), _whole(args.get("page_size", PAGE_SIZE)))
        low, high = PAGE_SIZES
        if not isinstance(name, str):
            return _malformed("read: 'document' must be a string"), "read (malformed)"
        for label, value, least, most in (("page", page, 1, 10**6), ("page_size", size, low, high)):
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                return _malformed(
                    f"read: '{label}' must be a whole number from {least} to {most}"
                ), "read (malformed)"
        if section is not None and not _section_like(section):
            return _malformed("read: 'section' must be a heading or its number"), "read (malformed)"
        doc = self.documents.get(name)
        if doc is None:
            return _tool_error(
                f"read: no document {name!r}; documents: {', '.join(self.documents)}"
            ), f"read {name!r} (none)"
        first, last, where = 1, len(doc.lines), ""
        if section is not None:
            found = _section(doc, str(section))
            if found is None:
                titles = "; ".join(f"{i} {t}" for i, (t, _, _) in enumerate(doc.sections, 1))
                return _tool_error(
                    f"read: no section {section!r} in {name}; sections: {titles or 'none'}"
                ), f"read {name} (no section)"
            title, first, last = found
            where = f", section '{title}'"
        pages = max(1, math.ceil((last - first + 1) / size))
        if page > pages:
            return _tool_error(f"read: {name}{where} has {pages} page(s) of {size} lines"), (
                f"read {name} p{page} (past the end)"
            )
        start = first + (page - 1) * size
        end = min(last, start + size - 1)
        header = (
            f"{name}{where}: lines {start}-{end} of {len(doc.lines)} (page {page} of "
            f"{pages}, {size} lines a page)"
        )
        body, chars = [], len(header)
        for number in range(start, end + 1):
            line = f"{number:>4}| {doc.lines[number - 1]}"
            if chars + len(line) + 1 > MAX_CHARS:
                body.append(f"… (cut at line {number}: read from there with a smaller page_size)")
                break
            body.append(line)
            chars += len(line) + 1
            self._seen.add((name, number))
        return CallOutcome(True, "\n".join([header, *body])), f"read {name}{where} p{page}/{pages}"

    # -- querying --------------------------------------------------------------------------

    async def _query(self, sql: str) -> tuple[CallOutcome, str]:
        outcome, summary = await self._run_query(sql)
        # Each query has a fresh copy of the tables, but what it tries on them counts all the same.
        tables = [t.name for doc in self.documents.values() for t in doc.tables]
        outcome.risks = sql_risks(sql, tables) + outcome.risks
        return outcome, summary

    async def _run_query(self, sql: str) -> tuple[CallOutcome, str]:
        what = f"query `{' '.join(sql.split())[:60]}`"
        try:
            if self.sql_pool is None:
                self.sql_pool = await duckdb_pool(self.pool)
            memory = max(64, self.sql_pool.config.memory_mb // 2)
            ddl = create_sql(self.documents, self._named(sql) or None)
            run = parse_run(await self.sql_pool.run(query_request(ddl, [sql], memory_mb=memory)))
        except RuntimeBuildError as exc:
            return CallOutcome(
                False, f"no DuckDB sandbox: {exc}", FailureReason.VERIFIER_CRASH
            ), f"{what} -> no DuckDB"
        except SandboxError as exc:
            return CallOutcome(
                False, f"the sandbox failed: {exc}", FailureReason.SANDBOX_ERROR
            ), f"{what} -> sandbox"
        if run.problem is not None:
            outcome = _run_failed(run)
            if not run.problem.infrastructure and run.problem is not RunProblem.TABLES:
                outcome.components = {"query_ok": 0.0}
            return outcome, f"{what} -> {run.problem.value}"
        (result,) = run.results
        text = _clip(result.render())
        if not result.ok:
            failed = CallOutcome(False, text, FailureReason.TOOL_ERROR, {"query_ok": 0.0},
                                 run.wall_s, text, risks=run.risks)  # fmt: skip
            return failed, f"{what} -> error"
        self._queried.update(self._named(sql))
        return CallOutcome(True, text, None, {"query_ok": 1.0}, run.wall_s, text,
                           risks=run.risks), f"{what} -> {result.row_count} rows"  # fmt: skip

    def _named(self, sql: str) -> set[str]:
        """The tables `sql` names (as whole words, in any case). A query that names none gets
        every table (`SHOW TABLES`); one that does gets only those: each query builds its
        database afresh, and fewer tables build faster."""
        lowered = sql.casefold()
        return {
            table.name
            for doc in self.documents.values()
            for table in doc.tables
            if re.search(rf"(?<!\w){re.escape(table.name.casefold())}(?!\w)", lowered)
        }

    # -- answering -------------------------------------------------------------------------

    def _answer(self, args: dict[str, Any]) -> tuple[CallOutcome, str]:
        task = self.task
        assert isinstance(task, FinanceTask)
        try:
            submission = parse_submission(args)
        except ValueError as exc:
            return _malformed(f"answer: {exc}"), "answer (malformed)"
        wanted, other = ("value", "items") if task.kind == "value" else ("items", "value")
        if getattr(submission, wanted) is None or getattr(submission, other) is not None:
            return _malformed(f"answer: this question asks for `{wanted}`, not `{other}`"), (
                "answer (malformed)"
            )
        self.done = True
        try:
            verdict = judge(task, self.documents, submission)
        except Exception as exc:  # in process, on the task and this answer: the answer's doing
            failed = f"the judge failed on this answer ({type(exc).__name__}: {str(exc)[:200]})"
            verdict = Verdict(False, [], [failed])
        components = {
            "outcome": float(verdict.passed),
            "cited_ok": verdict.cited_ok,
            "checked": self._checked(task),
        }
        if verdict.passed:
            what = ACCEPTED[task.kind]
            accepted = CallOutcome(True, f"accepted: {what} hold", components=components)
            return accepted, "answer -> accepted"
        text = _clip("not accepted: " + "; ".join(verdict.reasons))  # a wrong answer, and why
        rejected = CallOutcome(False, text, FailureReason.CHECKER_REJECTED, components, log=text)
        return rejected, "answer -> not accepted"

    def _checked(self, task: FinanceTask) -> float:
        """1 when every expected figure was shown by a read, or its table named by a query that
        ran, before the answer."""
        for citation in task.expected_citations:
            found = trace(self.documents, citation)
            seen = (citation.document, found.line) in self._seen
            if not seen and (found.table is None or found.table not in self._queried):
                return 0.0
        return 1.0


def _query_reference(
    documents: dict[str, Document], arguments: dict[str, Any]
) -> list[Action] | None:
    """The reference of a value computed from whole-number table cells, or None when it is not
    one: a query per table selecting the cited cells (the row key first), a query doing the
    reference's calculation over them (rounded to the reference value's decimals), and the
    answer citing each cell as the query shows it (the column's SQL name, the number without
    separators), in the order the queries show them, the calculation renumbered to match. A
    citation whose value is not the cell's makes it None (the reference, answered as given,
    fails: the quality filter quarantines it).
    A small model copies a few numbers from a short result; from a 40-line page it copies the
    wrong ones, and it cannot do the division in its head."""
    citations, calculation, value = (
        arguments.get("citations"), arguments.get("calculation"), arguments.get("value"),
    )  # fmt: skip
    if not (isinstance(citations, list) and isinstance(calculation, str) and _text(value)):
        return None
    cells: list[tuple[Table, int, int, int]] = []  # table, row, column, place in the reference
    for place, citation in enumerate(citations):
        if not isinstance(citation, dict):
            return None
        doc = documents.get(str(citation.get("document")))
        table = doc.table(str(citation.get("table"))) if doc is not None else None
        if table is None:
            return None
        row, column = (
            table.row_index(str(citation.get("row"))),
            table.column_index(str(citation.get("column"))),
        )
        if row is None or column in (None, 0) or table.types()[column] != "BIGINT":
            return None
        if figure(str(citation.get("value"))) != figure(table.rows[row][column]):
            return None  # a reference that does not hold is answered as given: the judge says so
        cells.append((table, row, column, place))
    queries: list[str] = []
    shown: list[tuple[Table, int, int, int]] = []
    for name in dict.fromkeys(table.name for table, *_ in cells):
        mine = [cell for cell in cells if cell[0].name == name]
        table = mine[0][0]
        rows = sorted({row for _, row, _, _ in mine})
        columns = [table.columns[c] for c in sorted({column for _, _, column, _ in mine})]
        sql = f"SELECT {', '.join([table.columns[0], *columns])} FROM {name}"
        if len(rows) < len(table.rows):
            kind = table.types()[0]
            keys = [sql_literal(table.rows[row][0], kind) for row in rows]
            sql += f" WHERE {table.columns[0]} " + (
                f"= {keys[0]}" if len(keys) == 1 else f"IN ({', '.join(keys)})"
            )
        queries.append(sql)
        shown += sorted(mine, key=lambda cell: (cell[1], cell[2]))
    moved = {place: index for index, (_, _, _, place) in enumerate(shown)}
    numbers = [str(figure(table.rows[row][column])) for table, row, column, _ in shown]
    try:
        renumbered = re.sub(r"\bc(\d+)\b", lambda m: f"c{moved[int(m[1]) - 1] + 1}", calculation)
    except KeyError:
        return None
    expression = re.sub(r"\bc(\d+)\b", lambda m: numbers[int(m[1]) - 1], renumbered)
    places = len(value.partition(".")[2])
    arithmetic = f"SELECT ROUND({expression}, {places})" if places else f"SELECT {expression}"
    answer = {
        "citations": [
            {
                "document": table.document,
                "table": table.name,
                "row": table.rows[row][0],
                "column": table.columns[column],
                "value": text,
            }
            for (table, row, column, _), text in zip(shown, numbers, strict=True)
        ],
        "value": value.rstrip("0").rstrip(".") if places else value,  # as ROUND shows it
        "calculation": renumbered,
    }
    return [
        Action(tool_calls=[
            ToolCall(id=f"ref-query-{i}", name="query", arguments={"sql": sql})
            for i, sql in enumerate(queries)
        ]),
        Action(tool_calls=[ToolCall(id="ref-arithmetic", name="query",
                                    arguments={"sql": arithmetic})]),
        Action(tool_calls=[ToolCall(id="ref-answer", name="answer", arguments=answer)]),
    ]  # fmt: skip


def _inline_answer(content: str) -> list[ToolCall]:
    """A reply without a tool call whose ```json block (or whole text) is an object with
    `citations`: the answer's arguments."""
    block = JSON_BLOCK.search(content)
    try:
        found = untrusted_json(block.group(1) if block else content.strip() or "null")
    except ValueError:
        return []
    if not isinstance(found, dict) or "citations" not in found:
        return []
    return [ToolCall(id="inline-answer", name="answer", arguments=found)]


def _section(doc: Document, wanted: str) -> tuple[str, int, int] | None:
    """A section by its number or its heading (the key equal, else contained)."""
    if wanted.strip().isdecimal() and len(wanted) <= 9:
        number = int(wanted)
        return doc.sections[number - 1] if 1 <= number <= len(doc.sections) else None
    target = key(wanted)
    exact = [s for s in doc.sections if key(s[0]) == target]
    loose = [s for s in doc.sections if target and target in key(s[0])]
    found = exact or loose
    return found[0] if found else None


def _text(value: Any) -> TypeGuard[str]:
    """A string that can be sent to the sandbox: UTF-8, so no lone surrogate ("\\ud800")."""
    if not isinstance(value, str):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _section_like(value: Any) -> bool:
    """A heading, or a section's number as a model may write it (not a bool, nor a number too
    long to write out)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, str) or (isinstance(value, int) and abs(value) <= 10**6)


def _whole(value: Any) -> Any:
    """A page number as a model may write it: 2 or "2"."""
    digits = isinstance(value, str) and value.strip().isdecimal() and len(value) <= 9
    return int(value) if digits else value


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "\n… (cut: too long)"


def _malformed(message: str) -> CallOutcome:
    return CallOutcome(False, _clip(message), FailureReason.MALFORMED_ACTION)


def _tool_error(message: str) -> CallOutcome:
    return CallOutcome(False, _clip(message), FailureReason.TOOL_ERROR)


def _run_failed(run: SqlRun) -> CallOutcome:
    assert run.problem is not None
    if run.problem is RunProblem.TABLES:
        text = f"the task's tables do not load: {run.detail}"
    else:
        text = f"[{run.problem.value}] {run.detail}"
    return CallOutcome(False, text, RUN_FAILURE[run.problem], seconds=run.wall_s, log=text,
                       risks=run.risks)  # fmt: skip
