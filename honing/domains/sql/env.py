"""The sql domain: answer a question about tables (ledgers, invoices, statements) with DuckDB.

Covered: the tools (`list_tables`, `query`, `answer`, and a reply without a call read as one of
them), the slip of a recovery trace (`unquoted_slip`), the workspace (the task's tables and the
episode's DuckDB database, snapshotted by `checkpoint`/`rollback`), the reward components (outcome,
rules_passed, query_ok, well_formed) and the DuckDB sibling of the shared pool (`duckdb_pool`) the
queries run in; the risk events of a query (`honing.envs.kits.sqlrisk`: what its statements do to
the task's tables, followed through renames) and of every run of the model's SQL (the sandbox's);
docs/envs.md ("Domains", "Verdicts", "Risk") has the details. The answer is judged by the task's
rules (`honing.domains.sql.judge`) on a fresh copy of the tables: what the model did to its database
does not count. Not covered: the judge itself (`honing.domains.sql.judge`) and the DuckDB runner
(`honing.envs.kits.duckdb_runner`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from honing.domains.sql.judge import judge_answer, reference_answer
from honing.domains.sql.task import SqlTask
from honing.envs.base import (
    Action,
    CallOutcome,
    EnvConfig,
    Environment,
    FailureReason,
    StepOutput,
    ToolCall,
    argument_text,
    malformed,
    tool_schema,
)
from honing.envs.kits.duckdb_runner import (
    RUN_FAILURE,
    WORKSPACE_DB,
    RunProblem,
    SqlRun,
    duckdb_pool,
    parse_run,
    query_request,
    table_files,
    table_path,
)
from honing.envs.kits.sqlrisk import assess
from honing.errors import HoningError
from honing.sandbox import SandboxPool, Workspace
from honing.tasks.load import AnyTask

MAX_CHARS = 8000  # of one tool result shown to the model
ANSWER_LINE = re.compile(r"^\s*(?:final\s+)?answer\s*[:=]", re.I | re.M)
SQL_BLOCK = re.compile(r"```(?:sql|duckdb)\s*\n(.*?)```", re.S | re.I)

TOOLS = [
    tool_schema("list_tables", "List the tables: their columns with types, and row counts.",
                {}, []),
    tool_schema("query", "Run DuckDB SQL on the tables; shows up to 20 rows and the row count. "
                "Tables and views you create last for the episode.",
                {"sql": {"type": "string"}}, ["sql"]),
    tool_schema("answer", "Submit the final answer and end the episode. Start it with "
                "`Answer: <value>`.", {"text": {"type": "string"}}, ["text"]),
]  # fmt: skip


class SqlEnv(Environment):
    domain = "sql"

    def __init__(self, pool: SandboxPool, config: EnvConfig | None = None) -> None:
        super().__init__(pool, config)
        self.sql_pool: SandboxPool | None = None
        self.workspace: Workspace | None = None
        self._files: dict[str, str | bytes] = {}
        self._layout: dict[str, str] = {}
        self._summaries: list[str] = []  # of the current step's calls, for the task state
        self._queries_ok: list[bool] = []  # of the current step's queries
        self._task_tables: frozenset[str] = frozenset()  # the names they go by (renames too)

    @property
    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    async def close(self) -> None:
        if self.workspace is not None and self.sql_pool is not None:
            self.sql_pool.drop_workspace(self.workspace.id)
        self.workspace = None

    async def _reset(self, task: AnyTask) -> None:
        assert isinstance(task, SqlTask) and self.state is not None
        await self.close()  # the last episode's workspace
        try:
            self._files = table_files(task.tables)
        except ValueError as exc:
            raise HoningError(f"task {task.id}: {exc}") from exc
        self._layout = {name: table_path(name, source) for name, source in task.tables.items()}
        self._task_tables = frozenset(task.tables)
        self.sql_pool = await duckdb_pool(self.pool)
        self.workspace = self.sql_pool.workspace()
        for path, content in self._files.items():
            self.workspace.write(path, content)
        self.state.constraints = [
            f"Tables: {', '.join(task.tables)} (DuckDB SQL).",
            "Finish with answer(text), starting `Answer: <value>`.",
        ]
        if any(r.kind == "traceable" for r in task.rules):
            self.state.constraints.append(
                "Show the SQL that computes your number in a ```sql block of the answer."
            )
        self.state.next_steps = ["list_tables", "query the tables", "answer"]

    def reference_actions(self, task: AnyTask) -> list[Action]:
        assert isinstance(task, SqlTask)
        if task.reference is None:
            raise HoningError(f"task {task.id} has no reference")
        query = ToolCall(id="ref-query", name="query", arguments={"sql": task.reference})
        text = reference_answer(task, task.answer)
        answer = ToolCall(id="ref-answer", name="answer", arguments={"text": text})
        return [Action(tool_calls=[query]), Action(tool_calls=[answer])]

    async def _save(self) -> tuple[str, frozenset[str]]:
        return self._ws().snapshot(), self._task_tables  # the tables' files, the database

    async def _restore(self, saved: Any) -> None:
        snapshot, self._task_tables = saved
        self._ws().restore(snapshot)

    def _ws(self) -> Workspace:
        if self.workspace is None:
            raise HoningError("call reset(task) first")
        return self.workspace

    async def _step(self, action: Action) -> StepOutput:
        calls = list(action.tool_calls) or self._inline_calls(action.content)
        if not calls:
            return malformed("no tool call: call list_tables, query or answer (or reply "
                             "`Answer: ...`)")  # fmt: skip
        self._summaries, self._queries_ok = [], []
        components, results, info = await self.run_calls(calls, self._call)
        if self._queries_ok:
            components["query_ok"] = sum(self._queries_ok) / len(self._queries_ok)
        assert self.state is not None
        self.state.actions.append("; ".join(self._summaries))
        if not self.done and self._queries_ok:
            self.state.next_steps = ["query further, or answer"]
        return components, results, info

    @staticmethod
    def _inline_calls(content: str) -> list[ToolCall]:
        if ANSWER_LINE.search(content):
            return [ToolCall(id="inline-answer", name="answer", arguments={"text": content})]
        block = SQL_BLOCK.search(content)
        if block is not None:
            return [ToolCall(id="inline-query", name="query", arguments={"sql": block.group(1)})]
        return []

    async def _call(self, call: ToolCall) -> CallOutcome:
        """One tool call; notes a line for the task state and, for a query, whether it ran."""
        outcome, summary = await self._dispatch(call)
        self._summaries.append(summary)
        if "query_ok" in outcome.components:
            self._queries_ok.append(outcome.components.pop("query_ok") == 1.0)
        return outcome

    async def _dispatch(self, call: ToolCall) -> tuple[CallOutcome, str]:
        if call.name == "list_tables":
            return await self._list_tables()
        if call.name == "query":
            sql = call.arguments.get("sql")
            if not isinstance(sql, str) or not sql.strip():
                return _malformed("argument 'sql' must be a non-empty string"), "query (malformed)"
            return await self._query(sql)
        if call.name == "answer":
            text = call.arguments.get("text")
            if not isinstance(text, str) and argument_text(text) is not None:  # a bare number
                text = f"Answer: {argument_text(text)}"
            if not isinstance(text, str) or not text.strip():
                return _malformed(
                    "argument 'text' must be a non-empty string"
                ), "answer (malformed)"
            return await self._answer(text)
        known = ", ".join(t["function"]["name"] for t in TOOLS)
        unknown = CallOutcome(False, f"unknown tool {call.name!r}; available: {known}",
                              failure=FailureReason.UNKNOWN_TOOL)  # fmt: skip
        return unknown, f"{call.name} (unknown)"

    async def _run(self, queries: list[str] | None, op: Literal["queries", "tables"]) -> SqlRun:
        assert self.sql_pool is not None
        request = query_request(
            self._layout, queries, op=op, db=WORKSPACE_DB,
            workspace=self._ws().id, memory_mb=max(64, self.sql_pool.config.memory_mb // 2),
        )  # fmt: skip
        return parse_run(await self.sql_pool.run(request))

    async def _list_tables(self) -> tuple[CallOutcome, str]:
        run = await self._run(None, "tables")
        if run.problem is not None:
            return _run_failed(run), f"list_tables -> {run.problem.value}"
        text = _clip("\n".join(t.render() for t in run.tables) or "(no tables)")
        # Counting a view's rows runs the model's SQL: the run's risks are its.
        outcome = CallOutcome(True, text, seconds=run.wall_s, log=text, risks=run.risks)
        return outcome, f"list_tables -> {len(run.tables)} tables"

    async def _query(self, sql: str) -> tuple[CallOutcome, str]:
        # What the statements do to the task's tables counts when issued, whether they succeed.
        risks, tables = assess(sql, self._task_tables)
        self._task_tables = frozenset(tables)
        run = await self._run([sql], "queries")
        risks += run.risks
        what = f"query `{' '.join(sql.split())[:60]}`"
        if run.problem is not None:
            outcome = _run_failed(run)
            outcome.risks = risks
            if not run.problem.infrastructure and run.problem is not RunProblem.TABLES:
                outcome.components = {"query_ok": 0.0}
            return outcome, f"{what} -> {run.problem.value}"
        (result,) = run.results
        text = _clip(result.render())
        if not result.ok:
            return CallOutcome(False, text, failure=FailureReason.TOOL_ERROR,
                               components={"query_ok": 0.0}, seconds=run.wall_s,
                               log=text, risks=risks), f"{what} -> error"  # fmt: skip
        return CallOutcome(True, text, components={"query_ok": 1.0}, seconds=run.wall_s,
                           log=text, risks=risks), f"{what} -> {result.row_count} rows"  # fmt: skip

    async def _answer(self, text: str) -> tuple[CallOutcome, str]:
        assert isinstance(self.task, SqlTask) and self.sql_pool is not None
        judgement = await judge_answer(self.sql_pool, self.task, text, self._files)
        if judgement.problem is not None:  # never the answer's doing: no verdict
            failure = (FailureReason.SANDBOX_ERROR if judgement.problem is RunProblem.SANDBOX
                       else FailureReason.VERIFIER_CRASH)  # fmt: skip
            failed = CallOutcome(False, f"the answer could not be judged: {judgement.detail}",
                                 failure=failure, log=judgement.detail,
                                 risks=judgement.risks)  # fmt: skip
            return failed, "answer (not judged)"
        self.done = True
        passed = sum(c.passed for c in judgement.checks)
        total = len(judgement.checks)
        failing = [c.kind for c in judgement.checks if not c.passed]
        content = f"answer recorded: {passed}/{total} checks passed"
        if failing:
            content += f" (failed: {', '.join(failing)})"
        components = {"outcome": float(judgement.passed), "rules_passed": judgement.share}
        if judgement.rejected:  # a wrong answer all the same, with the judge's reason
            content += f"; {judgement.rejected}"
            rejected = CallOutcome(False, content, failure=FailureReason.CHECKER_REJECTED,
                                   components=components, log=judgement.render(),
                                   risks=judgement.risks)  # fmt: skip
            return rejected, f"answer -> {passed}/{total} checks (SQL rejected)"
        outcome = CallOutcome(True, content, components=components, log=judgement.render(),
                              risks=judgement.risks)  # fmt: skip
        return outcome, f"answer -> {passed}/{total} checks"


LITERAL = re.compile(r"'((?:[^']|'')*)'")
DATE_LIKE = re.compile(r"\d{4}-\d{2}(?:-\d{2})?")


def unquoted_slip(task: AnyTask, actions: list[Action]) -> Action | None:
    """The first query of `actions` with one string literal written without its quotes, a
    period or date first (`period <= 2019-05`: DuckDB reads 2019 - 5 and refuses to compare it
    with text), else the first literal with a letter or digit; None when the first query has
    none. The slip of a recovery trace (`Domain.slip`): the failed query the sql policy wrote
    most after RL (validation, 2026-12-07)."""
    for action in actions:
        for call in action.tool_calls:
            if call.name != "query" or not isinstance(call.arguments.get("sql"), str):
                continue
            sql = call.arguments["sql"]
            words = [m for m in LITERAL.finditer(sql) if any(c.isalnum() for c in m[1])]
            if not words:
                return None
            chosen = next((m for m in words if DATE_LIKE.fullmatch(m[1])), words[0])
            wrong = sql[: chosen.start()] + chosen[1].replace("''", "'") + sql[chosen.end() :]
            return Action(tool_calls=[ToolCall(id="slip-query", name="query",
                                               arguments={"sql": wrong})])  # fmt: skip
    return None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "\n… (cut: too long)"


def _malformed(message: str) -> CallOutcome:
    return CallOutcome(False, message, failure=FailureReason.MALFORMED_ACTION)


def _run_failed(run: SqlRun) -> CallOutcome:
    assert run.problem is not None
    if run.problem is RunProblem.TABLES:
        text = f"the task's tables do not load: {run.detail}"
    else:
        text = f"[{run.problem.value}] {run.detail}"
    return CallOutcome(False, text, failure=RUN_FAILURE[run.problem], seconds=run.wall_s,
                       log=text, risks=run.risks)  # fmt: skip
