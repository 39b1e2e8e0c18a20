"""The pure parts of benchmarks/learning_vs_trl.py: its last line, the time honing takes to reach
trl's gain, the curve's lines, the points it reports, and which tokens of a trl completion are
the last assistant turn. The benchmark itself (a warm start and minutes of training per side) is
not run here."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("learning_vs_trl")


def test_the_last_line_when_honing_reached_trls_gain(bench: ModuleType) -> None:
    # honing reached +12 at 150 s (2.5 min); trl took 666 s to its +12: 666 / 150 = 4.44
    line = bench.last_line(8.0, trl=12, honing=20, reached_s=150.0, trl_s=666.0, n=128)
    assert line == (
        "learning: same start, 8 min each; trl +12 pts; honing +20 pts; honing reached trl's +12 "
        "in 2.5 min (4.4x sooner); held-out n=128"
    )
    # a zero or negative gain keeps its sign; 42 s = 0.7 min; 30 / 42 = 0.71 (later, not sooner)
    line = bench.last_line(0.5, trl=0, honing=-3, reached_s=42.0, trl_s=30.0, n=8)
    assert line == (
        "learning: same start, 0.5 min each; trl +0 pts; honing -3 pts; honing reached trl's +0 "
        "in 0.7 min (0.7x sooner); held-out n=8"
    )


def test_the_last_line_when_honing_never_reached_trls_gain(bench: ModuleType) -> None:
    assert bench.last_line(8.0, trl=23, honing=-3, reached_s=None, trl_s=666.0, n=128) == (
        "learning: same start, 8 min each; trl +23 pts; honing -3 pts; honing never reached "
        "trl's +23; held-out n=128"
    )


def test_time_to_reach_is_the_first_point_at_or_above_the_target(bench: ModuleType) -> None:
    curve = [(60.0, 5), (120.0, 12), (180.0, 9), (240.0, 20)]  # (seconds, gain in pts)
    assert bench.time_to_reach(curve, 5) == 60.0  # the first point, by a tie
    assert bench.time_to_reach(curve, -4) == 60.0  # a negative target: the first point
    assert bench.time_to_reach(curve, 12) == 120.0  # a tie counts: >=
    assert bench.time_to_reach(curve, 10) == 120.0  # later, not the first point above 5
    assert bench.time_to_reach(curve, 13) == 240.0  # the dip at 180 s does not reach it
    assert bench.time_to_reach(curve, 21) is None  # never
    assert bench.time_to_reach([], 0) is None


def test_a_curve_line(bench: ModuleType) -> None:
    point = bench.Point(step=2, seconds=444.0, model_dir=Path("steps/step-2"))  # 7.4 min
    after = bench.Score({"a": True, "b": True, "c": False}, infra_failed=0)  # 67%
    assert bench.curve_line("trl", point, after, 33) == (
        "curve trl step 2: 7.4 min, held-out 67% (+33 pts)"
    )
    assert bench.curve_line("honing", point, after, -1) == (
        "curve honing step 2: 7.4 min, held-out 67% (-1 pts)"
    )


def test_a_side_is_its_last_updates_model(bench: ModuleType) -> None:
    first = bench.Point(step=1, seconds=50.0, model_dir=Path("steps/step-1"))
    last = bench.Point(step=2, seconds=110.0, model_dir=Path("steps/step-2"))
    side = bench.SideResult("honing", (first, last), episodes=64)
    assert (side.steps, side.seconds, side.model_dir) == (2, 110.0, Path("steps/step-2"))
    with pytest.raises(RuntimeError, match="trl took no step"):
        bench.SideResult("trl", (), episodes=0)


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


def test_each_side_reports_the_update_best_on_validation_the_earliest_on_a_tie(
    bench: ModuleType,
) -> None:
    assert bench.chosen_step([(1, 0.50), (2, 0.75), (3, 0.75), (4, 0.25)]) == 2
    assert bench.chosen_step([(1, 0.50)]) == 1
    assert bench.chosen_step([(1, 0.2), (2, 0.1), (3, 0.3)]) == 3
    with pytest.raises(ValueError, match="no update"):
        bench.chosen_step([])


def test_the_sides_file_round_trips_and_a_bad_one_names_itself(
    bench: ModuleType, tmp_path: Path
) -> None:
    side = bench.SideResult(
        "honing", (bench.Point(1, 30.5, tmp_path / "s1"), bench.Point(2, 61.0, tmp_path / "s2")), 64
    )
    path = tmp_path / "sides.json"
    bench.write_sides(path, {"honing": side})
    assert bench.read_sides(path) == {"honing": side}
    path.write_text('{"honing": {"points": []}}')
    with pytest.raises(SystemExit, match=r"sides\.json: not a sides file"):
        bench.read_sides(path)
    with pytest.raises(SystemExit, match="no such file"):
        bench.read_sides(tmp_path / "missing.json")


def test_a_curve_line_adds_the_validation_score_when_there_is_one(bench: ModuleType) -> None:
    point = bench.Point(3, 150.0, Path("m"))
    held = bench.Score({"a": True, "b": False}, 0)
    check = bench.Score({"c": True, "d": True, "e": True, "f": False}, 0)
    assert bench.curve_line("honing", point, held, 12, check) == (
        "curve honing step 3: 2.5 min, held-out 50% (+12 pts); validation 75%"
    )
