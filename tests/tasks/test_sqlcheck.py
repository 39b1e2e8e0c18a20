"""sql tasks: reading answers, the rules (hand-computed cases), the schema, table files, the
synthetic generator, the bundled examples and the quality filter's sql branch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from honing.domains.sql.answers import Number, answer_number, numbers, sql_snippets
from honing.domains.sql.generate import SQL_EXAMPLES, generate_sql_tasks
from honing.domains.sql.judge import check_rules, close, mentions, reference_answer, states
from honing.domains.sql.task import AnswerRule, SqlTask
from honing.envs.kits.duckdb_runner import QueryResult, duckdb_pool, table_files
from honing.sandbox import (
    ExecRequest,
    ExecResult,
    ExecStatus,
    RuntimeStore,
    SandboxConfig,
    SandboxPool,
)
from honing.tasks import TaskSet, apply_quality_filter, domains, load_tasks, verify_references

SALES = "id,region,amount\n1,North,10.50\n2,South,20.25\n3,North,5.00\n"
SUM_SQL = "SELECT sum(amount) FROM sales"


def sql_task(**fields: Any) -> SqlTask:
    values: dict[str, Any] = {"id": "t", "prompt": "Total amount?", "tables": {"sales": SALES},
                              "answer": "35.75", "reference": SUM_SQL}  # fmt: skip
    values.update(fields)
    return SqlTask(**values)


def value(sql: str, v: Any) -> QueryResult:
    return QueryResult(sql=sql, columns=["v"], types=["DOUBLE"], rows=[[v]], row_count=1)


# -- reading answers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Answer: $1,234.50", [1234.5]),
        ("-3.2% and 1.5e6", [-3.2, 1_500_000.0]),
        ("Q4 revenue of INV-7 on 2024-03-31 at 10:30", []),  # glued to other text: not numbers
        ("total `SELECT 150` and\n```sql\nSELECT 99\n```\nis 12.", [12.0]),  # code is not read
        ("values 1,2,3 or 1, 2", [1.0, 2.0]),  # 1,2,3 is no thousands group: no number at all
    ],
)
def test_numbers_outside_code(text: str, expected: list[float]) -> None:
    assert [n.value for n in numbers(text)] == expected


def test_a_number_knows_the_unit_of_its_last_digit() -> None:
    assert numbers("1,234.50")[0] == Number(1234.5, pytest.approx(0.01))
    assert numbers("150")[0].unit == 1.0
    assert numbers("1.5e3")[0].unit == pytest.approx(100.0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("In 2024 the total was 5. Answer: 150", 150.0),  # the first number after "answer"
        ("The answer is 3.75.", 3.75),
        ("answer:150", 150.0),
        ("Answer: INV-7: 150.00", 150.0),
        ("42", 42.0),  # the only number
        ("Revenue in 2023 rose to 42", None),  # two numbers, no "answer": ambiguous
        ("Answer: none found", None),
    ],
)
def test_answer_number(text: str, expected: float | None) -> None:
    found = answer_number(text)
    assert (found.value if found else None) == expected


def test_states_allows_the_rounding_shown_or_the_tolerance() -> None:
    assert states(Number(1234.57, 0.01), 1234.5678, 0.0)  # |diff| = 0.0022 < 0.005
    assert not states(Number(1234.57, 0.01), 1234.58, 0.0)  # 0.01 > 0.005
    assert states(Number(150.0, 1.0), 150.4, 0.0) and not states(Number(150.0, 1.0), 150.6, 0.0)
    assert states(Number(151.0, 1.0), 150.0, 0.01)  # |1| ≤ 0.01 × 151
    assert close(0.1 + 0.2, 0.3, 0.0)  # float rounding is always allowed
    assert not close(100.0, 100.0001, 0.0)
    assert close(100.00005, 100.0, 1e-6)  # 5e-5 ≤ 1e-6 × 100
    assert not close(100.0002, 100.0, 1e-6)  # 2e-4 > 1e-4
    assert close(1e-13, 0.0, 0.0) and not close(1e-6, 0.0, 0.5)  # 0 expected: only rounding


def test_mentions_is_a_whole_word_outside_code() -> None:
    assert mentions("Flagged inv-2043 for review", "INV-2043")
    assert not mentions("Flagged INV-20431", "INV-2043")
    assert not mentions("```sql\nSELECT * FROM t WHERE id = 'INV-2043'\n```", "INV-2043")


def test_sql_snippets() -> None:
    text = (
        "Answer: 3\n```sql\nSELECT 1 FROM a\n```\n```\nWITH x AS (SELECT 2) SELECT * FROM x\n```\n"
        "```python\nprint('SELECT 3')\n```\nalso `select 4 from b` and `not sql`"
    )
    assert sql_snippets(text) == [
        "SELECT 1 FROM a",
        "WITH x AS (SELECT 2) SELECT * FROM x",
        "select 4 from b",
    ]


# -- rules (the queries' results given by hand) -----------------------------------------------


def test_numeric_and_traceable_rules() -> None:
    task = sql_task(rules=[{"kind": "numeric"}, {"kind": "traceable"}])
    shown = f"Answer: 35.75\n```sql\n{SUM_SQL}\n```"
    checks = check_rules(task, shown, {SUM_SQL: value(SUM_SQL, 35.75)})
    assert [(c.kind, c.passed) for c in checks] == [("numeric", True), ("traceable", True)]
    # the query yields something else than the answer states
    checks = check_rules(task, shown, {SUM_SQL: value(SUM_SQL, 35.7)})
    assert [c.passed for c in checks] == [True, False]
    assert "yields 35.7, not 35.75" in checks[1].detail
    # a wrong number, no SQL at all, SQL over no task table
    assert [c.passed for c in check_rules(task, "Answer: 35.5", {})] == [False, False]
    checks = check_rules(task, "Answer: 35.75 `SELECT 35.75`", {})
    assert "no SQL over the task's tables" in checks[1].detail
    assert "states no number" in check_rules(task, "I don't know", {})[0].detail


def test_traceable_needs_a_single_value() -> None:
    task = sql_task(rules=[{"kind": "traceable"}])
    sql = "SELECT region, sum(amount) FROM sales GROUP BY region"
    two = QueryResult(sql=sql, columns=["region", "s"], rows=[["North", 15.5], ["South", 20.25]],
                      row_count=2)  # fmt: skip
    (check,) = check_rules(task, f"Answer: 15.5 `{sql}`", {sql: two})
    assert not check.passed and "2 row(s) of 2 column(s)" in check.detail
    failed = QueryResult(sql=sql, error="Binder Error: no such column")
    (check,) = check_rules(task, f"Answer: 15.5 `{sql}`", {sql: failed})
    assert not check.passed and "no such column" in check.detail


def test_mentions_with_excludes_defeats_listing_every_row() -> None:
    rule = {"kind": "mentions", "text": "EXP-2", "excludes": ["EXP-1", "EXP-3"]}
    task = sql_task(answer="EXP-2", rules=[rule])
    assert check_rules(task, "The anomalous claim is exp-2.", {})[0].passed
    listed = check_rules(task, "It is one of EXP-1, EXP-2, EXP-3.", {})[0]
    assert not listed.passed and "EXP-1, EXP-3" in listed.detail
    assert not check_rules(task, "Claim EXP-22 looks odd.", {})[0].passed


def test_consistent_rule_reconciles_every_query() -> None:
    q1, q2 = "SELECT sum(a) FROM ledger", "SELECT sum(b) FROM items"
    task = sql_task(tables={"ledger": "a\n1\n", "items": "b\n1\n"}, answer="100",
                    rules=[{"kind": "consistent", "queries": [q1, q2]}])  # fmt: skip
    assert check_rules(task, "Answer: 100", {q1: value(q1, 100.0), q2: value(q2, 100.004)})[
        0
    ].passed
    (check,) = check_rules(task, "Answer: 100", {q1: value(q1, 100.0), q2: value(q2, 98.0)})
    assert not check.passed and "does not reconcile" in check.detail and "98" in check.detail


def test_text_values_are_read_for_their_number() -> None:
    task = sql_task(answer="INV-7: 90.00", rules=[{"kind": "numeric"}, {"kind": "traceable"}])
    sql = "SELECT id || ': ' || diff FROM sales"
    text = reference_answer(task, "INV-7: 90.0") + f"\n`{sql}`"
    assert text.startswith("Answer: INV-7: 90.0\n")
    checks = check_rules(task, text, {SUM_SQL: value(SUM_SQL, "INV-7: 90.0")})
    assert [c.passed for c in checks] == [True, True]


def test_query_result_renders_compactly() -> None:
    result = QueryResult(sql="q", columns=["region", "total"], rows=[["North", 15.5], [None, 2.0]],
                         row_count=7)  # fmt: skip
    assert result.render().splitlines() == [
        "region | total",
        "-------+------",
        "North  | 15.5",
        "NULL   | 2",
        "(2 of 7 rows shown)",
    ]
    assert QueryResult(sql="q", error="Parser Error: x").render() == "error: Parser Error: x"
    huge = QueryResult(sql="q", columns=["n"], rows=[[1]], row_count=1_000_000, capped=True)
    assert huge.render().endswith("(1 of more than 1000000 rows shown)")


# -- schema -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rules": [{"kind": "mentions"}]}, "`text` is required by mentions rules"),
        ({"rules": [{"kind": "numeric", "text": "x"}]}, "only allowed there"),
        ({"rules": [{"kind": "consistent", "queries": ["SELECT 1"]}]}, "at least two"),
        ({"rules": [{"kind": "numeric", "excludes": ["a"]}]}, "mentions rules only"),
        ({"rules": []}, "at least 1 item"),
        ({"answer": "INV-7"}, "states no number, but a numeric rule needs one"),
        ({"tables": {"my table": "a\n1\n"}}, "not a SQL identifier"),
        ({"tables": {}}, "at least 1 item"),
    ],
)
def test_schema_refuses_rules_and_tables_that_cannot_work(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        sql_task(**fields)


def test_a_mentions_only_task_needs_no_number() -> None:
    task = sql_task(answer="INV-7", rules=[{"kind": "mentions", "text": "INV-7"}])
    assert task.rules == [AnswerRule(kind="mentions", text="INV-7")]


def test_table_files_inline_and_by_path(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "nums.parquet")
    (tmp_path / "other.csv").write_text("a\n1\n")
    task = sql_task(tables={"sales": SALES, "nums": str(tmp_path / "nums.parquet"),
                            "other": str(tmp_path / "other.csv")})  # fmt: skip
    files = table_files(task.tables)
    assert files["tables/sales.csv"] == SALES.encode()
    assert files["tables/other.csv"] == b"a\n1\n"
    assert files["tables/nums.parquet"][:4] == b"PAR1"
    with pytest.raises(ValueError, match="table 'gone': cannot read"):
        table_files(sql_task(tables={"gone": str(tmp_path / "missing.csv")}).tables)


# -- synthetic tasks --------------------------------------------------------------------------


def test_synthetic_tasks_are_deterministic_and_prefix_stable() -> None:
    tasks = generate_sql_tasks(8, seed=5)
    assert tasks == generate_sql_tasks(8, seed=5)
    assert generate_sql_tasks(3, seed=5) == tasks[:3]
    other = generate_sql_tasks(8, seed=6)
    assert all(a.tables != b.tables for a, b in zip(tasks, other, strict=True))
    assert len({t.id for t in tasks}) == 8
    kinds = [sorted(r.kind for r in t.rules) for t in tasks[:4]]
    assert kinds == [["numeric", "traceable"], ["mentions", "numeric"], ["mentions", "numeric"],
                     ["consistent", "numeric"]]  # fmt: skip
    assert all(domains.task_adapter().validate_python(t.model_dump()) == t for t in tasks)
    with pytest.raises(ValueError, match="n must be >= 0"):
        generate_sql_tasks(-1, seed=0)


async def test_synthetic_references_pass_the_quality_filter(pool: SandboxPool) -> None:
    tasks = generate_sql_tasks(12, seed=11)
    filtered, found = await apply_quality_filter(TaskSet("synthetic", list(tasks), [], 12), pool)
    assert [q.reason for q in filtered.quarantined] == []
    assert len(found.passed) == 12 and not found.unverified


# -- bundled examples and the quality filter --------------------------------------------------


async def test_bundled_examples_load_and_pass_the_quality_filter(pool: SandboxPool) -> None:
    taskset = load_tasks(str(SQL_EXAMPLES))
    assert taskset.quarantined == [] and len(taskset.tasks) == 5
    kinds = {r.kind for t in taskset.tasks if isinstance(t, SqlTask) for r in t.rules}
    assert kinds == {"numeric", "mentions", "traceable", "consistent"}
    assert any(len(t.tables) > 1 for t in taskset.tasks if isinstance(t, SqlTask))
    filtered, found = await apply_quality_filter(taskset, pool)
    assert [q.reason for q in filtered.quarantined] == []
    assert len(found.passed) == 5 and not found.unverified


BROKEN = {
    "wrong-value": (sql_task(reference="SELECT max(amount) FROM sales"), "numeric: 20.25 ≠"),
    "two-columns": (sql_task(reference="SELECT sum(amount), 1 FROM sales"), "1 row(s) of 2"),
    "not-a-select": (sql_task(reference="DROP TABLE sales"), "exactly one SELECT"),
    "sql-error": (sql_task(reference="SELECT sum(amont) FROM sales"), "amont"),
    "inconsistent": (
        sql_task(
            tables={"sales": SALES, "ledger": "total\n36.00\n"},
            rules=[
                {"kind": "numeric"},
                {"kind": "consistent", "queries": [SUM_SQL, "SELECT total FROM ledger"]},
            ],
        ),
        "does not reconcile",
    ),
}


async def test_failing_sql_references_are_quarantined_with_the_reason(
    pool: SandboxPool, tmp_path: Path
) -> None:
    (tmp_path / "sales.parquet").write_text(SALES)  # CSV text under a Parquet name
    broken = {**BROKEN, "bad-table": (sql_task(tables={"sales": str(tmp_path / "sales.parquet")}),
                                      "reference query: table sales: ")}  # fmt: skip
    tasks = [t.model_copy(update={"id": name}) for name, (t, _) in broken.items()]
    good = sql_task(id="good", rules=[{"kind": "numeric"}, {"kind": "traceable"}])
    found = await verify_references([good, *tasks], pool)
    assert [t.id for t in found.passed] == ["good"] and not found.unverified
    reasons = {q.task_id: q.reason for q in found.failed}
    for name, (_, expected) in broken.items():
        assert expected in reasons[name], (name, reasons[name])


async def test_a_sandbox_failure_leaves_sql_tasks_unverified(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    sql_pool = await duckdb_pool(pool)

    async def broken(request: ExecRequest) -> ExecResult:
        return ExecResult(ExecStatus.SANDBOX_ERROR, error="cell died")

    monkeypatch.setattr(sql_pool, "run", broken)
    taskset = TaskSet("t", [sql_task()], [], 1)
    filtered, found = await apply_quality_filter(taskset, pool)
    assert [(t.id, "cell died" in why) for t, why in found.unverified] == [("t", True)]
    assert filtered.quarantined == [] and [t.id for t in filtered.tasks] == ["t"]


async def test_a_pool_that_preloads_duckdb_is_used_as_it_is(
    make_config: Callable[..., SandboxConfig],
) -> None:
    RuntimeStore().build_from_installed("honing-sql", ["duckdb"])
    config = make_config(pool_size=1, runtime="honing-sql", preload=["duckdb"])
    async with SandboxPool(config) as own:
        assert await duckdb_pool(own) is own
        found = await verify_references([sql_task()], own)
        assert [t.id for t in found.passed] == ["t"]
