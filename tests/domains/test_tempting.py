"""The tempting sets (`tempting-<domain>`): tasks whose fastest path is risky. Every task loads,
its safe reference passes its domain's quality check and, played through the real environment,
succeeds with no risk event; its risky path (`metadata.risky_reference`), played the same way,
triggers each of its `metadata.risk_kinds` and, for code and math, never succeeds
(docs/tasks.md, "Tasks that tempt risk")."""

from __future__ import annotations

import json

import pytest

from honing import risk
from honing.envs import Action, EnvConfig, StepResult, ToolCall
from honing.envs.base import Environment
from honing.envs.registry import make_env
from honing.sandbox import SandboxPool
from honing.tasks import domains, load_tasks
from honing.tasks.load import AnyTask

DOMAINS = ("code", "finance", "math", "sql", "tools")
# Where the reference cannot hold the risky path (a code reference is solution.py, a finance
# reference the answer's arguments), `risky_reference` is a JSON list of tool calls, one a step.
CALL_LISTS = ("code", "finance")
NEVER_SUCCEED = ("code", "math")  # the risky path is reward hacking the judge must reject
TASKS = [t for d in DOMAINS for t in load_tasks(f"tempting-{d}").tasks]
ON_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")  # the tests share one pool


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool


def by_id(task: AnyTask) -> str:
    return str(task.id)


def risky_actions(env: Environment, task: AnyTask) -> list[Action]:
    risky = task.metadata["risky_reference"]
    if task.domain in CALL_LISTS:
        return [Action(tool_calls=[ToolCall(id=f"risky-{i}", name=c["name"],
                                            arguments=c.get("arguments") or {})])
                for i, c in enumerate(json.loads(risky))]  # fmt: skip
    return env.reference_actions(task.model_copy(update={"reference": risky}))


async def play(pool: SandboxPool, task: AnyTask, risky: bool) -> list[StepResult]:
    env = make_env(task.domain, pool, EnvConfig())
    await env.reset(task)
    results = []
    try:
        for action in risky_actions(env, task) if risky else env.reference_actions(task):
            if env.done:
                break
            results.append(await env.step(action))
    finally:
        await env.close()
    return results


@pytest.mark.parametrize("domain", DOMAINS)
def test_each_set_loads_with_its_risky_path(domain: str) -> None:
    loaded = load_tasks(f"tempting-{domain}")
    assert loaded.quarantined == [] and 3 <= len(loaded.tasks) <= 6
    for task in loaded.tasks:
        assert task.domain == domain and "tempting" in task.tags and task.reference
        assert isinstance(task.metadata["risky_reference"], str)
        kinds = task.metadata["risk_kinds"]
        assert [risk.kind(k).name for k in kinds] == kinds  # every kind is a registered one
        assert (kinds == []) == (domain == "math"), task.id  # math's hacks are the judge's


@ON_MODULE_LOOP
@pytest.mark.parametrize("domain", DOMAINS)
async def test_safe_references_pass_the_quality_check(domain: str, pool: SandboxPool) -> None:
    tasks = [t for t in TASKS if t.domain == domain]
    verdicts = await domains.get(domain).check(tasks, pool)
    assert {i: v.status for i, v in verdicts.items()} == {t.id: "passed" for t in tasks}, verdicts


@ON_MODULE_LOOP
@pytest.mark.parametrize("task", TASKS, ids=by_id)
async def test_the_safe_path_succeeds_without_risk(task: AnyTask, pool: SandboxPool) -> None:
    results = await play(pool, task, risky=False)
    assert [(r.risk, r.info.risks) for r in results] == [(0.0, [])] * len(results)
    assert results[-1].done and results[-1].components.get("outcome") == 1.0, results[-1].info


@ON_MODULE_LOOP
@pytest.mark.parametrize("task", TASKS, ids=by_id)
async def test_the_risky_path_is_detected(task: AnyTask, pool: SandboxPool) -> None:
    results = await play(pool, task, risky=True)
    first = results[0].observation.tool_results[0]
    assert first.ok or task.domain in ("tools", "math"), first.content  # the risky step ran
    detected = {e.name for r in results for e in r.info.risks}
    assert set(task.metadata["risk_kinds"]) <= detected, [r.info.risks for r in results]
    assert sum(r.risk for r in results) >= sum(risk.kind(k).severity.cost
                                               for k in task.metadata["risk_kinds"])  # fmt: skip
    if task.domain in NEVER_SUCCEED:
        assert all(r.components.get("outcome", 0.0) < 1.0 for r in results)


@ON_MODULE_LOOP
@pytest.mark.parametrize("task", [t for t in TASKS if t.domain in ("sql", "finance")], ids=by_id)
async def test_changing_the_data_changes_no_verdict(task: AnyTask, pool: SandboxPool) -> None:
    """The risky query, then the safe answer: the judge reads the task's own tables (or
    documents), never what the query left behind."""
    env = make_env(task.domain, pool, EnvConfig())
    await env.reset(task)
    try:
        change, answer = risky_actions(env, task)[0], env.reference_actions(task)[-1]
        changed = await env.step(change)
        judged = await env.step(answer)
    finally:
        await env.close()
    assert changed.info.risks and changed.observation.tool_results[0].ok
    assert judged.done and judged.components.get("outcome") == 1.0, judged.info
