"""The pure parts of benchmarks/learning_vs_trl.py: its last line, the points it reports, and
which tokens of a trl completion are the last assistant turn. The benchmark itself (a warm start
and minutes of training per side) is not run here."""

from __future__ import annotations

from types import ModuleType

import pytest
from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("learning_vs_trl")


def test_the_last_line(bench: ModuleType) -> None:
    assert bench.last_line(8.0, 12, -3, 128) == (
        "learning: same start, 8 min each; trl +12 pts; honing -3 pts; held-out n=128"
    )
    assert bench.last_line(0.5, 0, 0, 8) == (
        "learning: same start, 0.5 min each; trl +0 pts; honing +0 pts; held-out n=8"
    )


def test_points_are_the_change_in_success_rounded(bench: ModuleType) -> None:
    before = bench.Score({"a": True, "b": False, "c": False}, infra_failed=0)
    after = bench.Score({"a": True, "b": True, "c": False}, infra_failed=0)
    assert bench.points(before, after) == round(100 * (2 / 3 - 1 / 3))  # 33
    assert bench.points(after, before) == -33
    # an infrastructure failure leaves its task out of the rate: 1/2 judged, not 1/3
    failed = bench.Score({"a": True, "c": False}, infra_failed=1)
    assert bench.points(before, failed) == round(100 * (1 / 2 - 1 / 3))  # 17
    assert str(failed) == "1/2 (50%, 1 infra failures)"
    assert bench.change(before, after).startswith("+33 pts (95% CI ")
    assert bench.change(before, after).endswith(", paired on 3 tasks)")


def test_the_final_turn_is_after_the_last_assistant_header(bench: ModuleType) -> None:
    header, stops = [1, 2, 3], [0]
    # turn 1, its end (0), a tool result (9 9), the header, turn 2 (7 8) and its end
    assert bench.final_turn([5, 6, 0, 9, 9, 1, 2, 3, 7, 8, 0], header, stops) == [7, 8]
    # one turn only, cut off by the length limit (no end-of-turn token)
    assert bench.final_turn([5, 6], header, stops) == [5, 6]
    # a turn that ends at its header: empty
    assert bench.final_turn([5, 0, 1, 2, 3], header, stops) == []
