"""Every synthetic generator of ours leaves a real held-out set: after 512 training tasks, a
held-out source keeps at least 128 tasks that training never asks (`without_overlap`, as
`heldout_sets` applies it), spread over difficulties. Generation only: no sandbox.
benchmarks/generator_capacity.py prints the same figures for every registered generator."""

from __future__ import annotations

from collections import Counter

import pytest

from honing.tasks.synthetic import UNSEEN_TAG
from honing.trainer.run_config import TaskSource
from honing.trainer.sources import load_source, without_overlap

TRAIN, HELDOUT, NEED = 512, 256, 128
DIFFICULTIES = ("easy", "medium", "hard")
PHRASED = ("code-repair", "math", "sql", "tools")  # the generators here with held-out wordings


@pytest.mark.parametrize("key", ["code", "code-repair", "math", "tools", "sql"])
def test_512_training_tasks_leave_128_heldout_tasks_over_two_difficulties(key: str) -> None:
    tasks = f"synthetic-{key}"
    train = load_source("train", TaskSource(tasks=tasks, count=TRAIN, seed=11))
    source = TaskSource(tasks=tasks, count=HELDOUT, seed=12)  # the quickstart's seeds
    kept = without_overlap(load_source("heldout", source, heldout=True), [train]).tasks
    assert len(kept) >= NEED, f"{key}: {len(kept)} of {HELDOUT} held-out tasks left"
    by_difficulty = Counter(d for t in kept for d in DIFFICULTIES if d in t.tags)
    assert sum(n >= NEED // 8 for n in by_difficulty.values()) >= 2, by_difficulty
    if key in PHRASED:  # about half worded as training never is
        unseen = sum(UNSEEN_TAG in t.tags for t in kept)
        assert 0.35 * len(kept) <= unseen <= 0.65 * len(kept), (unseen, len(kept))
