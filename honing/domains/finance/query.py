"""Running DuckDB SQL over a finance task's tables, in the sandbox.

    request = query_request(create_sql(documents), [sql], memory_mb=256)
    run = parse_run(await (await duckdb_pool(pool)).run(request))    # kits.duckdb_runner

Each run builds a fresh in-memory database from the documents' tables (`docs.create_sql`: typed
columns and literal rows, no CSV sniffing), then locks DuckDB's external access and runs the
queries; nothing a query creates or changes outlives the run, so the model cannot alter what
another query, or the judge, sees. The reply has the shape of the sql harness's, so the sql
domain's `parse_run`, `QueryResult` and `RunProblem` read it, in the same DuckDB sibling pool
(`duckdb_pool`). Not covered: judging (`honing.domains.finance.judge`, which reads the documents
themselves, never the database).
"""

from __future__ import annotations

import json

from honing.envs.kits.duckdb_runner import COUNT_CAP, MAX_ROWS, QUERY_RUNNER, TIMEOUT_S
from honing.sandbox import ExecRequest

# The sandboxed program: the sql harness's query runner, on a database built from the documents.
HARNESS = (
    QUERY_RUNNER
    + r"""

def main():
    spec = json.loads(sys.stdin.read())
    import duckdb
    con = memory_db(duckdb, spec["memory"])
    try:
        if spec["ddl"]:
            con.execute(spec["ddl"])
    except Exception as e:
        return {"load_error": f"{type(e).__name__}: {e}"[:2000]}
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return {"results": [run(con, duckdb, q, spec) for q in spec["queries"]]}


print("\n" + json.dumps(main(), default=str))
"""
)


def query_request(
    ddl: str, queries: list[str], *, memory_mb: int = 256, timeout_s: float = TIMEOUT_S
) -> ExecRequest:
    """The run of `queries` on a fresh database made by `ddl`."""
    spec = {
        "ddl": ddl,
        "queries": queries,
        "memory": f"{memory_mb}MB",
        "max_rows": MAX_ROWS,
        "count_cap": COUNT_CAP,
        "select_only": False,
    }
    return ExecRequest(
        code=HARNESS, stdin=json.dumps(spec), timeout_s=timeout_s, filename="finance_query.py"
    )
