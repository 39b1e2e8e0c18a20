"""The quality filter's last step: every task's reference must pass its own verifier.

Covered: code references judged as the code environment judges the model (and a repair task's
starting solution.py, which must fail); a failing reference quarantines its task with the reason,
and a task the sandbox could not check is reported as unverified, not failed (docs/tasks.md, "The
modules in detail"). A task of a domain this module cannot check is a ConfigError, never dropped.
Not covered: the schema and de-duplication steps, done on load (`honing.tasks.load`), and the checks
of domains in a package of their own (`honing.domains.<name>.judge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import honing.tasks.domains as domains
from honing.errors import ConfigError
from honing.sandbox import ExecResult, ExecStatus, SandboxPool
from honing.tasks.codecheck import JudgedRun, judged_run, run_files
from honing.tasks.load import AnyTask, Quarantined, TaskSet
from honing.tasks.schema import (
    CODE_SOLUTION,
    CodeTask,
    ReferenceVerdict,
)

CODE_TIMEOUT_S = 10.0


@dataclass
class Verification:
    """What `verify_references` found, in the order of the input tasks."""

    passed: list[AnyTask] = field(default_factory=list)
    failed: list[Quarantined] = field(default_factory=list)
    unverified: list[tuple[AnyTask, str]] = field(default_factory=list)
    without_reference: list[AnyTask] = field(default_factory=list)


def code_program(task: CodeTask, solution: str) -> str:
    """`solution`, the tests and `check(entry_point)` as one program (HumanEval's layout: the
    sandbox benchmark's load). Not a judge: a program that exits early passes it."""
    program = f"{solution}\n\n{task.tests}\n"
    if "def check(" in task.tests:
        program += f"\ncheck({task.entry_point})\n"
    return program


def _code_run(task: CodeTask, solution: str) -> JudgedRun:
    return judged_run(task, run_files(task, {CODE_SOLUTION: solution}), CODE_TIMEOUT_S)


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


def _verdict(reason: str | None) -> ReferenceVerdict:
    return ReferenceVerdict("passed") if reason is None else ReferenceVerdict("failed", reason)


async def check_code(tasks: Sequence[CodeTask], pool: SandboxPool) -> dict[str, ReferenceVerdict]:
    """Code: the reference judged as the environment judges the model; a repair task's starting
    solution.py must fail its tests (checked with or without a reference)."""
    code = [t for t in tasks if t.reference is not None]
    starters = [t for t in tasks if t.repair]
    runs = [
        *(_code_run(t, t.reference or "") for t in code),
        *(_code_run(t, t.files[CODE_SOLUTION]) for t in starters),
    ]
    results = await pool.run_many([r.request for r in runs])
    judged = [_judged(run, result) for run, result in zip(runs, results, strict=True)]
    by_id = dict(zip([t.id for t in code], judged[: len(code)], strict=True))
    starter_by_id = dict(zip([t.id for t in starters], judged[len(code) :], strict=True))
    out: dict[str, ReferenceVerdict] = {}
    for task in tasks:
        starter = starter_by_id.get(task.id)
        if starter is not None and starter[1] is None:
            passes = f"the starting {CODE_SOLUTION} already passes its tests: nothing to fix"
            out[task.id] = ReferenceVerdict("failed", passes)
        elif task.id in by_id:
            reference, reason = by_id[task.id]
            broken = [r for r in (reference, starter and starter[0])
                      if r is not None and r.status is ExecStatus.SANDBOX_ERROR]  # fmt: skip
            if broken:
                out[task.id] = ReferenceVerdict("unverified", f"sandbox error: {broken[0].error}")
            else:
                out[task.id] = _verdict(reason)
    return out


def _judged(run: JudgedRun, result: ExecResult) -> tuple[ExecResult, str | None]:
    """(the run, None) when the solution passed every test, else (the run, why not)."""
    if result.status is not ExecStatus.OK:
        last = (result.stderr.strip().splitlines() or [""])[-1]
        why = f"reference fails its tests ({result.status.value}): {last or result.error}"
        return result, why[:500]
    verdict = run.verdict(result)
    if verdict is None:
        return result, "reference fails its tests: the judge gave no verdict"
    if verdict.passed_all:
        return result, None
    why = "; ".join(verdict.tampering) if verdict.tampering else "; ".join(verdict.errors[:2])
    said = f"{verdict.passed}/{verdict.total} passed; " + ("tampering: " if verdict.tampering
                                                           else "first error: ")  # fmt: skip
    return result, f"reference fails its tests ({said}{why})"[:500]


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
