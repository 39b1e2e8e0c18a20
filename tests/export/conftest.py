"""Shared by the export/serve tests that run `honing train`: a small math task file and the base
of a tiny run's config (one domain, a random model that earns equal rewards), as fixtures that
return the functions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def _math_tasks(directory: Path, count: int) -> Path:
    """`count` addition tasks ("What is i + 2i?") as JSONL."""
    path = directory / "tasks.jsonl"
    rows = [{"id": f"m{i}", "domain": "math", "prompt": f"What is {i} + {2 * i}?",
             "answer": str(3 * i)} for i in range(1, count + 1)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _tiny_run_config(name: str, model: Path, tasks: Path, **settings: Any) -> dict[str, Any]:
    """Two updates of 2 groups × 2 on the first 4 tasks, held out on the rest. A random model's
    rewards are all equal (no gradient), so AdamW's decoupled weight decay is what moves the
    weights: the trained model always differs from the base."""
    return {
        "name": name,
        "model": str(model),
        "train": {"m": {"tasks": str(tasks), "limit": 4}},
        "heldout": {"m": {"tasks": str(tasks)}},
        "steps": 2,
        "groups_per_step": 2,
        "n": 2,
        "learner": {"lr": 1e-2, "weight_decay": 0.1, "dynamic_sampling": False},
        "sandbox": {"pool_size": 1, "timeout_s": 20.0},
        **settings,
    }


@pytest.fixture(scope="session")
def math_tasks() -> Callable[[Path, int], Path]:
    return _math_tasks


@pytest.fixture(scope="session")
def tiny_run_config() -> Callable[..., dict[str, Any]]:
    return _tiny_run_config
