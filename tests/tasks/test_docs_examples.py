"""docs/tasks.md's examples, one per domain, load and pass their own verifiers."""

from __future__ import annotations

import json
import re
from pathlib import Path

from honing.sandbox import SandboxPool
from honing.tasks import apply_quality_filter, tasks_from_rows

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"


async def test_every_documented_example_is_a_valid_verified_task(pool: SandboxPool) -> None:
    blocks = re.findall(r"```json\n(.*?)\n```", DOCS.read_text(), re.S)
    rows = [("docs/tasks.md", i, json.loads(block)) for i, block in enumerate(blocks, start=1)]
    taskset = tasks_from_rows("docs", iter(rows))
    assert taskset.quarantined == []
    assert sorted(t.domain for t in taskset.tasks) == ["code", "math", "sql", "tools"]
    filtered, found = await apply_quality_filter(taskset, pool)
    assert [q.reason for q in filtered.quarantined] == []
    assert len(found.passed) == 4 and not found.unverified
