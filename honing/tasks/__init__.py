"""Tasks: the typed record, loading from files/URLs/built-ins, versions, shards, quality filter.

Covered: the domain registry (`honing.tasks.domains`) and the task base record; JSONL,
Parquet and saved `datasets` directories, local or through fsspec; content versions;
deterministic shards; validation, de-duplication and reference verification with quarantine.
Not covered here: environments (`honing.envs`) and the domain modules that register them
(`honing.domains`).
"""

from honing.tasks.load import Quarantined, TaskSet, load_tasks, read_rows, tasks_from_rows
from honing.tasks.quality import Verification, apply_quality_filter, verify_references
from honing.tasks.schema import TaskBase

__all__ = [
    "Quarantined",
    "TaskBase",
    "TaskSet",
    "Verification",
    "apply_quality_filter",
    "load_tasks",
    "read_rows",
    "tasks_from_rows",
    "verify_references",
]
