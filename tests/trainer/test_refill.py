"""Refill (`refill.min_groups`): an update with too few groups that carry a signal plays more
tasks before it trains, up to `refill.max_rounds` extra draws; the refilled groups are stored,
counted and trained on like the first ones. Config errors name what to change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from test_curriculum import starving_updates

from honing.domains.math.task import MathTask
from honing.tasks.load import TaskSet
from honing.trainer.run_config import TrainConfig
from honing.trainer.sources import TaskMixer


def kept(update: dict[str, Any]) -> int:
    return int(update["signal"]["groups"] - update["signal"]["zero_variance"])


def test_refill_plays_more_tasks_until_an_update_has_a_group_with_signal(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Drawn two at a time from six tasks, most updates have no group whose rewards differ.
    With refill each such update draws two more tasks, up to three times, so that nearly every
    update trains. Checked by hand: with `_refill` playing no round, the refilled run plays 2
    groups an update like the plain one, and its first update without a signal fails it."""
    plain = starving_updates(tmp_path, tiny_model_dir, "plain")
    filled = starving_updates(tmp_path, tiny_model_dir, "filled",
                              refill={"min_groups": 1, "max_rounds": 3})  # fmt: skip
    assert all(u["signal"]["groups"] == 2 and u["signal"]["refills"] == 0 for u in plain)
    for u in filled:
        refills = int(u["signal"]["refills"])
        assert 0 <= refills <= 3
        assert u["signal"]["groups"] == 2 * (1 + refills)  # every round's groups are counted
        assert u["episodes"] == 4 * 2 * (1 + refills)  # ... and stored
        assert kept(u) >= 1 or refills == 3  # a round is played only while none has a signal
        if refills:  # the round before the last had no group with a signal
            assert kept(u) <= 2
    starved = sum(kept(u) == 0 for u in plain)
    assert starved >= 4  # the premise: plain draws often leave nothing to learn from
    assert sum(kept(u) == 0 for u in filled) < starved
    assert sum(int(u["signal"]["refills"]) for u in filled) >= 1
    # the stored groups are the played ones: 8 episodes a round
    store = json.loads((tmp_path / "filled" / "store.json").read_text())
    assert store["rows"] == sum(u["episodes"] for u in filled)


def test_a_refill_draw_chooses_its_sources_afresh_and_continues_each_sources_order() -> None:
    tasks = [MathTask(id=f"t{i}", prompt=f"What is {i} + 1?", answer=str(i + 1))
             for i in range(16)]  # fmt: skip
    mixer = TaskMixer({"a": TaskSet("a", tasks[:8]), "b": TaskSet("b", tasks[8:])},
                      {"a": 1.0, "b": 1.0}, seed=3)  # fmt: skip
    names = ["a", "b"]
    first = mixer.draw(0, names, 6, {})
    # the same update's refill draw is not its first draw again (the sources' mix is redrawn)
    assert [n for n, _ in mixer.draw(0, names, 6, {}, refill=1)] != [n for n, _ in first]
    cursors: dict[str, tuple[int, int]] = {}
    drawn = mixer.draw(0, names, 6, cursors) + mixer.draw(0, names, 6, cursors, refill=1)
    ids = [t.id for _, t in drawn]
    assert len(set(ids)) == len(ids)  # 12 draws of 16 tasks, each source's order continued
    assert mixer.draw(0, names, 6, {}, refill=1) == mixer.draw(0, names, 6, {}, refill=1)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"async": {"max_staleness": 1}}, "refill.min_groups is 2 and async.max_staleness is 1"),
        ({"learner": {"dynamic_sampling": False}}, "nothing to refill"),
    ],
)
def test_refill_is_refused_where_it_cannot_act(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TrainConfig.model_validate({"train": {"m": {"tasks": "synthetic-math"}}, "out": "r",
                                    "steps": 1, "refill": {"min_groups": 2}, **extra})  # fmt: skip
