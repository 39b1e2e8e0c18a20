"""Synthetic sql tasks, seeded: small financial tables with a known answer and a reference query.

    generate_sql_tasks(100, seed=7)                       the same 100 tasks on any machine
    generate_sql_tasks(100, seed=7, phrasings="heldout")  the same tables; about half worded
                                                          as training never is, tagged `UNSEEN_TAG`

Six families, in turn: a period total, an anomalous expense claim (a misplaced decimal point),
an invoice whose header disagrees with its lines, a receivables tie-out whose ledger and open
items agree, the change in sales between two periods, and the customer with the most orders or
the largest total. Each prompt names what sets its data apart (a region or product, a period, a
team, an office, a company): sql tasks are told apart by their prompt (`question_key`), so a
held-out set must not ask the prompts training asks (benchmarks/generator_capacity.py). Amounts
are whole cents, so every answer is exact. Task `i` depends only on `seed`, `i` and `phrasings`:
the first n tasks of a larger set are the set of n. The bundled, hand-written examples are in
`SQL_EXAMPLES` (a JSONL file; load it with `load_tasks`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from honing.domains.sql.task import AnswerRule, SqlTask
from honing.tasks.synthetic.common import (
    UNSEEN_TAG,
    Phrasings,
    Wording,
    check_phrasings,
    family_metadata,
    family_tags,
    phrase,
)

SQL_EXAMPLES = Path(__file__).parent / "data" / "examples.jsonl"

REGIONS = ["North", "South", "East", "West", "Central", "Coastal", "Highlands", "Metro"]
PRODUCTS = ["Licences", "Services", "Support", "Hardware", "Training", "Consulting"]
# (lowest, highest) cents of a normal claim: highest / lowest < 10, so a claim 100 times too
# large stands out against its category's median
CATEGORIES = {"meals": (2500, 9000), "hotel": (12000, 26000), "travel": (8000, 45000),
              "software": (3000, 15000), "training": (20000, 60000)}  # fmt: skip
CUSTOMERS = ["Acme Corp", "Globex", "Initech", "Umbrella", "Hooli", "Stark Ltd", "Wayne plc",
             "Soylent", "Vandelay", "Cyberdyne", "Tyrell", "Wonka"]  # fmt: skip
EMPLOYEES = ["A. Okafor", "B. Lindqvist", "C. Moreau", "D. Tanaka", "E. Silva", "F. Novak"]
TEAMS = ["Sales", "Marketing", "Engineering", "Finance", "Operations", "Legal", "Research",
         "Procurement"]  # fmt: skip
COMPANIES = ["Northwind", "Contoso", "Fabrikam", "Tailspin", "Litware", "Adatum", "Proseware",
             "Woodgrove", "Lucerne", "Wingtip", "Humongous", "Coho"]  # fmt: skip
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]  # fmt: skip
YEARS = range(2012, 2026)


def generate_sql_tasks(n: int, seed: int, phrasings: Phrasings = "train") -> list[SqlTask]:
    """`n` tasks, deterministic for `(seed, phrasings)` (each family in turn); `"heldout"` words
    about half of them as training never does, over the same tables."""
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    check_phrasings(phrasings)
    return [
        SQL_FAMILIES[i % len(SQL_FAMILIES)](
            random.Random(f"honing-sql:{seed}:{i}"), f"sql-synth/{seed}/{i}", seed, phrasings
        )
        for i in range(n)
    ]


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}" if cents >= 0 else "-" + _money(-cents)


def _csv(header: str, rows: Sequence[tuple[object, ...]]) -> str:
    return header + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows)


def _task(
    rng: random.Random,
    task_id: str,
    seed: int,
    phrasings: Phrasings,
    family: str,
    difficulty: str,
    wording: Wording,
    fields: Mapping[str, object],
    *,
    tables: dict[str, str],
    answer: str,
    rules: list[AnswerRule],
    reference: str,
) -> SqlTask:
    """The task, its prompt drawn last (so a held-out set has the tables of a training one)."""
    prompt, unseen = phrase(rng, phrasings, wording, **fields)
    return SqlTask(
        id=task_id,
        prompt=prompt,
        tables=tables,
        answer=answer,
        rules=rules,
        reference=reference,
        tags=family_tags(family, difficulty) + ([UNSEEN_TAG] if unseen else []),
        metadata=family_metadata(family, seed),
    )


@dataclass(frozen=True)
class _Period:
    """Whole months of one year: `months` of them from `first`."""

    year: int
    first: int
    months: int

    @property
    def name(self) -> str:
        if self.months == 1:
            return f"{MONTHS[self.first - 1]} {self.year}"
        if self.months == 3:
            return f"Q{(self.first + 2) // 3} {self.year}"
        if self.months == 6:
            return f"the {'first' if self.first == 1 else 'second'} half of {self.year}"
        return f"the year {self.year}"

    def holds(self, month: int) -> bool:
        return self.first <= month < self.first + self.months

    def where(self, column: str) -> str:
        end = self.first + self.months
        stop = f"{self.year + 1}-01-01" if end > 12 else f"{self.year}-{end:02d}-01"
        return f"{column} >= DATE '{self.year}-{self.first:02d}-01' AND {column} < DATE '{stop}'"


def _period(rng: random.Random, year: int, kinds: Sequence[int] = (1, 3, 6, 12)) -> _Period:
    months = rng.choice(kinds)
    return _Period(year, 1 + months * rng.randrange(12 // months), months)


def _sales(rng: random.Random) -> tuple[int, dict[tuple[int, str, str], int]]:
    """A year of monthly sales of 3 regions × 3 products: the year and cents by (month, region,
    product)."""
    year = rng.choice(YEARS)
    regions, products = rng.sample(REGIONS, 3), rng.sample(PRODUCTS, 3)
    cents = {
        (month, region, product): rng.randint(50_000, 5_000_000)
        for month in range(1, 13)
        for region in regions
        for product in products
    }
    return year, cents


def _sales_table(year: int, cents: dict[tuple[int, str, str], int]) -> dict[str, str]:
    rows = [(f"{year}-{m:02d}-01", r, p, _money(v)) for (m, r, p), v in cents.items()]
    return {"sales": _csv("month,region,product,amount", rows)}


def _scope(
    rng: random.Random, cents: dict[tuple[int, str, str], int], both: bool
) -> tuple[str, list[str], Callable[[str, str], bool]]:
    """Whose sales a question asks about: its words, its SQL conditions, and a row filter."""
    region = rng.choice(sorted({r for _, r, _ in cents}))
    product = rng.choice(sorted({p for _, _, p in cents}))
    kind = "both" if both else rng.choice(["region", "product"])
    if kind == "region":
        return (
            f"the {region} region (all products)",
            [f"region = '{region}'"],
            (lambda r, p: r == region),
        )
    if kind == "product":
        return f"{product} (all regions)", [f"product = '{product}'"], lambda r, p: p == product
    return (
        f"{product} in the {region} region",
        [f"region = '{region}'", f"product = '{product}'"],
        lambda r, p: r == region and p == product,
    )


_TOTAL = Wording(
    seen=(
        "What was the total sales amount of {scope} in {period}? Show the query you used.",
        "Sum the sales of {scope} for {period}. Show the query you used.",
    ),
    unseen=(
        "How much revenue did {scope} bring in during {period}? Show the query you used.",
        "Report the combined sales figure of {scope} over {period}, with the query behind it.",
    ),
)


def _period_total(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> SqlTask:
    year, cents = _sales(rng)
    both = rng.random() < 0.4
    scope, conditions, wanted = _scope(rng, cents, both)
    period = _period(rng, year)
    total = sum(v for (m, r, p), v in cents.items() if wanted(r, p) and period.holds(m))
    where = " AND ".join([*conditions, period.where("month")])
    return _task(
        rng, task_id, seed, phrasings, "aggregation", "medium" if both else "easy", _TOTAL,
        {"scope": scope, "period": period.name},
        tables=_sales_table(year, cents),
        answer=_money(total),
        rules=[AnswerRule(kind="numeric"), AnswerRule(kind="traceable")],
        reference=f"SELECT sum(amount) FROM sales WHERE {where}",
    )  # fmt: skip


_ANOMALY = Wording(
    seen=(
        "Audit the {count} expense claims the {team} team filed in {month} {year}. Exactly one "
        "claim is anomalous for its category (a data-entry error). Which claim is it, and what "
        "amount was recorded?",
        "The {team} team filed {count} expense claims in {month} {year}; one of them is out of "
        "line with the other claims of its category (a data-entry error). Which claim, and "
        "what amount does it record?",
    ),
    unseen=(
        "One of the {team} team's {count} expense claims from {month} {year} was keyed in "
        "wrongly: its amount is far off the rest of its category. Name the claim and the "
        "amount on record.",
        "Find the data-entry error among the {count} {month} {year} expense claims of the "
        "{team} team: the one claim whose amount does not fit its category. Give its id and "
        "the amount recorded.",
    ),
)


def _expense_anomaly(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> SqlTask:
    count = rng.randint(10, 18)
    year, month = rng.choice(YEARS), rng.randint(1, 12)
    first = rng.randint(100, 900) * 10
    ids = [f"EXP-{first + k}" for k in range(count)]
    kinds = sorted(rng.sample(sorted(CATEGORIES), 3))
    categories = [kinds[k % len(kinds)] for k in range(count)]
    rng.shuffle(categories)  # every category has at least three claims, so a median to compare
    amounts = [rng.randint(*CATEGORIES[c]) for c in categories]
    odd = rng.randrange(count)
    amounts[odd] *= 100  # the decimal point slipped two places
    rows = [
        (claim, rng.choice(EMPLOYEES), f"{year}-{month:02d}-{k + 1:02d}", categories[k],
         _money(amounts[k]))
        for k, claim in enumerate(ids)
    ]  # fmt: skip
    return _task(
        rng, task_id, seed, phrasings, "anomaly", "medium", _ANOMALY,
        {"count": count, "team": rng.choice(TEAMS), "month": MONTHS[month - 1], "year": year},
        tables={"expenses": _csv("claim_id,employee,claim_date,category,amount", rows)},
        answer=f"{ids[odd]}: {_money(amounts[odd])}",
        rules=[
            AnswerRule(kind="mentions", text=ids[odd], excludes=ids[:odd] + ids[odd + 1 :]),
            AnswerRule(kind="numeric"),
        ],
        reference="SELECT claim_id || ': ' || amount FROM expenses e ORDER BY amount / "
        "(SELECT median(amount) FROM expenses m WHERE m.category = e.category) DESC LIMIT 1",
    )  # fmt: skip


_MISMATCH = Wording(
    seen=(
        "Reconcile the {count} invoices the {office} office issued in {month} {year} with their "
        "line items (quantity × unit price). One invoice's header total does not match its "
        "lines. Which invoice, and by how much does its header total exceed the sum of its "
        "lines?",
        "Check the header totals of the {office} office's {count} invoices from {month} {year} "
        "against their lines (quantity × unit price): one header is too high. Which invoice is "
        "it, and by how much is it overstated?",
    ),
    unseen=(
        "Of the {count} invoices issued by the {office} office in {month} {year}, one has a "
        "header total larger than its line items (quantity × unit price) add up to. Name that "
        "invoice and the size of the overstatement.",
        "Tie each of the {office} office's {count} {month} {year} invoices to its lines "
        "(quantity × unit price). Which invoice's header is overstated, and by how much?",
    ),
)


def _invoice_mismatch(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> SqlTask:
    count = rng.randint(4, 8)
    year, month = rng.choice(YEARS), rng.randint(1, 12)
    first = rng.randint(1000, 9000)
    ids = [f"INV-{first + k}" for k in range(count)]
    odd = rng.randrange(count)
    excess = rng.randint(1, 500) * 100 + rng.choice([0, 50])
    headers, lines = [], []
    for k, invoice in enumerate(ids):
        total = 0
        for line in range(1, rng.randint(1, 4) + 1):
            qty, price = rng.randint(1, 20), rng.randint(100, 50_000)
            lines.append((invoice, line, qty, _money(price)))
            total += qty * price
        if k == odd:
            total += excess
        issued = f"{year}-{month:02d}-{rng.randint(1, 28):02d}"
        headers.append((invoice, rng.choice(CUSTOMERS), issued, _money(total)))
    return _task(
        rng, task_id, seed, phrasings, "reconciliation", "hard", _MISMATCH,
        {"count": count, "office": rng.choice(REGIONS), "month": MONTHS[month - 1], "year": year},
        tables={
            "invoices": _csv("invoice_id,customer,issued,total", headers),
            "invoice_lines": _csv("invoice_id,line_no,qty,unit_price", lines),
        },
        answer=f"{ids[odd]}: {_money(excess)}",
        rules=[
            AnswerRule(kind="mentions", text=ids[odd], excludes=ids[:odd] + ids[odd + 1 :]),
            AnswerRule(kind="numeric", tolerance=1e-6),
        ],
        reference="SELECT i.invoice_id || ': ' || round(i.total - l.lines_total, 2) "
        "FROM invoices i JOIN (SELECT invoice_id, sum(qty * unit_price) AS lines_total "
        "FROM invoice_lines GROUP BY invoice_id) l ON l.invoice_id = i.invoice_id "
        "WHERE abs(i.total - l.lines_total) > 0.005",
    )  # fmt: skip


_TIE_OUT = Wording(
    seen=(
        "What was {company}'s accounts receivable balance at the end of {close} (periods up to "
        "and including it)? The figure must tie out: the ledger's receivables account and the "
        "open-invoice list must agree.",
        "Give {company}'s receivables balance as of the close of {close} (every period up to "
        "and including it). It must tie out: the ledger's receivables account and the "
        "open-invoice list must agree.",
    ),
    unseen=(
        "At the end of {month} {year}, how much did customers owe {company}? Count every ledger "
        "period up to and including {close}; the ledger's receivables account and the open "
        "invoices must agree.",
        "Tie out {company}'s accounts receivable at the {month} {year} close (all periods "
        "through {close}): what balance do the ledger and the open-invoice list both show?",
    ),
)


def _receivables_tie_out(
    rng: random.Random, task_id: str, seed: int, phrasings: Phrasings
) -> SqlTask:
    year = rng.choice(YEARS)
    close_month = rng.randint(2, 11)
    ledger, balance = [], 0
    for month in range(1, close_month + 2):  # one month past the close, which must not count
        billed = rng.randint(2_000_000, 9_000_000)
        collected = rng.randint(billed // 2, billed - 100_000)
        period = f"{year}-{month:02d}"
        ledger.append((period, "1200 Accounts Receivable", _money(billed), "0.00"))
        ledger.append((period, "1200 Accounts Receivable", "0.00", _money(collected)))
        ledger.append((period, "4000 Revenue", "0.00", _money(billed)))
        if month <= close_month:
            balance += billed - collected
    parts = sorted(rng.sample(range(1, balance), rng.randint(2, 5)))
    amounts = [b - a for a, b in zip([0, *parts], [*parts, balance], strict=True)]
    first = rng.randint(100, 900)
    items = [(f"INV-{first + k}", rng.choice(CUSTOMERS), _money(a)) for k, a in enumerate(amounts)]
    close = f"{year}-{close_month:02d}"
    fields = {"company": rng.choice(COMPANIES), "close": close,
              "month": MONTHS[close_month - 1], "year": year}  # fmt: skip
    return _task(
        rng, task_id, seed, phrasings, "consistency", "medium", _TIE_OUT, fields,
        tables={
            "general_ledger": _csv("period,account,debit,credit", ledger),
            "open_invoices": _csv("invoice_id,customer,balance", items),
        },
        answer=_money(balance),
        rules=[
            AnswerRule(kind="numeric"),
            AnswerRule(
                kind="consistent",
                queries=[
                    "SELECT sum(debit) - sum(credit) FROM general_ledger "
                    f"WHERE account LIKE '1200%' AND period <= '{close}'",
                    "SELECT sum(balance) FROM open_invoices",
                ],
            ),
        ],
        reference="SELECT sum(debit - credit) FROM general_ledger "
        f"WHERE account = '1200 Accounts Receivable' AND period <= '{close}'",
    )  # fmt: skip


_CHANGE = Wording(
    seen=(
        "By how much did the sales of {scope} change from {before} to {after}? Give the change "
        "(negative if sales fell) and show the query you used.",
        "What is the change in the sales of {scope} from {before} to {after} ({after} minus "
        "{before}; negative if they fell)? Show the query you used.",
    ),
    unseen=(
        "Compare the sales of {scope} in {before} and in {after}: how much higher or lower was "
        "{after}? Answer with {after} minus {before} and show the query you used.",
        "Sales of {scope}, {after} against {before}: what is the difference ({after} minus "
        "{before})? Show your query.",
    ),
)


def _period_change(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> SqlTask:
    while True:  # a change of under 100.00 is redrawn: a sum's float error stays far below it
        year, cents = _sales(rng)
        scope, conditions, wanted = _scope(rng, cents, both=False)
        months = rng.choice([1, 3, 6])  # consecutive months, two quarters, the two halves
        first = 1 + months * rng.randrange(12 // months - 1)
        later = first + months
        if months == 3:
            later = rng.randrange(later, 11, 3)
        before, after = _Period(year, first, months), _Period(year, later, months)
        sums = [sum(v for (m, r, p), v in cents.items() if wanted(r, p) and period.holds(m))
                for period in (before, after)]  # fmt: skip
        change = sums[1] - sums[0]
        if abs(change) >= 10_000:
            break
    side = "sum(CASE WHEN {} THEN amount ELSE 0 END)"
    value = f"{side.format(after.where('month'))} - {side.format(before.where('month'))}"
    fields = {"scope": scope, "before": before.name, "after": after.name}
    return _task(
        rng, task_id, seed, phrasings, "change", "hard", _CHANGE, fields,
        tables=_sales_table(year, cents),
        answer=_money(change),
        rules=[AnswerRule(kind="numeric", tolerance=1e-6),
               AnswerRule(kind="traceable", tolerance=1e-6)],
        reference=f"SELECT {value} FROM sales WHERE {' AND '.join(conditions)}",
    )  # fmt: skip


_TOP = Wording(
    seen=(
        "Which customer had the {measure} {scope} in {period}? Give the customer and {what}.",
        "Among the orders {scope} in {period}, which customer had the {measure}? Name it and "
        "give {what}.",
    ),
    unseen=(
        "Looking only at {period} and at orders {scope}: who was the top customer by {by}? "
        "State the customer and {what}.",
        "Rank the customers by {by} for orders {scope} in {period}. Who comes first, and with "
        "what figure?",
    ),
)
_MEASURES = {  # measure: (the question's words, what to give, ranked by, the SQL aggregate)
    "total": ("largest total order value", "that total", "total order value", "sum(amount)"),
    "count": ("most orders", "the number of orders", "number of orders", "count(*)"),
}


def _top_customer(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> SqlTask:
    measure = rng.choice(sorted(_MEASURES))
    words, what, by, aggregate = _MEASURES[measure]
    while True:  # until one customer leads by a clear margin
        year = rng.choice(YEARS)
        regions, customers = rng.sample(REGIONS, 3), rng.sample(CUSTOMERS, rng.randint(4, 6))
        orders = sorted(
            (rng.randint(1, 12), rng.randint(1, 28), rng.choice(regions), rng.choice(customers),
             rng.randint(5_000, 900_000))
            for _ in range(rng.randint(90, 140))
        )  # fmt: skip
        region = rng.choice([None, *regions])
        period = _period(rng, year, (3, 6, 12))
        score: dict[str, int] = {}
        for month, _, r, customer, cents in orders:
            if period.holds(month) and region in (None, r):
                score[customer] = score.get(customer, 0) + (cents if measure == "total" else 1)
        ranked = sorted(score.values(), reverse=True)
        if len(ranked) >= 2 and ranked[0] - ranked[1] >= (100 if measure == "total" else 1):
            break
    winner = max(score, key=lambda c: score[c])
    value = _money(score[winner]) if measure == "total" else str(score[winner])
    rows = [(f"ORD-{10_000 + k}", f"{year}-{m:02d}-{d:02d}", r, c, _money(v))
            for k, (m, d, r, c, v) in enumerate(orders)]  # fmt: skip
    where = period.where("order_date") + (f" AND region = '{region}'" if region else "")
    fields = {"measure": words, "what": what, "by": by, "period": period.name,
              "scope": f"from the {region} region" if region else "from all regions"}  # fmt: skip
    return _task(
        rng, task_id, seed, phrasings, "ranking", "medium", _TOP, fields,
        tables={"orders": _csv("order_id,order_date,region,customer,amount", rows)},
        answer=f"{winner}: {value}",
        rules=[
            AnswerRule(kind="mentions", text=winner,
                       excludes=sorted(c for c in customers if c != winner)),
            AnswerRule(kind="numeric"),
        ],
        reference=f"SELECT customer || ': ' || {aggregate} FROM orders WHERE {where} "
        f"GROUP BY customer ORDER BY {aggregate} DESC LIMIT 1",
    )  # fmt: skip


SQL_FAMILIES: list[Callable[[random.Random, str, int, Phrasings], SqlTask]] = [
    _period_total, _expense_anomaly, _invoice_mismatch, _receivables_tie_out, _period_change,
    _top_customer,
]  # fmt: skip
