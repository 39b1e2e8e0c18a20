"""A curriculum over training tasks: each task's success tracked across updates, and the draw
steered towards the band where the policy sometimes succeeds (where GRPO's groups have signal).

    curriculum = Curriculum(CurriculumSettings(enabled=True), state.curriculum)
    key = curriculum.key("math", task)   # the task's own record, or its tags' (`by: tags`)
    curriculum.update(key, successes=3, judged=4)   # a finished group
    curriculum.band(key)          # "unseen" | "too_easy" | "learnable" | "too_hard"
    curriculum.keep(key, rng)     # False: the draw defers this task (TaskMixer.draw)
    curriculum.occupancy(keys)    # the share of `keys` in each band: the curriculum/* scalars

A task's estimate is an exponential moving average of its groups' success rates over judged
episodes (an infrastructure failure never counts); its first group sets it. With `by: tags`
the tasks of a source that carry the same tags (a synthetic generator's family and difficulty)
share one record, so a task drawn for the first time already has an estimate: in one pass over a
large training set no task comes back, and a per-task estimate would leave every draw `unseen`.
A record (`TaskRecord`) is plain data, saved in checkpoints with the loop's state. Not covered:
which task is next (`honing.trainer.sources.TaskMixer`), the loop that feeds it
(`honing.trainer.loop`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from honing.config import StrictModel

Band = Literal["unseen", "too_easy", "learnable", "too_hard"]
Pooling = Literal["task", "tags"]
BANDS: tuple[Band, ...] = ("learnable", "too_easy", "too_hard", "unseen")


class CurriculumSettings(StrictModel):
    """Draw tasks from the band where the policy sometimes succeeds (the YAML key
    `curriculum`); docs/training.md, "Curriculum"."""

    enabled: bool = Field(False, description="Off: every task is drawn in its turn (uniform).")
    by: Pooling = Field(
        "task",
        description="What an estimate is kept for: `task`, each task alone (for a small "
        "training set that many updates revisit); `tags`, the tasks of a source with the same "
        "tags together (a generator's family and difficulty: for one pass over a large set, "
        "where no task is drawn twice). A task without tags then shares its source's estimate.",
    )
    low: float = Field(
        0.1,
        ge=0,
        le=1,
        description="A task whose estimated success is below this is too hard.",
    )
    high: float = Field(
        0.9,
        ge=0,
        le=1,
        description="A task whose estimated success is above this is too easy; between low "
        "and high (both included) it is learnable.",
    )
    ema: float = Field(
        0.5,
        gt=0,
        le=1,
        description="The weight of a task's newest group in its estimate: estimate <- "
        "(1 - ema) x estimate + ema x the group's success rate (1: the last group alone).",
    )
    skip: float = Field(
        0.75,
        ge=0,
        lt=1,
        description="The chance that the draw defers a too-easy or too-hard task to its "
        "source's next epoch when its turn comes; below 1, so every task is still drawn.",
    )

    @model_validator(mode="after")
    def _check(self) -> CurriculumSettings:
        if self.low > self.high:
            raise ValueError(f"curriculum.low ({self.low:g}) > curriculum.high ({self.high:g})")
        return self


class TaskRecord(BaseModel):
    """One task's outcomes so far: the groups that counted and the success estimate."""

    model_config = ConfigDict(extra="forbid")

    groups: int = 0  # groups with at least one judged episode
    success: float = 0.0  # the moving average of their success rates


class Tagged(Protocol):
    """What the curriculum reads of a task: its id and tags (every task record has both)."""

    @property
    def id(self) -> str: ...

    @property
    def tags(self) -> list[str]: ...


def task_key(source: str, task_id: str) -> str:
    """A task's key in the records: its source and id (two sources may share ids)."""
    return f"{source}/{task_id}"


def tags_key(source: str, tags: Sequence[str]) -> str:
    """The key that the tasks of `source` with these `tags` (in any order) share; `#` keeps it
    apart from every task key."""
    return f"{source}#{'+'.join(sorted(set(tags)))}"


class Curriculum:
    """The bands and draw decisions over `records` (the loop state's, updated in place)."""

    def __init__(self, settings: CurriculumSettings, records: dict[str, TaskRecord]) -> None:
        self.settings = settings
        self.records = records

    def key(self, source: str, task: Tagged) -> str:
        """The record `task` of `source` is estimated by: its own, or its tags' (`by`)."""
        if self.settings.by == "tags":
            return tags_key(source, task.tags)
        return task_key(source, task.id)

    def update(self, key: str, successes: int, judged: int) -> None:
        """A finished group of `key`: `successes` of its `judged` episodes succeeded (episodes
        the infrastructure failed are not judged); a group with none judged changes nothing."""
        if judged <= 0:
            return
        if not 0 <= successes <= judged:
            raise ValueError(f"{key}: {successes} successes of {judged} judged episodes")
        rate = successes / judged
        record = self.records.get(key)
        if record is None:
            self.records[key] = TaskRecord(groups=1, success=rate)
            return
        a = self.settings.ema
        record.success = (1 - a) * record.success + a * rate
        record.groups += 1

    def estimate(self, key: str) -> float | None:
        """The task's estimated success; None before any judged group."""
        record = self.records.get(key)
        return None if record is None else record.success

    def band(self, key: str) -> Band:
        estimate = self.estimate(key)
        if estimate is None:
            return "unseen"
        if estimate < self.settings.low:
            return "too_hard"
        if estimate > self.settings.high:
            return "too_easy"
        return "learnable"

    def keep(self, key: str, rng: random.Random) -> bool:
        """Whether the draw takes `key` in its turn: always when learnable or unseen, with
        probability 1 - skip otherwise (one number from `rng` then, none else)."""
        if self.band(key) in ("learnable", "unseen"):
            return True
        return rng.random() >= self.settings.skip

    def occupancy(self, keys: Sequence[str]) -> dict[Band, float]:
        """The share of `keys` in each band (all four; zeros when `keys` is empty)."""
        bands = [self.band(k) for k in keys]
        return {b: bands.count(b) / len(bands) if bands else 0.0 for b in BANDS}
