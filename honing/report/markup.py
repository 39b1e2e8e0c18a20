"""The small pieces every part of the report page is written with: HTML escaping, shares,
points, durations and numbers in words, a section, a table, a "not recorded" note, and blocks laid
out two per row.

Not covered: the charts (honing.report.charts) and what any section says
(honing.report.page).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def pct(value: float | None) -> str:
    return "not recorded" if value is None else f"{100 * value:.0f}%"


def pts(delta: float) -> str:
    return f"{100 * delta:+.0f} pts"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 0.01:
        return f"{value:.2g}"
    return f"{value:.3g}"


def mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def missing_html(what: str, why: str) -> str:
    return f'<p class="missing"><b>{esc(what)}: not recorded.</b> {esc(why)}</p>'


def section_html(key: str, title: str, body: str) -> str:
    return f'<section id="{key}"><h2>{esc(title)}</h2>{body}</section>'


def table_html(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    head = "".join(f'<th class="{"num" if i in numeric else ""}">{esc(h)}</th>'
                   for i, h in enumerate(header))  # fmt: skip
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"num" if i in numeric else ""}">{c}</td>' for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def pairs_html(charts: Sequence[str]) -> str:
    """Charts two per row."""
    return "".join(
        '<div class="pair">' + "".join(f"<div>{c}</div>" for c in charts[i : i + 2]) + "</div>"
        for i in range(0, len(charts), 2)
    )
