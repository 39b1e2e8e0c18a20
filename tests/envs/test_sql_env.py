"""The sql environment against the real sandbox (DuckDB in a sibling pool): the contract, rewards,
failures, rollback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from honing.domains.sql import judge as sqlcheck
from honing.domains.sql.env import SqlEnv
from honing.domains.sql.generate import SQL_EXAMPLES
from honing.domains.sql.task import SqlTask
from honing.envs import Action, EnvConfig, FailureReason
from honing.envs.kits.duckdb_runner import duckdb_pool
from honing.envs.registry import make_env
from honing.errors import HoningError
from honing.sandbox import ExecRequest, ExecResult, ExecStatus, SandboxPool
from honing.tasks import load_tasks

INVOICES = "invoice_id,customer,total\nINV-1,Acme,100.00\nINV-2,Globex,250.50\nINV-3,Hooli,80.00\n"
LINES = "invoice_id,qty,unit_price\nINV-1,2,50.00\nINV-2,1,200.00\nINV-2,1,40.50\nINV-3,4,20.00\n"
MISMATCH = SqlTask(
    id="mismatch",
    prompt="Which invoice's header total disagrees with its lines, and by how much?",
    tables={"invoices": INVOICES, "invoice_lines": LINES},
    answer="INV-2: 10.00",  # 250.50 - (200.00 + 40.50)
    rules=[
        {"kind": "mentions", "text": "INV-2", "excludes": ["INV-1", "INV-3"]},
        {"kind": "numeric"},
        {"kind": "traceable"},
    ],
    reference="SELECT i.invoice_id || ': ' || round(i.total - sum(l.qty * l.unit_price), 2) "
    "FROM invoices i JOIN invoice_lines l ON l.invoice_id = i.invoice_id "
    "GROUP BY i.invoice_id, i.total HAVING abs(i.total - sum(l.qty * l.unit_price)) > 0.005",
)
DIFF_SQL = (
    "SELECT round(i.total - sum(l.qty * l.unit_price), 2) FROM invoices i JOIN invoice_lines l "
    "ON l.invoice_id = i.invoice_id WHERE i.invoice_id = 'INV-2' GROUP BY i.total"
)


def call(name: str, **arguments: Any) -> Action:
    message = {
        "tool_calls": [
            {"id": f"c-{name}", "function": {"name": name, "arguments": json.dumps(arguments)}}
        ]
    }
    return Action.from_openai(message)  # fmt: skip


@pytest.fixture
def env(pool: SandboxPool) -> SqlEnv:
    return SqlEnv(pool, EnvConfig(max_steps=6))


async def test_reference_solves_through_tool_calls(env: SqlEnv) -> None:
    obs = await env.reset(MISMATCH)
    assert "Tables: invoices, invoice_lines" in obs.text and "```sql" in obs.text
    assert [t["function"]["name"] for t in obs.tools] == ["list_tables", "query", "answer"]
    query, answer = env.reference_actions(MISMATCH)
    first = await env.step(query)
    assert first.components == {"well_formed": 1.0, "query_ok": 1.0} and not first.done
    assert "INV-2: 10.0" in first.observation.tool_results[0].content
    last = await env.step(answer)
    assert last.done and last.info.failure is None
    assert last.components == {"well_formed": 1.0, "outcome": 1.0, "rules_passed": 1.0}
    assert last.reward == 1.0  # default weights: outcome only
    assert last.observation.tool_results[0].content == "answer recorded: 3/3 checks passed"


async def test_every_bundled_example_is_solved_by_its_reference(pool: SandboxPool) -> None:
    tasks = [t for t in load_tasks(str(SQL_EXAMPLES)).tasks if isinstance(t, SqlTask)]

    async def solve(task: SqlTask) -> float:
        env = SqlEnv(pool)
        await env.reset(task)
        results = [await env.step(a) for a in env.reference_actions(task)]
        await env.close()
        return results[-1].components["outcome"]

    assert await asyncio.gather(*(solve(t) for t in tasks)) == [1.0] * len(tasks)


async def test_noop_fails_with_a_format_penalty(env: SqlEnv) -> None:
    await env.reset(MISMATCH)
    result = await env.step(Action(content="I am not sure."))
    assert result.components == {"well_formed": 0.0}
    assert result.info.failure is FailureReason.MALFORMED_ACTION and not result.done
    assert "call list_tables, query or answer" in result.observation.text


async def test_malformed_and_unknown_calls_are_named_not_crashes(env: SqlEnv) -> None:
    await env.reset(MISMATCH)
    bad = await env.step(call("query", sql=42))
    assert bad.info.failure is FailureReason.MALFORMED_ACTION
    assert bad.components == {"well_formed": 0.0}
    assert bad.observation.tool_results[0].content == "argument 'sql' must be a non-empty string"
    unknown = await env.step(call("drop_database"))
    assert unknown.info.failure is FailureReason.UNKNOWN_TOOL
    assert "available: list_tables, query, answer" in unknown.observation.tool_results[0].content


async def test_wrong_answers_end_the_episode_with_partial_credit(env: SqlEnv) -> None:
    await env.reset(MISMATCH)
    result = await env.step(call("answer", text="It is one of INV-1, INV-2 or INV-3. Answer: 10"))
    assert result.done and result.components["outcome"] == 0.0
    assert result.components["rules_passed"] == pytest.approx(1 / 3)  # numeric only
    assert "failed: mentions, traceable" in result.observation.tool_results[0].content


async def test_list_tables_and_queries(env: SqlEnv) -> None:
    await env.reset(MISMATCH)
    listed = await env.step(call("list_tables"))
    assert listed.observation.tool_results[0].content.splitlines() == [
        "invoice_lines (table, 4 rows): invoice_id VARCHAR, qty BIGINT, unit_price DOUBLE",
        "invoices (table, 3 rows): invoice_id VARCHAR, customer VARCHAR, total DOUBLE",
    ]
    long = await env.step(call("query", sql="SELECT * FROM range(50)"))
    assert long.observation.tool_results[0].content.endswith("(20 of 50 rows shown)")
    huge = await env.step(call("query", sql="SELECT * FROM range(3000000)"))
    assert huge.observation.tool_results[0].content.endswith("(20 of more than 1000000 rows shown)")
    columns = ", ".join(f"repeat('x', 30) AS c{i}" for i in range(300))
    wide = await env.step(call("query", sql=f"SELECT {columns} FROM range(20)"))
    assert wide.observation.tool_results[0].content.endswith("… (cut: too long)")
    error = await env.step(call("query", sql="SELEC 1"))
    assert error.components == {"well_formed": 1.0, "query_ok": 0.0}
    assert error.info.failure is FailureReason.TOOL_ERROR and not error.info.infrastructure
    assert "syntax error" in error.observation.text  # shown as the latest error
    outside = await env.step(call("query", sql="COPY invoices TO 'stolen.csv'"))
    assert "disabled by configuration" in outside.observation.tool_results[0].content


async def test_an_inline_sql_block_is_a_query_and_an_answer_line_an_answer(env: SqlEnv) -> None:
    await env.reset(MISMATCH)
    queried = await env.step(
        Action(content="Let me look.\n```sql\nSELECT count(*) FROM invoices\n```")
    )
    assert (
        queried.components["query_ok"] == 1.0 and "3" in queried.observation.tool_results[0].content
    )
    answered = await env.step(
        Action(content=f"Answer: INV-2 is off by 10.00\n```sql\n{DIFF_SQL}\n```")
    )
    assert answered.done and answered.components["outcome"] == 1.0


async def test_what_the_model_does_to_its_database_does_not_count(env: SqlEnv) -> None:
    await env.reset(MISMATCH)
    await env.step(call("query", sql="UPDATE invoices SET total = total + 5; SELECT 1"))
    answer = f"Answer: INV-2: 10.00\n```sql\n{DIFF_SQL}\n```"
    result = await env.step(call("answer", text=answer))
    assert result.components["outcome"] == 1.0  # judged on the pristine tables
    await env.reset(MISMATCH)
    await env.step(call("query", sql="UPDATE invoices SET total = total + 5; SELECT 1"))
    shifted = await env.step(call("query", sql=DIFF_SQL))
    assert shifted.observation.tool_results[0].content.splitlines()[2] == "15"  # its own database


async def test_checkpoint_and_rollback_restore_the_database_and_state(env: SqlEnv) -> None:
    await env.reset(MISMATCH)
    token = await env.checkpoint()
    await env.step(call("query", sql="CREATE TABLE scratch AS SELECT 1 AS x; DROP TABLE invoices"))
    listed = await env.step(call("list_tables"))
    names = [line.split(" ")[0] for line in listed.observation.tool_results[0].content.splitlines()]
    assert names == ["invoice_lines", "scratch"] and env.steps == 2
    await env.rollback(token)
    assert env.steps == 0 and env.state is not None and env.state.actions == []
    listed = await env.step(call("list_tables"))
    names = [line.split(" ")[0] for line in listed.observation.tool_results[0].content.splitlines()]
    assert names == ["invoice_lines", "invoices"]
    with pytest.raises(HoningError, match="no checkpoint"):
        await env.rollback("nope")


@pytest.mark.parametrize(
    ("reply", "failure"),
    [
        (ExecResult(ExecStatus.SANDBOX_ERROR, error="cell crashed"), FailureReason.SANDBOX_ERROR),
        (ExecResult(ExecStatus.OK, exit_code=0, stdout="garbage"), FailureReason.VERIFIER_CRASH),
    ],
)
async def test_infrastructure_failure_is_flagged_not_scored(
    env: SqlEnv, monkeypatch: pytest.MonkeyPatch, reply: ExecResult, failure: FailureReason
) -> None:
    await env.reset(MISMATCH)

    async def broken(request: ExecRequest) -> ExecResult:
        return reply

    assert env.sql_pool is not None
    monkeypatch.setattr(env.sql_pool, "run", broken)
    queried = await env.step(call("query", sql="SELECT 1"))
    assert queried.info.failure is failure and queried.info.infrastructure
    assert queried.components == {"well_formed": 1.0}  # no query_ok of 0 for a broken sandbox
    answered = await env.step(env.reference_actions(MISMATCH)[1])
    assert answered.info.failure is failure and answered.info.infrastructure
    assert "outcome" not in answered.components and not answered.done


async def test_tables_that_do_not_load_are_not_the_models_fault(env: SqlEnv, tmp_path: Any) -> None:
    (tmp_path / "t.parquet").write_text("not parquet")
    task = SqlTask(id="broken", prompt="Rows?", tables={"t": str(tmp_path / "t.parquet")},
                   answer="1")  # fmt: skip
    await env.reset(task)
    result = await env.step(call("query", sql="SELECT count(*) FROM t"))
    assert result.info.failure is FailureReason.VERIFIER_CRASH and result.info.infrastructure
    assert "the task's tables do not load: table t" in result.observation.tool_results[0].content


RECONCILED = SqlTask.model_validate(
    {
        **MISMATCH.model_dump(),
        "id": "reconciled",
        "rules": [*MISMATCH.model_dump()["rules"], {"kind": "consistent", "queries": [
            DIFF_SQL,
            "SELECT 250.50 - sum(qty * unit_price) FROM invoice_lines WHERE invoice_id = 'INV-2'",
        ]}],
    }
)  # fmt: skip
# Names a task table, so the traceable rule runs it; keeps DuckDB busy far past any CPU limit.
BURN_SQL = "SELECT count(*) FROM invoices, range(1000000000000) t(i) WHERE i % 7 = 3"
BURNING = f"Answer: INV-2: 10.00\n```sql\n{BURN_SQL}\n```"


async def test_sql_that_makes_the_judge_spend_its_limits_is_a_wrong_answer(
    env: SqlEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer's snippet spends the judge's CPU-time limit: its rule fails and the answer is
    rejected with the reason; the task's own rule queries are judged again without it."""
    monkeypatch.setattr(sqlcheck, "TIMEOUT_S", 1.0)  # the judge's CPU-time limit (10 s)
    await env.reset(RECONCILED)
    result = await env.step(call("answer", text=BURNING))
    assert result.done and result.components["outcome"] == 0.0
    assert result.info.failure is FailureReason.CHECKER_REJECTED and not result.info.infrastructure
    assert "the answer's SQL made the judge's run fail: timeout: CPU-time limit" in (
        result.info.detail
    )
    assert result.components["rules_passed"] == 3 / 4  # mentions, numeric, consistent pass
    assert "FAIL traceable" in result.info.logs[0] and "pass consistent" in result.info.logs[0]


async def test_a_judge_the_host_does_not_run_in_time_is_infrastructure(
    env: SqlEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge reached its wall clock before spending its CPU-time limit (as on an overloaded
    host, here by a wall-clock limit shorter than the work): no verdict."""
    monkeypatch.setattr(sqlcheck, "checker_limits", lambda cpu_s: (60.0, 1.0))
    await env.reset(MISMATCH)
    result = await env.step(call("answer", text=BURNING))
    assert result.info.failure is FailureReason.VERIFIER_CRASH and result.info.infrastructure
    assert "wall-clock limit" in result.info.detail and "outcome" not in result.components


async def test_a_judge_that_cannot_start_is_infrastructure(
    env: SqlEnv, pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge in plain cells, where DuckDB cannot be imported."""
    await env.reset(MISMATCH)
    monkeypatch.setattr(env, "sql_pool", pool)
    result = await env.step(env.reference_actions(MISMATCH)[1])
    assert result.info.failure is FailureReason.VERIFIER_CRASH and result.info.infrastructure
    assert "No module named 'duckdb'" in result.info.detail
    assert "outcome" not in result.components and not result.done


async def test_close_releases_the_workspace_and_the_registry_knows_sql(pool: SandboxPool) -> None:
    env = make_env("sql", pool)
    assert isinstance(env, SqlEnv)
    await env.reset(MISMATCH)
    assert env.workspace is not None
    workspace_id = env.workspace.id
    await env.close()
    with pytest.raises(KeyError):
        (await duckdb_pool(pool)).get_workspace(workspace_id)
    with pytest.raises(HoningError, match="runs sql tasks, not math"):
        from honing.domains.math.task import MathTask

        await env.reset(MathTask(id="m", prompt="1+1?", answer="2"))
