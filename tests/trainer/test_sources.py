"""Task sources of a run: synthetic-math held-out sets are worded as training never is."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from honing.tasks.synthetic import UNSEEN_TAG
from honing.trainer.gains import tag_scores
from honing.trainer.run_config import TaskSource
from honing.trainer.sources import load_source


def test_a_heldout_source_gets_unseen_wordings_and_a_training_source_none() -> None:
    source = TaskSource(tasks="synthetic-math", count=64, seed=12)
    heldout = load_source("math", source, heldout=True)
    train = load_source("math", source)
    assert sum(UNSEEN_TAG in t.tags for t in heldout.tasks) > 16
    assert not any(UNSEEN_TAG in t.tags for t in train.tasks)
    # the config can say otherwise, either way
    pinned = source.model_copy(update={"phrasings": "train"})
    assert not any(UNSEEN_TAG in t.tags for t in load_source("m", pinned, heldout=True).tasks)
    mixed = source.model_copy(update={"phrasings": "heldout"})
    assert [t.prompt for t in load_source("m", mixed).tasks] == [t.prompt for t in heldout.tasks]


def test_phrasings_is_refused_where_it_means_nothing() -> None:
    with pytest.raises(ValidationError, match="synthetic-math only"):
        TaskSource(tasks="synthetic-tools", count=8, phrasings="heldout")


def test_a_source_without_count_or_seed_is_the_builtin_set() -> None:
    from honing.tasks.builtin import BUILTIN

    source = TaskSource(tasks="synthetic-math")
    heldout = load_source("math", source, heldout=True)
    assert heldout.name == "synthetic-math"
    assert [t.prompt for t in heldout.tasks] == [
        t.prompt for t in BUILTIN["synthetic-math"]().tasks
    ]


def test_tag_scores_count_each_episode_under_each_of_its_tasks_tags() -> None:
    outcomes = {"a#0": True, "a#1": False, "b#0": True, "c#0": False, "gone#0": True}
    tags = {"a": ["x", UNSEEN_TAG], "b": ["x"], "c": [UNSEEN_TAG]}
    assert tag_scores(outcomes, tags) == {"x": (2, 3), UNSEEN_TAG: (1, 3)}
    assert tag_scores({}, tags) == {}
