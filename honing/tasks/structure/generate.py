"""Seeded structure tasks: parametric parts and scenes described exactly in words.

    generate_structure_tasks(n, seed)   brackets with holes, shelves, stairs, tables with a
                                        material, gears, lit scenes; tagged easy/medium/hard

Every dimension is a whole number of millimetres and every position is stated, so the words
determine the target; the reference is a script that builds it (`scene_script`). The same
`(n, seed)` gives the same tasks on any machine. Not covered: checking them (the quality
filter plays the references through the real environment).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from honing.tasks.structure.task import StructureTask
from honing.tasks.synthetic.common import generate

Json = dict[str, Any]
AXES = "Units are millimetres; x is width, y is depth, z is up."
IMAGE_MIN = 0.95  # the render similarity a scene whose look is asked for (colours, lights) needs


def _box(size: list[int], at: list[float] | None = None, **extra: Any) -> Json:
    node: Json = {"type": "box", "size": size}
    if at is not None and any(at):
        node["translate"] = at
    return {**node, **extra}


def scene_script(scene: Json) -> str:
    """A structure script (the kernel's script API) that builds `scene`: its materials, lights
    and one `add(...)` per object, each node's transforms in the order a node applies them
    (scale, rotate, translate)."""
    lines = [
        f"material({name!r}, {_num(spec['color'])})"
        for name, spec in scene.get("materials", {}).items()
    ]
    lines += [
        f"add_light({_num(light['direction'])}, {_num(light.get('intensity', 1.0))}, "
        f"{_num(light.get('color', [1, 1, 1]))})"
        for light in scene.get("lights", [])
    ]
    lines += [f"add({_expression(node)})" for node in scene["objects"]]
    return "\n".join(lines) + "\n"


def _num(value: Any) -> str:
    """A number or a list of numbers as Python source (whole floats as integers)."""
    if isinstance(value, list):
        return "[" + ", ".join(_num(v) for v in value) + "]"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _expression(node: Json) -> str:
    kind = node["type"]
    center = ", center=True" if node.get("center") else ""
    segments = f", segments={node['segments']}" if "segments" in node else ""
    if kind == "box":
        made = f"box({_num(node['size'])}{center})"
    elif kind in ("cylinder", "cone"):
        top = f", top_radius={_num(node['top_radius'])}" if "top_radius" in node else ""
        made = f"{kind}({_num(node['radius'])}, {_num(node['height'])}{top}{segments}{center})"
    elif kind == "sphere":
        made = f"sphere({_num(node['radius'])}{segments})"
    elif kind == "extrude":
        made = f"extrude({_num(node['points'])}, {_num(node['height'])}{center})"
    else:  # union, difference, intersection
        made = f"{kind}({', '.join(_expression(child) for child in node['children'])})"
    for transform in ("scale", "rotate", "translate"):
        if transform in node:
            made = f"{transform}({made}, {_num(node[transform])})"
    if "material" in node:
        made = f"set_material({made}, {node['material']!r})"
    return made


def _task(
    task_id: str, family: str, level: str, prompt: str, scene: Json, **extra: Any
) -> StructureTask:
    return StructureTask(
        id=task_id,
        prompt=f"{prompt} {AXES}",
        target=scene,
        reference=scene_script(scene),
        tags=[f"family:{family}", level],
        metadata={"family": family},
        **extra,
    )


def bracket(rng: random.Random, task_id: str, seed: int) -> StructureTask:
    holes = rng.choice([1, 2, 2, 3, 4])
    width, depth, thick = (
        rng.randrange(40, 101, 5),
        rng.randrange(20, 51, 5),
        rng.choice([4, 5, 6, 8]),
    )
    dia = rng.choice([4, 5, 6, 8])
    while dia >= depth - 4 or holes * (dia + 4) >= width:
        dia -= 1
    step = width / (holes + 1)
    xs = [round(step * (i + 1), 1) for i in range(holes)]
    cutters = [
        {
            "type": "cylinder",
            "radius": dia / 2,
            "height": thick + 2,
            "segments": 48,
            "translate": [x, depth / 2, -1],
        }
        for x in xs
    ]
    scene = {
        "objects": [{"type": "difference", "children": [_box([width, depth, thick]), *cutters]}]
    }
    where = ", ".join(f"x = {x:g}" for x in xs)
    prompt = (
        f"Model a flat mounting bracket: a plate {width} wide, {depth} deep and {thick} thick with "
        f"one corner at the origin, and {holes} round through-hole(s) of diameter {dia} going "
        f"straight down through it, centred at y = {depth / 2:g} and at {where}."
    )
    return _task(task_id, "bracket", "easy" if holes <= 2 else "medium", prompt, scene)


def stairs(rng: random.Random, task_id: str, seed: int) -> StructureTask:
    steps, run, rise, width = (
        rng.randint(3, 6),
        rng.choice([20, 25, 30]),
        rng.choice([15, 18, 20]),
        rng.randrange(60, 121, 10),
    )
    blocks = [_box([run, width, rise * (i + 1)], [run * i, 0, 0]) for i in range(steps)]
    scene = {"objects": [{"type": "union", "children": blocks}]}
    prompt = (
        f"Model a solid staircase of {steps} steps rising along +x, starting at the origin: each "
        f"step is {run} long (x), {width} wide (y) and {rise} higher than the one before, the "
        f"first step {rise} high; the steps form one solid resting on z = 0."
    )
    return _task(task_id, "stairs", "medium" if steps <= 4 else "hard", prompt, scene)


def shelf(rng: random.Random, task_id: str, seed: int) -> StructureTask:
    boards, width, depth = rng.randint(2, 4), rng.randrange(60, 121, 10), rng.randrange(20, 41, 5)
    thick, gap = rng.choice([4, 5, 6]), rng.choice([25, 30, 40])
    height = boards * thick + (boards - 1) * gap
    sides = [_box([thick, depth, height]), _box([thick, depth, height], [width - thick, 0, 0])]
    inner = width - 2 * thick
    shelves = [_box([inner, depth, thick], [thick, 0, i * (thick + gap)]) for i in range(boards)]
    scene = {"objects": [{"type": "union", "children": [*sides, *shelves]}]}
    prompt = (
        f"Model a bookshelf {width} wide, {depth} deep and {height} high, one corner at the "
        f"origin: two side panels {thick} thick (at x = 0 and x = {width - thick}) and {boards} "
        f"boards {thick} thick spanning between them, the lowest at z = 0 and each next one "
        f"{gap} above the top of the one below; all parts joined into one solid."
    )
    return _task(task_id, "shelf", "medium", prompt, scene)


def table(rng: random.Random, task_id: str, seed: int) -> StructureTask:
    width, depth, height = (
        rng.randrange(80, 161, 10),
        rng.randrange(50, 91, 10),
        rng.randrange(50, 81, 5),
    )
    top, leg = rng.choice([4, 5, 6]), rng.choice([5, 6, 8])
    name, color = rng.choice([("oak", [0.62, 0.45, 0.26]), ("walnut", [0.36, 0.24, 0.15]),
                              ("steel", [0.6, 0.62, 0.66])])  # fmt: skip
    legs = [
        _box([leg, leg, height - top], [x, y, 0])
        for x in (0, width - leg)
        for y in (0, depth - leg)
    ]
    parts = [_box([width, depth, top], [0, 0, height - top]), *legs]
    scene = {
        "objects": [{"type": "union", "children": parts, "material": name}],
        "materials": {name: {"color": color}},
    }
    rgb = ", ".join(f"{c:g}" for c in color)
    prompt = (
        f"Model a table {height} high: a top {width} wide, {depth} deep and {top} thick, and four "
        f"square legs {leg} x {leg} under its corners (flush with its edges) standing on z = 0, "
        f"one corner of the table at the origin; give the whole table a material named "
        f"'{name}' with colour RGB ({rgb})."
    )
    return _task(task_id, "table", "medium", prompt, scene, checks={"material_names": True},
                 image_min=IMAGE_MIN)  # fmt: skip


def gear(rng: random.Random, task_id: str, seed: int) -> StructureTask:
    teeth, radius, thick = (
        rng.choice([6, 8, 10, 12]),
        rng.randrange(20, 41, 5),
        rng.choice([6, 8, 10]),
    )
    tooth, bore = rng.choice([4, 5, 6]), rng.choice([4, 5, 6])
    body = {"type": "cylinder", "radius": radius, "height": thick, "segments": 96}
    cog = _box([tooth * 2, tooth, thick], [radius - tooth, -tooth / 2, 0])
    # each tooth placed along +x, then turned about the z axis (a node rotates before it moves)
    cogs = [
        {"type": "union", "children": [cog], "rotate": [0, 0, round(360 * i / teeth, 6)]}
        for i in range(teeth)
    ]
    hole = {"type": "cylinder", "radius": bore, "height": thick + 2, "segments": 48,
            "translate": [0, 0, -1]}  # fmt: skip
    wheel = {"type": "union", "children": [body, *cogs]}
    scene = {"objects": [{"type": "difference", "children": [wheel, hole]}]}
    prompt = (
        f"Model a spur gear lying flat on z = 0, centred on the z axis: a disc of radius {radius} "
        f"and thickness {thick}, with {teeth} rectangular teeth evenly spaced around it (the "
        f"first pointing along +x), each {tooth} wide and reaching {tooth} beyond the disc's rim "
        f"(a block {2 * tooth} long radially, from radius {radius - tooth} to {radius + tooth}), "
        f"and a round bore of radius {bore} through its centre."
    )
    return _task(task_id, "gear", "hard", prompt, scene, checks={"iou_min": 0.95})


def lit_scene(rng: random.Random, task_id: str, seed: int) -> StructureTask:
    size, base = rng.randrange(20, 41, 5), rng.randrange(60, 101, 10)
    lights = rng.sample([
        ([-1, 0, -1], "from +x, 45 degrees above"),
        ([1, 0, -1], "from -x, 45 degrees above"),
        ([0, 0, -1], "straight from above"),
        ([0, 1, -1], "from -y, 45 degrees above"),
    ], k=rng.choice([1, 2]))  # fmt: skip
    intensity = rng.choice([0.6, 0.8, 1.0])
    scene = {
        "objects": [
            _box([base, base, 5], material="floor"),
            _box([size, size, size], [(base - size) / 2, (base - size) / 2, 5], material="paint"),
        ],
        "materials": {"floor": {"color": [0.8, 0.8, 0.8]}, "paint": {"color": [0.8, 0.1, 0.1]}},
        "lights": [{"direction": d, "intensity": intensity, "color": [1, 1, 1]} for d, _ in lights],
    }
    said = " and ".join(f"one shining {text}" for _, text in lights)
    prompt = (
        f"Build a small lit scene: a floor slab {base} x {base} x 5 (corner at the origin, "
        f"material 'floor', colour RGB (0.8, 0.8, 0.8)) and a cube of side {size} resting on "
        f"its centre (material 'paint', colour RGB (0.8, 0.1, 0.1)); light it with "
        f"{len(lights)} white directional light(s) of intensity {intensity:g}: {said}."
    )
    return _task(task_id, "lit-scene", "hard", prompt, scene, checks={"material_names": True},
                 image_min=IMAGE_MIN)  # fmt: skip


FAMILIES: list[Callable[[random.Random, str, int], StructureTask]] = [
    bracket, stairs, shelf, table, gear, lit_scene,
]  # fmt: skip


def generate_structure_tasks(n: int, seed: int, phrasings: str = "train") -> list[StructureTask]:
    """`n` distinct tasks, the families in turn; `phrasings` is ignored (one wording)."""
    return generate("structure", n, seed, FAMILIES)
