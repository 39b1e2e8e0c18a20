"""Recovery traces: `recovery_share` of the trace tasks whose domain has a slip (sql: the first
query with a literal unquoted; tools: the first `convert_units` call without its units or with a
unit spelled out, or `calendar` with the operation `days`) get a second trace beside their own,
which begins with the slip, kept as context only (weight 0: SFT does not learn it), and the
error the real environment gives it, then the reference, which still solves the task; the same
tasks every run; a slip the environment accepts gives no second trace; a config that asks for
slips where no domain has one, or on `warm_start.data`, fails before anything is played. Why:
after RL the sql policy's greedy query lost its quotes on worded-anew questions (`period <=
2017-04`, a Binder Error), and having never seen a failed query answered by a corrected one, it
answered the error's garbage (docs/training.md, "Recipes"). Beside, not instead: with the
recovery trace in place of the task's own, the corrected query is learned as a copy of the slip
in its context, and the sql warm start fell from 43% to 27% of validation. Breaking the weight
(the slip learned as weight 1) fails the mask test, checked by hand"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pydantic import ValidationError

import honing.domains.sql
import honing.domains.tools  # noqa: F401  (both register their domains)
from honing.domains.math.generate import generate_math_tasks
from honing.domains.sql.env import unquoted_slip
from honing.domains.sql.generate import generate_sql_tasks
from honing.domains.tools.env import tools_slip
from honing.domains.tools.generate import generate_tools_tasks
from honing.envs import Action, ToolCall
from honing.errors import ConfigError
from honing.rollout.chat import ChatFormat
from honing.rollout.models import load_tokenizer
from honing.sandbox import SandboxPool
from honing.tasks import domains
from honing.tasks.load import AnyTask
from honing.trainer.run_config import WarmStart
from honing.trainer.sft import parse_example, tokenize_example
from honing.trainer.traces import recovery_choice, reference_traces, trace_budget

MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


def query(sql: str) -> Action:
    return Action(tool_calls=[ToolCall(id="q", name="query", arguments={"sql": sql})])


def slipped_sql(actions: list[Action]) -> str | None:
    found = unquoted_slip(generate_sql_tasks(1, 0)[0], actions)
    return None if found is None else str(found.tool_calls[0].arguments["sql"])


def test_the_sql_slip_unquotes_a_date_first_else_the_first_word() -> None:
    ledger = "SELECT sum(debit) FROM gl WHERE account = '1200 AR' AND period <= '2019-05'"
    assert slipped_sql([query(ledger)]) == (
        "SELECT sum(debit) FROM gl WHERE account = '1200 AR' AND period <= 2019-05"
    )
    assert slipped_sql([query("SELECT x || ': ' || y FROM t WHERE name = 'O''Hara'")]) == (
        "SELECT x || ': ' || y FROM t WHERE name = O'Hara"  # punctuation alone is no word
    )
    assert slipped_sql([query("SELECT count(*) FROM t")]) is None
    answer = Action(tool_calls=[ToolCall(id="a", name="answer", arguments={"text": "'x'"})])
    assert slipped_sql([answer, query("SELECT 1 FROM t WHERE a = 'b'")]) == (
        "SELECT 1 FROM t WHERE a = b"  # the first query, wherever it is
    )


def test_recovery_choice_takes_the_share_of_the_tasks_with_a_slip() -> None:
    tasks: list[AnyTask] = [*generate_sql_tasks(10, 0), *generate_math_tasks(6, 0)]
    assert recovery_choice(tasks, 0.0) == set()
    half = recovery_choice(tasks, 0.5)
    assert len(half) == 5 and all(i.startswith("sql-") for i in half)
    assert recovery_choice(list(reversed(tasks)), 0.5) == half  # the ids decide, not the order
    assert recovery_choice(tasks, 0.5) <= recovery_choice(tasks, 0.8)  # a larger share adds
    assert recovery_choice(tasks, 1.0) == {t.id for t in tasks[:10]}
    with pytest.raises(ConfigError, match=r"recovery_share is 0.5, but none of the 6 trace"):
        recovery_choice(generate_math_tasks(6, 0), 0.5)


def test_recovery_share_applies_to_traces_only() -> None:
    with pytest.raises(ValidationError, match=r"recovery_share .* applies to traces only"):
        WarmStart(data=Path("chat.jsonl"), recovery_share=0.5)


@MODULE_LOOP
async def test_a_recovery_trace_is_the_slip_as_context_its_error_then_the_reference(
    module_pool: SandboxPool, tiny_model_dir: Path
) -> None:
    tasks = generate_sql_tasks(12, 3)
    plain = await reference_traces(tasks, module_pool, system_prompt="", restate=False)
    traces = await reference_traces(tasks, module_pool, system_prompt="", restate=False,
                                    recovery_share=1.0)  # fmt: skip
    assert [t for t in traces if not t.slipped] == plain  # each task's own trace, as it was
    slipped = [t for t in traces if t.slipped]
    assert len(slipped) >= 8 and all(t.outcome == 1.0 for t in traces)
    order = [t.task_id for t in traces]
    assert order == sorted(order, key=[t.id for t in tasks].index)  # each beside its own
    fmt = ChatFormat.of(load_tokenizer(tiny_model_dir))
    alone_of = {t.task_id: t for t in plain}
    for trace in slipped:
        alone = alone_of[trace.task_id]
        user, slip, error, *rest = trace.messages[1:]
        assert user == alone.messages[1] and slip["weight"] == 0 and slip["role"] == "assistant"
        assert error["role"] == "tool" and "error" in error["content"].lower()
        assert trace.actions[0] == slip["content"] and trace.actions[1:] == alone.actions
        assert (
            [m for m in rest if m["role"] != "user"]
            == [  # then the reference
                m for m in alone.messages[2:] if m["role"] != "user"
            ]
        )
        row = trace.to_json_dict()
        assert row["id"] == f"{trace.task_id}/recovery"
        example, problems = parse_example(row, trace.task_id)
        assert example is not None, problems
        sequence = tokenize_example(example, fmt)
        learned = "".join(
            fmt.decode([token for token, _ in group])
            for value, group in itertools.groupby(
                zip(sequence.token_ids, sequence.loss_mask, strict=True), key=lambda p: p[1]
            )
            if value
        )
        assert slip["content"] not in learned and all(a in learned for a in alone.actions)
    budget = trace_budget(traces, load_tokenizer(tiny_model_dir), 4096, 2)
    assert set(budget.too_many) == {t.task_id for t in slipped}  # the slip is a turn too


@MODULE_LOOP
async def test_a_slip_the_environment_accepts_is_left_out(
    module_pool: SandboxPool,
) -> None:
    tasks = generate_sql_tasks(4, 3)
    plain = await reference_traces(tasks, module_pool, system_prompt="", restate=False)

    def harmless(task: AnyTask, actions: list[Action]) -> Action:
        return query("SELECT 1")

    with domains.replaced("sql", slip=harmless):
        traces = await reference_traces(tasks, module_pool, system_prompt="", restate=False,
                                        recovery_share=1.0)  # fmt: skip
    assert traces == plain  # no recovery trace: each task's own, once


def test_the_tools_slip_drops_or_spells_out_the_units_and_misnames_the_calendar_operation() -> None:
    def call(name: str, **arguments: object) -> Action:
        return Action(tool_calls=[ToolCall(id=name, name=name, arguments=arguments)])

    convert = call("convert_units", value=882, from_unit="in", to_unit="mm")
    task = generate_tools_tasks(1, 0)[0]
    ids = [task.model_copy(update={"id": f"t{i}"}) for i in range(8)]
    slips = [tools_slip(t, [call("lookup", key="x"), convert]) for t in ids]
    forms = {tuple(sorted(s.tool_calls[0].arguments.items())) for s in slips if s is not None}
    assert forms == {(("value", 882),),  # the units dropped: some tasks, by their ids
                     (("from_unit", "inches"), ("to_unit", "mm"), ("value", 882))}  # fmt: skip
    assert tools_slip(ids[0], [convert]) == tools_slip(ids[0], [convert])  # the same every run
    weekday = call("calendar", operation="add_days", date="2030-06-23", days=12)
    slip = tools_slip(task, [weekday])
    assert slip is not None and slip.tool_calls[0].arguments == {
        "operation": "days", "date": "2030-06-23", "days": 12}  # fmt: skip
    assert tools_slip(task, [call("lookup", key="x"), call("answer", value="1")]) is None


@MODULE_LOOP
async def test_a_tools_recovery_trace_shows_what_the_tool_takes_then_solves_the_task(
    module_pool: SandboxPool,
) -> None:
    tasks = generate_tools_tasks(40, 3)
    traces = await reference_traces(tasks, module_pool, system_prompt="", restate=False,
                                    recovery_share=1.0)  # fmt: skip
    slipped = [t for t in traces if t.slipped]
    assert len(slipped) >= 10 and all(t.outcome == 1.0 for t in traces)  # the budget holds it
    said = [t.messages[3]["content"] for t in slipped]
    assert any("it takes value (number), from_unit (string), to_unit (string)" in e for e in said)
    assert any("unknown unit" in e and "the units are length m, km" in e for e in said)
    assert any("unknown operation 'days'; use weekday, add_days or days_between" in e for e in said)
    names = {t.task_id for t in slipped}
    for trace in (t for t in traces if not t.slipped):  # a slip wherever there is one to make
        calls = any(name in a for a in trace.actions for name in ("convert_units", "calendar"))
        assert (trace.task_id in names) == calls
