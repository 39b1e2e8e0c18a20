"""The strict run configuration: pydantic models, unknown keys are errors that name the key.

Covered: `SandboxConfig` (the sandbox section), loading YAML (`load_yaml_model`) with command-line
overrides in dotted form (`parse_overrides(["learner.lr=1e-5"])`), and validation whose errors name
the file, the key path and the allowed keys or values. Later layers define their sections beside
their code (the trainer's run config lives in `honing.trainer`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from honing.errors import ConfigError

# Sandbox cells per CPU by default: on the soak's mix (benchmarks/sandbox_soak.py), 2 cores ran
# 188 exec/s with 2 cells, ~230 with 3 and ~236 with 4 (quiet, 1 min each): a program that sleeps,
# waits out a time limit or leaves processes for the zygote to wait on idles its cell, not a core.
CELLS_PER_CPU = 2


def default_home() -> Path:
    """Where honing keeps caches and reports: $HONING_HOME, default ~/.cache/honing."""
    return Path(os.environ.get("HONING_HOME") or Path.home() / ".cache" / "honing")


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, values are validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SandboxRequire(StrictModel):
    """Protections a pool must have: without one it refuses to start, instead of warning and
    running with a weaker fallback (see docs/sandbox.md, "Enforcement")."""

    cgroup: bool = Field(
        False,
        description="Memory and process limits by a cgroup (v1, or a delegated v2 group); "
        "without one the pool would limit memory per process (RLIMIT_AS) and have no pids cgroup.",
    )
    seccomp: bool = Field(
        False, description="The syscall filter jobs run under (installed on x86_64 only)."
    )


class SandboxConfig(StrictModel):
    """How programs are executed; limits an `ExecRequest` leaves unset come from here."""

    isolation: Literal["bwrap", "none"] = Field(
        "bwrap",
        description="'bwrap': namespaces via bubblewrap (the default, and the only safe choice). "
        "'none': no isolation, for development where bubblewrap is missing; warns at every start.",
    )
    pool_size: int | None = Field(
        None,
        ge=1,
        description="Number of warm cells; default: two per CPU this process may use, so that a "
        "cell whose program sleeps or waits out a limit leaves its core to another (when every "
        "cell runs a CPU-bound program, each gets half a core: set the CPU count where programs "
        "run close to their time limit).",
    )
    runtime: str | None = Field(
        None, description="Named runtime from `honing sandbox runtime build`; default: stdlib only."
    )
    preload: list[str] = Field(
        default_factory=list,
        description="Modules each cell imports once at start (from its runtime), so executions "
        "find them warm instead of importing them every time.",
    )
    warm: str = Field(
        "",
        description="Python each cell runs once at start, after the preloads: what it defines is "
        "the module `honing_warm`, which executions may import (each gets its own copy at the "
        "fork: no execution sees another's changes). For state that is slow to make, such as a "
        "database instance.",
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
    require: SandboxRequire = Field(
        default_factory=SandboxRequire,
        description="Refuse to start without these protections ({cgroup: true, seccomp: true}) "
        "instead of warning and falling back.",
    )

    @property
    def size(self) -> int:
        return self.pool_size or CELLS_PER_CPU * (len(os.sched_getaffinity(0)) or 1)


M = TypeVar("M", bound=BaseModel)


def load_yaml_model(
    path: Path, model: type[M], overrides: dict[str, object] | Sequence[str] | None = None
) -> M:
    """Load `path` as `model`; errors name the file, the key path and what is allowed.
    `overrides`: `key.sub=value` strings (see `parse_overrides`) or an already nested mapping,
    merged over the file's values."""
    data = read_yaml_mapping(path)
    if overrides is not None and not isinstance(overrides, dict):
        overrides = parse_overrides(overrides)
    merge(data, overrides or {})
    return validate_model(model, data, source=str(path))


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """The YAML mapping in `path`, unvalidated; a ConfigError names the file when it cannot be
    read, is not YAML, or is not a mapping."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    return data


def parse_overrides(items: Sequence[str]) -> dict[str, object]:
    """`["learner.lr=1e-5", "tasks=[a, b]"]` -> `{"learner": {"lr": 1e-5}, "tasks": ["a", "b"]}`.
    Values are read as YAML (numbers, booleans, lists, null); anything else stays a string."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(
                f"override {item!r}: expected key=value, with a dotted key for nested sections "
                "(e.g. learner.lr=1e-5)"
            )
        try:
            value: object = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, str):  # PyYAML reads 1e-5 as a string (YAML 1.1)
            with contextlib.suppress(ValueError):
                value = float(value)
        node = out
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} was already given a value")
            node = child
        node[parts[-1]] = value
    return out


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Merge `overrides` into `base` in place, recursing into mappings present in both."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def validate_model(model: type[M], data: dict[str, object], source: str = "config") -> M:
    """Validate `data` as `model`, turning pydantic's error into one that names each key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":
                allowed = ", ".join(sorted(_fields_at(model, err["loc"][:-1])))
                lines.append(f"{source}: unknown key '{key}' (allowed: {allowed})")
            else:
                lines.append(f"{source}: key '{key}': {err['msg']}")
        raise ConfigError("\n".join(lines)) from exc


def _fields_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The keys (a field's alias where it has one) of the (nested) model section at `loc`, as far
    as it can be followed."""
    current: type[BaseModel] = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {f.alias or name: f for name, f in current.model_fields.items()}
        field = fields.get(part)
        if field is None:
            return []
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return []
        current = nested[0]
    return [f.alias or name for name, f in current.model_fields.items()]
