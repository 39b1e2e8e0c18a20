"""The report's charts, drawn as inline SVG: `line_chart`, `bar_chart` (stacked) and `share_bar`
(one bar split into named shares), each a `Chart` that renders itself as a figure with its title,
legend and caption. Round y ticks, x labels thinned to fit, a `<title>` tooltip per mark and a
`data-marks` count the tests check.

Not covered: which charts the page shows and what they say (honing.report.page);
interactivity (no JavaScript: the page is a static snapshot).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from honing.report.markup import duration, esc, num

PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1",
    "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#bab0ac",
)  # fmt: skip
SUCCESS_COLOR = "#59a14f"
W, H = 520, 230  # viewBox of a full-size chart
PAD_L, PAD_R, PAD_T, PAD_B = 52, 14, 12, 34


@dataclass(frozen=True)
class Series:
    name: str
    points: list[tuple[float, float | None]]  # (x, y); None: a gap
    color: str


@dataclass(frozen=True)
class Chart:
    """An SVG chart and what the page says about it."""

    key: str  # id on the page
    title: str
    caption: str  # one line: what to look at
    svg: str
    legend: list[tuple[str, str]]  # (label, colour)
    marks: int  # data marks drawn (points or bars), checked by the tests

    def html(self, small: bool = False, wide: bool = False) -> str:
        legend = "".join(
            f'<span class="key"><i style="background:{c}"></i>{esc(label)}</span>'
            for label, c in self.legend
        )
        return (
            f'<figure class="chart{" small" if small else ""}{" wide" if wide else ""}" '
            f'id="{self.key}" '
            f'data-marks="{self.marks}"><div class="ctitle">{esc(self.title)}</div>'
            f'{self.svg}<div class="legend">{legend}</div>'
            f"<figcaption>{esc(self.caption)}</figcaption></figure>"
        )


def colors(n: int) -> list[str]:
    return [PALETTE[i % len(PALETTE)] for i in range(n)]


def _y_ticks(values: Iterable[float], percent: bool, most: int = 5) -> list[float]:
    """Round tick values covering `values` and 0 (0-100% for shares)."""
    if percent:
        return [0.0, 0.25, 0.5, 0.75, 1.0]
    items = [v for v in values if math.isfinite(v)]
    lo, hi = min([0.0, *items]), max([0.0, *items])
    if hi - lo < 1e-12:
        hi = lo + 1.0
    raw = (hi - lo) / (most - 1)
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    start, end = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(i * step, 12) for i in range(start, end + 1)]


def _tick(value: float, percent: bool) -> str:
    return f"{100 * value:.0f}%" if percent else num(value)


@dataclass(frozen=True)
class _Frame:
    """A plot area: the SVG size and the scales from data to pixels."""

    width: int
    height: int
    y_ticks: list[float]
    sx: Callable[[float], float]
    pad_l: int = PAD_L

    @property
    def y_lo(self) -> float:
        return self.y_ticks[0]

    def sy(self, y: float) -> float:
        lo, hi = self.y_ticks[0], self.y_ticks[-1]
        return PAD_T + (1 - (y - lo) / (hi - lo)) * (self.height - PAD_T - PAD_B)

    def axes(self, percent: bool, x_ticks: Sequence[tuple[float, str]], x_label: str) -> list[str]:
        w, h = self.width, self.height
        parts = [
            f'<svg class="plot" viewBox="0 0 {w} {h}" role="img" '
            f'preserveAspectRatio="xMidYMid meet" xmlns="http://www.w3.org/2000/svg">'
        ]
        for v in self.y_ticks:
            y = self.sy(v)
            parts.append(
                f'<line class="grid{" zero" if v == 0 else ""}" x1="{self.pad_l}" '
                f'x2="{w - PAD_R}" y1="{y:.1f}" y2="{y:.1f}"/><text class="ytick" '
                f'x="{self.pad_l - 6}" y="{y + 4:.1f}">{_tick(v, percent)}</text>'
            )
        for x, label in x_ticks:
            parts.append(
                f'<text class="xtick" x="{self.sx(x):.1f}" y="{h - 18}">{esc(label)}</text>'
            )
        parts.append(
            f'<text class="xlabel" x="{(self.pad_l + w - PAD_R) / 2:.1f}" y="{h - 3}">'
            f"{esc(x_label)}</text>"
        )
        return parts


def _thin(labels: Sequence[tuple[float, str]], most: int) -> list[tuple[float, str]]:
    if len(labels) <= most:
        return list(labels)
    every = math.ceil(len(labels) / most)
    return [t for i, t in enumerate(labels) if i % every == 0 or i == len(labels) - 1]


def line_chart(
    key: str,
    title: str,
    caption: str,
    series: Sequence[Series],
    *,
    x_label: str = "update",
    percent: bool = False,
    x_names: Sequence[str] | None = None,
    small: bool = False,
) -> Chart:
    """Lines with a dot per data point; `x_names` makes x ordinal (0..n-1, labelled)."""
    width, height, pad_l = (300, 180, 54) if small else (W, H, PAD_L)
    xs = [x for s in series for x, _ in s.points]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    inset = 34 if x_names is not None else 12  # room for the first and last x labels

    def sx(x: float) -> float:
        return pad_l + inset + (x - x_lo) / (x_hi - x_lo) * (width - pad_l - PAD_R - 2 * inset)

    ys = [y for s in series for _, y in s.points if y is not None]
    frame = _Frame(width, height, _y_ticks(ys, percent), sx, pad_l)
    if x_names is not None:
        ticks = [(float(i), name) for i, name in enumerate(x_names)]
    else:
        ticks = [(x, f"{x:g}") for x in sorted(set(xs))]
    parts = frame.axes(percent, _thin(ticks, 6 if small else 12), x_label)
    marks = 0
    for s in series:
        segment: list[str] = []
        paths: list[list[str]] = [segment]
        for x, y in s.points:
            if y is None:
                segment = []
                paths.append(segment)
                continue
            segment.append(f"{sx(x):.1f},{frame.sy(y):.1f}")
        for path in paths:
            if len(path) > 1:
                parts.append(
                    f'<polyline class="line" points="{" ".join(path)}" stroke="{s.color}"/>'
                )
        for x, y in s.points:
            if y is None:
                continue
            name = x_names[int(x)] if x_names is not None else f"{x_label} {x:g}"
            parts.append(
                f'<circle class="mark" cx="{sx(x):.1f}" cy="{frame.sy(y):.1f}" r="3.2" '
                f'fill="{s.color}"><title>{esc(s.name)}, {esc(name)}: '
                f"{_tick(y, percent) if percent else num(y)}</title></circle>"
            )
            marks += 1
    parts.append("</svg>")
    legend = [(s.name, s.color) for s in series] if len(series) > 1 else []
    return Chart(key, title, caption, "".join(parts), legend, marks)


def bar_chart(
    key: str,
    title: str,
    caption: str,
    bars: Sequence[tuple[str, dict[str, float]]],
    categories: Sequence[tuple[str, str]],
    *,
    x_label: str = "update",
    unit: str = "",
) -> Chart:
    """Stacked bars, one per (label, {category: value}); `categories` is (name, colour), bottom
    first. One data mark per bar."""
    width, height = W, H
    totals = [sum(v.get(c, 0.0) for c, _ in categories) for _, v in bars]
    n = max(len(bars), 1)
    slot = (width - PAD_L - PAD_R) / n
    bar_w = min(48.0, slot * 0.7)

    def sx(i: float) -> float:
        return PAD_L + slot * (i + 0.5)

    frame = _Frame(width, height, _y_ticks(totals, False), sx)
    sy = frame.sy
    ticks = [(float(i), label) for i, (label, _) in enumerate(bars)]
    parts = frame.axes(False, _thin(ticks, 16), x_label)
    for i, (label, values) in enumerate(bars):
        parts.append(f'<g class="mark" data-label="{esc(label)}">')
        base = 0.0
        for name, color in categories:
            value = values.get(name, 0.0)
            if value <= 0:
                continue
            top = base + value
            parts.append(
                f'<rect x="{sx(i) - bar_w / 2:.1f}" y="{sy(top):.1f}" width="{bar_w:.1f}" '
                f'height="{max(sy(base) - sy(top), 0.5):.1f}" fill="{color}">'
                f"<title>{esc(x_label)} {esc(label)}: {esc(name)} {num(value)}{unit}</title></rect>"
            )
            base = top
        parts.append("</g>")
    parts.append("</svg>")
    legend = list(categories) if len(categories) > 1 else []
    return Chart(key, title, caption, "".join(parts), legend, len(bars))


def share_bar(key: str, title: str, caption: str, parts: Sequence[tuple[str, float, str]]) -> Chart:
    """One horizontal bar split into named shares (the run's time), labelled in the legend."""
    total = sum(v for _, v, _ in parts) or 1.0
    width, height, x = 1000, 40, 0.0
    svg = [
        f'<svg class="plot" viewBox="0 0 {width} {height}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg">'
    ]
    legend = []
    for name, value, color in parts:
        w = value / total * width
        svg.append(
            f'<rect class="mark" x="{x:.1f}" y="4" width="{max(w, 0.5):.1f}" height="32" '
            f'fill="{color}"><title>{esc(name)}: {duration(value)}</title></rect>'
        )
        if w > 60:
            svg.append(
                f'<text class="inbar" x="{x + w / 2:.1f}" y="24">{100 * value / total:.0f}%</text>'
            )
        x += w
        legend.append((f"{name} {duration(value)} ({100 * value / total:.0f}%)", color))
    svg.append("</svg>")
    return Chart(key, title, caption, "".join(svg), legend, len(parts))
