"""The strict run configuration: pydantic models, unknown keys are errors that name the key.

Covered so far: `SandboxConfig`, the sandbox section. Later layers add their sections and the
top-level run config beside it. Load YAML through `load_yaml_model` so every error names the file
and the offending key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from honing.errors import ConfigError


def default_home() -> Path:
    """Where honing keeps caches and reports: $HONING_HOME, default ~/.cache/honing."""
    return Path(os.environ.get("HONING_HOME") or Path.home() / ".cache" / "honing")


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, values are validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SandboxConfig(StrictModel):
    """How programs are executed; limits an `ExecRequest` leaves unset come from here."""

    isolation: Literal["bwrap", "none"] = Field(
        "bwrap",
        description="'bwrap': namespaces via bubblewrap (the default, and the only safe choice). "
        "'none': no isolation, for development where bubblewrap is missing; warns at every start.",
    )
    pool_size: int | None = Field(
        None, ge=1, description="Number of warm cells; default: the CPUs this process may use."
    )
    runtime: str | None = Field(
        None, description="Named runtime from `honing sandbox runtime build`; default: stdlib only."
    )
    preload: list[str] = Field(
        default_factory=list,
        description="Modules each cell imports once at start (from its runtime), so executions "
        "find them warm instead of importing them every time.",
    )
    timeout_s: float = Field(10.0, gt=0, description="Wall-clock limit per execution.")
    cpu_s: float | None = Field(
        None, gt=0, description="CPU-time limit per process; default: wall-clock limit + 1 s."
    )
    memory_mb: int = Field(512, ge=16, description="Memory limit per execution, in MiB.")
    max_procs: int = Field(32, ge=1, description="Processes (and threads) one execution may run.")
    max_output_bytes: int = Field(
        1_000_000,
        ge=1,
        description="Bytes kept per stream (stdout, stderr); past it: output_limit.",
    )
    max_file_mb: int = Field(64, ge=1, description="Largest file an execution may write, in MiB.")
    tmp_mb: int = Field(64, ge=1, description="Size of the private /tmp (tmpfs) of each cell.")
    root: Path | None = Field(
        None,
        description="Where cells keep their workspaces; default: a fresh directory in $TMPDIR.",
    )

    @property
    def size(self) -> int:
        return self.pool_size or len(os.sched_getaffinity(0)) or 1


M = TypeVar("M", bound=BaseModel)


def load_yaml_model(path: Path, model: type[M], overrides: dict[str, object] | None = None) -> M:
    """Load `path` as `model`; errors name the file, the key path and what is allowed."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    data.update(overrides or {})
    return validate_model(model, data, source=str(path))


def validate_model(model: type[M], data: dict[str, object], source: str = "config") -> M:
    """Validate `data` as `model`, turning pydantic's error into one that names each key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":
                allowed = ", ".join(sorted(model.model_fields))
                lines.append(f"{source}: unknown key '{key}' (allowed: {allowed})")
            else:
                lines.append(f"{source}: key '{key}': {err['msg']}")
        raise ConfigError("\n".join(lines)) from exc
