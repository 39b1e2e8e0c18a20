"""Synthetic sql tasks, seeded: small financial tables with a known answer and a reference query.

    tasks = generate_sql_tasks(100, seed=7)   # the same 100 tasks for seed 7, on any machine

Four kinds, in turn: a period total (numeric + traceable), an anomalous expense claim (a
misplaced decimal point: mentions + numeric), an invoice whose header disagrees with its lines
(mentions + numeric), and a receivables tie-out whose ledger and open items agree (numeric +
consistent). Amounts are whole cents, so every answer is exact. Task `i` depends only on `seed`
and `i`: the first n tasks of a larger set are the set of n.

The bundled, hand-written examples are in `SQL_EXAMPLES` (a JSONL file; load it with
`load_tasks`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path

from honing.tasks.schema import AnswerRule, SqlTask

SQL_EXAMPLES = Path(__file__).parents[1] / "data" / "sql_examples.jsonl"

REGIONS = ["North", "South", "East", "West", "Central"]
PRODUCTS = ["Licences", "Services", "Support", "Hardware"]
CATEGORIES = {"meals": (2500, 9000), "hotel": (12000, 26000), "travel": (8000, 45000)}
CUSTOMERS = ["Acme Corp", "Globex", "Initech", "Umbrella", "Hooli", "Stark Ltd", "Wayne plc"]
EMPLOYEES = ["A. Okafor", "B. Lindqvist", "C. Moreau", "D. Tanaka", "E. Silva", "F. Novak"]


def generate_sql_tasks(n: int, seed: int) -> list[SqlTask]:
    """`n` tasks, deterministic for `seed` (each kind in turn)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    kinds: list[Callable[[random.Random, str], SqlTask]] = [
        _period_total,
        _expense_anomaly,
        _invoice_mismatch,
        _receivables_tie_out,
    ]
    return [
        kinds[i % len(kinds)](random.Random(f"honing-sql:{seed}:{i}"), f"sql-synth/{seed}/{i}")
        for i in range(n)
    ]


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}" if cents >= 0 else "-" + _money(-cents)


def _csv(header: str, rows: Sequence[tuple[object, ...]]) -> str:
    return header + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows)


def _period_total(rng: random.Random, task_id: str) -> SqlTask:
    year = rng.randint(2019, 2025)
    regions = rng.sample(REGIONS, 3)
    rows, cents = [], {}
    for month in range(1, 13):
        for region in regions:
            for product in rng.sample(PRODUCTS, 2):
                amount = rng.randint(50_000, 5_000_000)
                rows.append((f"{year}-{month:02d}-01", region, product, _money(amount)))
                cents[(month, region, product)] = amount
    region = rng.choice(regions)
    quarter = rng.randint(1, 4)
    months = range(3 * quarter - 2, 3 * quarter + 1)
    total = sum(v for (m, r, _), v in cents.items() if r == region and m in months)
    start = f"{year}-{months[0]:02d}-01"
    end = f"{year + 1}-01-01" if quarter == 4 else f"{year}-{months[-1] + 1:02d}-01"
    return SqlTask(
        id=task_id,
        prompt=f"What was the total sales amount of the {region} region in Q{quarter} {year}, "
        "all products together? Show the query you used.",
        tables={"sales": _csv("month,region,product,amount", rows)},
        answer=_money(total),
        rules=[AnswerRule(kind="numeric"), AnswerRule(kind="traceable")],
        reference=f"SELECT sum(amount) FROM sales WHERE region = '{region}' "
        f"AND month >= DATE '{start}' AND month < DATE '{end}'",
        tags=["synthetic", "aggregation"],
    )


def _expense_anomaly(rng: random.Random, task_id: str) -> SqlTask:
    count = rng.randint(10, 18)
    first = rng.randint(100, 900) * 10
    ids = [f"EXP-{first + k}" for k in range(count)]
    categories = [sorted(CATEGORIES)[k % len(CATEGORIES)] for k in range(count)]
    rng.shuffle(categories)  # every category has at least three claims, so a median to compare
    amounts = [rng.randint(*CATEGORIES[c]) for c in categories]
    odd = rng.randrange(count)
    amounts[odd] *= 100  # the decimal point slipped two places
    rows = [
        (claim, rng.choice(EMPLOYEES), f"2024-05-{k + 1:02d}", categories[k], _money(amounts[k]))
        for k, claim in enumerate(ids)
    ]
    return SqlTask(
        id=task_id,
        prompt="Audit the May expense claims. Exactly one claim is anomalous for its category "
        "(a data-entry error). Which claim is it, and what amount was recorded?",
        tables={"expenses": _csv("claim_id,employee,claim_date,category,amount", rows)},
        answer=f"{ids[odd]}: {_money(amounts[odd])}",
        rules=[
            AnswerRule(kind="mentions", text=ids[odd], excludes=ids[:odd] + ids[odd + 1 :]),
            AnswerRule(kind="numeric"),
        ],
        reference="SELECT claim_id || ': ' || amount FROM expenses e ORDER BY amount / "
        "(SELECT median(amount) FROM expenses m WHERE m.category = e.category) DESC LIMIT 1",
        tags=["synthetic", "anomaly"],
    )


def _invoice_mismatch(rng: random.Random, task_id: str) -> SqlTask:
    count = rng.randint(4, 8)
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
        headers.append((invoice, rng.choice(CUSTOMERS), _money(total)))
    return SqlTask(
        id=task_id,
        prompt="Reconcile the invoice headers with their line items (quantity × unit price). "
        "One invoice's header total does not match its lines. Which invoice, and by how much "
        "does its header total exceed the sum of its lines?",
        tables={
            "invoices": _csv("invoice_id,customer,total", headers),
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
        tags=["synthetic", "reconciliation"],
    )


def _receivables_tie_out(rng: random.Random, task_id: str) -> SqlTask:
    year = rng.randint(2019, 2025)
    close_month = rng.randint(3, 11)
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
    return SqlTask(
        id=task_id,
        prompt=f"What was the accounts receivable balance at the end of {close} (periods up to "
        "and including it)? The figure must tie out: the ledger's receivables account and the "
        "open-invoice list must agree.",
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
        tags=["synthetic", "consistency"],
    )
