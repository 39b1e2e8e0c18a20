"""The `sql` domain: answer a question about tables by querying them with DuckDB.

Tasks: `SqlTask`; environment: `honing.envs.sql.SqlEnv`; references judged by the sql rules
(`honing.tasks.quality.check_sql`); generator `sql` (its `phrasings`); built-in sets
`examples-sql`, `tempting-sql`. docs/envs.md and docs/tasks.md describe the domain.
"""

from __future__ import annotations

from functools import partial

from honing.envs.sql import SqlEnv, unquoted_slip
from honing.tasks.builtin import EXAMPLES_DIR, tempting
from honing.tasks.domains import Domain, register
from honing.tasks.quality import check_sql
from honing.tasks.schema import SqlTask
from honing.tasks.synthetic import generate_sql_tasks


def _generate(n: int, seed: int, phrasings: str) -> list[SqlTask]:
    return generate_sql_tasks(n, seed, phrasings)  # type: ignore[arg-type]  # checked there


DOMAIN = register(
    Domain(
        name="sql",
        task=SqlTask,
        env=SqlEnv,
        check=check_sql,
        generators={"sql": _generate},
        sets={"tempting-sql": partial(tempting, "sql")},
        examples=EXAMPLES_DIR / "sql_examples.jsonl",
        slip=unquoted_slip,
        description="financial questions answered with DuckDB queries",
    )
)
