"""The `sql` domain: answer a question about tables (ledgers, invoices, statements) with DuckDB.

    task      `SqlTask` and its `AnswerRule`s
    answers   reading an answer's text: its number, the SQL it shows
    env       `SqlEnv`: list_tables, query (the DuckDB runner, `honing.envs.kits.duckdb_runner`),
              answer; `unquoted_slip` for recovery traces
    judge     the task's rules on a fresh copy of its tables, and the reference check
              (`check_sql`)
    generate  `synthetic-sql` (`generate_sql_tasks`; `phrasings="heldout"` words about half as
              training never does)
    data/     `examples-sql`, `tempting-sql`

docs/envs.md and docs/tasks.md describe the domain.
"""

from __future__ import annotations

from functools import partial

from honing.domains.sql.env import SqlEnv, unquoted_slip
from honing.domains.sql.generate import SQL_EXAMPLES, generate_sql_tasks
from honing.domains.sql.judge import check_sql
from honing.domains.sql.task import AnswerRule, SqlTask
from honing.tasks.domains import Domain, register
from honing.tasks.load import jsonl_set


def _generate(n: int, seed: int, phrasings: str) -> list[SqlTask]:
    return generate_sql_tasks(n, seed, phrasings)  # type: ignore[arg-type]  # checked there


DOMAIN = register(
    Domain(
        name="sql",
        task=SqlTask,
        env=SqlEnv,
        check=check_sql,
        generators={"sql": _generate},
        heldout_wordings=("sql",),
        sets={
            "tempting-sql": partial(
                jsonl_set, "tempting-sql", SQL_EXAMPLES.with_name("tempting.jsonl")
            )
        },
        examples=SQL_EXAMPLES,
        submit_tools=("answer",),
        description="financial questions answered with DuckDB queries",
        slip=unquoted_slip,
    )
)

__all__ = ["DOMAIN", "AnswerRule", "SqlEnv", "SqlTask", "check_sql", "generate_sql_tasks"]
