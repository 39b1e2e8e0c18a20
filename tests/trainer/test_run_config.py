"""The run config owns the settings one section takes from another: `env.max_steps` is
`agent.max_turns` and `learner.temperature` is `agent.temperature`; setting either to something
else is an error naming both keys, never a silent override."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from honing.config import load_yaml_model
from honing.errors import ConfigError
from honing.trainer.run_config import TrainConfig, load_saved


def config_file(tmp_path: Path, **sections: Any) -> Path:
    values = {
        "out": str(tmp_path / "run"),
        "train": {"math": {"tasks": "synthetic-math", "count": 4, "seed": 1}},
        "steps": 1,
        "agent": {"max_turns": 3, "temperature": 0.7},
        **sections,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_the_environment_plays_agent_max_turns_steps(tmp_path: Path) -> None:
    config = load_yaml_model(config_file(tmp_path), TrainConfig)
    assert config.env_config.max_steps == 3
    assert config.env_config.step_timeout_s == config.env.step_timeout_s  # the rest is `env`'s
    # stating the same value is no conflict
    same = load_yaml_model(config_file(tmp_path, env={"max_steps": 3}), TrainConfig)
    assert same.env_config.max_steps == 3


def test_the_agents_generate_deadline_is_the_configs(tmp_path: Path) -> None:
    """A slow CPU's long turns need more than the default 600 s (the finance recipe's 32 rows
    of 2-3k tokens passed it: every episode an infrastructure failure)."""
    default = load_yaml_model(config_file(tmp_path), TrainConfig)
    assert default.agent_config(0.0, 0).deadlines.generate_s == 600.0
    path = config_file(tmp_path, agent={"max_turns": 3, "generate_timeout_s": 1800})
    config = load_yaml_model(path, TrainConfig)
    assert config.agent_config(0.7, 1).deadlines.generate_s == 1800.0
    with pytest.raises(ConfigError, match="generate_timeout_s"):
        load_yaml_model(config_file(tmp_path, agent={"generate_timeout_s": 0}), TrainConfig)


def test_a_conflicting_env_max_steps_is_an_error_naming_both_keys(tmp_path: Path) -> None:
    path = config_file(tmp_path, env={"max_steps": 8})
    with pytest.raises(ConfigError) as caught:
        load_yaml_model(path, TrainConfig)
    message = str(caught.value)
    assert "env.max_steps is 8 but agent.max_turns is 3" in message
    assert "set agent.max_turns" in message


def test_the_learner_scores_at_the_sampling_temperature(tmp_path: Path) -> None:
    config = load_yaml_model(config_file(tmp_path), TrainConfig)
    assert config.learner_config.temperature == 0.7
    assert config.learner_config.lr == config.learner.lr  # the rest is `learner`'s


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_learner_temperature_is_refused_even_when_it_agrees(
    tmp_path: Path, temperature: float
) -> None:
    path = config_file(tmp_path, learner={"temperature": temperature})
    with pytest.raises(ConfigError, match=r"learner.temperature is .* set agent.temperature"):
        load_yaml_model(path, TrainConfig)


def test_a_saved_config_loads_again_with_overrides(tmp_path: Path) -> None:
    config = load_yaml_model(config_file(tmp_path), TrainConfig)
    dumped = config.model_dump(mode="json")
    assert "max_steps" not in dumped["env"] and "temperature" not in dumped["learner"]
    saved = tmp_path / "saved.yaml"
    saved.write_text(yaml.safe_dump(dumped))
    assert load_yaml_model(saved, TrainConfig) == config
    resumed = load_saved(saved, ["agent.max_turns=5"])
    assert resumed.env_config.max_steps == 5


def test_a_config_saved_before_the_derivation_loads_as_it_played(tmp_path: Path) -> None:
    # runs saved earlier wrote EnvConfig's default max_steps and the learner's temperature
    path = config_file(tmp_path, env={"max_steps": 8}, learner={"temperature": 0.7, "lr": 1e-4})
    config = load_saved(path)
    assert (config.env_config.max_steps, config.learner_config.temperature) == (3, 0.7)
    assert config.learner.lr == 1e-4
    with pytest.raises(ConfigError, match=r"env\.max_steps is 6 but agent\.max_turns is 3"):
        load_saved(path, ["env.max_steps=6"])  # an override is the user's, and checked


def test_the_risk_section_reads_yaml_off_and_refuses_settings_that_do_nothing(
    tmp_path: Path,
) -> None:
    from honing.trainer.config import RiskSettings

    path = tmp_path / "risk.yaml"
    path.write_text("mode: off\n")  # YAML 1.1 reads a bare off as false
    assert RiskSettings.model_validate(yaml.safe_load(path.read_text())).mode == "off"
    with pytest.raises(ValueError, match="budget do nothing in risk mode 'penalty'"):
        RiskSettings.model_validate({"mode": "penalty", "budget": 0.2})
    assert RiskSettings.model_validate({"mode": "constrained", "budget": 0.2}).budget == 0.2


def test_a_policy_loss_typo_is_refused_naming_the_allowed_values(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"learner.policy_loss.*'ppo', 'gspo' or 'cispo'"):
        load_yaml_model(config_file(tmp_path, learner={"policy_loss": "gpso"}), TrainConfig)
    with pytest.raises(ConfigError, match="set aggregation: sequence"):
        load_yaml_model(config_file(tmp_path, learner={"policy_loss": "gspo"}), TrainConfig)
    gspo = {"policy_loss": "gspo", "aggregation": "sequence", "eps_low": 3e-4, "eps_high": 4e-4}
    config = load_yaml_model(config_file(tmp_path, learner=gspo), TrainConfig)
    assert config.learner.policy_loss == "gspo"
