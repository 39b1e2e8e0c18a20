"""Task sources of a run: synthetic held-out sets (math, sql, tools, finance, structure, code
repair) are worded as training never is, and a held-out set keeps out every task that training
or the warm start asks, in any words."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from honing.domains.math.generate import generate_math_tasks
from honing.domains.math.task import MathTask
from honing.errors import ConfigError
from honing.tasks.domains import phrased_sets
from honing.tasks.load import question_key
from honing.tasks.synthetic import UNSEEN_TAG
from honing.trainer.gains import tag_scores
from honing.trainer.run_config import TaskSource, TrainConfig, WarmStart
from honing.trainer.sources import heldout_sets, load_source, validation_sets, warm_start_tasks


@pytest.mark.parametrize("tasks", phrased_sets())
def test_a_heldout_source_gets_unseen_wordings_and_a_training_source_none(tasks: str) -> None:
    source = TaskSource(tasks=tasks, count=64, seed=12)
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
    refused = "applies to synthetic-code-repair, .* only, not 'synthetic-code'; drop it"
    with pytest.raises(ValidationError, match=refused):
        TaskSource(tasks="synthetic-code", count=8, phrasings="heldout")


def test_a_source_without_count_or_seed_is_the_builtin_set() -> None:
    from honing.tasks.load import builtin_sets

    source = TaskSource(tasks="synthetic-math")
    heldout = load_source("math", source, heldout=True)
    assert heldout.name == "synthetic-math"
    assert [t.prompt for t in heldout.tasks] == [
        t.prompt for t in builtin_sets()["synthetic-math"]().tasks
    ]


def test_tag_scores_count_each_episode_under_each_of_its_tasks_tags() -> None:
    outcomes = {"a#0": True, "a#1": False, "b#0": True, "c#0": False, "gone#0": True}
    tags = {"a": ["x", UNSEEN_TAG], "b": ["x"], "c": [UNSEEN_TAG]}
    assert tag_scores(outcomes, tags) == {"x": (2, 3), UNSEEN_TAG: (1, 3)}
    assert tag_scores({}, tags) == {}


def math_task(task_id: str, prompt: str, answer: int, expression: str | None) -> MathTask:
    metadata = {"expression": expression} if expression is not None else {}
    return MathTask(id=task_id, prompt=prompt, answer=str(answer), metadata=metadata)


def test_a_question_is_its_calculation_whatever_the_wording() -> None:
    add = math_task("a", "Add 12 and 30.", 42, "12 + 30")
    assert question_key(add) == question_key(math_task("b", "What is 30 plus 12?", 42, "30 + 12"))
    assert question_key(add) != question_key(math_task("c", "Add 12 and 31.", 43, "12 + 31"))
    take = math_task("d", "Subtract 12 from 30.", 18, "30 - 12")
    assert question_key(take) != question_key(math_task("e", "What is 12 - 30?", -18, "12 - 30"))
    nested = math_task("f", "x", 1260, "(12 + 30) * 30")
    assert question_key(nested) == question_key(math_task("g", "y", 1260, "30 * (30 + 12)"))
    # without a calculation (or with one that is not plain arithmetic) the wording is the question
    assert question_key(math_task("h", "Add 12 and 30.", 42, None)) != question_key(add)
    odd = math_task("i", "Add 12 and 30.", 42, "sum([12, 30])")
    assert question_key(odd) == question_key(math_task("j", "Add 12 and 30.", 42, None))


def test_synthetic_math_never_asks_one_calculation_twice() -> None:
    tasks = generate_math_tasks(2048, 5, "heldout")
    assert len({question_key(t) for t in tasks}) == len(tasks)


def tasks_file(path: Path, rows: list[tuple[str, str, int, str]]) -> str:
    lines = [
        {"id": i, "domain": "math", "prompt": p, "answer": str(a), "metadata": {"expression": e}}
        for i, p, a, e in rows
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return str(path)


def chat_file(path: Path, user_texts: list[str]) -> str:
    rows = [
        {"messages": [{"role": "user", "content": t}, {"role": "assistant", "content": "ok"}]}
        for t in user_texts
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def config(tmp_path: Path, **settings: Any) -> TrainConfig:
    train = tasks_file(tmp_path / "train.jsonl", [("t1", "Add 12 and 30.", 42, "12 + 30")])
    heldout = tasks_file(
        tmp_path / "heldout.jsonl",
        [
            ("h1", "What is 30 plus 12?", 42, "30 + 12"),  # training's problem, other words
            ("h2", "What is 7 times 6?", 42, "7 * 6"),  # in the warm start's chat data
            ("h3", "What is 50 minus 8?", 42, "50 - 8"),  # unseen
        ],
    )
    values: dict[str, Any] = {
        "out": str(tmp_path / "run"),
        "train": {"math": {"tasks": train}},
        "heldout": {"math": {"tasks": heldout}},
        "steps": 1,
        **settings,
    }
    return TrainConfig.model_validate(values)


def test_heldout_sets_leave_out_what_training_and_the_warm_start_ask(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert [t.id for t in heldout_sets(config(tmp_path))["math"].tasks] == ["h2", "h3"]
    chats = chat_file(tmp_path / "warm.jsonl", ["Please solve: What is 7 times 6? Use the tools."])
    with caplog.at_level(logging.INFO, logger="honing.trainer.sources"):
        sets = heldout_sets(config(tmp_path, warm_start={"data": chats}))
    assert [t.id for t in sets["math"].tasks] == ["h3"]
    assert "2 task(s) also asked in training or the warm start" in caplog.text
    assert [t.id for t in heldout_sets(config(tmp_path), limit=1)["math"].tasks] == ["h2"]


def test_a_run_from_another_runs_warm_start_leaves_out_that_warm_starts_tasks_too(
    tmp_path: Path,
) -> None:
    earlier = tmp_path / "earlier" / "warm_start"
    (earlier / "model").mkdir(parents=True)
    chat_file(earlier / "traces.jsonl", ["Please solve: What is 7 times 6? Use the tools."])
    start = str(earlier / "model")
    # not finished (no done.json): not a warm start's model yet, nothing more is left out
    assert [t.id for t in heldout_sets(config(tmp_path, model=start))["math"].tasks] == [
        "h2",
        "h3",
    ]
    (earlier / "done.json").write_text("{}")
    assert [t.id for t in heldout_sets(config(tmp_path, model=start))["math"].tasks] == ["h3"]
    # another directory named model, without a warm start's files beside it
    other = tmp_path / "other" / "model"
    other.mkdir(parents=True)
    assert [t.id for t in heldout_sets(config(tmp_path, model=str(other)))["math"].tasks] == [
        "h2",
        "h3",
    ]


def test_extra_traces_add_the_families_they_name_once_and_count_as_trained_on(
    tmp_path: Path,
) -> None:
    traces = {"tasks": "synthetic-sql", "count": 12, "seed": 13}
    warm = WarmStart.model_validate({"traces": traces, "extra_traces": [
        {**traces, "count": 24, "tags": ["change"]},  # tasks 0-11 are traces' own: played once
        {"tasks": "synthetic-sql", "count": 12, "seed": 31, "tags": ["aggregation", "change"]},
    ]})  # fmt: skip
    tasks = warm_start_tasks(warm)
    first = load_source("w", TaskSource.model_validate(traces)).tasks
    assert [t.id for t in tasks.tasks[:12]] == [t.id for t in first]
    extra = tasks.tasks[12:]
    assert [t.id for t in extra] == [f"sql-synth/13/{i}" for i in (16, 22)] + [
        f"sql-synth/31/{i}" for i in (0, 4, 6, 10)
    ]
    assert all({"aggregation", "change"} & set(t.tags) for t in extra)
    assert "synthetic-sql/31 ['aggregation', 'change']" in tasks.name
    # a held-out set keeps out what the extra traces ask, as it does the traces'
    heldout = {"sql": {"tasks": "synthetic-sql", "count": 24, "seed": 31, "phrasings": "train"}}
    run = config(tmp_path, heldout=heldout, warm_start=warm.model_dump())
    kept = {t.id for t in heldout_sets(run)["sql"].tasks}
    assert not kept & {t.id for t in extra} and "sql-synth/31/1" in kept
    with pytest.raises(ValidationError, match="extra_traces adds to traces: set traces too"):
        WarmStart.model_validate({"data": "chats.jsonl", "extra_traces": [traces]})


def test_validation_sets_leave_out_what_training_and_the_heldout_sets_ask(tmp_path: Path) -> None:
    validation = tasks_file(
        tmp_path / "validation.jsonl",
        [
            ("v1", "Add 30 and 12.", 42, "30 + 12"),  # training's problem
            ("v2", "Take 8 from 50.", 42, "50 - 8"),  # held-out h3's problem, other words
            ("v3", "What is 9 times 4?", 36, "9 * 4"),  # unseen
        ],
    )
    cfg = config(tmp_path, validation={"math": {"tasks": validation}})
    assert [t.id for t in validation_sets(cfg)["math"].tasks] == ["v3"]
    assert [t.id for t in heldout_sets(cfg)["math"].tasks] == ["h2", "h3"]  # unchanged by it


def test_keep_best_without_validation_sets_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="no validation sets: add one"):
        config(tmp_path, checkpoint={"keep_best": True})


def test_a_heldout_set_that_training_covers_entirely_is_an_error(tmp_path: Path) -> None:
    chats = chat_file(tmp_path / "warm.jsonl", ["What is 7 times 6?", "What is 50 minus 8?"])
    with pytest.raises(ConfigError, match="every task is also asked in training"):
        heldout_sets(config(tmp_path, warm_start={"data": chats}))
