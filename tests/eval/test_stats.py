"""Intervals of success rates and of their change, against published values and by hand."""

from __future__ import annotations

import math

import pytest

from honing.eval.stats import (
    Z95,
    difference_interval,
    difference_interval_counts,
    paired_gain,
    wilson,
)


def test_wilson_matches_the_published_intervals() -> None:
    low, high = wilson(5, 10).low, wilson(5, 10).high
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    assert wilson(0, 10).low == 0.0 and round(wilson(0, 10).high, 4) == 0.2775
    # by hand: p = 1/4, n = 4, z² = 3.8415: centre (0.25 + z²/8) / (1 + z²/4)
    z2 = Z95 * Z95
    centre = (0.25 + z2 / 8) / (1 + z2 / 4)
    half = Z95 / (1 + z2 / 4) * math.sqrt(0.25 * 0.75 / 4 + z2 / 64)
    assert wilson(1, 4).low == pytest.approx(centre - half)
    assert wilson(1, 4).high == pytest.approx(centre + half)
    assert (wilson(0, 0).low, wilson(0, 0).high) == (0.0, 1.0)
    with pytest.raises(ValueError, match="passed 5 of total 4"):
        wilson(5, 4)


def test_independent_difference_matches_newcombes_example() -> None:
    """Newcombe (1998), independent proportions: 56/70 - 48/80, method 10: 0.0524 to 0.3339."""
    interval = difference_interval_counts(48, 80, 56, 70)
    assert (round(interval.low, 4), round(interval.high, 4)) == (0.0524, 0.3339)
    assert 56 / 70 - 48 / 80 in interval


def test_paired_difference_by_hand() -> None:
    # 10 episodes: 4 solved at both points, 1 lost, 3 gained, 2 solved at neither
    before = [True] * 4 + [True] + [False] * 3 + [False] * 2
    after = [True] * 4 + [False] + [True] * 3 + [False] * 2
    p1, p2 = 5 / 10, 7 / 10
    w1, w2 = wilson(5, 10), wilson(7, 10)
    cross = 4 * 2 - 1 * 3  # ad - bc = 5, which is at most n/2: the corrected φ is 0
    assert cross <= 10 / 2
    lower = p2 - p1 - math.sqrt((w1.high - p1) ** 2 + (p2 - w2.low) ** 2)
    upper = p2 - p1 + math.sqrt((p1 - w1.low) ** 2 + (w2.high - p2) ** 2)
    interval = difference_interval(before, after)
    assert interval.low == pytest.approx(lower) and interval.high == pytest.approx(upper)


def test_pairing_narrows_the_interval_when_outcomes_agree() -> None:
    # 40 tasks: 20 solved before and after, 12 gained, 8 never solved: strongly correlated
    before = [True] * 20 + [False] * 20
    after = [True] * 32 + [False] * 8
    paired = difference_interval(before, after)
    independent = difference_interval_counts(20, 40, 32, 40)
    assert 12 / 40 in paired and 12 / 40 in independent
    assert paired.high - paired.low < independent.high - independent.low
    assert paired.low > independent.low


def test_edges_stay_inside_minus_one_and_one() -> None:
    none_to_all = difference_interval([False] * 10, [True] * 10)
    assert none_to_all.high == 1.0 and 0 < none_to_all.low < 1
    same = difference_interval([True] * 10, [True] * 10)
    assert same.low < 0 < same.high
    assert (difference_interval([], []).low, difference_interval([], []).high) == (-1.0, 1.0)
    with pytest.raises(ValueError, match="must pair"):
        difference_interval([True], [])


def test_paired_gain_pairs_by_key_and_leaves_infrastructure_failures_out() -> None:
    # keys a..e: e failed for infrastructure reasons on the team side, f was only played alone
    alone = {"a": True, "b": False, "c": False, "d": True, "e": True, "f": True}
    team = {"d": True, "c": True, "b": True, "a": False, "e": None}
    gain = paired_gain(alone, team)
    assert gain.n == 4  # a, b, c, d
    assert (gain.before, gain.after) == (0.5, 0.75)
    assert gain.gain == pytest.approx(0.25)
    # the same four pairs in the same order: a, b, c, d
    expected = difference_interval([True, False, False, True], [False, True, True, True])
    assert gain.interval == expected
    empty = paired_gain({"a": None}, {"a": True})
    assert (empty.n, empty.before, empty.after) == (0, 0.0, 0.0)
    assert (empty.interval.low, empty.interval.high) == (-1.0, 1.0)
