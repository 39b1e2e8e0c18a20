"""Code-repair tasks: deterministic, one token from the reference, and — in the real sandbox —
every starting solution.py fails its tests while every reference passes them."""

from __future__ import annotations

import difflib
import random
from pathlib import Path

import pytest

from honing.config import load_yaml_model
from honing.domains.code.generate import CODE_FAMILIES
from honing.domains.code.repair import (
    LINE_BUDGET,
    fails_a_case,
    generate_code_repair_tasks,
    mutations,
    source_of,
)
from honing.domains.code.task import CODE_SOLUTION, CodeTask
from honing.sandbox import SandboxPool
from honing.tasks import apply_quality_filter, load_tasks, tasks_from_rows
from honing.tasks.synthetic import as_taskset
from honing.trainer.run_config import TrainConfig
from honing.trainer.sources import load_source

SMALL = 24  # every family twice


def changed_lines(task: CodeTask) -> list[tuple[str, str]]:
    """(reference line, starter line) for each line the bug changed."""
    before = (task.reference or "").splitlines()
    after = task.files[CODE_SOLUTION].splitlines()
    assert len(before) == len(after)
    return [(b, a) for b, a in zip(before, after, strict=True) if b != a]


def test_same_seed_same_tasks_and_a_larger_n_extends_a_smaller() -> None:
    assert generate_code_repair_tasks(SMALL, 3) == generate_code_repair_tasks(SMALL, 3)
    assert generate_code_repair_tasks(SMALL + 5, 3)[:SMALL] == generate_code_repair_tasks(SMALL, 3)
    assert generate_code_repair_tasks(SMALL, 3) != generate_code_repair_tasks(SMALL, 4)
    assert generate_code_repair_tasks(0, 3) == []


def test_each_task_has_one_small_bug_in_a_file_to_fix() -> None:
    tasks = generate_code_repair_tasks(SMALL, 7)
    assert [t.id for t in tasks] == [f"synth-code-repair/7/{i}" for i in range(SMALL)]
    families = set()
    for task in tasks:
        assert task.domain == "code" and task.repair and list(task.files) == [CODE_SOLUTION]
        assert task.tags[:2] == ["synthetic", "repair"] and task.metadata["bug"] in task.tags
        assert f"Fix the bug in {CODE_SOLUTION}" in task.prompt
        assert f"`{task.entry_point}`" in task.prompt
        ((before, after),) = changed_lines(task)  # one line differs ...
        diff = [d for d in difflib.ndiff([before], [after]) if d.startswith("?")]
        assert diff, (before, after)  # ... by a token: the rest of the line is the same
        assert task.files[CODE_SOLUTION].startswith(f"def {task.entry_point}(")
        families.add(task.metadata["family"])
    assert len(families) == len(CODE_FAMILIES)
    assert as_taskset("repair", tasks).quarantined == []


def test_the_bugs_are_of_every_kind() -> None:
    kinds = {t.metadata["bug"] for t in generate_code_repair_tasks(120, 0)}
    assert kinds == {"off-by-one", "comparison", "operator", "name", "call"}


def test_mutations_change_one_token_and_skip_signs() -> None:
    source = "def f(xs):\n    return sorted(xs)[-2] + max(1, len(xs)) <= 3\n"
    changed = {m.apply(source).splitlines()[1].strip() for m in mutations(source)}
    assert changed == {
        "return sorted(xs)[-3] + max(1, len(xs)) <= 3",  # the index off by one, never -0
        "return sorted(xs)[-1] + max(1, len(xs)) <= 3",
        "return sorted(xs)[-2] - max(1, len(xs)) <= 3",  # a minus for the plus
        "return sorted(xs)[-2] + min(1, len(xs)) <= 3",
        "return sorted(xs)[-2] + max(2, len(xs)) <= 3",
        "return sorted(xs)[-2] + max(0, len(xs)) <= 3",
        "return sorted(xs)[-2] + max(1, len(xs)) < 3",
        "return sorted(xs)[-2] + max(1, len(xs)) <= 4",
        "return sorted(xs)[-2] + max(1, len(xs)) <= 2",
    }  # the sign of -2 is not turned into a plus; the `def` line is never changed


def test_a_change_that_never_ends_or_still_passes_is_not_a_bug() -> None:
    function = CODE_FAMILIES[-1](random.Random(0))  # collatz_steps: a loop to break
    correct = source_of(function)
    assert fails_a_case(correct, function) is False
    endless = correct.replace("3 * n + 1", "3 * n - 1")  # cycles: 5 → 14 → 7 → 20 → 10 → 5
    assert fails_a_case(endless, function) is None
    assert fails_a_case(correct.replace("count += 1", "count += 2"), function) is True
    assert fails_a_case(correct.replace("return count", "return 1 // 0"), function) is True
    assert LINE_BUDGET > 1000  # the references need fewer than this


def test_the_builtin_set_and_configured_sources() -> None:
    builtin = load_tasks("synthetic-code-repair")
    assert len(builtin.tasks) == 64 and builtin.quarantined == []
    assert builtin.tasks == generate_code_repair_tasks(64, 0, "heldout")  # as every synthetic set
    config = load_yaml_model(
        Path(__file__).parents[2] / "examples" / "code_repair.yaml", TrainConfig, []
    )
    source = config.train["repair"]
    assert [t.id for t in load_source("repair", source).tasks][:2] == [
        "synth-code-repair/21/0",
        "synth-code-repair/21/1",
    ]
    assert config.agent.max_turns >= 2  # look, then fix


async def test_every_starter_fails_and_every_reference_passes_in_the_sandbox(
    pool: SandboxPool,
) -> None:
    tasks = [*generate_code_repair_tasks(48, 0), *generate_code_repair_tasks(48, 1)]
    filtered, found = await apply_quality_filter(as_taskset("repair", tasks), pool)
    assert [(q.task_id, q.reason) for q in found.failed] == []
    assert found.unverified == [] and len(filtered.tasks) == len(tasks)


async def test_a_starter_that_passes_is_quarantined(pool: SandboxPool) -> None:
    task = generate_code_repair_tasks(1, 0)[0]
    fixed = task.model_copy(update={"id": "fixed", "files": {CODE_SOLUTION: task.reference or ""}})
    filtered, found = await apply_quality_filter(as_taskset("repair", [task, fixed]), pool)
    assert [q.reason for q in found.failed] == [
        f"the starting {CODE_SOLUTION} already passes its tests: nothing to fix"
    ]
    assert len(filtered.tasks) == 1


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../up.py", "a/../../b.py", "", "a\\b.py"], ids=repr
)
def test_files_must_stay_in_the_workspace(path: str) -> None:
    row = {
        "id": "c",
        "domain": "code",
        "prompt": "fix it",
        "entry_point": "f",
        "tests": "assert f() == 1",
        "files": {path: "x = 1\n"},
    }
    loaded = tasks_from_rows("t", iter([("t.jsonl", 1, row)]))
    assert loaded.tasks == []
    (quarantined,) = loaded.quarantined
    assert quarantined.field == "files" and "relative to the workspace" in quarantined.reason
