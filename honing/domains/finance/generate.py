"""Seeded finance tasks: a question about a fictional company's documents (`company`), with
planted defects, answered with the citations it needs.

    generate_finance_tasks(n, seed, phrasings)   same (n, seed) -> same tasks on any machine

Questions (tag `question:*`): `compute` (growth or margin: easy; a sum of quarters or a
segment's share: medium; growth against a restated prior year: hard), `inconsistent` (the wrong
figures among candidates: a CSV quarter that disagrees with the annual report, a total that does
not add up, a slipped digit; one defect easy or medium, two hard) and `claim` (the press-release
highlights the annual report does not support; one medium, two or a restated basis hard).
Defects are tagged `defect:*`. The reference is the answer with its expected citations (and
calculation); "heldout" phrasings word about half the tasks as training never does (tagged
`phrasing-unseen`). Not covered: checking them (the references are played through the
environment).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from honing.domains.finance.cite import Citation
from honing.domains.finance.company import (
    CLAIMS,
    LABELS,
    Books,
    Draft,
    Shown,
    decimal,
    draft,
    draw_books,
    names,
    original_prior_revenue,
    prior_column,
    true_claims,
)
from honing.domains.finance.task import FinanceTask
from honing.tasks.synthetic.common import (
    UNSEEN_SHARE,
    UNSEEN_TAG,
    Phrasings,
    Wording,
    check_phrasings,
)

PERCENT_TOLERANCE = 0.002  # relative: a percentage given to two decimals (every one is >= 3)
# How to answer, as training words it (`seen`, the prompt's last sentence) and as only held-out
# sets do; a held-out prompt also puts the question before the documents (`_ask`).
CITE_VALUE = Wording(
    seen="Answer with the number, cite the cells that hold the figures you use, and give the "
    "calculation over them (c1, c2, … in citation order).",
    unseen=(
        "Your reply needs three things: the figure, a citation for every cell whose figure "
        "goes into it, and the calculation over those cells, written with c1, c2, … for the "
        "cells in the order you cite them.",
    ),
)
CITE_ITEMS = Wording(
    seen="Answer with the wrong figures' names exactly as listed, citing the cell of each and, "
    "for a figure that disagrees with another document, that document's cell too.",
    unseen=(
        "Reply with each faulty figure named word for word as in the list; cite the cell it "
        "sits in and, where another document reports it differently, that document's cell as "
        "well.",
    ),
)
CITE_CLAIMS = Wording(
    seen="Answer with the highlights' names as listed; for each one not supported, cite its "
    "line in the press release and the annual-report cells it should be computed from.",
    unseen=(
        "Reply with the names of the unsupported highlights, spelled as in the list, and for "
        "each cite the press-release line that makes it and the annual-report cells it ought to "
        "be computed from.",
    ),
)
# Each question's wordings: the one training asks, and those only held-out sets ask (str.format
# fields from `_ask`).
WORDINGS = {
    "growth": Wording(
        seen="By what percentage did {label} change from fiscal {prior} to fiscal {year}, "
        "according to the income statement in {report}? Give it to two decimals (negative for a "
        "decline).",
        unseen=(
            "Using {report}'s income statement, compute the year-over-year change in {label} "
            "for fiscal {year}, in percent with two decimals (a decline is negative).",
            "Set fiscal {year} {label} against fiscal {prior} {label}, both from the income "
            "statement in {report}: how big was the move, as a percentage of the fiscal {prior} "
            "figure? Two decimals; a fall is negative.",
        ),
    ),
    "margin": Wording(
        seen="What was the {name} margin in fiscal {year} ({label} as a percentage of revenue), "
        "according to the income statement in {report}? Give it to two decimals.",
        unseen=(
            "From the income statement in {report}, what percentage of fiscal {year} revenue "
            "was {label}? Two decimals.",
            "Out of every 100 of fiscal {year} revenue, how much ended up as {label}? Take both "
            "lines from {report}'s income statement; give a percentage with two decimals.",
        ),
    ),
    "sum": Wording(
        seen="What was the total of {metric} over the four quarters of {year} in {quarterly}, "
        "in thousands of US dollars?",
        unseen=(
            "Add up the quarterly {metric} figures of {year} in {quarterly}: what is the "
            "full-year total (thousands of US dollars)?",
            "{quarterly} splits {year} into quarters. Q1 to Q4 of its {metric} column together "
            "come to how many thousand US dollars?",
        ),
    ),
    "share": Wording(
        seen="What share of fiscal {year} revenue came from the {segment} segment, in percent "
        "with two decimals, according to the segment table of {report}?",
        unseen=(
            "In {report}'s segment results, what percentage of total fiscal {year} revenue did "
            "{segment} contribute? Two decimals.",
            "Take the {segment} segment's fiscal {year} revenue in {report}'s segment table and "
            "express it as a percentage of the total there, to two decimals.",
        ),
    ),
    "restated": Wording(
        seen="By what percentage did revenue grow in fiscal {year}, measured against the "
        "restated fiscal {prior} revenue in {report}'s income statement (not the figure in "
        "{release})? Two decimals.",
        unseen=(
            "{release} compares fiscal {year} revenue with the fiscal {prior} figure as first "
            "reported. Recompute the revenue growth against the restated figure in {report}'s "
            "income statement, in percent with two decimals.",
            "Fiscal {prior} revenue was restated: {report}'s income statement has the new "
            "figure, {release} still the old one. Against the restated figure, what was the "
            "revenue growth in fiscal {year}, in percent to two decimals?",
        ),
    ),
    "inconsistent": Wording(
        seen="Some of these figures are wrong: they disagree with the same figure reported in "
        "another document, do not add up with the figures they total, or are implausible next "
        "to the other quarters. Which ones? Candidates: {listed}.",
        unseen=(
            "An analyst checking the documents suspects errors among these figures: {listed}. "
            "Find every figure that conflicts with another document, fails to add up, or is out "
            "of line with the other quarters.",
            "Candidates: {listed}. An error among them is a figure that another document "
            "reports differently, a total that is not the sum of its parts, or a quarter far out "
            "of line with the rest. Which candidates are errors?",
        ),
    ),
    "claim": Wording(
        seen="Which highlights of {release} are not supported by the income statement and "
        "segment table of {report} (the release rounds to one decimal)? Candidates: {listed}.",
        unseen=(
            "Check each highlight of {release} ({listed}) against {report}'s income statement "
            "and segment results, allowing for rounding to one decimal: which are not "
            "supported?",
            "{release} makes these highlights: {listed}. Rounded to one decimal as the release "
            "does, which of them cannot be reproduced from the income statement and segment "
            "table of {report}?",
        ),
    ),
}
# The documents, after the question in a held-out prompt (before it in a training one).
SOURCES = "The documents, all on {company}'s fiscal {year}: {report}, {quarterly} and {release}."


def _rng(seed: int) -> random.Random:
    return random.Random(f"honing.tasks.synthetic/finance/{seed}")


def _ask(d: Draft, question: str, unseen: float | None, closing: Wording, **fields: Any) -> str:
    """The prompt: which documents there are, the question in one of its wordings, and how to
    answer. `unseen` (in [0, 1)) picks a held-out wording and puts the question first; None
    gives the training prompt."""
    b = d.books
    report, quarterly, release = names(b)
    known = {
        "report": report,
        "quarterly": quarterly,
        "release": release,
        "year": b.year,
        "prior": b.year - 1,
        "company": b.company,
    }
    wording = WORDINGS[question]
    if unseen is None:
        assert isinstance(wording.seen, str) and isinstance(closing.seen, str)
        intro = (
            f"You have three documents on {b.company}'s fiscal {b.year}: {report}, {quarterly} "
            f"and {release}."
        )
        return f"{intro} {wording.seen.format(**known, **fields)} {closing.seen}"
    asked = wording.unseen[int(unseen * len(wording.unseen))].format(**known, **fields)
    how = closing.unseen[int(unseen * len(closing.unseen))]
    return f"{asked} {SOURCES.format(**known)} {how}"


def _task(
    task_id: str,
    d: Draft,
    unseen: bool,
    level: str,
    question: str,
    prompt: str,
    cites: list[Citation],
    tags: list[str],
    **answer: Any,
) -> FinanceTask:
    """A value task (`value`, `places`, `calculation`) or an items task (`items`,
    `candidates`), its reference the answer with the expected citations; `unseen`: worded as
    training never is (tagged `UNSEEN_TAG`)."""
    cites = list({c.model_dump_json(): c for c in cites}.values())
    reference: dict[str, Any] = {"citations": [c.model_dump(exclude_none=True) for c in cites]}
    if "value" in answer:
        value = decimal(answer["value"], answer["places"])
        reference.update(value=value, calculation=answer["calculation"])
        fields: dict[str, Any] = {
            "kind": "value",
            "answer": value,
            "tolerance": PERCENT_TOLERANCE if answer["places"] else 0.0,
        }
    else:
        reference["items"] = answer["items"]
        fields = {"kind": "items", "items": answer["items"], "candidates": answer["candidates"]}
    return FinanceTask(
        id=task_id,
        prompt=prompt,
        documents=d.documents,
        expected_citations=cites,
        reference=json.dumps(reference),
        tags=[level, f"question:{question}", *tags] + ([UNSEEN_TAG] if unseen else []),
        metadata={"company": d.books.company, "year": d.books.year, "question": question},
        **fields,
    )


def growth_or_margin(rng: random.Random, task_id: str, unseen: float | None) -> FinanceTask:
    b = draw_books(rng)
    d = draft(b, Shown(), rng)
    y = b.year
    if rng.random() < 0.5:
        metric = rng.choice(["revenue", "operating_income", "net_income"])
        row = LABELS[metric]
        cites = [
            d.cell("Income statement", row, f"FY{y - 1}"),
            d.cell("Income statement", row, f"FY{y}"),
        ]
        value = Fraction(b.fy(metric) - b.before(metric), b.before(metric)) * 100
        prompt = _ask(d, "growth", unseen, CITE_VALUE, label=row.lower())
        kind, calculation = "growth", "(c2 - c1) / c1 * 100"
    else:
        metric = rng.choice(["gross_profit", "operating_income", "net_income"])
        row = LABELS[metric]
        cites = [
            d.cell("Income statement", row, f"FY{y}"),
            d.cell("Income statement", "Revenue", f"FY{y}"),
        ]
        value = Fraction(b.fy(metric), b.fy("revenue")) * 100
        name = row.split()[0].lower()  # gross, operating, net
        prompt = _ask(d, "margin", unseen, CITE_VALUE, label=row.lower(), name=name)
        kind, calculation = "margin", "c1 / c2 * 100"
    return _task(
        task_id,
        d,
        unseen is not None,
        "easy",
        "compute",
        prompt,
        cites,
        [f"compute:{kind}"],
        value=value,
        places=4,
        calculation=calculation,
    )


def quarters_sum(rng: random.Random, task_id: str, unseen: float | None) -> FinanceTask:
    b = draw_books(rng)
    d = draft(b, Shown(), rng)
    _, quarterly, _ = names(b)
    metric = rng.choice(["cost_of_revenue", "gross_profit", "operating_expenses"])
    cites = [d.cell(quarterly, f"Q{q + 1} {b.year}", metric) for q in range(4)]
    prompt = _ask(d, "sum", unseen, CITE_VALUE, metric=metric)
    return _task(
        task_id,
        d,
        unseen is not None,
        "medium",
        "compute",
        prompt,
        cites,
        ["compute:sum"],
        value=Fraction(b.fy(metric)),
        places=0,
        calculation="c1 + c2 + c3 + c4",
    )


def segment_share(rng: random.Random, task_id: str, unseen: float | None) -> FinanceTask:
    b = draw_books(rng)
    d = draft(b, Shown(), rng)
    s = rng.randrange(3)
    cites = [
        d.cell("Segment results", b.segments[s], "Revenue"),
        d.cell("Segment results", "Total", "Revenue"),
    ]
    value = Fraction(b.segment_revenue[s], sum(b.segment_revenue)) * 100
    prompt = _ask(d, "share", unseen, CITE_VALUE, segment=b.segments[s])
    return _task(
        task_id,
        d,
        unseen is not None,
        "medium",
        "compute",
        prompt,
        cites,
        ["compute:share"],
        value=value,
        places=4,
        calculation="c1 / c2 * 100",
    )


def restated_growth(rng: random.Random, task_id: str, unseen: float | None) -> FinanceTask:
    b = draw_books(rng)
    d = draft(b, Shown(original_prior_revenue=original_prior_revenue(b, rng)), rng)
    cites = [
        d.cell("Income statement", "Revenue", prior_column(b, d.shown)),
        d.cell("Income statement", "Revenue", f"FY{b.year}"),
    ]
    value = Fraction(b.fy("revenue") - b.prior["revenue"], b.prior["revenue"]) * 100
    prompt = _ask(d, "restated", unseen, CITE_VALUE)
    return _task(
        task_id,
        d,
        unseen is not None,
        "hard",
        "compute",
        prompt,
        cites,
        ["compute:growth", "defect:restated"],
        value=value,
        places=4,
        calculation="(c2 - c1) / c1 * 100",
    )


def _nudge(value: int, rng: random.Random) -> int:
    """`value` moved by 3-9% (and at least 7), up or down."""
    step = max(7, round(value * rng.uniform(0.03, 0.09)))
    return value + step if rng.random() < 0.5 else value - step


Planted = tuple[str, Callable[[Draft], list[Citation]]]  # the item, the cells that show it


def _plant(kind: str, b: Books, shown: Shown, q: int, rng: random.Random) -> Planted:
    """Plant one defect of `kind` (in quarter row `q` of the CSV, for a CSV defect)."""
    y, (report, quarterly, _) = b.year, names(b)
    if kind == "mismatch":  # the CSV disagrees with the report's quarterly results
        metric = rng.choice(["revenue", "operating_income"])
        shown.csv[(q, metric)] = _nudge(b.quarters[metric][q], rng)
        return f"{LABELS[metric]} Q{q + 1} {y} ({quarterly})", lambda d: [
            d.cell(quarterly, f"Q{q + 1} {y}", metric),
            d.cell("Quarterly results", f"Q{q + 1} {y}", LABELS[metric]),
        ]
    if kind == "outlier":  # a slipped digit
        shown.csv[(q, "operating_expenses")] = b.quarters["operating_expenses"][q] * 10
        return f"Operating expenses Q{q + 1} {y} ({quarterly})", lambda d: [
            d.cell(quarterly, f"Q{q + 1} {y}", "operating_expenses")
        ]
    if rng.random() < 0.5:  # a subtotal: operating income is not gross profit less expenses
        shown.income["operating_income"] = _nudge(b.fy("operating_income"), rng)
        return f"Operating income FY{y} ({report}, income statement)", lambda d: [
            d.cell("Income statement", "Operating income", f"FY{y}")
        ]
    shown.segment_total = _nudge(sum(b.segment_revenue), rng)  # the segments do not add up
    return f"Total segment revenue FY{y} ({report}, segment results)", lambda d: [
        d.cell("Segment results", "Total", "Revenue")
    ]


def inconsistent(rng: random.Random, task_id: str, unseen: float | None) -> FinanceTask:
    b = draw_books(rng)
    y, (report, quarterly, _) = b.year, names(b)
    kinds = rng.sample(["mismatch", "subtotal", "outlier"], 2 if rng.random() < 0.4 else 1)
    rows = rng.sample(range(4), 2)  # one CSV row per CSV defect
    shown = Shown()
    planted = [_plant(kind, b, shown, rows[i], rng) for i, kind in enumerate(kinds)]
    # Distractors: figures no defect touches, nor makes look wrong (a CSV row with a defect
    # fails its own arithmetic, so none of its other cells is offered).
    clean = [q for q in range(4) if not any(key[0] == q for key in shown.csv)]
    pool = [
        f"{what} Q{q + 1} {y} ({quarterly})"
        for q in clean
        for what in ("Revenue", "Operating expenses")
    ]
    pool.append(f"Gross profit FY{y} ({report}, income statement)")
    if "operating_income" not in shown.income:
        pool.append(f"Operating income FY{y} ({report}, income statement)")
    if shown.segment_total is None:
        pool += [
            f"Total segment revenue FY{y} ({report}, segment results)",
            f"Revenue FY{y} ({report}, income statement)",
        ]
    items = [item for item, _ in planted]
    candidates = rng.sample(pool, 5 - len(items)) + items
    rng.shuffle(candidates)
    d = draft(b, shown, rng)
    level = "hard" if len(kinds) == 2 else ("easy" if kinds == ["outlier"] else "medium")
    prompt = _ask(d, "inconsistent", unseen, CITE_ITEMS, listed="; ".join(candidates))
    cites = [c for _, make in planted for c in make(d)]
    return _task(
        task_id,
        d,
        unseen is not None,
        level,
        "inconsistent",
        prompt,
        cites,
        sorted(f"defect:{k}" for k in kinds),
        items=items,
        candidates=candidates,
    )


def _claim_cells(d: Draft, claim: str) -> list[Citation]:
    """The annual-report cells a highlight is computed from."""
    y, this = d.books.year, f"FY{d.books.year}"
    if claim == "Revenue growth":
        return [
            d.cell("Income statement", "Revenue", prior_column(d.books, d.shown)),
            d.cell("Income statement", "Revenue", this),
        ]
    if claim == "Gross margin":
        return [
            d.cell("Income statement", "Gross profit", this),
            d.cell("Income statement", "Revenue", f"FY{y}"),
        ]
    if claim in ("Revenue", "Operating income", "Net income"):
        return [d.cell("Income statement", claim, this)]
    return [d.cell("Segment results", d.books.segments[0], "Revenue")]


def _false_claim(truth: str, percent: bool, rng: random.Random) -> str:
    """A claim off by 1-3 points (a percentage) or 3-8% and at least 0.2 (millions)."""
    value, sign = Fraction(truth), rng.choice([-1, 1])
    if percent:
        step = Fraction(decimal(Fraction(rng.uniform(1.0, 3.0)), 1))
    else:
        share = Fraction(decimal(Fraction(rng.uniform(0.03, 0.08)), 3))
        step = max(Fraction(1, 5), abs(value) * share)
    return decimal(value + sign * step, 1)


def claims(rng: random.Random, task_id: str, unseen: float | None) -> FinanceTask:
    b = draw_books(rng)
    offered = [*CLAIMS, f"{b.segments[0]} segment revenue"]
    shown = Shown()
    restated = rng.random() < 0.3
    if restated:  # the release's growth is against the prior year as first reported
        shown.original_prior_revenue = original_prior_revenue(b, rng)
        false = ["Revenue growth", rng.choice(offered[:1] + offered[2:])]
    else:
        false = rng.sample(offered, 2 if rng.random() < 0.3 else 1)
    truth = true_claims(b, shown.original_prior_revenue)
    for claim in false:
        if not (restated and claim == "Revenue growth"):
            percent = claim in ("Revenue growth", "Gross margin")
            shown.claims[claim] = _false_claim(truth[claim], percent, rng)
    d = draft(b, shown, rng)
    items = [c for c in offered if c in false]
    prompt = _ask(d, "claim", unseen, CITE_CLAIMS, listed="; ".join(offered))
    cites = [c for claim in items for c in [d.claim_line(claim), *_claim_cells(d, claim)]]
    tags = ["defect:claim"] + (["defect:restated"] if restated else [])
    return _task(
        task_id,
        d,
        unseen is not None,
        "hard" if len(false) == 2 else "medium",
        "claim",
        prompt,
        cites,
        tags,
        items=items,
        candidates=offered,
    )


FAMILIES: list[Callable[[random.Random, str, float | None], FinanceTask]] = [
    growth_or_margin,
    inconsistent,
    claims,
    quarters_sum,
    segment_share,
    restated_growth,
]


def generate_finance_tasks(n: int, seed: int, phrasings: Phrasings = "train") -> list[FinanceTask]:
    """`n` tasks, the families in turn; `phrasings="heldout"` words about half of them
    (`UNSEEN_SHARE`) as training never does, tagged `phrasing-unseen`: the question in other
    words, asked before the documents are named, and how to answer in other words. The
    documents and answers are those of `"train"` (the draw is made in every phrasing)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    check_phrasings(phrasings)
    rng = _rng(seed)
    out: list[FinanceTask] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 100:
            raise ValueError(f"cannot draw {n} distinct finance tasks")
        draw = rng.random()  # in every phrasing, so that a held-out set's documents are the same
        unseen = draw / UNSEEN_SHARE if phrasings == "heldout" and draw < UNSEEN_SHARE else None
        task = FAMILIES[len(out) % len(FAMILIES)](rng, f"finance/{seed}/{len(out)}", unseen)
        key = json.dumps([task.documents, task.prompt], sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(task)
    return out
