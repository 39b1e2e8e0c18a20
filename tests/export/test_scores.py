"""Held-out success as the export prints it (the int8 comparison line, the card's cells): over the
judged episodes, with the infrastructure failures counted beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from honing.export.card import _cell
from honing.export.quantize import Comparison, HeldoutScore, Measurement
from honing.trainer.run_dir import EvalPoint


def measured(label: str, *scores: HeldoutScore) -> Measurement:
    return Measurement(label, weight_bytes=10**6, tokens_per_s=10.0, heldout=scores, eval_s=1.0)


def test_pooled_success_is_over_the_judged_episodes_once() -> None:
    # `total` is already the judged episodes: 3 of 4 judged, 2 left out (not 3 of 2)
    m = measured("fp32", HeldoutScore("a", 1, 2, 1, 0.5), HeldoutScore("b", 2, 2, 1, 1.0))
    assert m.success == 3 / 4


def test_the_comparison_line_counts_the_infra_failures() -> None:
    reference = measured("fp32", HeldoutScore("a", 3, 4, 0, 0.75))
    quantised = measured("int8", HeldoutScore("a", 1, 2, 2, 0.5))
    line = Comparison(reference, quantised, new_tokens=8, threads=1, heldout_limit=None).line()
    assert line.endswith(
        "held-out success 50% (1/2; infra failures 2) vs 75% (3/4; infra failures 0)"
    )
    nothing = measured("int8", HeldoutScore("a", 0, 0, 4, None))
    line = Comparison(reference, nothing, new_tokens=8, threads=1, heldout_limit=None).line()
    assert "held-out success n/a (infra failures 4) vs" in line


def test_the_cards_cells_count_the_infra_failures() -> None:
    def point(passed: int, total: int, infra: int) -> EvalPoint:
        success = passed / total if total else None
        return EvalPoint(step=1, phase="main", set="a", success=success, passed=passed,
                         total=total, infra_failed=infra, seconds=1.0)  # fmt: skip

    assert _cell(point(3, 4, 1)) == "75% (3/4; infra failures 1)"
    assert _cell(point(0, 0, 2)) == "n/a (0/0; infra failures 2)"
    assert _cell(None) == "—"


def test_the_cards_warm_start_row_says_a_team_played_the_traces(tmp_path: Path) -> None:
    from honing.export.card import _training
    from honing.export.model import TrainedRun
    from honing.trainer.run_config import TaskSource, load_saved

    def row(config_file: str, **warm: Any) -> str:
        config = load_saved(Path(__file__).parents[2] / "examples" / config_file)
        if warm:
            assert config.warm_start is not None
            ws = config.warm_start.model_copy(update=warm)
            config = config.model_copy(update={"warm_start": ws})
        run = TrainedRun(run_dir=tmp_path, config=config, checkpoint=tmp_path / "step-1", step=1,
                         kind="lora", base=tmp_path, warm_started=True, evals=())  # fmt: skip
        return next(line for line in _training(run).splitlines() if "Warm start" in line)

    teamed = row("code_repair_team.yaml")
    assert "a scripted team's reference episodes (analyst, executor, validator)" in teamed
    assert "reference tool-use traces" in row("code_repair.yaml")
    extra = TaskSource(tasks="synthetic-sql", count=384, seed=13, tags=["change"])
    assert "synthetic-sql/13" not in row("sql.yaml")
    assert "and of `synthetic-sql` (384 tasks, seed 13, tags ['change'])" in row(
        "sql.yaml", extra_traces=[extra]
    )
