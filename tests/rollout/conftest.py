"""The tiny model loaded for the rollout tests (`tiny_model_dir` and `smol_dir` are in the root
conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from honing.rollout.models import load_model, load_tokenizer


@pytest.fixture
def model(tiny_model_dir: Path) -> Any:
    """The tiny model, loaded fresh in fp32 (exact comparisons with HF's own forward)."""
    return load_model(tiny_model_dir, "float32")


@pytest.fixture
def tokenizer(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)
