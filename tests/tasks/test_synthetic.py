"""Synthetic task generators and bundled examples: deterministic, verified, solvable in the envs."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import re
from collections.abc import Callable, Sequence
from fractions import Fraction

import pytest

from honing.domains.code.generate import CODE_FAMILIES, generate_code_tasks
from honing.domains.code.task import CodeTask
from honing.domains.math.generate import MATH_FAMILIES, generate_math_tasks
from honing.domains.math.task import MathTask
from honing.domains.tools.env import UNITS, calendar, convert_units
from honing.domains.tools.generate import (
    TOOLS_FAMILIES,
    UNIT_FACTORS,
    WEEKDAYS,
    convert_exactly,
    decimal_text,
    generate_tools_tasks,
)
from honing.domains.tools.task import ToolsTask
from honing.envs.base import Action
from honing.envs.registry import make_env
from honing.eval.policies import NoopPolicy
from honing.sandbox import SandboxPool
from honing.tasks import apply_quality_filter, load_tasks
from honing.tasks.load import AnyTask
from honing.tasks.synthetic import UNSEEN_TAG, as_taskset

GENERATORS: dict[str, Callable[[int, int], Sequence[AnyTask]]] = {
    "code": generate_code_tasks,
    "math": generate_math_tasks,
    "tools": generate_tools_tasks,
}
FAMILY_COUNTS = {"code": len(CODE_FAMILIES), "math": len(MATH_FAMILIES),
                 "tools": len(TOOLS_FAMILIES)}  # fmt: skip
SMALL = 14  # at least one task of every family, in every domain
EXAMPLES = ("examples-code", "examples-math", "examples-tools")


def small_sets(seed: int = 5) -> list[AnyTask]:
    return [t for generate in GENERATORS.values() for t in generate(SMALL, seed)]


def bundled() -> list[AnyTask]:
    return [t for name in EXAMPLES for t in load_tasks(name).tasks]


@pytest.mark.parametrize("domain", list(GENERATORS))
def test_same_seed_same_tasks_and_a_larger_n_extends_a_smaller(domain: str) -> None:
    generate = GENERATORS[domain]
    assert generate(SMALL, 3) == generate(SMALL, 3)
    assert list(generate(SMALL + 5, 3))[:SMALL] == list(generate(SMALL, 3))
    assert generate(0, 3) == []
    with pytest.raises(ValueError, match="n must be >= 0"):
        generate(-1, 3)


@pytest.mark.parametrize("domain", list(GENERATORS))
def test_different_seeds_give_different_tasks(domain: str) -> None:
    first, second = GENERATORS[domain](SMALL, 0), GENERATORS[domain](SMALL, 1)
    assert [t.id for t in first] != [t.id for t in second]
    contents = [{t.model_dump_json(exclude={"id", "metadata"}) for t in s} for s in (first, second)]
    assert not contents[0] & contents[1]


@pytest.mark.parametrize("domain", list(GENERATORS))
def test_ids_tags_and_family_coverage(domain: str) -> None:
    tasks = GENERATORS[domain](SMALL, 7)
    assert [t.id for t in tasks] == [f"synth-{domain}/7/{i}" for i in range(SMALL)]
    families = set()
    for task in tasks:
        assert task.domain == domain and task.reference
        assert task.tags[0] == "synthetic"
        assert task.tags[-1] in ("easy", "medium", "hard")
        assert task.metadata["family"] in task.tags
        families.add(task.metadata["family"])
    assert len(families) == FAMILY_COUNTS[domain]  # families take turns
    assert as_taskset(domain, tasks).quarantined == []  # valid and distinct


def test_generated_tasks_have_their_domain_shape() -> None:
    for code in generate_code_tasks(SMALL, 2):
        assert isinstance(code, CodeTask)
        assert code.prompt.startswith(f"def {code.entry_point}(")
        assert code.reference is not None and code.reference.startswith(code.prompt)
        assert code.tests.count("assert ") >= 5
    for maths in generate_math_tasks(SMALL, 2):
        assert isinstance(maths, MathTask) and maths.reference == maths.answer
        assert maths.answer.lstrip("-").isdigit()
    products = [t for t in generate_math_tasks(64, 0) if "product" in t.tags]
    assert products  # the 3-digit × 2-digit products the default model gets wrong
    forbidding = 0
    for tools in generate_tools_tasks(64, 2):
        assert isinstance(tools, ToolsTask) and tools.answer is not None
        calls = json.loads(tools.reference or "")
        assert calls[-1] == {"name": "answer", "arguments": {"value": tools.answer}}
        assert tools.max_calls is not None and len(calls) <= tools.max_calls
        names = {f["name"] for f in tools.functions}
        assert {c["name"] for c in calls[:-1]} <= names - set(tools.forbidden_tools)
        assert set(tools.forbidden_tools) <= names
        forbidding += bool(tools.forbidden_tools)
    assert forbidding > 0


def test_units_are_the_environments() -> None:
    assert {d: set(t) for d, t in UNIT_FACTORS.items()} == {d: set(t) for d, t in UNITS.items()}


def test_exact_conversions_agree_with_the_environment() -> None:
    rng = random.Random(0)
    for _ in range(200):
        table = rng.choice(sorted(UNIT_FACTORS))
        from_unit, to_unit = rng.sample(sorted(UNIT_FACTORS[table]), 2)
        value = rng.randint(1, 5000)
        exact = convert_exactly(Fraction(value), from_unit, to_unit)
        assert float(exact) == pytest.approx(convert_units(value, from_unit, to_unit), rel=1e-12)
    for from_unit in "CFK":
        for to_unit in "CFK":
            exact = convert_exactly(Fraction(300), from_unit, to_unit)
            assert float(exact) == pytest.approx(convert_units(300, from_unit, to_unit), rel=1e-12)
    day = dt.date(2031, 2, 28)
    assert WEEKDAYS[day.weekday()] == calendar("weekday", day.isoformat())


def test_decimal_text() -> None:
    assert [decimal_text(Fraction(x)) for x in ("4.8", "1250", "-40", "310.15", "0.0625")] == [
        "4.8", "1250", "-40", "310.15", "0.0625"]  # fmt: skip
    with pytest.raises(ValueError, match="decimals"):
        decimal_text(Fraction(1, 3))


@pytest.mark.parametrize(
    ("name", "domain", "sizes"),
    [("synthetic-code", "code", (64,)), ("synthetic-math", "math", (64,)),
     ("synthetic-tools", "tools", (64,)), ("examples-code", "code", range(5, 9)),
     ("examples-math", "math", range(5, 9)), ("examples-tools", "tools", range(5, 9))],
)  # fmt: skip
def test_builtin_sets_load(name: str, domain: str, sizes: Sequence[int]) -> None:
    taskset = load_tasks(name)
    assert taskset.quarantined == []
    assert len(taskset.tasks) in sizes and {t.domain for t in taskset.tasks} == {domain}
    assert all(t.reference for t in taskset.tasks)
    assert load_tasks(name).version == taskset.version


def test_tools_examples_have_both_kinds() -> None:
    tasks = [t for t in load_tasks("examples-tools").tasks if isinstance(t, ToolsTask)]
    assert any(t.answer is None and t.expected_calls for t in tasks)  # BFCL-style
    executable = [t for t in tasks if t.answer is not None]
    assert len(executable) >= 3 and any(t.forbidden_tools for t in executable)


async def test_every_synthetic_and_bundled_reference_passes_its_verifier(
    pool: SandboxPool,
) -> None:
    builtins = [t for n in ("synthetic-code", "synthetic-math", "synthetic-tools")
                for t in load_tasks(n).tasks]  # fmt: skip
    taskset = as_taskset("all", [*builtins, *small_sets(), *bundled()])
    assert taskset.quarantined == []
    filtered, found = await apply_quality_filter(taskset, pool)
    assert [(q.task_id, q.reason) for q in filtered.quarantined] == []
    assert found.unverified == [] and found.without_reference == []
    assert len(filtered.tasks) == len(taskset.tasks)


async def solve_then_noop(pool: SandboxPool, task: AnyTask) -> None:
    env = make_env(task.domain, pool)
    try:
        await env.reset(task)
        outcome = None
        for action in env.reference_actions(task):
            assert not env.done, task.id
            result = await env.step(action)
            assert result.info.failure is None, (task.id, result.info.detail)
            outcome = result.components.get("outcome", outcome)
        assert env.done and outcome == 1.0, task.id

        await env.reset(task)
        result = await env.step(Action(content=NoopPolicy.MESSAGE))
        assert not result.info.infrastructure, task.id
        assert result.components.get("outcome", 0.0) == 0.0 and result.reward == 0.0, task.id
    finally:
        await env.close()


async def test_references_solve_every_task_in_its_environment_and_noop_fails(
    pool: SandboxPool,
) -> None:
    tasks = [*small_sets(), *bundled()]
    await asyncio.gather(*(solve_then_noop(pool, task) for task in tasks))


def _wording(prompt: str) -> str:
    """A prompt with its numbers blanked: the phrasing it was drawn from."""
    return re.sub(r"\d+", "N", prompt)


def test_a_heldout_set_is_half_worded_as_training_never_is() -> None:
    train = generate_math_tasks(700, 11)
    heldout = generate_math_tasks(700, 12, phrasings="heldout")
    seen = {_wording(t.prompt) for t in train}
    unseen = [t for t in heldout if UNSEEN_TAG in t.tags]
    assert not any(UNSEEN_TAG in t.tags for t in train)
    assert 0.4 < len(unseen) / len(heldout) < 0.6
    # every family has phrasings training never shows, and no training prompt uses one
    assert {t.metadata["family"] for t in unseen} == {t.metadata["family"] for t in train}
    assert not {_wording(t.prompt) for t in unseen} & seen
    # the rest of the held-out set is worded as training is (700 draws show every phrasing)
    assert {_wording(t.prompt) for t in heldout if UNSEEN_TAG not in t.tags} <= seen


def test_each_math_task_records_the_calculation_of_its_answer() -> None:
    for task in generate_math_tasks(70, 3, phrasings="heldout"):
        expression = str(task.metadata["expression"])
        assert re.fullmatch(r"[\d ()+\-*/%]+", expression), expression
        assert eval(expression) == int(task.answer), (task.prompt, expression)
        # its numbers are the prompt's numbers, whatever order the wording puts them in
        assert sorted(re.findall(r"\d+", expression)) == sorted(re.findall(r"\d+", task.prompt))
