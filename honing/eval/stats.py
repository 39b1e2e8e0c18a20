"""Uncertainty of success rates and of the change between two evaluations: pure functions.

    wilson(passed, total)                         95% Wilson score interval of one rate
    difference_interval(before, after)            95% interval of after - before on the same
                                                  episodes (paired: Newcombe 1998, method 10)
    difference_interval_counts(k1, n1, k2, n2)    the same for two independent samples (φ = 0)
    paired_gain(before, after)                    after − before over the episodes (keys) judged
                                                  on both sides, with the paired interval

Paired: `before[i]` and `after[i]` are one held-out episode (a task and its sample index) judged
at two points of a run. Newcombe's hybrid score interval combines the two Wilson intervals with
the correlation φ of the 2x2 table; it stays inside [-1, 1] and behaves at 0% and 100%, where the
Wald interval collapses. Not covered: continuity corrections, k > 1 samples per task pooled into
one task-level rate (each sample is its own pair), multiple-comparison adjustments.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def __contains__(self, value: float) -> bool:
        return self.low <= value <= self.high


def wilson(passed: int, total: int, z: float = Z95) -> Interval:
    """The Wilson score interval of passed/total (Wilson 1927); total 0 gives [0, 1]."""
    if not 0 <= passed <= total:
        raise ValueError(f"passed {passed} of total {total}: need 0 <= passed <= total")
    if total == 0:
        return Interval(0.0, 1.0)
    p, n, z2 = passed / total, total, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return Interval(max(0.0, centre - half), min(1.0, centre + half))


def _combine(
    p1: float, w1: Interval, p2: float, w2: Interval, phi: float
) -> Interval:  # fmt: skip
    """Newcombe's method 10 for p2 - p1, given each rate's Wilson interval and φ."""
    down1, up1 = p1 - w1.low, w1.high - p1
    down2, up2 = p2 - w2.low, w2.high - p2
    lower = math.sqrt(max(0.0, up1 * up1 - 2 * phi * up1 * down2 + down2 * down2))
    upper = math.sqrt(max(0.0, down1 * down1 - 2 * phi * down1 * up2 + up2 * up2))
    delta = p2 - p1
    return Interval(max(-1.0, delta - lower), min(1.0, delta + upper))


def difference_interval_counts(
    passed1: int, total1: int, passed2: int, total2: int, z: float = Z95
) -> Interval:
    """The interval of passed2/total2 - passed1/total1 for independent samples (Newcombe's
    method 10 with φ = 0)."""
    if total1 == 0 or total2 == 0:
        return Interval(-1.0, 1.0)
    p1, p2 = passed1 / total1, passed2 / total2
    return _combine(p1, wilson(passed1, total1, z), p2, wilson(passed2, total2, z), 0.0)


def difference_interval(
    before: Sequence[bool], after: Sequence[bool], z: float = Z95
) -> Interval:  # fmt: skip
    """The interval of mean(after) - mean(before) over paired outcomes (Newcombe 1998,
    method 10): the same episodes judged twice."""
    if len(before) != len(after):
        raise ValueError(f"{len(before)} outcomes before, {len(after)} after: they must pair")
    n = len(before)
    if n == 0:
        return Interval(-1.0, 1.0)
    both = sum(1 for x, y in zip(before, after, strict=True) if x and y)
    lost = sum(1 for x, y in zip(before, after, strict=True) if x and not y)
    gained = sum(1 for x, y in zip(before, after, strict=True) if not x and y)
    neither = n - both - lost - gained
    margins = (both + lost) * (gained + neither) * (both + gained) * (lost + neither)
    cross = both * neither - lost * gained
    # Newcombe's corrected φ: shrunk by n/2 when positive, 0 in between
    corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = corrected / math.sqrt(margins) if margins else 0.0
    p1, p2 = (both + lost) / n, (both + gained) / n
    return _combine(p1, wilson(both + lost, n, z), p2, wilson(both + gained, n, z), phi)


@dataclass(frozen=True)
class PairedGain:
    """after − before over the episodes judged on both sides, with its paired 95% interval."""

    n: int  # episodes judged on both sides (pairs)
    before: float  # success rate over those pairs
    after: float
    interval: Interval

    @property
    def gain(self) -> float:
        return self.after - self.before


def paired_gain(before: Mapping[K, bool | None], after: Mapping[K, bool | None]) -> PairedGain:
    """The paired gain of `after` over `before`, each an outcome per episode key (a task and its
    sample); None marks an episode the infrastructure failed. Only keys judged on both sides
    pair; with none, the rates are 0 and the interval is [-1, 1]."""
    keys = [k for k in before if k in after and before[k] is not None and after[k] is not None]
    x = [bool(before[k]) for k in keys]
    y = [bool(after[k]) for k in keys]
    n = len(keys)
    return PairedGain(
        n=n,
        before=sum(x) / n if n else 0.0,
        after=sum(y) / n if n else 0.0,
        interval=difference_interval(x, y),
    )
