"""The settings behind `honing rollout`, one per flag, and the task-set shard both commands take.

    config = RolloutConfig(tasks="examples-math", model="default", out=Path("runs/x"),
                           agent=AgentConfig(sampling=SamplingParams(max_new_tokens=512)))
    taskset.shard(*config.shard) if config.shard else taskset

The sections are the owners' own models (`AgentConfig`, `SchedulerConfig`, `SandboxConfig`), so
no limit is restated here; the weights' dtype is `honing.precision.Dtype`. Not covered: Ray's
settings (`honing.rollout.ray.RayConfig`, which needs Ray installed) and running the rollout
(`honing.rollout.offline`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from honing.config import SandboxConfig, StrictModel
from honing.precision import Dtype
from honing.rollout.agent import AgentConfig
from honing.rollout.scheduler import SchedulerConfig


def parse_shard(text: str) -> tuple[int, int]:
    """`"I/N"` as `(I, N)`; a ValueError names the form expected."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit()):
        raise ValueError("expected I/N, e.g. 0/4")
    return int(index), int(count)


# Shard I of N, given as "I/N".
Shard = Annotated[
    tuple[int, int], BeforeValidator(lambda v: parse_shard(v) if isinstance(v, str) else v)
]


class RolloutConfig(StrictModel):
    """What `honing rollout` generates, with what and where it writes it."""

    tasks: str = Field(description="Task set: built-in name, path or fsspec URL.")
    model: str = Field(description="default, a model directory, or openai:URL[#MODEL].")
    out: Path = Field(description="Run directory: trajectories go to its store.")
    n: int = Field(1, ge=1, description="Samples per task (the group size).")
    limit: int | None = Field(None, ge=1, description="Only the first N tasks.")
    shard: Shard | None = Field(None, description="Only shard I/N of the tasks.")
    dtype: Dtype = Field("auto", description="Local models: the weights' dtype.")
    backend: Literal["local", "ray"] = Field(
        "local", description="local (one process) or ray (engine and sandbox workers as actors)."
    )
    agent: AgentConfig  # max_turns, and sampling: max_new_tokens, temperature, seed
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)  # engine_slots
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)  # isolation
