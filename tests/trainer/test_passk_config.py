"""Advantage passk in the config: passk_k below the group size, binary rewards (no risk
shaping), and the learner dispatching to honing.rl.passk_advantages with the configured k."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from honing.config import load_yaml_model
from honing.errors import ConfigError
from honing.rl import passk_advantages
from honing.trainer.config import LearnerConfig
from honing.trainer.learner import advantages
from honing.trainer.run_config import TrainConfig


def config_file(tmp_path: Path, **sections: Any) -> Path:
    values = {
        "out": str(tmp_path / "run"),
        "train": {"math": {"tasks": "synthetic-math", "count": 4, "seed": 1}},
        "steps": 1,
        **sections,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_passk_with_k_below_the_group_size_loads(tmp_path: Path) -> None:
    path = config_file(tmp_path, n=8, learner={"advantage": "passk", "passk_k": 7})
    config = load_yaml_model(path, TrainConfig)
    assert config.learner_config.advantage == "passk"
    assert config.learner_config.passk_k == 7
    assert LearnerConfig(advantage="passk").passk_k == 4


@pytest.mark.parametrize("k", [8, 9])
def test_passk_k_of_the_group_size_or_more_is_refused_naming_both(tmp_path: Path, k: int) -> None:
    path = config_file(tmp_path, n=8, learner={"advantage": "passk", "passk_k": k})
    with pytest.raises(ConfigError, match=rf"passk_k is {k} but the group size n is 8"):
        load_yaml_model(path, TrainConfig)


def test_passk_refuses_risk_shaped_rewards(tmp_path: Path) -> None:
    path = config_file(tmp_path, learner={"advantage": "passk"}, risk={"mode": "penalty"})
    with pytest.raises(ConfigError, match=r"passk needs binary rewards, and risk.mode 'penalty'"):
        load_yaml_model(path, TrainConfig)


def test_passk_k_without_advantage_passk_is_refused() -> None:
    with pytest.raises(ValueError, match=r"passk_k is 2, .* nothing with advantage 'grpo'"):
        LearnerConfig(passk_k=2)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        LearnerConfig(advantage="passk", passk_k=0)


def test_the_learner_dispatches_passk_with_its_k() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    out = advantages(LearnerConfig(advantage="passk", passk_k=2), rewards, group_ids)
    torch.testing.assert_close(out, passk_advantages(rewards, group_ids, k=2))
    # [1, 0, 0, 0] at k = 2: +1 and -1/3 (the six pairs: tests/rl/test_rl_passk.py)
    torch.testing.assert_close(out[:4], torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))
    assert not torch.equal(out, advantages(LearnerConfig(), rewards, group_ids))
