"""The structure domain end to end: the environment's tools and rewards on the real kernel in the
sandbox, the render's image in the tool result, and the quality filter quarantining a planted
bad reference (`honing eval` on its examples: tests/domains/test_new_domains_cli.py)."""

from __future__ import annotations

import json

import pytest

from honing.domains.structure.env import StructureEnv
from honing.domains.structure.generate import generate_structure_tasks
from honing.domains.structure.task import StructureTask
from honing.envs import Action, EnvConfig, FailureReason, ToolCall
from honing.envs.registry import make_env
from honing.sandbox import ExecRequest, ExecResult, SandboxPool
from honing.tasks import load_tasks, verify_references


def call(name: str, **arguments: object) -> Action:
    return Action(tool_calls=[ToolCall(id=name, name=name, arguments=arguments)])


def bracket() -> StructureTask:
    task = next(t for t in generate_structure_tasks(6, 3) if "family:bracket" in t.tags)
    return task


async def test_build_render_rollback_and_a_wrong_model_judged_per_constraint(
    pool: SandboxPool,
) -> None:
    task = bracket()
    env = make_env("structure", pool, EnvConfig(max_steps=8))
    assert isinstance(env, StructureEnv)
    await env.reset(task)
    scene = json.loads(json.dumps(task.target))  # a copy of the target: its reference, as a scene
    plate = scene["objects"][0]["children"][0]  # the plate without its holes

    first = await env.step(call("build", scene={"objects": [plate]}))
    assert first.components == {"well_formed": 1.0, "built": 1.0, "watertight": 1.0}
    assert "0 through-hole(s)" in first.observation.tool_results[0].content

    shown = await env.step(call("render", view="top"))
    text = shown.observation.tool_results[0].content
    assert "silhouette (top)" in text and "#" in text
    assert env.last_render is not None and env.last_render.startswith(b"\x89PNG\r\n\x1a\n")

    broken = await env.step(call("build", scene={"objects": [{"type": "box", "size": [1, -2, 3]}]}))
    assert broken.info.failure is FailureReason.TOOL_ERROR and broken.components["built"] == 0.0
    assert "objects[0]" in broken.observation.tool_results[0].content

    back = await env.step(call("rollback"))
    assert back.observation.tool_results[0].ok
    judged = await env.step(call("submit"))
    assert judged.done and judged.components["outcome"] == 0.0
    assert judged.info.failure is FailureReason.CHECKER_REJECTED
    assert judged.components["met:holes"] == 0.0 and judged.components["met:dims"] == 1.0
    assert 0.5 < judged.components["volume_iou"] < 1.0  # graded: the plate lacks only its holes
    assert "holes" in judged.observation.tool_results[0].content
    await env.close()


async def test_a_script_builds_the_same_model_as_its_scene(pool: SandboxPool) -> None:
    task = next(t for t in load_tasks("examples-structure").tasks if t.id.endswith("l-bracket"))
    assert task.reference is not None and "add(" in task.reference  # a script reference
    env = make_env("structure", pool, EnvConfig(max_steps=4))
    await env.reset(task)
    for action in env.reference_actions(task):
        result = await env.step(action)
    assert result.done and result.components["outcome"] == 1.0
    assert result.components["volume_iou"] == pytest.approx(1.0, abs=1e-3)
    await env.close()


async def test_the_quality_filter_quarantines_a_planted_bad_reference(pool: SandboxPool) -> None:
    tasks = generate_structure_tasks(6, 1)
    target = tasks[0].target
    wrong = json.loads(json.dumps(target))
    wrong["objects"] = [wrong["objects"][0]["children"][0]]  # the plate alone: holes missing
    planted = tasks[0].model_copy(update={"reference": json.dumps(wrong)})
    found = await verify_references([planted, *tasks[1:]], pool)
    assert [q.task_id for q in found.failed] == [planted.id]
    assert "holes" in found.failed[0].reason
    assert len(found.passed) == 5 and found.unverified == []


async def test_render_returns_its_png_as_the_tool_results_image(pool: SandboxPool) -> None:
    """The image of `render` travels in the tool result (JSON as base64); no other tool draws."""
    from honing.envs.base import StepResult

    env = make_env("structure", pool, EnvConfig(max_steps=8))
    await env.reset(bracket())
    built = await env.step(call("build", scene={"objects": [{"type": "box", "size": [4, 3, 2]}]}))
    assert built.observation.tool_results[0].images == []
    shown = await env.step(call("render", view="iso"))
    [result] = shown.observation.tool_results
    assert isinstance(env, StructureEnv) and result.images == [env.last_render]
    assert result.images[0].startswith(b"\x89PNG\r\n\x1a\n")
    assert "images" not in repr(result)  # bytes stay out of logs
    assert StepResult.model_validate_json(shown.model_dump_json()) == shown
    assert isinstance(shown.model_dump(mode="json")["observation"]["tool_results"][0]["images"][0],
                      str)  # fmt: skip
    await env.close()


async def test_a_scene_that_looks_wrong_fails_on_its_image(pool: SandboxPool) -> None:
    """A lit scene asks for its look: with the lights' own constraint left out, a light from
    another side still fails the task, on the rendered-image similarity."""
    task = next(t for t in load_tasks("examples-structure").tasks if t.id.endswith("lit-scene"))
    assert task.image_min is not None
    task = task.model_copy(update={"required": [c for c in task.required if c != "lights"]})
    scene = json.loads(json.dumps(task.target))  # a copy of the target: its reference, as a scene
    for light in scene["lights"]:
        x, y, z = light["direction"]
        light["direction"] = [-x, -y, -z]  # from below: the lit faces go dark
    env = make_env("structure", pool, EnvConfig(max_steps=4))
    await env.reset(task)
    await env.step(call("build", scene=scene))
    judged = await env.step(call("submit"))
    assert judged.components["outcome"] == 0.0 and judged.components["met:lights"] == 0.0
    assert "image similarity" in judged.observation.tool_results[0].content
    assert judged.components["met:iou"] == 1.0  # the geometry is right
    await env.close()


async def test_the_kernel_runs_risks_reach_the_call_that_caused_them(
    pool: SandboxPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the sandbox saw a kernel run do (here planted in its result, as the audit hook
    reports it) is the risk of the tool call that ran it, and of no other."""
    from honing import risk
    from honing.domains.structure.runtime import kernel_pool

    planted = risk.event("fs_write_outside", "open('/etc/passwd', 'w')")
    kernel = await kernel_pool(pool)
    real = kernel.run
    calls = {"n": 0}

    async def run(request: ExecRequest) -> ExecResult:
        result = await real(request)
        calls["n"] += 1
        if calls["n"] == 1:  # only the first kernel run: the build
            result.risks.append(planted)
        return result

    monkeypatch.setattr(kernel, "run", run)
    task = bracket()
    env = make_env("structure", pool, EnvConfig(max_steps=8))
    await env.reset(task)
    built = await env.step(call("build", scene=json.loads(json.dumps(task.target))))
    assert built.info.risks == [planted] and built.risk == 1.0
    assert built.reward == 0.0  # the cost is kept apart from the reward
    shown = await env.step(call("render"))
    assert shown.info.risks == [] and shown.risk == 0.0
    await env.close()
