"""The settings behind `honing eval`, one per flag.

    config = EvalConfig(tasks="humaneval", policy="reference", k=4)
    config.model_policy         # False: a scripted policy (`make_policy(config.policy)`)

A policy is a built-in scripted one (`POLICIES`), `model:PATH` or `openai:URL[#MODEL]`. The
sampling settings of a model policy are None when not given: the model's saved agent settings
(`honing.rollout.saved_agent`) or the defaults fill them in, and `SamplingParams` validates them.
The weights' dtype is `honing.precision.Dtype`; the shard is `honing.rollout.config.Shard`.
`team` names a YAML file holding a team (`load_team_file`): the model is then evaluated alone and
as that team, on the same tasks with the same agent settings. The file's `models: {role: DIR}`
(what `honing export` writes for per-role adapters; DIR relative to the file) and `role_model`
(`--role-model ROLE=PATH`, relative to the working directory) give roles models of their own;
the other roles play the policy's model. `write_team_file` writes the format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, Field, field_validator

from honing.config import SandboxConfig, StrictModel, read_yaml_mapping, validate_model
from honing.errors import ConfigError
from honing.eval.policies import POLICIES
from honing.precision import Dtype
from honing.rollout.config import Shard
from honing.rollout.models import resolve_model
from honing.rollout.team import TeamConfig

MODEL_POLICIES = ("model:", "openai:")  # the prefixes of a policy an engine plays


def _role_equals_path(item: str) -> str:
    role, sep, path = item.partition("=")
    if not sep or not role.strip() or not path.strip():
        raise ValueError("expected ROLE=PATH (e.g. validator=exports/team/validator)")
    return item


RoleModel = Annotated[str, AfterValidator(_role_equals_path)]  # --role-model ROLE=PATH


class EvalConfig(StrictModel):
    """What `honing eval` evaluates, with which policy, how often and how."""

    tasks: str = Field(description="Task set: built-in name (humaneval), path or fsspec URL.")
    policy: str = Field(description="A built-in policy, model:PATH or openai:URL[#MODEL].")
    k: int = Field(1, ge=1, description="Episodes (samples) per task; pass@k up to k.")
    max_steps: int | None = Field(None, ge=1, description="Steps after which an episode ends.")
    episode_timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds the environment's steps may take in one episode (default: 300).",
    )
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
    role_model: list[RoleModel] = Field(
        default_factory=list,
        description="--team: ROLE=PATH, the model directory ROLE plays (over the team file's "
        "models:).",
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

    @property
    def role_models(self) -> dict[str, Path]:
        """`role_model` as role → path (a later flag for a role wins)."""
        pairs = (item.partition("=") for item in self.role_model)
        return {role.strip(): Path(path.strip()) for role, _, path in pairs}


class _RunTeam(StrictModel):
    """The `team:` block of a run config (the rest of it is not read), so that an error names
    the key as the run config spells it (`team.roles.0.kind`)."""

    team: TeamConfig


MODELS_KEY = "models"  # a team file's role → model directory (relative to the file)


@dataclass(frozen=True)
class TeamFile:
    """A team YAML (`load_team_file`): the team and the model directory of each role that has one
    of its own (the others play the policy's model)."""

    path: Path
    team: TeamConfig
    models: dict[str, Path]  # role → model directory (a file's: joined to its directory)


def load_team(path: Path) -> TeamConfig:
    """The team in the YAML file `path` (see `load_team_file`; its models are not read)."""
    return _read_team(path)[0]


def load_team_file(path: Path, role_models: Mapping[str, Path] | None = None) -> TeamFile:
    """The team in the YAML file `path`: a team config (`roles:`, `max_rounds:`, …) or a run
    config with a `team:` block (its other keys are not read), with an optional `models:` mapping
    of role names to model directories relative to the file. `role_models` (`--role-model`) add
    to or replace those. A ConfigError names the file, and the key when one is wrong: a role that
    is not in the team, a directory that does not exist or holds no model (an adapter too)."""
    team, models = _read_team(path)
    found: dict[str, Path] = {}
    for role, given in _models(path, models).items():
        where = f"{path}: {MODELS_KEY}.{role}"
        found[role] = _model_dir(team, role, path.parent / given, where)
    for role, given in (role_models or {}).items():
        found[role] = _model_dir(team, role, given, f"--role-model {role}={given}")
    return TeamFile(path, team, found)


def _read_team(path: Path) -> tuple[TeamConfig, Any]:
    """The team in `path`, and its `models:` as written (None without)."""
    data = read_yaml_mapping(path)
    models = data.pop(MODELS_KEY, None)
    if "team" in data:
        if not isinstance(data["team"], dict):
            raise ConfigError(
                f"{path}: team: expected a team's settings (roles:, max_rounds:, …), not "
                f"{data['team']!r}"
            )
        return validate_model(_RunTeam, {"team": data["team"]}, source=str(path)).team, models
    if "roles" not in data:
        raise ConfigError(
            f"{path}: no team in it: give a team config (roles:, max_rounds:, …) or a run "
            f"config with a team: block; its keys are {', '.join(map(str, data)) or 'none'}"
        )
    return validate_model(TeamConfig, data, source=str(path)), models


def _models(path: Path, models: Any) -> dict[str, Path]:
    if models is None:
        return {}
    if not isinstance(models, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in models.items()
    ):
        raise ConfigError(
            f"{path}: {MODELS_KEY}: expected a mapping of role names to model directories "
            f"(relative to the file), e.g. {{validator: validator}}; got {models!r}"
        )
    return {role: Path(directory) for role, directory in models.items()}


def _model_dir(team: TeamConfig, role: str, directory: Path, where: str) -> Path:
    """`directory`, checked to be a model directory that `role` of `team` can play."""
    roles = [r.role for r in team.roles]
    if role not in roles:
        raise ConfigError(
            f"{where}: the team has no role {role!r}; its roles: {', '.join(roles)} (a role's "
            "name, else its kind)"
        )
    if not directory.exists():
        raise ConfigError(
            f"{where}: {directory} does not exist: give the directory of the model this role plays"
        )
    try:
        return resolve_model(str(directory))
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from e


def write_team_file(path: Path, team: Mapping[str, Any], models: Mapping[str, str],
                    comment: str = "") -> None:  # fmt: skip
    """Write the team file `load_team_file` reads: `team:` (a team config's settings, as a run
    config holds them) and, when any, `models:` (role → directory relative to `path`), after
    `comment` (each line made a YAML comment)."""
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    body: dict[str, Any] = {"team": dict(team)}
    if models:
        body[MODELS_KEY] = dict(models)
    path.write_text(head + yaml.safe_dump(body, sort_keys=False))
