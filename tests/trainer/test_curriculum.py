"""The curriculum (honing.trainer.curriculum): each task's success estimate, its band, the draw
that defers too easy and too hard tasks (TaskMixer), exact resume with it, and the learning
signal it buys on a task mix where uniform sampling starves."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from test_loop import assert_same_store_and_logs, assert_same_weights, run_child
from test_loop import config as loop_config

from honing.domains.math.task import MathTask
from honing.report import build_report
from honing.rollout.engines.base import Prompt
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.tasks.load import TaskSet
from honing.trainer.checkpoint import latest_checkpoint
from honing.trainer.curriculum import Curriculum, CurriculumSettings, TaskRecord, task_key
from honing.trainer.loop import LoopState, train
from honing.trainer.run_config import TrainConfig
from honing.trainer.sources import TaskMixer

# -- the estimate and the bands ----------------------------------------------------------------


def test_the_estimate_is_a_moving_average_of_each_groups_judged_success_rate() -> None:
    records: dict[str, TaskRecord] = {}
    curriculum = Curriculum(CurriculumSettings(enabled=True, ema=0.25), records)
    assert curriculum.estimate("m/a") is None and curriculum.band("m/a") == "unseen"
    curriculum.update("m/a", successes=3, judged=4)  # the first group sets it
    assert curriculum.estimate("m/a") == 3 / 4
    curriculum.update("m/a", successes=1, judged=4)
    assert curriculum.estimate("m/a") == pytest.approx(0.75 * 3 / 4 + 0.25 * 1 / 4)  # 0.625
    curriculum.update("m/a", successes=0, judged=0)  # every episode an infrastructure failure
    assert records["m/a"].groups == 2
    assert curriculum.estimate("m/a") == pytest.approx(0.625)
    curriculum.update("m/a", successes=2, judged=2)  # two judged of four: the rate is 2/2
    assert curriculum.estimate("m/a") == pytest.approx(0.75 * 0.625 + 0.25 * 1.0)  # 0.71875
    curriculum.update("m/b", successes=0, judged=0)
    assert "m/b" not in records and curriculum.band("m/b") == "unseen"
    with pytest.raises(ValueError, match="5 successes of 4"):
        curriculum.update("m/a", successes=5, judged=4)


@pytest.mark.parametrize(
    ("success", "band"),
    [(0.0, "too_hard"), (0.0999, "too_hard"), (0.1, "learnable"), (0.5, "learnable"),
     (0.9, "learnable"), (0.9001, "too_easy"), (1.0, "too_easy")],
)  # fmt: skip
def test_bands_include_their_boundaries_in_learnable(success: float, band: str) -> None:
    records = {"m/a": TaskRecord(groups=1, success=success)}
    assert Curriculum(CurriculumSettings(low=0.1, high=0.9), records).band("m/a") == band


def test_occupancy_is_the_share_of_the_keys_in_each_band() -> None:
    records = {"m/easy": TaskRecord(groups=1, success=1.0),
               "m/hard": TaskRecord(groups=3, success=0.0),
               "m/mid": TaskRecord(groups=2, success=0.5)}  # fmt: skip
    curriculum = Curriculum(CurriculumSettings(), records)
    keys = ["m/easy", "m/hard", "m/hard", "m/mid", "m/new"]
    assert curriculum.occupancy(keys) == {
        "learnable": 1 / 5, "too_easy": 1 / 5, "too_hard": 2 / 5, "unseen": 1 / 5
    }  # fmt: skip
    assert set(curriculum.occupancy([]).values()) == {0.0}


def test_settings_are_strict() -> None:
    with pytest.raises(ValidationError, match="lo"):
        CurriculumSettings(enabled=True, lo=0.2)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match=r"low \(0.6\) > curriculum.high \(0.4\)"):
        CurriculumSettings(low=0.6, high=0.4)
    with pytest.raises(ValidationError, match="skip"):
        CurriculumSettings(skip=1.0)  # 1 would starve a task for ever
    raw = {"model": "m", "out": "o", "steps": 1, "train": {"a": {"tasks": "t"}}}
    with pytest.raises(ValidationError, match=r"curriculum\.skp"):
        TrainConfig.model_validate({**raw, "curriculum": {"skp": 0.5}})
    assert not TrainConfig.model_validate(raw).curriculum.enabled  # off by default


def test_by_tags_the_tasks_of_a_source_with_the_same_tags_share_one_record() -> None:
    records: dict[str, TaskRecord] = {}
    pooled = Curriculum(CurriculumSettings(enabled=True, by="tags"), records)
    a = MathTask(id="a", prompt="1 + 1?", answer="2", tags=["sum", "easy"])
    b = MathTask(id="b", prompt="2 + 2?", answer="4", tags=["easy", "sum", "easy"])
    c = MathTask(id="c", prompt="2 * 9?", answer="18", tags=["product", "easy"])
    bare = MathTask(id="d", prompt="3 - 1?", answer="2")
    assert pooled.key("m", a) == pooled.key("m", b) == "m#easy+sum"  # any order, repeats once
    assert pooled.key("m", c) == "m#easy+product" and pooled.key("other", a) == "other#easy+sum"
    assert pooled.key("m", bare) == "m#"  # without tags: its source's estimate
    pooled.update(pooled.key("m", a), successes=4, judged=4)
    assert pooled.band(pooled.key("m", b)) == "too_easy"  # b never played, a's record speaks
    assert pooled.band(pooled.key("m", c)) == "unseen"
    alone = Curriculum(CurriculumSettings(enabled=True), records)  # by: task, the default
    assert alone.key("m", a) == task_key("m", "a") and alone.band(alone.key("m", b)) == "unseen"
    with pytest.raises(ValidationError, match="by"):
        CurriculumSettings(by="family")  # type: ignore[arg-type]


# -- the draw ----------------------------------------------------------------------------------


def math_set(count: int) -> TaskSet:
    tasks = [MathTask(id=f"t{i}", prompt=f"What is {i} + 1?", answer=str(i + 1))
             for i in range(count)]  # fmt: skip
    return TaskSet("m", tasks)  # type: ignore[arg-type]


def draws(mixer: TaskMixer, steps: int, curriculum: Curriculum | None) -> list[list[str]]:
    cursors: dict[str, tuple[int, int]] = {}
    return [
        [t.id for _, t in mixer.draw(step, ["m"], 3, cursors, curriculum)] for step in range(steps)
    ]


def test_without_records_out_of_band_the_draw_is_the_uniform_one() -> None:
    mixer = TaskMixer({"m": math_set(10)}, {"m": 1.0}, seed=4)
    records = {task_key("m", "t1"): TaskRecord(groups=1, success=0.5)}  # learnable, the rest unseen
    curriculum = Curriculum(CurriculumSettings(enabled=True), records)
    assert draws(mixer, 8, curriculum) == draws(mixer, 8, None)


def test_the_draw_defers_out_of_band_tasks_deterministically_and_reaches_every_task() -> None:
    mixer = TaskMixer({"m": math_set(10)}, {"m": 1.0}, seed=4)
    solved = {task_key("m", f"t{i}"): TaskRecord(groups=1, success=1.0) for i in range(8)}
    learnable = {task_key("m", f"t{i}"): TaskRecord(groups=1, success=0.5) for i in (8, 9)}
    curriculum = Curriculum(CurriculumSettings(enabled=True, skip=0.75), solved | learnable)
    steered = draws(mixer, 40, curriculum)
    assert steered == draws(mixer, 40, curriculum)  # a pure function of (seed, step, records)
    ids = [i for step in steered for i in step]
    assert len(ids) == 40 * 3
    share = sum(i in ("t8", "t9") for i in ids) / len(ids)
    # uniform: 2 of 10. Steered: per permutation, each of the 8 is kept with 1 - 0.75, so the
    # expected share is 2 / (2 + 8 x 0.25) = 0.5
    assert 0.35 < share < 0.65
    assert set(ids) == {f"t{i}" for i in range(10)}  # deferred, never starved
    uniform = [i for step in draws(mixer, 40, None) for i in step]
    assert sum(i in ("t8", "t9") for i in uniform) / len(uniform) == pytest.approx(0.2)


def test_by_tags_a_task_never_drawn_is_deferred_when_its_family_is_out_of_band() -> None:
    """One pass over a large set: no task comes back, so per-task records leave every draw
    unseen (uniform), while a record per family defers the unseen members of a solved one."""
    tasks = [MathTask(id=f"t{i}", prompt=f"What is {i} + 1?", answer=str(i + 1),
                      tags=["solved" if i % 5 else "learnable"]) for i in range(400)]  # fmt: skip
    mixer = TaskMixer({"m": TaskSet("m", tasks)}, {"m": 1.0}, seed=4)  # type: ignore[arg-type]
    records = {"m#solved": TaskRecord(groups=1, success=1.0),
               "m#learnable": TaskRecord(groups=1, success=0.5)}  # fmt: skip
    pooled = draws(mixer, 20, Curriculum(CurriculumSettings(enabled=True, by="tags"), records))
    per_task = draws(mixer, 20, Curriculum(CurriculumSettings(enabled=True), records))
    assert per_task == draws(mixer, 20, None)  # every task unseen: the uniform draw
    share = sum(int(i[1:]) % 5 == 0 for step in pooled for i in step) / 60
    # uniform: 1 in 5. Pooled: 1 / (1 + 4 x 0.25) = 0.5 expected
    assert 0.35 < share < 0.65
    assert len({i for step in pooled for i in step}) == 60  # still one pass: no task twice


def test_when_every_task_is_out_of_band_the_draw_still_fills_its_slots() -> None:
    mixer = TaskMixer({"m": math_set(4)}, {"m": 1.0}, seed=1)
    records = {task_key("m", f"t{i}"): TaskRecord(groups=1, success=0.0) for i in range(4)}
    curriculum = Curriculum(CurriculumSettings(enabled=True, skip=0.9), records)
    ids = [i for step in draws(mixer, 30, curriculum) for i in step]
    assert len(ids) == 90 and set(ids) == {"t0", "t1", "t2", "t3"}


def test_the_records_survive_a_checkpoints_json_and_draw_the_same() -> None:
    mixer = TaskMixer({"m": math_set(10)}, {"m": 1.0}, seed=4)
    state = LoopState(curriculum={task_key("m", f"t{i}"): TaskRecord(groups=i, success=i / 9)
                                  for i in range(10)})  # fmt: skip
    saved = json.loads(json.dumps(state.model_dump(mode="json")))
    loaded = LoopState.model_validate(saved)
    assert loaded.curriculum == state.curriculum
    settings = CurriculumSettings(enabled=True)
    assert draws(mixer, 20, Curriculum(settings, loaded.curriculum)) == draws(
        mixer, 20, Curriculum(settings, state.curriculum)
    )
    assert LoopState.model_validate({"step": 3}).curriculum == {}  # a checkpoint from before


# -- in the loop -------------------------------------------------------------------------------


def test_a_sigkilled_run_with_the_curriculum_resumes_to_the_same_draws_and_weights(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Four tasks over three updates of two groups: tasks come back, so the records steer the
    draws after the first update, and the resumed run must read them from its checkpoint."""
    extra = {
        "train": {"add": {"tasks": str(tmp_path / "add.jsonl"), "limit": 4}},
        "curriculum": {"enabled": True, "skip": 0.5},
    }
    straight = tmp_path / "straight"
    done = run_child(loop_config(tmp_path, tiny_model_dir, straight, **extra), tmp_path / "a.json")
    assert done.returncode == 0, done.stderr[-3000:]
    killed = tmp_path / "killed"
    cfg = loop_config(tmp_path, tiny_model_dir, killed, **extra)
    first = run_child(cfg, tmp_path / "b.json", "--kill-after", "3")
    assert first.returncode == -9, first.stderr[-3000:]
    second = run_child(cfg, tmp_path / "b.json", "--resume")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "at step 2" in second.stderr

    assert_same_weights(straight, killed, tiny_model_dir)
    assert_same_store_and_logs(straight, killed)
    updates = [json.loads(line) for line in (killed / "metrics.jsonl").read_text().splitlines()]
    bands = [u["curriculum"] for u in updates]
    assert bands == [json.loads(line)["curriculum"]
                     for line in (straight / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    assert bands[0]["unseen"] == 1.0 and any(b["unseen"] < 1.0 for b in bands[1:])
    states = [json.loads((latest_checkpoint(r) / "state.json").read_text())  # type: ignore[operator]
              for r in (straight, killed)]  # fmt: skip
    assert states[0]["curriculum"] == states[1]["curriculum"] != {}


QUESTION = re.compile(r"What is (\d+) \+ 1\?")
EASY, HARD = range(0, 2), range(2, 5)  # t0, t1 always solved; t2..t4 never; t5 sometimes


def starving_engine(model: Path) -> ScriptedEngine:
    """Answers t0-t1 right, t2-t4 wrong, and t5 right unless the sample's seed is a multiple
    of 3: only t5's groups can have unequal rewards. Task tI of a larger set plays as t(I mod 6)."""
    tokenizer = load_tokenizer(model)

    def respond(prompt: Prompt, seed: int) -> str:
        n = int(QUESTION.findall(tokenizer.decode(prompt.token_ids or []))[-1])
        i = n % 6
        value = n + 1 + (i in HARD or (i not in EASY and seed % 3 == 0))
        return f'<tool_call>{{"name": "answer", "arguments": {{"value": "{value}"}}}}</tool_call>'

    return ScriptedEngine(respond, tokenizer=tokenizer, by_seed=True)


def starving_updates(
    tmp_path: Path, model: Path, name: str, count: int = 6, **settings: Any
) -> list[dict[str, Any]]:
    """12 updates of 2 groups of 4 played by `starving_engine` on `count` tasks (task tI tagged
    with its kind, I mod 6), with `settings` (curriculum, refill) over the run's config; its
    metrics.jsonl lines."""
    tasks = tmp_path / f"tasks-{count}.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "domain": "math",
                                         "prompt": f"What is {i} + 1?", "answer": str(i + 1),
                                         "tags": [f"kind{i % 6}"]})
                             + "\n" for i in range(count)))  # fmt: skip
    cfg = TrainConfig.model_validate({
        "model": str(model), "out": str(tmp_path / name), "seed": 5,
        "train": {"mix": {"tasks": str(tasks)}}, "heldout": {},
        "steps": 12, "groups_per_step": 2, "n": 4,
        "learner": {"lr": 1e-3, "micro_batch_tokens": 2048},
        "agent": {"max_turns": 1, "max_new_tokens": 32, "system_prompt": ""},
        "eval": {"before": False}, "checkpoint": {"every": 12},
        "sandbox": {"pool_size": 1, "timeout_s": 20.0}, **settings,
    })  # fmt: skip
    asyncio.run(train(cfg, engine=starving_engine(model)))
    metrics = (tmp_path / name / "metrics.jsonl").read_text()
    return [json.loads(line) for line in metrics.splitlines()]


def signal_share(
    tmp_path: Path, model: Path, name: str, curriculum: dict[str, Any], count: int = 6
) -> float:
    """The share of the run's groups whose rewards were not all equal (`starving_updates`)."""
    updates = starving_updates(tmp_path, model, name, count, curriculum=curriculum)
    groups = float(sum(u["signal"]["groups"] for u in updates))
    assert groups == 12 * 2
    return 1 - float(sum(u["signal"]["zero_variance"] for u in updates)) / groups


def test_the_curriculum_raises_the_share_of_groups_with_signal_where_uniform_starves(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Of six tasks, five are always solved or never: drawn uniformly, about 1 group in 6 has
    unequal rewards. With the curriculum the five are deferred (kept 1 time in 4) once seen, so
    after the first epoch about 1 / (1 + 5 x 0.25) = 4 in 9 draws are the learnable task.
    Checked by hand: with `TaskMixer.draw` ignoring its curriculum (always the uniform order)
    both runs draw the same groups and the assertion fails (equal shares)."""
    uniform = signal_share(tmp_path, tiny_model_dir, "uniform", {"enabled": False})
    steered = signal_share(tmp_path, tiny_model_dir, "steered", {"enabled": True})
    assert uniform <= 0.25
    assert steered >= uniform + 0.1  # seen: 4 of 24 groups uniformly, 8 of 24 steered
    metrics = (tmp_path / "steered" / "metrics.jsonl").read_text()
    updates = [json.loads(line) for line in metrics.splitlines()]
    assert set(updates[0]["curriculum"]) == {"learnable", "too_easy", "too_hard", "unseen"}
    assert updates[0]["curriculum"]["unseen"] == 1.0
    late = updates[-4:]  # after the first epochs, most drawn tasks are learnable
    assert sum(u["curriculum"]["learnable"] for u in late) / 4 > 1 / 6
    uniform_updates = (tmp_path / "uniform" / "metrics.jsonl").read_text().splitlines()
    assert all(json.loads(line)["curriculum"] == {} for line in uniform_updates)

    # the report: the bands per update (4 series x 12 updates) and their means over the run
    page = build_report(tmp_path / "steered").read_text()
    assert 'id="chart-curriculum" data-marks="48"' in page
    learnable = sum(u["curriculum"]["learnable"] for u in updates) / 12
    assert f"the drawn tasks were on average {100 * learnable:.0f}% learnable, " in page
    assert "chart-curriculum" not in build_report(tmp_path / "uniform").read_text()


def test_by_tags_the_curriculum_raises_the_signal_in_one_pass_where_no_task_comes_back(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The same policy on 120 tasks of the six kinds above (tagged with their kind): 24 draws
    never repeat a task, so a per-task curriculum draws uniformly, while a record per tag set
    defers the solved and the hopeless kinds once one of each has been played. Checked by hand:
    with `Curriculum.key` always the task's own key, the `tags` run equals the uniform one and
    the assertion fails."""
    uniform = signal_share(tmp_path, tiny_model_dir, "uniform", {"enabled": False}, count=120)
    pooled = signal_share(
        tmp_path, tiny_model_dir, "pooled", {"enabled": True, "by": "tags"}, count=120
    )
    assert uniform <= 0.25
    assert pooled >= uniform + 0.1
    updates = [json.loads(line) for line in
               (tmp_path / "pooled" / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    assert updates[0]["curriculum"]["unseen"] == 1.0
    assert sum(u["curriculum"]["unseen"] for u in updates[-4:]) == 0.0  # every kind seen by then
