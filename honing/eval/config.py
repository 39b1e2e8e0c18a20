"""The settings behind `honing eval`, one per flag.

    config = EvalConfig(tasks="humaneval", policy="reference", k=4)
    config.model_policy         # False: a scripted policy (`make_policy(config.policy)`)

A policy is a built-in scripted one (`POLICIES`), `model:PATH` or `openai:URL[#MODEL]`. The
sampling settings of a model policy are None when not given: the model's saved agent settings
(`honing.rollout.saved_agent`) or the defaults fill them in, and `SamplingParams` validates them.
The weights' dtype is `honing.precision.Dtype`; the shard is `honing.rollout.config.Shard`.
`team` names a YAML file holding a team (`load_team`): the model is then evaluated alone and as
that team, on the same tasks with the same agent settings.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from honing.config import SandboxConfig, StrictModel, read_yaml_mapping, validate_model
from honing.errors import ConfigError
from honing.eval.policies import POLICIES
from honing.precision import Dtype
from honing.rollout.config import Shard
from honing.rollout.team import TeamConfig

MODEL_POLICIES = ("model:", "openai:")  # the prefixes of a policy an engine plays


class EvalConfig(StrictModel):
    """What `honing eval` evaluates, with which policy, how often and how."""

    tasks: str = Field(description="Task set: built-in name (humaneval), path or fsspec URL.")
    policy: str = Field(description="A built-in policy, model:PATH or openai:URL[#MODEL].")
    k: int = Field(1, ge=1, description="Episodes (samples) per task; pass@k up to k.")
    max_steps: int | None = Field(None, ge=1, description="Steps after which an episode ends.")
    shard: Shard | None = Field(None, description="Only shard I/N of the tasks.")
    concurrency: int | None = Field(None, ge=1, description="Episodes at once.")
    max_new_tokens: int | None = Field(None, description="Model policies: tokens per turn.")
    system_prompt: str | None = Field(None, description="Model policies: the system prompt.")
    temperature: float | None = Field(None, description="Model policies: sampling temperature.")
    seed: int | None = Field(None, description="Model policies: sampling seed.")
    dtype: Dtype = Field("auto", description="model:PATH: the weights' dtype.")
    images: bool = Field(False, description="Model policies: show the tools' images.")
    team: Path | None = Field(
        None, description="Model policies: a team's YAML (`load_team`), evaluated beside it."
    )
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)  # isolation

    @field_validator("policy")
    @classmethod
    def _known(cls, policy: str) -> str:
        if policy in POLICIES or policy.startswith(MODEL_POLICIES):
            return policy
        raise ValueError(f"unknown; allowed: {', '.join(POLICIES)}, model:PATH, openai:URL")

    @property
    def model_policy(self) -> bool:
        """Whether an engine plays (model:PATH, openai:URL), not a scripted policy."""
        return self.policy.startswith(MODEL_POLICIES)


class _RunTeam(StrictModel):
    """The `team:` block of a run config (the rest of it is not read), so that an error names
    the key as the run config spells it (`team.roles.0.kind`)."""

    team: TeamConfig


def load_team(path: Path) -> TeamConfig:
    """The team in the YAML file `path`: a team config (`roles:`, `max_rounds:`, …) or a run
    config with a `team:` block (its other keys are not read). A ConfigError names the file, and
    the key when one is wrong."""
    data = read_yaml_mapping(path)
    if "team" in data:
        if not isinstance(data["team"], dict):
            raise ConfigError(
                f"{path}: team: expected a team's settings (roles:, max_rounds:, …), not "
                f"{data['team']!r}"
            )
        return validate_model(_RunTeam, {"team": data["team"]}, source=str(path)).team
    if "roles" not in data:
        raise ConfigError(
            f"{path}: no team in it: give a team config (roles:, max_rounds:, …) or a run "
            f"config with a team: block; its keys are {', '.join(map(str, data)) or 'none'}"
        )
    return validate_model(TeamConfig, data, source=str(path))
