"""A task set as loaded: its valid tasks, what was quarantined (with where and why), its content
version and its deterministic shards. Not covered: reading or validating rows
(`honing.tasks.load`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from honing.errors import ConfigError
from honing.tasks.schema import TaskBase

AnyTask = TaskBase  # a task of any registered domain (`honing.tasks.domains`)


@dataclass(frozen=True)
class Quarantined:
    """A row or task left out of a set, with where it came from and why."""

    source: str
    line: int | None  # 1-based line of a JSONL file, or row of a Parquet/Arrow table
    task_id: str | None
    field: str | None
    reason: str
    row: Any = None  # the raw row, so nothing is lost

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source

    def to_json_dict(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line, "task_id": self.task_id,
                "field": self.field, "reason": self.reason, "row": self.row}  # fmt: skip


@dataclass
class TaskSet:
    """Valid tasks of one source, what was quarantined, and how many rows were read."""

    name: str
    tasks: list[AnyTask]
    quarantined: list[Quarantined] = field(default_factory=list)
    total: int = 0
    origins: dict[str, tuple[str, int | None]] = field(default_factory=dict)  # id → source, line

    @property
    def version(self) -> str:
        return content_version(self.tasks)

    def shard(self, index: int, count: int) -> TaskSet:
        """The tasks whose id hashes to `index` of `count` shards: stable across runs and order."""
        if count < 1 or not 0 <= index < count:
            raise ConfigError(f"shard {index}/{count}: need 0 <= index < count")
        kept = [t for t in self.tasks if shard_of(t.id, count) == index]
        origins = {t.id: self.origins[t.id] for t in kept if t.id in self.origins}
        return TaskSet(f"{self.name}[{index}/{count}]", kept, [], len(kept), origins)


def shard_of(task_id: str, count: int) -> int:
    return int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big") % count


def content_version(tasks: list[AnyTask]) -> str:
    h = hashlib.sha256()
    for task in sorted(tasks, key=lambda t: t.id):
        h.update(json.dumps(task.model_dump(mode="json"), sort_keys=True).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]
