"""The structure domain: model a part or scene with typed operations or a script, look at it,
fix it, submit it; the submission is judged geometrically against the task's target.

Covered: `build(scene | script)`, `render(view)` (a text summary and a coarse silhouette for
text-only policies; the PNG is its image and `last_render`), `inspect`, `rollback` (to the last
scene that built as a closed solid), `submit` (the kernel's comparison: volume IoU, extents,
volume, holes, bodies, watertightness, materials, lights, each stated cut by position and size,
the surfaces' distance, and the image similarity when the task asks for it); process rewards
`built`, `watertight`, one `met:<constraint>` per constraint and `volume_iou` (the submission's
volume IoU with the target, a graded measure where `met:iou` is pass or fail).
Everything runs in the sandbox (`honing.domains.structure.runtime`). A script runs alone and
gives back only a scene, as data, which a fresh kernel run builds: what the script's run does
(an exit, a signal, a forged reply) is the model's failure, and the model's code never enters
the run that compares with the target. A failure of the sandbox or of the kernel on the task's
own target is infrastructure, never a verdict. Not covered: the kernel (`kernel.py`).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from honing.domains.structure.runtime import run_kernel_audited, run_script_audited, scene_problem
from honing.domains.structure.task import StructureTask
from honing.envs.base import (
    Action,
    CallOutcome,
    EnvConfig,
    Environment,
    FailureReason,
    StepOutput,
    ToolCall,
    malformed,
    tool_schema,
)
from honing.errors import SandboxError
from honing.risk import RiskEvent
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask

RENDER_SIZE = 256
VIEWS = ["iso", "front", "back", "left", "right", "top", "bottom"]
SCENE_HELP = (
    "A scene is {'objects': [node, ...], 'materials': {name: {'color': [r, g, b]}}, 'lights': "
    "[{'direction': [x, y, z], 'intensity': i, 'color': [r, g, b]}]}; a node is a primitive "
    "{'type': 'box', 'size': [x, y, z]} | {'type': 'cylinder'|'cone', 'radius', 'height'} | "
    "{'type': 'sphere', 'radius'} | {'type': 'extrude', 'points': [[x, y], ...], 'height'}, or "
    "a boolean {'type': 'union'|'difference'|'intersection', 'children': [...]}, each with "
    "optional 'translate', 'rotate' (degrees about x, y, z, applied before translate), 'scale', "
    "'material', 'name'. Primitives sit on z = 0 from the origin (cylinders around the z axis) "
    "unless 'center': true."
)
TOOLS = [
    tool_schema("build", "Build the model from a scene (JSON) or a Python script; replaces the "
                "current model. " + SCENE_HELP + " A script calls box(), cylinder(), cone(), "
                "sphere(), extrude(), union(), difference(), intersection(), translate(), "
                "rotate(), scale(), set_material(shape, name, color), add_light(direction, "
                "intensity) and add(shape) for each part of the scene (or sets result).",
                {"scene": {"type": "object"}, "script": {"type": "string"}}, []),
    tool_schema("render", "Render the current model; returns its summary and silhouette.",
                {"view": {"type": "string", "enum": VIEWS}}, []),
    tool_schema("inspect", "The current model's measurements: bounding box, volume, bodies, "
                "holes, watertightness, materials, lights.", {}, []),
    tool_schema("rollback", "Go back to the last model that built as a closed solid.", {}, []),
    tool_schema("submit", "Submit the current model; ends the episode.", {}, []),
]  # fmt: skip


def describe(summary: dict[str, Any]) -> str:
    """A model's summary as text (what a text-only policy sees)."""
    lo, hi = summary["bbox"]
    box = " x ".join(f"{v:g}" for v in summary["size"])
    corners = f"({', '.join(f'{v:g}' for v in lo)}) to ({', '.join(f'{v:g}' for v in hi)})"
    mats = ", ".join(summary["materials"]) or "none"
    closed = "closed solid" if summary["watertight"] else "NOT a closed solid"
    return (
        f"size {box} from {corners}; volume {summary['volume']:g}; "
        f"{summary['components']} body/bodies, {summary['holes']} through-hole(s), {closed}; "
        f"materials: {mats}; lights: {summary['lights']}"
    )


class StructureEnv(Environment):
    domain = "structure"

    def __init__(self, pool: SandboxPool, config: EnvConfig | None = None) -> None:
        super().__init__(pool, config)
        self._risks: list[RiskEvent] = []  # what the current call's kernel runs did

    @property
    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    async def _reset(self, task: AnyTask) -> None:
        assert self.state is not None
        self.scene: dict[str, Any] | None = None
        self.good: dict[str, Any] | None = None  # the last scene that built as a closed solid
        self.last_render: bytes | None = None
        self.state.constraints = ["Build the model, check it with render or inspect, then "
                                  "submit; only the submitted model is judged."]  # fmt: skip
        self.state.next_steps = ["build", "render", "submit"]

    def reference_actions(self, task: AnyTask) -> list[Action]:
        assert isinstance(task, StructureTask)
        reference = task.reference or json.dumps(task.target)
        try:
            build = {"scene": json.loads(reference)}
        except json.JSONDecodeError:
            build = {"script": reference}
        calls = [ToolCall(id="ref-build", name="build", arguments=build),
                 ToolCall(id="ref-submit", name="submit", arguments={})]  # fmt: skip
        return [Action(tool_calls=calls)]

    async def _save(self) -> Any:
        return self.scene, self.good

    async def _restore(self, saved: Any) -> None:
        self.scene, self.good = saved

    async def _step(self, action: Action) -> StepOutput:
        if not action.tool_calls:
            return malformed("no tool call: use build, render, inspect, rollback or submit")
        components, results, info = await self.run_calls(list(action.tool_calls), self._call)
        assert self.state is not None
        self.state.actions.append(
            "; ".join(f"{r.name}: {r.content.splitlines()[0][:70]}" for r in results)
        )
        return components, results, info

    async def _kernel(self, request: dict[str, Any]) -> dict[str, Any] | CallOutcome:
        """The kernel's reply, or the outcome that ends the call (an infrastructure failure).
        What the sandbox saw the run do that is risky goes to the call's outcome (`_call`)."""
        try:
            reply, risks = await run_kernel_audited(self.pool, request)
            self._risks.extend(risks)
        except SandboxError as exc:
            return CallOutcome(False, f"the model could not be processed: {exc}",
                               FailureReason.SANDBOX_ERROR)  # fmt: skip
        if reply.get("internal") or reply.get("failed") in ("target", "request"):
            return CallOutcome(False, f"structure kernel: {reply.get('error')}",
                               FailureReason.VERIFIER_CRASH)  # fmt: skip
        return reply

    async def _call(self, call: ToolCall) -> CallOutcome:
        self._risks = []
        try:
            outcome = await self._tool(call)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            # Only the kernel's replies are read unchecked, and no model code runs where they
            # are made: a reply that breaks this is the kernel's failure, never the model's.
            outcome = CallOutcome(False, f"structure kernel: a malformed reply ({exc!r})",
                                  FailureReason.VERIFIER_CRASH)  # fmt: skip
        outcome.risks.extend(self._risks)
        return outcome

    async def _tool(self, call: ToolCall) -> CallOutcome:
        name, args = call.name, call.arguments
        if name == "build":
            return await self._build(args)
        if name in ("render", "inspect", "submit") and self.scene is None:
            return CallOutcome(False, f"{name}: nothing is built yet; call build first",
                               FailureReason.TOOL_ERROR)  # fmt: skip
        if name == "render":
            view = args.get("view", "iso")
            if view not in VIEWS:
                return CallOutcome(False, f"render: view must be one of {', '.join(VIEWS)}",
                                   FailureReason.MALFORMED_ACTION)  # fmt: skip
            request = {"op": "render", "scene": self.scene, "size": RENDER_SIZE, "view": view}
            reply = await self._kernel(request)
            if isinstance(reply, CallOutcome):
                return reply
            self.last_render = base64.b64decode(reply["png_b64"])
            text = f"{describe(reply['summary'])}\nsilhouette ({view}):\n{reply['silhouette']}"
            return CallOutcome(True, text, images=[self.last_render])
        if name == "inspect":
            reply = await self._kernel({"op": "build", "scene": self.scene})
            if isinstance(reply, CallOutcome):
                return reply
            objects = reply["summary"].get("objects", [])
            parts = "; ".join(f"{o['name']}: volume {o['volume']:g}" for o in objects[:10])
            return CallOutcome(True, describe(reply["summary"]) + (f"\nparts: {parts}" if parts
                                                                   else ""))  # fmt: skip
        if name == "rollback":
            if self.good is None:
                return CallOutcome(False, "rollback: no closed solid was built yet",
                                   FailureReason.TOOL_ERROR)  # fmt: skip
            self.scene = self.good
            return CallOutcome(True, "back to the last closed solid")
        if name == "submit":
            return await self._submit()
        return CallOutcome(False, f"unknown tool {name!r}; available: build, render, inspect, "
                           "rollback, submit", FailureReason.UNKNOWN_TOOL)  # fmt: skip

    async def _build(self, args: dict[str, Any]) -> CallOutcome:
        scene, script = args.get("scene"), args.get("script")
        if (scene is None) == (script is None):
            return CallOutcome(False, "build: give exactly one of 'scene' (an object) or "
                               "'script' (a string)", FailureReason.MALFORMED_ACTION)  # fmt: skip
        if scene is not None and not isinstance(scene, dict):
            return CallOutcome(False, "build: 'scene' must be an object",
                               FailureReason.MALFORMED_ACTION)  # fmt: skip
        if script is not None and not isinstance(script, str):
            return CallOutcome(False, "build: 'script' must be a string",
                               FailureReason.MALFORMED_ACTION)  # fmt: skip
        printed, made_by = "", ""
        if script is not None:
            try:
                run = await run_script_audited(self.pool, script)
            except SandboxError as exc:
                return CallOutcome(False, f"the script could not be run: {exc}",
                                   FailureReason.SANDBOX_ERROR)  # fmt: skip
            self._risks.extend(run.risks)
            if run.scene is None:
                return CallOutcome(False, f"build failed: {run.error}", FailureReason.TOOL_ERROR,
                                   components={"built": 0.0})  # fmt: skip
            scene, printed, made_by = run.scene, run.printed.strip(), "the script made "
        problem = scene_problem(scene)
        if problem is not None:
            return CallOutcome(False, f"build: {problem}", FailureReason.MALFORMED_ACTION,
                               components={"built": 0.0})  # fmt: skip
        reply = await self._kernel({"op": "build", "scene": scene})
        if isinstance(reply, CallOutcome):
            return reply
        if not reply["ok"]:
            error = f"{made_by}an invalid scene: {reply['error']}" if made_by else reply["error"]
            return CallOutcome(False, f"build failed: {error}", FailureReason.TOOL_ERROR,
                               components={"built": 0.0})  # fmt: skip
        self.scene = scene
        closed = bool(reply["summary"]["watertight"])
        if closed:
            self.good = self.scene
        text = "built: " + describe(reply["summary"]) + (f"\nprinted: {printed[:500]}"
                                                          if printed else "")  # fmt: skip
        return CallOutcome(True, text, components={"built": 1.0, "watertight": float(closed)})

    async def _submit(self) -> CallOutcome:
        task = self.task
        assert isinstance(task, StructureTask)
        self.done = True
        request = {"op": "compare", "scene": self.scene, "target": task.target,
                   "checks": task.checks}  # fmt: skip
        reply = await self._kernel(request)
        if isinstance(reply, CallOutcome):
            return reply
        if not reply["ok"]:
            return CallOutcome(False, f"submit: {reply['error']}", FailureReason.CHECKER_REJECTED,
                               components={"outcome": 0.0})  # fmt: skip
        met = {c["name"]: bool(c["passed"]) for c in reply["constraints"]}
        unjudged = sorted(set(task.required) - set(met))
        if unjudged:
            return CallOutcome(False, f"structure kernel: no verdict on {unjudged}",
                               FailureReason.VERIFIER_CRASH)  # fmt: skip
        components = {f"met:{name}": float(ok) for name, ok in met.items()}
        components["volume_iou"] = min(1.0, max(0.0, float(reply["iou"])))
        failed = [c for c in reply["constraints"] if c["name"] in task.required and not c["passed"]]
        similarity = float(reply["image_similarity"])
        if task.image_min is not None and similarity < task.image_min:
            failed.append({"name": "image", "detail": f"image similarity {similarity:.3f}, "
                           f"need >= {task.image_min:g}"})  # fmt: skip
        components["outcome"] = 0.0 if failed else 1.0
        if failed:
            why = "; ".join(f"{c['name']}: {c['detail']}" for c in failed)
            return CallOutcome(False, f"does not match: {why}", FailureReason.CHECKER_REJECTED,
                               components=components)  # fmt: skip
        return CallOutcome(True, f"matches the target (volume IoU {reply['iou']:.3f})",
                           components=components)  # fmt: skip
