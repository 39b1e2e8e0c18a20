"""Held-out wordings of the tools, finance, structure and code-repair generators: about half of a
held-out set is worded as no training task is (tagged `phrasing-unseen`), those tasks' references
still pass their judge, and the training tasks are exactly what they were before the wordings
came."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence

import pytest

from honing.domains.code.repair import generate_code_repair_tasks
from honing.domains.code.task import CodeTask
from honing.domains.finance.generate import generate_finance_tasks
from honing.domains.structure.generate import generate_structure_tasks
from honing.domains.tools.generate import generate_tools_tasks
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask
from honing.tasks.quality import verify_references
from honing.tasks.synthetic import UNSEEN_TAG, Phrasings

GENERATORS: dict[str, Callable[[int, int, Phrasings], Sequence[AnyTask]]] = {
    "tools": generate_tools_tasks,
    "finance": generate_finance_tasks,
    "structure": generate_structure_tasks,
    "code-repair": generate_code_repair_tasks,
}
# sha256 of json.dumps([t.model_dump_json() for t in generate(512, seed, "train")]). They pin the
# training tasks as of the change that gave each generator held-out wordings (computed before
# it): recipes, tests and measured figures depend on them, so a change here is a new training
# set, not a refactor. Code repair's seeds are its recipes' (training 21, held-out 22, ...).
TRAIN_HASHES = {
    ("tools", 11): "0ecb40d6ff1391c71b7ec6825e16b266d96312ae0da979ea298a5a5e51f47b3e",
    ("tools", 12): "3a8d003f270ae1ecab0bd086aff591972540a039f235e3031b3c9fb5a18ba962",
    ("tools", 13): "cf32cc70754aec00c009ad9f8e38485c879bda6b72b7fa17e25c63edea27cb26",
    ("tools", 14): "e70f8d8c491ed060936937d765b8fd98295c58ece8e8c481e43eb2a78a91db6a",
    ("finance", 11): "bc8700e93d7b980bdeac8589ad6202990ea3ddc448aba45f923ae7171818a9c8",
    ("finance", 12): "d4edd997a203d5a5ce9a0666390c2cac0045657b31c9ed2e2319e3b75af97f79",
    ("finance", 13): "05a676fd6e7564d759539e7884ba8af7d9f3b55f61ede0ef5a2cd1d87e25d4d8",
    ("finance", 14): "2f685f1c59f4366632dd89e308788cb991511e03e1bca0c7fd2b9dfec1b538a0",
    ("structure", 11): "24b9dd747e26ca76cde643a2f54cf67fd27d3808b2fd412781163fc6b3b0810c",
    ("structure", 12): "4d460fe14bc1b69236f3c1370c045e989d1cfa1bf25239cf4da00cccc6f2182a",
    ("structure", 13): "517a5d205fd3a5c49a812524e18f0f6731cbf55ba1b211b055dfd3dd6103bae6",
    ("structure", 14): "ab4c129c4527cafbaf1350a7156f6af8e2fea5932b15e78d62894f4a766ee3f0",
    ("code-repair", 21): "2b76ae957d4e337184ca252645058f06ab83152177c6fd5f07fbd648f91b2405",
    ("code-repair", 22): "888764b6e1afc80a7dfa9f86ab87d4b5762e13118f4e9f2fac715ae38c903106",
    ("code-repair", 23): "3a95de82c9c49032ae0a906c98935778d6fc345f13bb105455b864777b6d3369",
    ("code-repair", 24): "26675a9ee7299f2d67f51fcf787d2a75fd7f6a0f531919f4245e30b0f2402e29",
}


def _family(task: AnyTask) -> str:
    """The problem family a task was drawn from (finance: its question, and what it computes)."""
    if task.domain == "finance":
        return " ".join(t for t in task.tags if t.startswith(("question:", "compute:")))
    return str(task.metadata["family"])


def _wording(prompt: str) -> str:
    """A prompt with its numbers blanked: the wording it was drawn from, names aside."""
    return re.sub(r"\d+", "N", prompt)


@pytest.mark.parametrize(("domain", "seed"), sorted(TRAIN_HASHES))
def test_the_training_tasks_are_those_pinned(domain: str, seed: int) -> None:
    tasks = GENERATORS[domain](512, seed, "train")
    dumped = json.dumps([t.model_dump_json() for t in tasks]).encode()
    assert hashlib.sha256(dumped).hexdigest() == TRAIN_HASHES[domain, seed]


@pytest.mark.parametrize("domain", list(GENERATORS))
def test_about_half_a_heldout_set_is_worded_as_no_training_task_is(domain: str) -> None:
    generate = GENERATORS[domain]
    train = generate(512, 11, "train")
    heldout = generate(64, 12, "heldout")
    unseen = [t for t in heldout if UNSEEN_TAG in t.tags]
    assert not any(UNSEEN_TAG in t.tags for t in train)
    assert not any(UNSEEN_TAG in t.tags for t in generate(64, 12, "train"))
    assert 0.25 * len(heldout) <= len(unseen) <= 0.75 * len(heldout), len(unseen)
    # every family has wordings of its own kept for held-out sets
    assert {_family(t) for t in unseen} == {_family(t) for t in train}
    worded = {(_family(t), _wording(t.prompt)) for t in train}
    assert not [t.id for t in unseen if (_family(t), _wording(t.prompt)) in worded]
    assert not {t.prompt for t in unseen} & {t.prompt for t in train}


def test_a_finance_heldout_set_has_the_documents_and_answers_of_the_training_one() -> None:
    train, heldout = generate_finance_tasks(24, 12), generate_finance_tasks(24, 12, "heldout")
    moved = [a.id for a, b in zip(train, heldout, strict=True) if a.prompt != b.prompt]
    assert moved == [t.id for t in heldout if UNSEEN_TAG in t.tags] and moved
    for a, b in zip(train, heldout, strict=True):
        assert a.model_dump(exclude={"prompt", "tags"}) == b.model_dump(exclude={"prompt", "tags"})


def test_a_code_repair_prompt_keeps_its_function_and_example_in_every_wording() -> None:
    tasks = generate_code_repair_tasks(48, 22, "heldout")
    assert any(UNSEEN_TAG in t.tags for t in tasks)
    for task in tasks:
        assert isinstance(task, CodeTask)
        call, expected = task.tests.splitlines()[0].removeprefix("assert ").split(" == ", 1)
        assert f"def {task.entry_point}(" in task.prompt and f"`{task.entry_point}`" in task.prompt
        assert call in task.prompt and expected in task.prompt, task.prompt


def test_an_unknown_phrasing_is_refused() -> None:
    for generate in GENERATORS.values():
        with pytest.raises(ValueError, match="phrasings must be one of"):
            generate(4, 0, "held-out")  # type: ignore[arg-type]


async def test_the_references_of_unseen_worded_tasks_pass_their_judge(pool: SandboxPool) -> None:
    tasks = [
        task
        for generate in GENERATORS.values()
        for task in [t for t in generate(32, 12, "heldout") if UNSEEN_TAG in t.tags][:4]
    ]
    assert len(tasks) == 4 * len(GENERATORS)
    found = await verify_references(tasks, pool)
    assert [t.id for t in found.passed] == [t.id for t in tasks], found.failed
