"""The sql judge: an answer's number checked by the task's rules (numeric, mentions, traceable,
consistent), whose queries run on a fresh copy of the task's tables in the DuckDB runner
(`honing.envs.kits.duckdb_runner`), and the reference check (`check_references`); docs/tasks.md
("The modules in detail"). Not covered: a traceable query that names a table but returns a
constant (`SELECT 150 FROM sales LIMIT 1`) passes its rule — the numeric rule is what checks the
value.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from honing.domains.sql.answers import (
    Number,
    answer_number,
    sql_snippets,
    value_number,
    without_code,
)
from honing.domains.sql.task import AnswerRule, SqlTask
from honing.envs.kits.duckdb_runner import (
    TIMEOUT_S,
    QueryResult,
    RunProblem,
    SqlRun,
    duckdb_pool,
    format_value,
    parse_run,
    query_request,
    table_files,
    table_path,
)
from honing.errors import HoningError
from honing.risk import RiskEvent
from honing.sandbox import SandboxPool
from honing.tasks.checkrun import checker_limits
from honing.tasks.schema import ReferenceVerdict

FLOAT_REL = 1e-9  # "equal up to float rounding"
FLOAT_ABS = 1e-12


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


def reference_answer(task: SqlTask, value: Any) -> str:
    """The answer text the reference gives: `Answer: VALUE`, with its SQL shown."""
    text = f"Answer: {format_value(value)}"
    if task.reference is not None:
        text += f"\n\n```sql\n{task.reference.strip()}\n```"
    return text


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
        files = table_files(task.tables)
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


async def check_sql(tasks: Sequence[SqlTask], pool: SandboxPool) -> dict[str, ReferenceVerdict]:
    """SQL: the reference queries run and the reference answer meets every rule."""
    return await check_references(pool, [t for t in tasks if t.reference is not None])
