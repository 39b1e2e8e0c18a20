"""An evaluation keeps the judge's per-criterion verdicts (`met:*`): how close unsolved episodes
came, counted over every judged episode (one never compared meets none), an infrastructure
failure counted in neither; a held-out point records and logs them."""

from __future__ import annotations

import json

from honing.envs import FailureReason, Observation, StepInfo, StepResult
from honing.envs.base import Action
from honing.eval.metrics import Episode, Step, end_to_end
from honing.trainer.heldout import _criteria_text
from honing.trainer.run_dir import EvalPoint

OBS = Observation(text="state")


def episode(
    task: str, components: dict[str, float], failure: FailureReason | None = None
) -> Episode:
    result = StepResult(observation=OBS, reward=0.0, components=components, done=True,
                        info=StepInfo(failure=failure))  # fmt: skip
    return Episode(task, "structure", (), 0, (Step(OBS, Action(), result),))


def point(criteria: dict[str, tuple[int, int]]) -> EvalPoint:
    return EvalPoint(step=0, phase="before", set="structure", success=0.0, passed=0, total=4,
                     infra_failed=0, seconds=1.0, criteria=criteria)  # fmt: skip


def test_criteria_are_counted_over_judged_episodes_and_an_uncompared_one_meets_none() -> None:
    e2e = end_to_end(
        [
            episode("a", {"met:iou": 1.0, "met:dims": 1.0, "outcome": 0.0}),
            episode("b", {"met:iou": 0.0, "met:dims": 1.0, "outcome": 0.0}),
            episode("c", {"built": 0.0}, FailureReason.TOOL_ERROR),  # never compared
            episode("d", {}, FailureReason.SANDBOX_ERROR),  # infrastructure: not judged
        ],
        ks=[1],
    )
    assert e2e.criteria == {"dims": (2, 3), "iou": (1, 3)}
    # the mean over criteria of their shares: (2/3 + 1/3) / 2
    assert e2e.criteria_share == 0.5
    assert point(e2e.criteria).criteria_share == 0.5


def test_a_domain_without_criteria_records_none_and_says_nothing() -> None:
    e2e = end_to_end([episode("a", {"outcome": 1.0}), episode("b", {"outcome": 0.0})], ks=[1])
    assert e2e.criteria == {}
    assert e2e.criteria_share is None
    assert point({}).criteria_share is None
    assert _criteria_text(point({})) == ""


def test_the_log_names_the_share_and_the_three_lowest_criteria() -> None:
    criteria = {"iou": (1, 10), "dims": (3, 10), "volume": (2, 10), "holes": (8, 10)}
    # (10% + 30% + 20% + 80%) / 4 = 35%
    assert _criteria_text(point(criteria)) == (
        "; criteria met 35% (lowest: iou 10%, volume 20%, dims 30%)"
    )


def test_criteria_round_trip_through_evals_jsonl_and_older_lines_read_without_them() -> None:
    p = point({"iou": (1, 4)})
    line = json.loads(p.model_dump_json())
    assert EvalPoint.model_validate(line).criteria == {"iou": (1, 4)}
    del line["criteria"]
    assert EvalPoint.model_validate(line).criteria == {}
