"""benchmarks/learning_matrix.py: each recipe's line read from a run's result.json, the latest
run of a recipe found by its directory's name, and the matrix's last line. No training here (a
recipe takes many minutes); the result.json read is the one `honing train` writes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from benchmark_scripts import load_benchmark

LAST = re.compile(
    r"learning_matrix: \d+/\d+ recipes gain \(CI low > 0\); median RL ([+-]\d+ pts|n/a); "
    r"slowest \d+ min"
)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("learning_matrix")


def result(warm: float | None, rl: float, gain: float, ci: tuple[float, float],
           minutes: float) -> dict[str, Any]:  # fmt: skip
    base = 0.0 if warm is not None else rl - gain  # RL started from the base without a warm start
    stages: dict[str, Any] = {"base": {"success": base, "total": 128},
                              "rl": {"success": rl, "total": 128}}  # fmt: skip
    if warm is not None:
        stages["warm_start"] = {"success": warm, "total": 128}
    return {"elapsed_s": minutes * 60, "gains": {**stages, "rl_gain": gain, "ci95": list(ci),
                                                 "n": 128}}  # fmt: skip


def test_a_recipes_line_and_the_matrix_line(bench: ModuleType) -> None:
    sql = bench.outcome("sql", result(0.20, 0.45, 0.25, (0.15, 0.35), 12.4))
    assert sql.line() == (
        "learning sql: warm start 20% → RL 45% (RL +25 pts, 95% CI +15..+35; n=128) in 12 min"
    )
    flat = bench.outcome("tools", result(None, 0.30, 0.02, (-0.05, 0.09), 18.0))
    assert flat.line().startswith("learning tools: base 28% → RL 30% (RL +2 pts")
    missing = bench.Outcome("finance", why="no recipe yet (examples/finance.yaml is missing)")
    assert missing.line() == "learning finance: no recipe yet (examples/finance.yaml is missing)"
    assert [o.gains for o in (sql, flat, missing)] == [True, False, False]
    last = bench.summary([sql, flat, missing])
    assert last == ("learning_matrix: 1/3 recipes gain (CI low > 0); median RL +14 pts; "
                    "slowest 18 min")  # fmt: skip
    assert LAST.fullmatch(last)
    assert LAST.fullmatch(bench.summary([missing]))  # nothing measured: "n/a"


def test_a_judge_with_criteria_adds_the_criteria_met_to_the_recipes_line(
    bench: ModuleType,
) -> None:
    graded = result(0.0, 0.0, 0.0, (-0.03, 0.03), 40.0)
    graded["gains"]["warm_start"]["criteria_met"] = 0.165
    graded["gains"]["rl"]["criteria_met"] = 0.137
    assert bench.outcome("structure", graded).line() == (
        "learning structure: warm start 0% → RL 0% (RL +0 pts, 95% CI -3..+3; n=128; criteria "
        "met 16% → 14%) in 40 min"
    )


def test_the_latest_run_of_a_recipe_and_not_a_longer_ones(bench: ModuleType,
                                                          tmp_path: Path) -> None:  # fmt: skip
    for name in (
        "code-repair-20261201-100000",
        "code-repair-20261202-090000",
        "code-repair-team-20261203-080000",
        "code-repair-20261204-000000",
    ):
        (tmp_path / name).mkdir()
    for name in (
        "code-repair-20261201-100000",
        "code-repair-20261202-090000",
        "code-repair-team-20261203-080000",
    ):
        (tmp_path / name / "result.json").write_text(json.dumps({}))
    # the newest with a result; the team's runs are not code-repair's; one without a result skipped
    assert bench.latest_run(tmp_path, "code-repair").name == "code-repair-20261202-090000"
    assert bench.latest_run(tmp_path, "code-repair-team").name.startswith("code-repair-team-")
    assert bench.latest_run(tmp_path, "sql") is None
    assert bench.outcome("x", {}).line() == "learning x: the run measured no RL gain on held-out"


def test_every_recipe_loads_and_is_named_as_its_runs(bench: ModuleType) -> None:
    """Each recipe file there is a valid run config whose name is the matrix's recipe (what
    `runs/<recipe>-*` and the result line are named after), with a held-out set of 128 tasks
    or more (64 for structure and the team, whose episodes are slow; counted before the tasks
    training asks are left out)."""
    from honing.trainer.run_config import load_saved

    present = {r: f for r, f in bench.RECIPES.items() if (bench.ROOT / "examples" / f).is_file()}
    assert set(present) == set(bench.RECIPES)  # a recipe for every built-in domain, and the team
    for recipe, name in present.items():
        config = load_saved(bench.ROOT / "examples" / name)
        assert config.name == recipe, name
        held = sum(s.count or 0 for s in config.heldout.values())
        assert held >= (64 if recipe in ("code-repair-team", "structure") else 128), recipe


def test_the_exploration_line_reads_the_first_updates_entropy_and_varied_groups(
    bench: ModuleType,
) -> None:
    updates = [
        {"step": 1, "learner": {"entropy": 0.3127, "groups": 6, "dropped_groups": 4}},
        {"step": 2, "learner": {"entropy": 0.1, "groups": 6, "dropped_groups": 0}},
    ]
    assert bench.exploration("tools", updates) == (
        "  tools after the warm start: entropy 0.313 per token; groups with reward variance 2/6"
    )
    assert bench.exploration("tools", []) is None
    # the sampled tokens' entropy when recorded: it covers the groups the learner dropped too
    starved = [{"step": 1, "learner": {"entropy": 0.0, "groups": 6, "dropped_groups": 6},
                "signal": {"sampled_entropy": 0.0213}}]  # fmt: skip
    assert bench.exploration("sql", starved) == (
        "  sql after the warm start: entropy 0.021 per token; groups with reward variance 0/6"
    )
