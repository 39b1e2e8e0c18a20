"""A fictional company's fiscal year and the three documents that tell it.

    books = draw_books(rng)                       # true figures, thousands of US dollars
    d = draft(books, Shown(segment_total=...), rng)   # the documents, with planted defects
    d.cell("Income statement", "Revenue", "FY2025")   # a Citation of what a document shows

`Books` are internally consistent (quarters add up to the year, subtotals hold, every growth and
margin at least 3%, no press-release figure on a rounding tie). `Shown` lists where the
documents depart from the books: a quarterly CSV cell, an income-statement figure, the segment
total, a restated prior year (the release keeps the original), a press-release claim. The annual
report is Markdown (letter, income statement, segment results, quarterly results, risk factors,
outlook), the quarterly figures a CSV, the press release Markdown with one claim per line.
Not covered: the questions (`honing.domains.finance.generate`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from fractions import Fraction

from honing.domains.finance.cite import Citation
from honing.domains.finance.docs import Table, parse_documents

METRICS = ["revenue", "cost_of_revenue", "gross_profit", "operating_expenses", "operating_income"]
LABELS = {
    "revenue": "Revenue",
    "cost_of_revenue": "Cost of revenue",
    "gross_profit": "Gross profit",
    "operating_expenses": "Operating expenses",
    "operating_income": "Operating income",
    "net_income": "Net income",
}
SEGMENTS = ["Cloud", "Devices", "Services", "Retail", "Wholesale", "Licensing", "Industrial"]
SEGMENTS += ["Consumer", "Healthcare", "Logistics"]
PREFIXES = ["Nor", "Kes", "Bel", "Cal", "Dar", "Hal", "Mer", "Ost", "Tal", "Ver", "Lun", "Bra"]
ROOTS = ["vale", "trel", "mont", "wick", "haven", "ford", "more", "stead", "crest", "field"]
KINDS = ["Systems", "Foods", "Logistics", "Instruments", "Analytics", "Materials", "Robotics"]
CITIES = ["Leeds", "Porto", "Tampere", "Graz", "Dayton", "Boise", "Ghent", "Aarhus"]
PEOPLE = ["Maria Okafor", "Jon Lindqvist", "Priya Raman", "Tomás Ferreira", "Hana Sato"]


def _round(value: Fraction, places: int) -> Fraction:
    """Half away from zero, exactly."""
    scale = 10**places
    magnitude = math.floor(abs(value) * scale + Fraction(1, 2))
    return Fraction(magnitude if value >= 0 else -magnitude, scale)


def decimal(value: Fraction, places: int) -> str:
    """`value` rounded to `places` decimals, as text."""
    rounded = _round(value, places)
    sign = "-" if rounded < 0 else ""
    whole, rest = divmod(abs(rounded.numerator) * 10**places // rounded.denominator, 10**places)
    return f"{sign}{whole}.{rest:0{places}d}" if places else f"{sign}{whole}"


def millions(thousands: int) -> str:
    return decimal(Fraction(thousands, 1000), 1)


@dataclass
class Books:
    """The company's true figures (thousands of US dollars); `prior` is the year before."""

    company: str
    year: int
    segments: list[str]
    quarters: dict[str, list[int]]
    prior: dict[str, int]
    net_income: int
    prior_net_income: int
    segment_revenue: list[int]
    segment_income: list[int]
    city: str
    ceo: str
    employees: int
    countries: int

    def fy(self, metric: str) -> int:
        if metric == "net_income":
            return self.net_income
        return sum(self.quarters[metric])

    def before(self, metric: str) -> int:
        return self.prior_net_income if metric == "net_income" else self.prior[metric]


@dataclass
class Shown:
    """Where the documents differ from the books: the planted defects."""

    csv: dict[tuple[int, str], int] = field(default_factory=dict)  # (quarter, metric) -> value
    income: dict[str, int] = field(default_factory=dict)  # income statement, this year
    segment_total: int | None = None
    original_prior_revenue: int | None = None  # restated: the press release keeps the original
    claims: dict[str, str] = field(default_factory=dict)  # claim -> the number it states


def _split(total: int, rng: random.Random, parts: int) -> list[int]:
    weights = [rng.uniform(0.2, 0.5) for _ in range(parts)]
    shares = [round(total * w / sum(weights)) for w in weights[:-1]]
    return [*shares, total - sum(shares)]


def draw_books(rng: random.Random) -> Books:
    """A company whose figures are internally consistent, every growth and margin >= 3%."""
    while True:
        base = rng.randrange(6000, 60000)
        revenue = [round(base * (1 + rng.uniform(-0.08, 0.12))) for _ in range(4)]
        cost_ratio, opex_ratio = rng.uniform(0.35, 0.62), rng.uniform(0.12, 0.25)
        cost = [round(r * (cost_ratio + rng.uniform(-0.02, 0.02))) for r in revenue]
        opex = [round(r * (opex_ratio + rng.uniform(-0.015, 0.015))) for r in revenue]
        gross = [r - c for r, c in zip(revenue, cost, strict=True)]
        income = [g - o for g, o in zip(gross, opex, strict=True)]
        quarters = {
            "revenue": revenue,
            "cost_of_revenue": cost,
            "gross_profit": gross,
            "operating_expenses": opex,
            "operating_income": income,
        }
        growth = rng.uniform(0.04, 0.25) * (-1 if rng.random() < 0.25 else 1)
        fy = {m: sum(v) for m, v in quarters.items()}
        prior_revenue = round(fy["revenue"] / (1 + growth))
        prior_cost = round(
            prior_revenue * (fy["cost_of_revenue"] / fy["revenue"] + rng.uniform(-0.03, 0.03))
        )
        prior_opex = round(
            prior_revenue * (fy["operating_expenses"] / fy["revenue"] + rng.uniform(-0.02, 0.02))
        )
        prior = {
            "revenue": prior_revenue,
            "cost_of_revenue": prior_cost,
            "gross_profit": prior_revenue - prior_cost,
            "operating_expenses": prior_opex,
            "operating_income": prior_revenue - prior_cost - prior_opex,
        }
        net, prior_net = (
            round(fy["operating_income"] * rng.uniform(0.70, 0.82)),
            round(prior["operating_income"] * rng.uniform(0.70, 0.82)),
        )
        pairs = [(prior[m], fy[m]) for m in ("revenue", "operating_income")] + [(prior_net, net)]
        if min(income) <= 0 or any(a <= 0 or abs(b - a) * 100 < 3 * a for a, b in pairs):
            continue
        books = Books(
            company=f"{rng.choice(PREFIXES)}{rng.choice(ROOTS)} {rng.choice(KINDS)}",
            year=rng.randint(2021, 2026),
            segments=rng.sample(SEGMENTS, 3),
            quarters=quarters,
            prior=prior,
            net_income=net,
            prior_net_income=prior_net,
            segment_revenue=_split(fy["revenue"], rng, 3),
            segment_income=_split(fy["operating_income"], rng, 3),
            city=rng.choice(CITIES),
            ceo=rng.choice(PEOPLE),
            employees=rng.randrange(120, 4000, 10),
            countries=rng.randint(3, 40),
        )
        if not any(map(_tie, _claim_values(books, books.prior["revenue"]))):
            return books


def _tie(value: Fraction) -> bool:
    """Whether rounding `value` to one decimal is a tie (x.x5 exactly), which half-up and
    half-even rounding settle differently: no claim is drawn there."""
    return (value * 10).denominator == 2


def _claim_values(b: Books, prior_revenue: int) -> list[Fraction]:
    """The exact values the press release's highlights round (millions, percentages)."""
    revenue = b.fy("revenue")
    return [
        Fraction(revenue, 1000),
        Fraction(revenue - prior_revenue, prior_revenue) * 100,
        Fraction(b.fy("gross_profit"), revenue) * 100,
        Fraction(b.fy("operating_income"), 1000),
        Fraction(b.net_income, 1000),
        Fraction(b.segment_revenue[0], 1000),
    ]


def original_prior_revenue(b: Books, rng: random.Random) -> int:
    """The prior year's revenue as first reported, before a restatement (4-10% higher)."""
    while True:
        original = round(b.prior["revenue"] * (1 + rng.uniform(0.04, 0.10)))
        if not _tie(Fraction(b.fy("revenue") - original, original) * 100):
            return original


# -- the documents --------------------------------------------------------------------------


def names(b: Books) -> tuple[str, str, str]:
    """(annual report, quarterly CSV, press release) file names."""
    return f"annual_report_{b.year}.md", f"quarterly_{b.year}.csv", f"press_release_fy{b.year}.md"


def prior_column(b: Books, shown: Shown) -> str:
    return f"FY{b.year - 1}" + (" (restated)" if shown.original_prior_revenue else "")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def annual_report(b: Books, shown: Shown, rng: random.Random) -> str:
    y, seg = b.year, b.segments
    lines = [
        f"# {b.company} — Annual Report {y}",
        "",
        "## Letter to shareholders",
        "",
        f"Dear shareholders, fiscal {y} was a year of steady execution for {b.company}.",
        f"We served customers in {b.countries} countries and ended the year with {b.employees:,} "
        "employees.",
        f"Our {seg[0]} business remained the largest contributor to revenue.",
        f"We continued to invest in {seg[1]} while keeping operating expenses disciplined.",
        f"The {seg[2]} segment opened new channels with partners in {b.city}.",
        "Pricing held up well despite a competitive market.",
        "We thank our employees, customers and partners for their trust.",
        "",
        "## Income statement",
        "",
        f"All figures in thousands of US dollars, for the fiscal years {y - 1} and {y}.",
        "",
        _row(["Line item", prior_column(b, shown), f"FY{y}"]),
        "|---|---:|---:|",
    ]
    for metric in [*METRICS, "net_income"]:
        this = shown.income.get(metric, b.fy(metric))
        lines.append(_row([LABELS[metric], f"{b.before(metric):,}", f"{this:,}"]))
    if shown.original_prior_revenue:
        lines += [
            "",
            f"Fiscal {y - 1} figures are restated to exclude a business discontinued "
            f"during fiscal {y}.",
        ]
    total = shown.segment_total if shown.segment_total is not None else sum(b.segment_revenue)
    lines += [
        "",
        "## Segment results",
        "",
        f"Fiscal {y}, in thousands of US dollars.",
        "",
        _row(["Segment", "Revenue", "Operating income"]),
        "|---|---:|---:|",
        *[
            _row([s, f"{r:,}", f"{i:,}"])
            for s, r, i in zip(seg, b.segment_revenue, b.segment_income, strict=True)
        ],
        _row(["Total", f"{total:,}", f"{sum(b.segment_income):,}"]),
        "",
        "## Quarterly results (unaudited)",
        "",
        _row(["Quarter", "Revenue", "Operating income"]),
        "|---|---:|---:|",
        *[
            _row(
                [
                    f"Q{q + 1} {y}",
                    f"{b.quarters['revenue'][q]:,}",
                    f"{b.quarters['operating_income'][q]:,}",
                ]
            )
            for q in range(4)
        ],
        "",
        "## Risk factors",
        "",
    ]
    risks = [
        "Demand for our products depends on the budgets of our customers.",
        "We rely on a small number of suppliers for key components.",
        f"Competition in the {seg[0]} market may pressure our prices.",
        "Changes in exchange rates may affect reported results.",
        "Failures of our systems could interrupt service to customers.",
        "New regulation could raise our compliance costs.",
        "We may not attract and keep the people we need.",
        "Acquisitions may not deliver the benefits we expect.",
    ]
    lines += rng.sample(risks, rng.randint(5, len(risks)))
    lines += [
        "",
        "## Outlook",
        "",
        f"For fiscal {y + 1} we expect growth in {seg[0]} and {seg[1]}.",
        "We will keep investing in our products and our people.",
        "",
    ]
    return "\n".join(lines)


def quarterly_csv(b: Books, shown: Shown) -> str:
    rows = [",".join(["quarter", *METRICS])]
    for q in range(4):
        values = [str(shown.csv.get((q, m), b.quarters[m][q])) for m in METRICS]
        rows.append(",".join([f"Q{q + 1} {b.year}", *values]))
    return "\n".join(rows) + "\n"


CLAIMS = ["Revenue", "Revenue growth", "Gross margin", "Operating income", "Net income"]


def true_claims(b: Books, prior_revenue: int | None = None) -> dict[str, str]:
    """Each highlight's number as the annual report supports it (one decimal); growth against
    `prior_revenue` when given (the press release's own basis)."""
    revenue, prior = b.fy("revenue"), prior_revenue or b.prior["revenue"]
    return {
        "Revenue": millions(revenue),
        "Revenue growth": decimal(Fraction(revenue - prior, prior) * 100, 1),
        "Gross margin": decimal(Fraction(b.fy("gross_profit"), revenue) * 100, 1),
        "Operating income": millions(b.fy("operating_income")),
        "Net income": millions(b.net_income),
        f"{b.segments[0]} segment revenue": millions(b.segment_revenue[0]),
    }


def press_release(b: Books, shown: Shown) -> str:
    prior = shown.original_prior_revenue or b.prior["revenue"]
    claims = {**true_claims(b, prior), **shown.claims}
    lines = [
        f"# {b.company} reports fiscal {b.year} results",
        "",
        f"{b.city} — {b.company} today announced its results for fiscal {b.year}.",
        "",
        "## Highlights",
        "",
        f"- **Revenue:** ${claims['Revenue']} million.",
        f"- **Revenue growth:** {claims['Revenue growth']}% over fiscal {b.year - 1} revenue of "
        f"${millions(prior)} million.",
        f"- **Gross margin:** {claims['Gross margin']}%.",
        f"- **Operating income:** ${claims['Operating income']} million.",
        f"- **Net income:** ${claims['Net income']} million.",
        f"- **{b.segments[0]} segment revenue:** ${claims[f'{b.segments[0]} segment revenue']} "
        "million.",
        "",
        f'"We delivered on our plan this year," said {b.ceo}, chief executive officer.',
        "",
        f"## About {b.company}",
        "",
        f"{b.company} serves customers in {b.countries} countries.",
        "",
        "## Forward-looking statements",
        "",
        "This release contains forward-looking statements that involve risks and uncertainties.",
        "",
    ]
    return "\n".join(lines)


@dataclass
class Draft:
    """The documents of one task and where their figures are, for citing them."""

    books: Books
    shown: Shown
    documents: dict[str, str]

    def table(self, title_start: str) -> Table:
        docs = parse_documents(self.documents)
        return next(t for d in docs.values() for t in d.tables if t.title.startswith(title_start))

    def cell(self, title_start: str, row: str, column: str) -> Citation:
        table = self.table(title_start)
        found = table.cell(row, column)
        assert found is not None, (table.name, row, column)
        return Citation(
            document=table.document, table=table.name, row=row, column=column, value=found[0]
        )

    def claim_line(self, claim: str) -> Citation:
        _, _, release = names(self.books)
        lines = self.documents[release].splitlines()
        number = next(i for i, t in enumerate(lines, 1) if t.startswith(f"- **{claim}:**"))
        value = {**true_claims(self.books, self.shown.original_prior_revenue), **self.shown.claims}[
            claim
        ]
        return Citation(document=release, line=number, value=value)


def draft(b: Books, shown: Shown, rng: random.Random) -> Draft:
    report, quarterly, release = names(b)
    documents = {
        report: annual_report(b, shown, rng),
        quarterly: quarterly_csv(b, shown),
        release: press_release(b, shown),
    }
    return Draft(b, shown, documents)
