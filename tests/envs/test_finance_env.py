"""The finance domain end to end on a real sandbox pool: each tool, the contract (the reference
solves every example with every process reward, noop fails, an unknown tool is a format failure,
rollback), the reward hacks that must earn nothing, traceability, the quality filter quarantining
a planted bad reference, and infrastructure failures that are never a reward of 0; and the judge
alone: one value read whole, dependence proved, the reference's formula, and random submissions
that never make it raise (tests/envs/test_reward_hacking.py plays the tricks)."""

from __future__ import annotations

import json
import random
import re
from fractions import Fraction
from typing import Any

import pytest

import honing.domains.finance  # noqa: F401  (registers the domain until honing.domains does)
from honing.config import SandboxConfig
from honing.domains.finance.docs import parse_documents
from honing.domains.finance.env import FinanceEnv
from honing.domains.finance.generate import generate_finance_tasks
from honing.domains.finance.judge import (
    CalcError,
    CalcTooLarge,
    Submission,
    compile_calculation,
    constant_parts,
    judge,
    moved_values,
    parse_submission,
    read_value,
    run_calculation,
    show_calculation,
    unused_citations,
)
from honing.domains.finance.task import FinanceTask
from honing.envs import Action, EnvConfig, FailureReason, StepResult, ToolCall
from honing.envs.registry import make_env
from honing.sandbox import SandboxPool
from honing.tasks import load_tasks, verify_references


def call(name: str, **arguments: object) -> Action:
    return Action(tool_calls=[ToolCall(id=name, name=name, arguments=arguments)])


def example(name: str) -> FinanceTask:
    task = next(t for t in load_tasks("examples-finance").tasks if t.id.endswith(name))
    assert isinstance(task, FinanceTask)
    return task


def reference(task: FinanceTask) -> dict[str, Any]:
    assert task.reference is not None
    found: dict[str, Any] = json.loads(task.reference)
    return found


async def env_for(pool: SandboxPool, task: FinanceTask, steps: int = 8) -> FinanceEnv:
    env = make_env("finance", pool, EnvConfig(max_steps=steps))
    assert isinstance(env, FinanceEnv)
    await env.reset(task)
    return env


def text(result: StepResult) -> str:
    return "\n".join(r.content for r in result.observation.tool_results)


async def test_list_documents_and_read_by_page_and_section(pool: SandboxPool) -> None:
    task = example("growth")
    report = next(name for name in task.documents if name.startswith("annual"))
    env = await env_for(pool, task)
    listing = await env.step(call("list_documents"))
    shown = text(listing)
    assert f"table {report[:-3]}_income_statement" in shown and "quarterly_" in shown
    assert "2 page(s) of 40 lines" in shown and "sections: 1 " in shown

    first = await env.step(call("read", document=report))
    assert text(first).startswith(f"{report}: lines 1-40 of ")
    assert "(page 1 of 2, 40 lines a page)" in text(first) and "  13| ## Income statement" in text(
        first
    )
    section = await env.step(call("read", document=report, section="segment results"))
    assert "section 'Segment results'" in text(section) and "| Total |" in text(section)
    past = await env.step(call("read", document=report, page=3))
    assert past.info.failure is FailureReason.TOOL_ERROR and "2 page(s)" in text(past)
    bad = await env.step(call("read", document=report, page_size=1000))
    assert bad.info.failure is FailureReason.MALFORMED_ACTION and bad.components["well_formed"] == 0
    missing = await env.step(call("read", document="10-K.md"))
    assert missing.info.failure is FailureReason.TOOL_ERROR and report in text(missing)
    assert not env.done
    await env.close()


async def test_query_runs_duckdb_on_a_fresh_copy_and_the_calculator_is_exact(
    pool: SandboxPool,
) -> None:
    task = example("growth")
    env = await env_for(pool, task, steps=10)
    table = next(t for d in env.documents.values() for t in d.tables if "income" in t.name)
    year = table.columns[2]
    ok = await env.step(
        call("query", sql=f"SELECT {year} FROM {table.name} WHERE line_item = 'Revenue'")
    )
    assert ok.components == {"well_formed": 1.0, "query_ok": 1.0}
    revenue = table.cell("Revenue", year)
    assert revenue is not None and revenue[0].replace(",", "") in text(ok)

    changed = await env.step(
        call(
            "query", sql=f"UPDATE {table.name} SET {year} = 1; SELECT SUM({year}) FROM {table.name}"
        )
    )
    assert changed.components["query_ok"] == 1.0 and "\n6\n" in text(changed)
    again = await env.step(
        call("query", sql=f"SELECT {year} FROM {table.name} WHERE line_item = 'Revenue'")
    )
    assert revenue[0].replace(",", "") in text(again)  # the update did not last

    wrong = await env.step(call("query", sql="SELECT nonsense FROM nowhere"))
    assert wrong.info.failure is FailureReason.TOOL_ERROR and wrong.components["query_ok"] == 0
    outside = await env.step(call("query", sql="SELECT * FROM read_csv_auto('/etc/passwd')"))
    assert outside.components["query_ok"] == 0.0 and "error" in text(outside)

    calc = await env.step(call("calculator", expression="(36048 - 31732) / 31732 * 100"))
    assert calc.components["tool_ok"] == 1.0 and "= 107900/7933" in text(calc)
    await env.close()


async def test_the_reference_solves_every_example_with_every_process_reward(
    pool: SandboxPool,
) -> None:
    tasks = load_tasks("examples-finance").tasks
    assert len(tasks) >= 6
    for task in tasks:
        assert isinstance(task, FinanceTask)
        env = await env_for(pool, task, steps=6)
        for action in env.reference_actions(task):
            result = await env.step(action)
        assert result.done and result.info.failure is None, (task.id, result.info)
        assert result.components == {
            "well_formed": 1.0,
            "outcome": 1.0,
            "cited_ok": 1.0,
            "checked": 1.0,
        }, task.id
        assert result.reward == 1.0
        await env.close()


async def test_noop_fails_an_unknown_tool_is_a_format_failure_and_rollback_works(
    pool: SandboxPool,
) -> None:
    task = example("quarterly-sum")
    env = await env_for(pool, task, steps=6)
    noop = await env.step(Action(content="I don't know."))
    assert noop.components.get("outcome", 0.0) == 0.0 and noop.reward == 0.0
    bogus = await env.step(Action(tool_calls=[ToolCall(id="x", name="no_such_tool", arguments={})]))
    assert bogus.info.failure is FailureReason.UNKNOWN_TOOL
    assert bogus.components["well_formed"] == 0.0 and "no_such_tool" in text(bogus)

    first = await env.reset(task)
    token = await env.checkpoint()
    for action in env.reference_actions(task):
        await env.step(action)
    assert env.done and env.steps > 0
    await env.rollback(token)
    assert not env.done and env.steps == 0
    assert env.state is not None and env.state.render() == first.text
    # what was read before the checkpoint is all `checked` knows: answer without reading again
    skipped = await env.step(env.reference_actions(task)[-1])
    assert skipped.components["outcome"] == 1.0 and skipped.components["checked"] == 0.0

    await env.reset(task)  # a reply without a tool call: its ```json block is the answer
    inline = await env.step(Action(content=f"Done.\n```json\n{task.reference}\n```"))
    assert inline.done and inline.components["outcome"] == 1.0
    await env.close()


async def test_a_computed_values_reference_queries_the_cells_and_the_arithmetic(
    pool: SandboxPool,
) -> None:
    """The reference of a value over table cells: a query of the cited cells, a query doing the
    arithmetic (its result shows the answer's value as written), then the answer citing the
    cells as the query shows them, in its order, the calculation renumbered to match. (A margin
    cites gross profit before revenue; the table, and so the query, shows revenue first.) An
    items question still reads its pages."""
    (margin,) = [t for t in generate_finance_tasks(40, 11) if "compute:margin" in t.tags][:1]
    given = reference(margin)
    assert [c["row"] for c in given["citations"]] == ["Gross profit", "Revenue"]
    assert given["calculation"] == "c1 / c2 * 100"
    env = await env_for(pool, margin)
    actions = env.reference_actions(margin)
    cells, arithmetic, answer = [a.tool_calls for a in actions]
    table = given["citations"][0]["table"]
    year = given["citations"][0]["column"].lower()
    assert [c.arguments for c in cells] == [
        {
            "sql": f"SELECT line_item, {year} FROM {table} "
            "WHERE line_item IN ('Revenue', 'Gross profit')"
        }
    ]
    revenue, gross = (int(c["value"].replace(",", "")) for c in given["citations"][::-1])
    assert arithmetic[0].arguments == {"sql": f"SELECT ROUND({gross} / {revenue} * 100, 4)"}
    arguments = answer[0].arguments
    assert [(c["row"], c["column"], c["value"]) for c in arguments["citations"]] == [
        ("Revenue", year, str(revenue)),
        ("Gross profit", year, str(gross)),
    ]
    assert arguments["calculation"] == "c2 / c1 * 100"
    shown = [await env.step(action) for action in actions]
    assert str(revenue) in text(shown[0]) and str(gross) in text(shown[0])
    assert arguments["value"] in text(shown[1]).splitlines()
    assert shown[-1].components["outcome"] == 1.0 and shown[-1].components["checked"] == 1.0
    await env.close()

    items = example("mismatch")
    reads = (await env_for(pool, items)).reference_actions(items)
    assert {c.name for a in reads[:-1] for c in a.tool_calls} == {"read"}


def test_the_calculation_is_exact_bounded_and_must_use_every_citation() -> None:
    values: list[Fraction | None] = [Fraction(31732), Fraction(36048), None]

    def run(expression: str) -> Fraction:
        return run_calculation(compile_calculation(expression, values), values)

    assert run("(c2 - c1) / c1 * 100") == Fraction(36048 - 31732, 31732) * 100
    assert run("(36048 - 31732) / 31732 * 100") == run("(c2 - c1) / c1 * 100")  # cited literals
    assert run("c2 ^ 2") == 36048**2
    for expression, why in [
        ("c1 * 1.5", "neither a cited value nor a whole number"),
        ("__import__('os')", "not allowed"),
        ("c1.real", "not allowed"),
        ("c4 + 1", "unknown name 'c4'"),
        ("c3 + 1", "c3 is not a number"),
        ("c1 / (c2 - c2)", "division by zero"),
        ("2 ** 13", "exponent"),
        ("c1 +", "not an arithmetic expression"),
        ("1" * 320 + " * c1", "neither a cited value nor a whole number"),  # past a float's range
        ("1e999 * c1", "not a finite number"),
        ("c1 ** (c2 - c1)", "the exponent of c1 ** (c2 - c1) holds a cited value"),
        ("0 ** (c1 - 31*1000 - 732)", "holds a cited value"),
    ]:
        with pytest.raises(CalcError, match=re.escape(why)):
            run(expression)
    for expression in ("((c1 ** 12) ** 12) ** 12", "+".join(["1"] * 300)):
        with pytest.raises(CalcTooLarge):
            run(expression)
    tree = compile_calculation("c1 - c1 + c2 * 0 + 7", values[:2])
    assert unused_citations(tree, values[:2]) == [0, 1]


def test_dependence_is_proved_by_evaluating_at_moved_values() -> None:
    """Each cited value moved alone must move the result, and a calculation that fails to
    evaluate there fails the check; no part over cited values may stay constant when they all
    move at once."""
    two = Fraction(2)
    there = moved_values([two], 1)[0]  # where the judge moves c1 first
    assert there is not None and there != two
    values: list[Fraction | None] = [two, there]
    breaks = compile_calculation("1 / (c1 - c2) + c2", values)  # divides by zero only there
    assert run_calculation(breaks, values) == 1 / (two - there) + there
    with pytest.raises(CalcError, match="fails when c1 changes"):
        unused_citations(breaks, values)

    growth: list[Fraction | None] = [Fraction(31732), Fraction(36048)]
    for expression, part in [
        ("c1 / c1 * 13 + c2", "c1 / c1"),
        ("(c2 - c1) / c1 * 100 + (c1 - c1)", "c1 - c1"),
        ("(c2 - c1) / c1 * 100 + 0 * c1", "0 * c1"),
        ("(c2 - c1) / c1 * 100 * c2 ** 0", "c2 ** 0"),
        ("c1 * c2 / (c2 * c1) * 7", "(c1 * c2) / (c2 * c1)"),
    ]:
        found = constant_parts(compile_calculation(expression, growth), growth)
        assert found and show_calculation(found[0]) == part, expression
    honest = compile_calculation("(c2 - c1) / c1 * 100", growth)
    assert constant_parts(honest, growth) == [] and unused_citations(honest, growth) == []


def test_the_value_is_read_whole_and_must_be_one_number() -> None:
    assert read_value(" 13.60 ") == Fraction(1360, 100)
    assert read_value("46,310") == 46310 and read_value("-3.5%") == Fraction(-7, 2)
    for gap in (" ", " " * 300, "\n", "\t" * 50, "\u00a0", "\u2003\u3000", " or ", "/"):
        text = f"13.60{gap}14"
        found = read_value(text)
        assert isinstance(found, str), repr(text)
        if len(text) <= 200:
            assert found.startswith("several values (13.60, 14)"), repr(text)
    assert (
        read_value("1" * 201) == "the value is 201 characters long: give one number, such as 12.34"
    )
    assert read_value("about thirteen") == "the answer must be one number, such as 12.34"
    with pytest.raises(ValueError, match="at most 200 characters"):
        parse_submission({"citations": [], "value": 10**5000})  # no JSON gives one; refused
    assert parse_submission({"citations": [], "value": "9" * 5000}).value == "9" * 5000  # uncut


def test_the_calculation_must_be_the_reference_formula() -> None:
    """A calculation that meets the answer only at the cited values (literals that cancel them)
    is refused when the task's reference gives its formula; honest rewritings pass, in any
    citation order. Without a reference calculation such a formula is not detected
    (docs/envs.md, "Reward hacking")."""
    task = example("growth")
    documents = parse_documents(task.documents)
    ref = reference(task)

    def verdict(calculation: str, citations: list[Any] = ref["citations"]) -> list[str]:
        answer = parse_submission({**ref, "citations": citations, "calculation": calculation})
        return judge(task, documents, answer).reasons

    cancels = (
        "(c1*107*1000 + c1*900 + c1*36*1000 + c1*48 - c2*31*1000 - c2*732) / (c1*7*1000 + c1*933)"
    )
    assert "not the formula the question asks for" in " ".join(verdict(cancels))
    assert verdict("c2 / c1 * 100 - 100") == [] and verdict("(36048 - 31732) / 31732 * 100") == []
    assert verdict("(c1 - c2) / c2 * 100", ref["citations"][::-1]) == []
    bare = task.model_copy(update={"reference": None})
    answer = parse_submission({**ref, "calculation": cancels})
    assert judge(bare, documents, answer).passed  # not covered without the reference's formula


def test_random_submissions_never_make_the_judge_raise() -> None:
    """A property, by seeded random sampling: whatever the value, the calculation and the
    citations hold, `parse_submission` raises only ValueError and `judge` returns a verdict;
    nothing random passes."""
    task = example("growth")
    documents = parse_documents(task.documents)
    ref = reference(task)
    rng = random.Random(7)
    tokens = ["c1", "c2", "c3", "c0", "(", ")", "+", "-", "*", "/", "**", "^", "0", "1", "7",
              "1000", "1001", "9" * 310, "1e999", "0.5", "31732", "36048", ".", "'x'", "1j",
              "[", "]", ",", "lambda", "__import__", "c1.real", " ", "\u00a0", "\x00", "٣",
              "(" * 60, ")" * 60, "-" * 100, "nan", "inf", "\ud800"]  # fmt: skip
    characters = "0123456789 .,-+%$()eE\t\n\u00a0\u2003x٣"
    for _ in range(1500):
        calculation = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 40)))
        value: Any = rng.choice([
            "".join(rng.choice(characters) for _ in range(rng.randint(0, 250))),
            rng.choice([0, -1, 10**400, 1e308, float("nan"), 13.6014, ref["value"], None, []]),
        ])  # fmt: skip
        citations: Any = rng.choice([
            ref["citations"],
            ref["citations"][::-1],
            [{**ref["citations"][0], "value": rng.choice(["1e999", "9" * 199, "-0", "(1)"])}],
            [{"document": rng.choice(list(task.documents)), "line": rng.randint(1, 60),
              "value": rng.choice(["13.6", "0", "x"])}] * rng.randint(1, 3),
        ])  # fmt: skip
        try:
            answer = parse_submission(
                {"citations": citations, "value": value, "calculation": calculation}
            )
        except ValueError:
            continue
        found = judge(task, documents, answer)
        assert found.reasons or calculation == ref["calculation"], (value, calculation)
    garbage = Submission(citations=[], value="x" * 10**6, calculation="(" * 10**6)
    assert not judge(task, documents, garbage).passed


def _all_cells(env: FinanceEnv) -> list[dict[str, Any]]:
    return [
        {"document": t.document, "table": t.name, "row": row[0], "column": column, "value": row[i]}
        for d in env.documents.values()
        for t in d.tables
        for row in t.rows
        for i, column in enumerate(t.columns)
        if i
    ]


async def _answer(pool: SandboxPool, task: FinanceTask, **arguments: Any) -> StepResult:
    env = await env_for(pool, task)
    result = await env.step(call("answer", **arguments))
    assert result.done, text(result)
    await env.close()
    return result


async def test_reward_hacks_earn_nothing(pool: SandboxPool) -> None:
    growth, total, items = example("growth"), example("quarterly-sum"), example("two-defects")
    ref = reference(growth)
    env = await env_for(pool, growth)
    everything = _all_cells(env)
    await env.close()
    right = {json.dumps(c, sort_keys=True) for c in ref["citations"]}
    rest = [c for c in everything if json.dumps(c, sort_keys=True) not in right]
    total_ref = reference(total)
    answer = int(total_ref["value"])
    hacks: list[tuple[str, FinanceTask, dict[str, Any], str]] = [
        (
            "cite every cell",
            growth,
            {**ref, "citations": ref["citations"] + rest},
            "the citations are not the figures",
        ),
        (
            "name every candidate",
            items,
            {**reference(items), "items": items.candidates},
            "the set of items is not right",
        ),
        (
            "the answer as a constant",
            growth,
            {**ref, "calculation": ref["value"]},
            "neither a cited value",
        ),
        (
            "a constant that ignores the cited values",
            total,
            {
                **total_ref,
                "calculation": f"{answer // 1000} * 1000 + {answer % 1000} + "
                "0 * (c1 + c2 + c3 + c4)",
            },
            "0 * (((c1 + c2) + c3) + c4) does not change with the cited values",
        ),
        (
            "a citation that states a value that is not there",
            growth,
            {**ref, "citations": [{**ref["citations"][0], "value": "99,999"}, ref["citations"][1]]},
            "holds",
        ),
        ("two values", growth, {**ref, "value": f"{ref['value']} or 14"}, "one number"),
        (
            "the right items with nothing cited",
            items,
            {**reference(items), "citations": []},
            "no citations",
        ),
    ]
    for name, task, arguments, why in hacks:
        result = await _answer(pool, task, **arguments)
        assert result.components["outcome"] == 0.0 and result.reward == 0.0, name
        assert result.info.failure is FailureReason.CHECKER_REJECTED, name
        assert why in text(result), (name, text(result))

    huge = await _answer(pool, growth, **{**ref, "calculation": "((c2 ** 12) ** 12) ** 12"})
    assert huge.components["outcome"] == 0.0 and huge.info.failure is FailureReason.CHECKER_REJECTED
    assert "calculation refused" in text(huge)
    power = await _answer(pool, growth, **{**ref, "calculation": "9 ** 9 ** 9"})
    assert power.components["outcome"] == 0.0 and "exponent" in text(power)


async def test_answers_from_a_rewritten_table_or_the_press_release_fail(pool: SandboxPool) -> None:
    task = example("growth")
    ref = reference(task)
    env = await env_for(pool, task)
    cited = ref["citations"][1]
    await env.step(call("query", sql=f"UPDATE {cited['table']} SET {cited['column'].lower()} = 1"))
    forged = {**ref, "citations": [ref["citations"][0], {**cited, "value": "1"}]}
    result = await env.step(call("answer", **forged))
    assert result.components["outcome"] == 0.0 and result.components["cited_ok"] == 0.5
    await env.close()

    restated = example("restated-growth")
    release = next(n for n in restated.documents if n.startswith("press"))
    number = next(
        i
        for i, line in enumerate(restated.documents[release].splitlines(), 1)
        if line.startswith("- **Revenue growth:**")
    )
    claimed = restated.documents[release].splitlines()[number - 1].split("** ")[1].split("%")[0]
    copied = {
        "value": claimed,
        "calculation": "c1",
        "citations": [{"document": release, "line": number, "value": claimed}],
    }
    result = await _answer(pool, restated, **copied)
    assert result.components["cited_ok"] == 1.0  # the line does say so
    assert result.components["outcome"] == 0.0 and "not right" in text(result)

    two = await env_for(pool, task)
    both = Action(
        tool_calls=[
            ToolCall(id="a", name="answer", arguments={**ref, "value": "1"}),
            ToolCall(id="b", name="answer", arguments=ref),
        ]
    )
    first_counts = await two.step(both)
    assert first_counts.done and first_counts.components["outcome"] == 0.0
    assert len(first_counts.observation.tool_results) == 1
    await two.close()


async def test_a_wrong_citation_fails_traceability(pool: SandboxPool) -> None:
    task = example("growth")
    ref = reference(task)
    good, other = ref["citations"][1], dict(ref["citations"][1])
    other["row"] = "Net income"  # the right value, cited from a cell that does not hold it
    result = await _answer(pool, task, **{**ref, "citations": [ref["citations"][0], other]})
    assert result.components["outcome"] == 0.0 and result.components["cited_ok"] == 0.5
    assert f"[Net income, {good['column']}] holds" in text(result)

    claim = example("claim")
    release = next(n for n in claim.documents if n.startswith("press"))
    wrong_line = {
        **reference(claim),
        "citations": [
            {"document": release, "line": 1, "value": "15.8"},
            *reference(claim)["citations"][1:],
        ],
    }
    result = await _answer(pool, claim, **wrong_line)
    assert result.components["outcome"] == 0.0 and "line 1 does not state" in text(result)


async def test_the_quality_filter_quarantines_a_planted_bad_reference(pool: SandboxPool) -> None:
    tasks = [t for t in load_tasks("examples-finance").tasks if isinstance(t, FinanceTask)]
    ref = reference(tasks[0])
    ref["citations"][0] = {**ref["citations"][0], "value": "12,345"}
    planted = tasks[0].model_copy(update={"reference": json.dumps(ref)})
    unparsable = tasks[1].model_copy(update={"reference": "Answer: 42"})
    found = await verify_references([planted, unparsable, *tasks[2:]], pool)
    assert {q.task_id for q in found.failed} == {planted.id, unparsable.id}
    reasons = {q.task_id: q.reason for q in found.failed}
    assert "holds" in reasons[planted.id]
    assert "do not end the episode" in reasons[unparsable.id]
    assert len(found.passed) == len(tasks) - 2 and found.unverified == []


async def test_infrastructure_failures_are_never_a_reward_of_zero(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = example("growth")
    env = await env_for(pool, task)
    # the task's tables do not load: the task's fault, not the model's
    monkeypatch.setattr(
        "honing.domains.finance.env.create_sql", lambda *args: "CREATE TABLE broken ("
    )
    broken = await env.step(call("query", sql="SELECT 1"))
    assert broken.info.failure is FailureReason.VERIFIER_CRASH and broken.info.infrastructure
    assert "query_ok" not in broken.components and "outcome" not in broken.components

    env.sql_pool = SandboxPool(SandboxConfig(pool_size=1))  # never started: the sandbox is down
    down = await env.step(call("query", sql="SELECT 1"))
    assert down.info.failure is FailureReason.SANDBOX_ERROR and down.info.infrastructure
    assert "query_ok" not in down.components and down.reward == 0.0 and not env.done

    def crash(*args: object) -> None:
        raise RecursionError("judge bug")

    # the judge runs in process on the task (validated) and the answer: what it fails on is the
    # answer's doing, a wrong answer with the reason, never an infrastructure escape
    monkeypatch.setattr("honing.domains.finance.env.judge", crash)
    crashed = await env.step(call("answer", **reference(task)))
    assert (
        crashed.info.failure is FailureReason.CHECKER_REJECTED and not crashed.info.infrastructure
    )
    assert crashed.components["outcome"] == 0.0 and env.done
    assert "the judge failed on this answer (RecursionError: judge bug)" in text(crashed)
    await env.close()
