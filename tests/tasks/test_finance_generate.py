"""The finance generator and task model: the same (n, seed) gives the same tasks; the planted
defects are in the documents (found again here from the parsed tables, independently of the
generator), nothing else disagrees; every reference passes the judge; and the task model refuses
what is wrong, naming the field."""

from __future__ import annotations

import json
import re
from fractions import Fraction

import pytest
from pydantic import ValidationError

import honing.domains.finance  # noqa: F401  (registers the domain)
from honing.domains.finance.docs import Table, number, parse_documents
from honing.domains.finance.generate import generate_finance_tasks
from honing.domains.finance.judge import judge, parse_submission
from honing.domains.finance.task import FinanceTask
from honing.tasks import load_tasks


def test_the_same_seed_gives_the_same_tasks_and_another_seed_others() -> None:
    first = [t.model_dump() for t in generate_finance_tasks(18, 3)]
    assert first == [t.model_dump() for t in generate_finance_tasks(18, 3)]
    other = [t.model_dump() for t in generate_finance_tasks(18, 4)]
    assert all(a["documents"] != b["documents"] for a, b in zip(first, other, strict=True))
    heldout = generate_finance_tasks(18, 3, "heldout")
    same = [(t["documents"], t.get("answer"), t["items"]) for t in first]
    assert same == [(t.documents, t.answer, t.items) for t in heldout]  # only the wording moves
    assert 0 < sum(a["prompt"] != b.prompt for a, b in zip(first, heldout, strict=True)) < 18
    assert len({t["id"] for t in first}) == 18


def test_every_question_kind_and_difficulty_is_drawn() -> None:
    tags = {tag for t in generate_finance_tasks(60, 0) for tag in t.tags}
    assert {"easy", "medium", "hard"} <= tags
    assert {"question:compute", "question:inconsistent", "question:claim"} <= tags
    assert {
        "defect:mismatch",
        "defect:subtotal",
        "defect:outlier",
        "defect:restated",
        "defect:claim",
    } <= tags


# -- an independent audit of the documents ----------------------------------------------------


def _tables(task: FinanceTask) -> dict[str, Table]:
    docs = parse_documents(task.documents)
    out = {}
    for doc in docs.values():
        for table in doc.tables:
            out["csv" if doc.kind == "csv" else table.title.split(" (")[0]] = table
    return out


def _value(table: Table, row: str, column: str) -> Fraction:
    cell = table.cell(row, column)
    assert cell is not None, (table.name, row, column)
    found = number(cell[0])
    assert found is not None
    return found


def audit(task: FinanceTask) -> set[str]:
    """Every disagreement the documents show, as short labels."""
    t = _tables(task)
    income, segments, quarterly, csv = (
        t["Income statement"],
        t["Segment results"],
        t["Quarterly results"],
        t["csv"],
    )
    this = income.headers[2]
    found = set()
    for column in income.headers[1:]:
        v = {r[0]: _value(income, r[0], column) for r in income.rows}
        if v["Revenue"] - v["Cost of revenue"] != v["Gross profit"]:
            found.add(f"income gross profit {column}")
        if v["Gross profit"] - v["Operating expenses"] != v["Operating income"]:
            found.add(f"income operating income {column}")
    for column, total in (("Revenue", "Revenue"), ("Operating income", "Operating income")):
        parts = sum(_value(segments, r[0], column) for r in segments.rows[:-1])
        if parts != _value(segments, "Total", column):
            found.add(f"segment {column} total")
        if _value(segments, "Total", column) != _value(income, total, this):
            found.add(f"segment {column} total vs income")
    for metric, label in (("revenue", "Revenue"), ("operating_income", "Operating income")):
        for row in csv.rows:
            if _value(csv, row[0], metric) != _value(quarterly, row[0], label):
                found.add(f"csv {metric} {row[0]} vs report")
        if sum(_value(csv, r[0], metric) for r in csv.rows) != _value(income, label, this):
            found.add(f"csv {metric} sum vs income")
    opex = [_value(csv, r[0], "operating_expenses") for r in csv.rows]
    for row in csv.rows:
        v = {m: _value(csv, row[0], m) for m in csv.columns[1:]}
        if v["revenue"] - v["cost_of_revenue"] != v["gross_profit"]:
            found.add(f"csv gross profit {row[0]}")
        if v["gross_profit"] - v["operating_expenses"] != v["operating_income"]:
            found.add(f"csv operating income {row[0]}")
        others = sorted(o for o in opex if o != v["operating_expenses"])
        if others and v["operating_expenses"] > 3 * others[len(others) // 2]:
            found.add(f"csv outlier operating expenses {row[0]}")
    release = next(text for name, text in task.documents.items() if name.startswith("press"))
    revenue, before = _value(income, "Revenue", this), _value(income, "Revenue", income.headers[1])
    truth = {
        "Revenue": revenue / 1000,
        "Revenue growth": (revenue - before) / before * 100,
        "Gross margin": _value(income, "Gross profit", this) / revenue * 100,
        "Operating income": _value(income, "Operating income", this) / 1000,
        "Net income": _value(income, "Net income", this) / 1000,
        f"{segments.rows[0][0]} segment revenue": _value(segments, segments.rows[0][0], "Revenue")
        / 1000,
    }
    for line in release.splitlines():
        claim = re.match(r"- \*\*(.+?):\*\* \$?(-?\d+\.\d)", line)
        if claim:
            stated = Fraction(claim.group(2))
            if abs(stated - truth[claim.group(1)]) > Fraction(1, 20):  # more than the rounding
                found.add(f"claim {claim.group(1)}")
    return found


def implied(item: str) -> set[str]:
    """What a planted wrong figure (named as the question lists it) shows in the documents."""
    quarter = re.search(r"(Q\d \d{4})", item)
    q = quarter.group(1) if quarter else ""
    if item.startswith("Revenue Q"):
        return {f"csv revenue {q} vs report", "csv revenue sum vs income", f"csv gross profit {q}"}
    if item.startswith("Operating income Q"):
        return {
            f"csv operating_income {q} vs report",
            "csv operating_income sum vs income",
            f"csv operating income {q}",
        }
    if item.startswith("Operating expenses Q"):
        return {f"csv outlier operating expenses {q}", f"csv operating income {q}"}
    if item.startswith("Operating income FY"):
        year = item.split()[2]
        return {
            f"income operating income {year}",
            "segment Operating income total vs income",
            "csv operating_income sum vs income",
        }
    assert item.startswith("Total segment revenue"), item
    return {"segment Revenue total", "segment Revenue total vs income"}


def test_the_planted_defects_are_in_the_documents_and_nothing_else_disagrees() -> None:
    tasks = generate_finance_tasks(60, 11)
    for task in tasks:
        found = audit(task)
        if "question:inconsistent" in task.tags:
            expected = set().union(*(implied(i) for i in task.items))
            # the release states the true operating income: it may differ visibly from a wrong one
            maybe = (
                {"claim Operating income"}
                if any("Operating income FY" in i for i in task.items)
                else set()
            )
            assert expected <= found <= expected | maybe, (task.id, found ^ expected)
            for item in task.items:  # its own symptom, whatever the other defect shows
                assert implied(item) & found, (task.id, item)
        elif "question:claim" in task.tags:
            assert found == {f"claim {i}" for i in task.items}, (task.id, found)
        elif "defect:restated" in task.tags:
            assert found == {"claim Revenue growth"}, (task.id, found)  # the release's basis
            assert "(restated)" in _tables(task)["Income statement"].headers[1]
        else:
            assert found == set(), (task.id, found)


def test_a_subtotal_defect_does_not_add_up_in_the_generated_tables() -> None:
    task = next(t for t in generate_finance_tasks(60, 2) if "defect:subtotal" in t.tags)
    segments = _tables(task)["Segment results"]
    income = _tables(task)["Income statement"]
    this = income.headers[2]
    parts = sum(_value(segments, r[0], "Revenue") for r in segments.rows[:-1])
    total_off = parts != _value(segments, "Total", "Revenue")
    v = {r[0]: _value(income, r[0], this) for r in income.rows}
    income_off = v["Gross profit"] - v["Operating expenses"] != v["Operating income"]
    assert total_off != income_off  # exactly one of the two subtotals is planted
    assert any(i.startswith(("Total segment", "Operating income FY")) for i in task.items)


def test_every_reference_passes_the_judge_and_cites_what_the_task_expects() -> None:
    for task in [*generate_finance_tasks(30, 5), *load_tasks("examples-finance").tasks]:
        assert isinstance(task, FinanceTask) and task.reference is not None
        submission = parse_submission(json.loads(task.reference))
        verdict = judge(task, parse_documents(task.documents), submission)
        assert verdict.passed, (task.id, verdict.reasons)
        assert verdict.cited_ok == 1.0


def test_the_examples_cover_each_question_kind() -> None:
    tasks = load_tasks("examples-finance").tasks
    assert 6 <= len(tasks) <= 10
    kinds = {tag for t in tasks for tag in t.tags if tag.startswith(("question:", "defect:"))}
    assert {
        "question:compute",
        "question:inconsistent",
        "question:claim",
        "defect:mismatch",
        "defect:subtotal",
        "defect:outlier",
        "defect:restated",
    } <= kinds


# -- the task model ----------------------------------------------------------------------------


def _row(**changes: object) -> dict[str, object]:
    row = generate_finance_tasks(1, 0)[0].model_dump(mode="json")
    row.update(changes)
    return row


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"documents": {"report.txt": "x"}}, "documents"),
        ({"documents": {}}, "documents"),
        ({"kind": "value", "answer": "about ten"}, "answer"),
        ({"kind": "value", "answer": None}, "answer"),
        ({"kind": "items", "answer": None, "items": ["a"], "candidates": ["a"]}, "candidates"),
        ({"kind": "items", "answer": None, "items": ["z"], "candidates": ["a", "b"]}, "items"),
        ({"expected_citations": []}, "expected_citations"),
        ({"tolerance": -1}, "tolerance"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_the_task_model_names_the_field_at_fault(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        FinanceTask.model_validate(_row(**changes))


def test_an_expected_citation_that_does_not_hold_is_refused() -> None:
    row = _row()
    cited = dict(row["expected_citations"][0])  # type: ignore[index]
    cited["value"] = "1"
    with pytest.raises(ValidationError, match=r"expected_citations\[0\]: .* holds"):
        FinanceTask.model_validate({**row, "expected_citations": [cited]})
    cited = {
        "document": cited["document"],
        "table": "nope",
        "row": "x",
        "column": "y",
        "value": "1",
    }
    with pytest.raises(ValidationError, match=r"expected_citations\[0\]: no table 'nope'"):
        FinanceTask.model_validate({**row, "expected_citations": [cited]})
