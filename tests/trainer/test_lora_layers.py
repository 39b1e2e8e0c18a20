"""LoRA on the top decoder layers only: adapters where asked, and merged weights only there."""

from __future__ import annotations

from pathlib import Path

import pytest

from honing.trainer.config import LearnerConfig, LoraSettings
from honing.trainer.learner import Learner


def test_top_layers_adapts_only_the_last_layers(tiny_model_dir: Path) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig(lora=LoraSettings(top_layers=1)))
    trained = [n for n, p in learner.model.named_parameters() if p.requires_grad]
    assert trained and all(".layers.1." in n for n in trained)
    merged = learner.weights()
    assert merged and all(n.startswith("model.layers.1.") for n in merged)


def test_more_top_layers_than_the_model_has_is_an_error(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="only 2 decoder layers"):
        Learner(tiny_model_dir, LearnerConfig(lora=LoraSettings(top_layers=3)))
