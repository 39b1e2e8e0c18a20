"""Tasks: the typed record, loading from files/URLs/built-ins, versions, shards, quality filter.

Covered: the `code`, `math`, `tools` and `sql` domains' schemas; JSONL, Parquet and saved `datasets`
directories,
local or through fsspec; content versions; deterministic shards; validation, de-duplication and
reference verification with quarantine. Not covered here: environments that use tasks
(`honing.envs`) and the domains those add.
"""

from honing.tasks.load import Quarantined, TaskSet, load_tasks, read_rows, tasks_from_rows
from honing.tasks.quality import Verification, apply_quality_filter, verify_references
from honing.tasks.schema import (
    DOMAINS,
    AnswerRule,
    CodeTask,
    MathTask,
    SqlTask,
    Task,
    TaskBase,
    ToolsTask,
)
from honing.tasks.synthetic import (
    generate_code_repair_tasks,
    generate_code_tasks,
    generate_math_tasks,
    generate_sql_tasks,
    generate_tools_tasks,
)

__all__ = [
    "DOMAINS",
    "AnswerRule",
    "CodeTask",
    "MathTask",
    "Quarantined",
    "SqlTask",
    "Task",
    "TaskBase",
    "TaskSet",
    "ToolsTask",
    "Verification",
    "apply_quality_filter",
    "generate_code_repair_tasks",
    "generate_code_tasks",
    "generate_math_tasks",
    "generate_sql_tasks",
    "generate_tools_tasks",
    "load_tasks",
    "read_rows",
    "tasks_from_rows",
    "verify_references",
]
