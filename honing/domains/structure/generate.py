"""Seeded structure tasks: parametric parts and scenes described exactly in words.

    generate_structure_tasks(n, seed)   brackets with holes, shelves, stairs, tables with a
                                        material, gears, lit scenes; tagged easy/medium/hard
    generate_structure_tasks(n, seed, phrasings="heldout")   about half described as training
                                        never does, tagged `UNSEEN_TAG`

Every dimension is a whole number of millimetres and every position is stated, so the words
determine the target; the reference is a script that builds it (`scene_script`). The same
`(n, seed)` gives the same tasks on any machine. Not covered: checking them (the quality
filter plays the references through the real environment).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from honing.domains.structure.task import StructureTask
from honing.tasks.synthetic.common import (
    UNSEEN_TAG,
    Phrasings,
    Wording,
    generate_phrased,
    phrase,
)

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
    task_id: str, family: str, level: str, worded: tuple[str, bool], scene: Json, **extra: Any
) -> StructureTask:
    """`worded`: the prompt and whether it is worded as training never is (`phrase`); a
    training prompt ends with `AXES`, a held-out one states units and axes its own way."""
    prompt, unseen = worded
    return StructureTask(
        id=task_id,
        prompt=prompt if unseen else f"{prompt} {AXES}",
        target=scene,
        reference=scene_script(scene),
        tags=[f"family:{family}", level] + ([UNSEEN_TAG] if unseen else []),
        metadata={"family": family},
        **extra,
    )


# Each family's wordings: the one training asks, and those only held-out sets ask (another
# order, register, or form of the same numbers: a radius for a diameter, totals for steps).
_BRACKET = Wording(
    seen="Model a flat mounting bracket: a plate {width} wide, {depth} deep and {thick} thick "
    "with one corner at the origin, and {holes} round through-hole(s) of diameter {dia} going "
    "straight down through it, centred at y = {y} and at {where}.",
    unseen=(
        "A mounting plate {thick} mm thick lies flat on z = 0, one corner at the origin, "
        "reaching {width} mm along x and {depth} mm along y. {holes} vertical hole(s) of radius "
        "{radius} mm pass right through it, centred at (x, y) = {points}. Millimetres "
        "throughout; z points up.",
        "Bracket plate, x by y by z: {width} by {depth} by {thick} (mm), a corner at the origin "
        "and z up. Through it, straight down, go {holes} round hole(s) {dia} across, on the "
        "line y = {y}, at {where}.",
    ),
)


def bracket(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> StructureTask:
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
    worded = phrase(
        rng, phrasings, _BRACKET, width=width, depth=depth, thick=thick, holes=holes, dia=dia,
        y=f"{depth / 2:g}", where=", ".join(f"x = {x:g}" for x in xs), radius=f"{dia / 2:g}",
        points=", ".join(f"({x:g}, {depth / 2:g})" for x in xs),
    )  # fmt: skip
    return _task(task_id, "bracket", "easy" if holes <= 2 else "medium", worded, scene)


_STAIRS = Wording(
    seen="Model a solid staircase of {steps} steps rising along +x, starting at the origin: "
    "each step is {run} long (x), {width} wide (y) and {rise} higher than the one before, the "
    "first step {rise} high; the steps form one solid resting on z = 0.",
    unseen=(
        "Build one solid flight of {steps} equal steps standing on z = 0: it starts at the "
        "origin, climbs towards +x over a total run of {length} to a total height of {height} "
        "at its top step, and is {width} wide in y. Each step is solid down to the floor. (mm; "
        "x along the flight, y across it, z up.)",
        "Staircase as a single solid: {steps} steps, each with a tread of {run} along +x and a "
        "riser of {rise}, {width} wide across y. The bottom step starts at the origin and every "
        "step is filled down to z = 0. Millimetres, z up.",
    ),
)


def stairs(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> StructureTask:
    steps, run, rise, width = (
        rng.randint(3, 6),
        rng.choice([20, 25, 30]),
        rng.choice([15, 18, 20]),
        rng.randrange(60, 121, 10),
    )
    blocks = [_box([run, width, rise * (i + 1)], [run * i, 0, 0]) for i in range(steps)]
    scene = {"objects": [{"type": "union", "children": blocks}]}
    worded = phrase(
        rng, phrasings, _STAIRS, steps=steps, run=run, rise=rise, width=width,
        length=steps * run, height=steps * rise,
    )  # fmt: skip
    return _task(task_id, "stairs", "medium" if steps <= 4 else "hard", worded, scene)


_SHELF = Wording(
    seen="Model a bookshelf {width} wide, {depth} deep and {height} high, one corner at the "
    "origin: two side panels {thick} thick (at x = 0 and x = {right}) and {boards} boards "
    "{thick} thick spanning between them, the lowest at z = 0 and each next one {gap} above "
    "the top of the one below; all parts joined into one solid.",
    unseen=(
        "Two upright panels, each {thick} x {depth} x {height} (x by y by z), stand on z = 0, "
        "one from x = 0 to x = {thick} and the other from x = {right} to x = {width}. Between "
        "them run {boards} horizontal boards, {thick} thick and {depth} deep, with their "
        "undersides at z = {levels}. Join everything into one solid bookshelf with a corner at "
        "the origin. (mm; x across, y deep, z up.)",
        "Bookshelf, one solid, corner at the origin, overall {width} x {depth} x {height} "
        "(width x depth x height, mm, z up): a side panel {thick} thick at each end in x, and "
        "between them {boards} shelves, also {thick} thick, the bottom one on the floor and a "
        "clear gap of {gap} between one shelf and the next.",
    ),
)


def shelf(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> StructureTask:
    boards, width, depth = rng.randint(2, 4), rng.randrange(60, 121, 10), rng.randrange(20, 41, 5)
    thick, gap = rng.choice([4, 5, 6]), rng.choice([25, 30, 40])
    height = boards * thick + (boards - 1) * gap
    sides = [_box([thick, depth, height]), _box([thick, depth, height], [width - thick, 0, 0])]
    inner = width - 2 * thick
    shelves = [_box([inner, depth, thick], [thick, 0, i * (thick + gap)]) for i in range(boards)]
    scene = {"objects": [{"type": "union", "children": [*sides, *shelves]}]}
    worded = phrase(
        rng, phrasings, _SHELF, width=width, depth=depth, height=height, thick=thick,
        right=width - thick, boards=boards, gap=gap,
        levels=", ".join(str(i * (thick + gap)) for i in range(boards)),
    )  # fmt: skip
    return _task(task_id, "shelf", "medium", worded, scene)


_TABLE = Wording(
    seen="Model a table {height} high: a top {width} wide, {depth} deep and {top} thick, and "
    "four square legs {leg} x {leg} under its corners (flush with its edges) standing on z = 0, "
    "one corner of the table at the origin; give the whole table a material named '{name}' "
    "with colour RGB ({rgb}).",
    unseen=(
        "Material first: define '{name}' with RGB colour ({rgb}) and use it for the whole "
        "table. The table stands on z = 0 with one corner at the origin; four square legs, "
        "{leg} x {leg} and {legs} tall, sit flush under the corners of the top, which is "
        "{width} x {depth} and {top} thick. (mm; x is width, y is depth, z up.)",
        "Make a table all in one material, '{name}' (RGB {rgb}): a {top}-thick tabletop "
        "measuring {width} along x and {depth} along y, its upper surface {height} above the "
        "floor at z = 0, carried by four {leg} x {leg} legs flush with its corners. One corner "
        "of the table is at the origin. Millimetres, z up.",
    ),
)


def table(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> StructureTask:
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
    worded = phrase(
        rng, phrasings, _TABLE, height=height, width=width, depth=depth, top=top, leg=leg,
        legs=height - top, name=name, rgb=", ".join(f"{c:g}" for c in color),
    )  # fmt: skip
    return _task(task_id, "table", "medium", worded, scene, checks={"material_names": True},
                 image_min=IMAGE_MIN)  # fmt: skip


_GEAR = Wording(
    seen="Model a spur gear lying flat on z = 0, centred on the z axis: a disc of radius "
    "{radius} and thickness {thick}, with {teeth} rectangular teeth evenly spaced around it "
    "(the first pointing along +x), each {tooth} wide and reaching {tooth} beyond the disc's "
    "rim (a block {block} long radially, from radius {inner} to {outer}), and a round bore of "
    "radius {bore} through its centre.",
    unseen=(
        "Spur gear, {thick} thick, flat on z = 0 and centred on the z axis. Body: a disc "
        "{diameter} in diameter. Teeth: {teeth} rectangular blocks, one every {pitch} degrees "
        "starting along +x, each {tooth} wide and running radially from {inner} to {outer} "
        "from the axis. Bore: {bore_diameter} in diameter, through the middle. (mm; z up.)",
        "Through the centre of a flat disc (radius {radius}, {thick} thick, centred on the z "
        "axis and resting on z = 0) runs a round bore of radius {bore}. Around the disc stand "
        "{teeth} evenly spaced rectangular teeth, the first pointing along +x, each {tooth} "
        "wide and reaching from radius {inner} out to radius {outer}. Model this spur gear, in "
        "millimetres with z up.",
    ),
)


def gear(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> StructureTask:
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
    worded = phrase(
        rng, phrasings, _GEAR, teeth=teeth, radius=radius, thick=thick, tooth=tooth, bore=bore,
        block=2 * tooth, inner=radius - tooth, outer=radius + tooth, diameter=2 * radius,
        bore_diameter=2 * bore, pitch=f"{360 / teeth:g}",
    )  # fmt: skip
    return _task(task_id, "gear", "hard", worded, scene, checks={"iou_min": 0.95})


_LIT_SCENE = Wording(
    seen="Build a small lit scene: a floor slab {base} x {base} x 5 (corner at the origin, "
    "material 'floor', colour RGB (0.8, 0.8, 0.8)) and a cube of side {size} resting on its "
    "centre (material 'paint', colour RGB (0.8, 0.1, 0.1)); light it with {count} white "
    "directional light(s) of intensity {intensity}: {said}.",
    unseen=(
        "Lights first: {count} white directional light(s) of intensity {intensity}, shining "
        "along {vectors} (the direction the light travels). Under them lies a floor slab, "
        "{base} by {base} and 5 thick, corner at the origin, material 'floor' with RGB colour "
        "(0.8, 0.8, 0.8); on the middle of its top sits a cube {size} on a side, material "
        "'paint' with RGB colour (0.8, 0.1, 0.1). Millimetres; z up.",
        "Scene brief. Floor: a slab {base} x {base}, 5 thick, with a corner at the origin; "
        "material 'floor', RGB (0.8, 0.8, 0.8). Object: a cube of side {size} centred on the "
        "slab's top face; material 'paint', RGB (0.8, 0.1, 0.1). Lighting, white and "
        "directional at intensity {intensity}: {said}. (mm; x width, y depth, z up.)",
    ),
)


def lit_scene(rng: random.Random, task_id: str, seed: int, phrasings: Phrasings) -> StructureTask:
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
    worded = phrase(
        rng, phrasings, _LIT_SCENE, base=base, size=size, count=len(lights),
        intensity=f"{intensity:g}", said=" and ".join(f"one shining {text}" for _, text in lights),
        vectors=" and ".join(f"({', '.join(map(str, d))})" for d, _ in lights),
    )  # fmt: skip
    return _task(task_id, "lit-scene", "hard", worded, scene, checks={"material_names": True},
                 image_min=IMAGE_MIN)  # fmt: skip


FAMILIES: list[Callable[[random.Random, str, int, Phrasings], StructureTask]] = [
    bracket, stairs, shelf, table, gear, lit_scene,
]  # fmt: skip


def generate_structure_tasks(
    n: int, seed: int, phrasings: Phrasings = "train"
) -> list[StructureTask]:
    """`n` distinct tasks, the families in turn. `phrasings="heldout"` words about half of them
    (`UNSEEN_SHARE`) as training never does, tagged `phrasing-unseen`: the same kind of part,
    described in another order or register, some numbers in another form (a radius for a
    diameter, a flight's totals for its steps), the target unchanged."""
    return generate_phrased("structure", n, seed, FAMILIES, phrasings)
