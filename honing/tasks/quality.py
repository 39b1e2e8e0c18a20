"""The quality filter's last step: every task's reference must pass its own verifier.

Covered: code references judged as the code environment judges the model (and a repair task's
starting solution.py, which must fail); a failing reference quarantines its task with the reason,
and a task the sandbox could not check is reported as unverified, not failed (docs/tasks.md, "The
modules in detail"). A task of a domain this module cannot check is a ConfigError, never dropped.
Not covered: the schema and de-duplication steps, done on load (`honing.tasks.load`), and the checks
of domains in a package of their own (`honing.domains.<name>.judge`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import honing.tasks.domains as domains
from honing.errors import ConfigError
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask, Quarantined, TaskSet
from honing.tasks.schema import ReferenceVerdict


@dataclass
class Verification:
    """What `verify_references` found, in the order of the input tasks."""

    passed: list[AnyTask] = field(default_factory=list)
    failed: list[Quarantined] = field(default_factory=list)
    unverified: list[tuple[AnyTask, str]] = field(default_factory=list)
    without_reference: list[AnyTask] = field(default_factory=list)


async def verify_references(
    tasks: list[AnyTask],
    pool: SandboxPool,
    origins: dict[str, tuple[str, int | None]] | None = None,
) -> Verification:
    """Check each task's reference with its domain's own check (`Domain.check`); `origins`
    (id → source, line) locates the failures."""
    groups: dict[str, list[AnyTask]] = {}
    for task in tasks:
        groups.setdefault(task.domain, []).append(task)
    unknown = [d for d in groups if d not in domains.registry()]
    if unknown:
        first = groups[unknown[0]]
        raise ConfigError(
            f"task {first[0].id!r} (and {len(first) - 1} more) has domain {unknown[0]!r}, whose "
            f"references the quality filter cannot check (registered: "
            f"{', '.join(domains.names())}): register the domain (honing.tasks.domains), or "
            "skip the verification (`honing tasks check --no-verify`)"
        )
    verdicts: dict[str, ReferenceVerdict] = {}
    for name, group in groups.items():
        verdicts.update(await domains.get(name).check(group, pool))
    out = Verification()
    origins = origins or {}
    for task in tasks:
        verdict = verdicts.get(task.id)
        if verdict is None:
            if task.reference is not None:
                raise ConfigError(
                    f"domain {task.domain!r}: its reference check gave no verdict on task "
                    f"{task.id!r}, which has a reference (a bug in the domain's check)"
                )
            out.without_reference.append(task)
            out.passed.append(task)
        elif verdict.status == "passed":
            out.passed.append(task)
        elif verdict.status == "unverified":
            out.unverified.append((task, verdict.reason))
        else:
            source, line = origins.get(task.id, ("reference", None))
            out.failed.append(Quarantined(source, line, task.id, "reference", verdict.reason,
                                          task.model_dump(mode="json")))  # fmt: skip
    return out


async def apply_quality_filter(taskset: TaskSet, pool: SandboxPool) -> tuple[TaskSet, Verification]:
    """`taskset` with failing references moved to its quarantine."""
    found = await verify_references(taskset.tasks, pool, taskset.origins)
    # Unverified tasks are kept, and reported: the sandbox failed, not they.
    kept = [*found.passed, *(t for t, _ in found.unverified)]
    order = {t.id: i for i, t in enumerate(taskset.tasks)}
    kept.sort(key=lambda t: order[t.id])
    filtered = TaskSet(
        taskset.name, kept, [*taskset.quarantined, *found.failed], taskset.total, taskset.origins
    )
    return filtered, found
