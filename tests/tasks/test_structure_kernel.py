"""The structure kernel, for real: its runtime built with pip (once per checkout, cached in
pytest's cache directory), and every request run through a real sandbox pool: geometry of a
bracket, comparisons, renders, scripts, invalid scenes, materials and lights, limits."""

from __future__ import annotations

import ast
import asyncio
import base64
import copy
import math
import shutil
import struct
import sys
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from honing.domains.structure import runtime
from honing.domains.structure.runtime import ensure_runtime, kernel_pool, run_kernel
from honing.errors import RuntimeBuildError, SandboxError
from honing.sandbox import ExecRequest, ExecResult, ExecStatus, SandboxConfig, SandboxPool

pytestmark = pytest.mark.asyncio(loop_scope="module")

NO_INDEX = (  # what pip says when it cannot reach the package index (and no wrong pin does)
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "(from versions: none)",
    "ConnectTimeout",
    "Read timed out",
)

BRACKET_SCRIPT = """\
material("steel", [0.6, 0.62, 0.7])
add_light([-0.5, 0.4, -1], intensity=0.9)
plate = box([4, 2, 1], center=True)
hole = cylinder(0.4, 3, center=True)
bracket = difference(plate, translate(hole, [1, 0, 0]), hole.translate([-1, 0, 0]))
set_material(bracket, "steel")
print("holes at x = 1 and -1")
add(set_name(bracket, "bracket"))
"""


def bracket(size: tuple[float, float, float] = (4, 2, 1), hole_x: float = 1.0) -> dict[str, Any]:
    """A plate with two vertical through-holes of radius 0.4, in steel, under one light."""
    hole = {"type": "cylinder", "radius": 0.4, "height": 3, "center": True}
    plate = {"type": "box", "size": list(size), "center": True}
    return {
        "objects": [
            {
                "type": "difference",
                "name": "bracket",
                "material": "steel",
                "children": [
                    plate,
                    {**hole, "translate": [hole_x, 0, 0]},
                    {**hole, "translate": [-1, 0, 0]},
                ],
            }
        ],
        "materials": {"steel": {"color": [0.6, 0.62, 0.7]}},
        "lights": [{"direction": [-0.5, 0.4, -1], "intensity": 0.9}],
    }


@pytest.fixture(scope="module")
def structure_home(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """HONING_HOME for the module, where the structure runtime is built once and kept (in
    pytest's cache directory; without it, for this session)."""
    cache = getattr(pytestconfig, "cache", None)  # None under -p no:cacheprovider
    home = cache.mkdir("honing-structure-home") if cache else tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HONING_HOME", str(home))
        try:
            ensure_runtime(progress=lambda line: None)
        except RuntimeBuildError as exc:
            if any(sign in str(exc) for sign in NO_INDEX):
                said = str(exc).strip().splitlines()[-1]
                pytest.skip(f"the structure runtime needs the package index, out of reach: {said}")
            raise
        yield home


@pytest.fixture(autouse=True)
def _offline(structure_home: Path) -> None:
    """Replaces tasks/conftest.py's: these tests keep the module's HONING_HOME (its runtime)."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(structure_home: Path) -> AsyncIterator[SandboxPool]:
    """A plain two-cell pool; run_kernel runs in its structure sibling."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    async with SandboxPool(SandboxConfig(pool_size=2, timeout_s=10.0)) as p:
        yield p


async def build(pool: SandboxPool, scene: Any) -> dict[str, Any]:
    return await run_kernel(pool, {"op": "build", "scene": scene})


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG, after checking its signature and that its IDAT holds
    exactly the rows of an 8-bit RGB image of that size."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, tag = struct.unpack(">I4s", data[8:16])
    assert (length, tag) == (13, b"IHDR")
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    assert (depth, color) == (8, 2)
    idat, at = b"", 33
    while at < len(data):
        length, tag = struct.unpack(">I4s", data[at : at + 8])
        if tag == b"IDAT":
            idat += data[at + 8 : at + 8 + length]
        at += 12 + length
    assert len(zlib.decompress(idat)) == height * (1 + 3 * width)
    return width, height


async def test_a_bracket_has_two_holes_one_body_and_its_volume(pool: SandboxPool) -> None:
    reply = await build(pool, bracket())
    assert reply["ok"] and reply["error"] is None, reply
    found = reply["summary"]
    assert found["holes"] == found["genus"] == 2
    assert found["watertight"] is True
    assert found["components"] == 1 and found["cavities"] == 0
    assert found["volume"] == pytest.approx(4 * 2 * 1 - 2 * math.pi * 0.4**2 * 1, rel=0.01)
    assert found["bbox"] == [[-2, -1, -0.5], [2, 1, 0.5]]
    assert found["materials"] == ["steel"] and found["lights"] == 1
    assert found["triangles"] > 100
    assert found["objects"][0]["name"] == "bracket"


async def test_bodies_cavities_and_blind_holes_are_counted_apart(pool: SandboxPool) -> None:
    cube = {"type": "box", "size": [2, 2, 2], "center": True}
    two = {"objects": [cube, {**cube, "translate": [5, 0, 0]}]}
    hollow = {"objects": [{"type": "difference", "children": [cube, {**cube, "size": [1, 1, 1]}]}]}
    blind = {"type": "cylinder", "radius": 0.3, "height": 1.5, "translate": [0, 0, -0.5]}
    cupped = {"objects": [{"type": "difference", "children": [cube, blind]}]}
    replies = await asyncio.gather(*(build(pool, s) for s in (two, hollow, cupped)))
    found = [(r["summary"]["components"], r["summary"]["cavities"], r["summary"]["holes"])
             for r in replies]  # fmt: skip
    assert found == [(2, 0, 0), (1, 1, 0), (1, 0, 0)]
    assert replies[1]["summary"]["volume"] == pytest.approx(8 - 1)


async def test_a_scene_compared_with_itself_matches_everywhere(pool: SandboxPool) -> None:
    reply = await run_kernel(pool, {"op": "compare", "scene": bracket(), "target": bracket()})
    assert reply["ok"], reply
    assert reply["iou"] == 1.0 and reply["iou_method"] == "exact"
    assert reply["image_similarity"] == 1.0
    assert reply["holes"] == {"scene": 2, "target": 2}
    assert reply["materials_ok"] and reply["lights_ok"]
    assert all(c["passed"] for c in reply["constraints"]), reply["constraints"]
    names = {c["name"] for c in reply["constraints"]}
    assert {"iou", "dims", "volume", "holes", "components", "watertight"} <= names


async def test_a_moved_hole_and_a_longer_plate_are_found(pool: SandboxPool) -> None:
    changed = bracket(size=(4.5, 2, 1), hole_x=1.3)
    request = {"op": "compare", "scene": changed, "target": bracket()}
    exact, voxels = await asyncio.gather(
        run_kernel(pool, request),
        run_kernel(pool, {**request, "checks": {"iou_method": "voxel"}}),
    )
    assert exact["ok"], exact
    assert exact["iou"] < 0.9
    assert voxels["iou_method"] == "voxel" and voxels["iou"] == pytest.approx(
        exact["iou"], abs=0.03
    )
    assert exact["dims"]["x"] == {"scene": 4.5, "target": 4.0}
    assert exact["dims"]["y"] == {"scene": 2.0, "target": 2.0}
    assert exact["image_similarity"] < 0.99
    failed = {c["name"] for c in exact["constraints"] if not c["passed"]}
    assert failed == {"iou", "dims", "volume", "features", "surface"}


async def test_a_render_is_a_256_png_the_same_every_time(pool: SandboxPool) -> None:
    request = {"op": "render", "scene": bracket(), "size": 256}
    first, second, top = await asyncio.gather(
        run_kernel(pool, request),
        run_kernel(pool, request),
        run_kernel(pool, {**request, "view": "top"}),
    )
    assert first["ok"], first
    image = base64.b64decode(first["png_b64"])
    assert png_size(image) == (256, 256)
    assert image == base64.b64decode(second["png_b64"])
    assert first["view"] == {"azimuth": -55.0, "elevation": 25.0}
    rows = first["silhouette"].splitlines()
    assert len(rows) == 16 and {len(r) for r in rows} == {32}
    assert set("".join(rows)) == {"#", "."} and 0.1 < first["coverage"] < 0.6
    # from the top, both holes show through the plate: a row reads #...#...# (at least)
    through = [r for r in top["silhouette"].splitlines() if r.strip(".").count(".") > 0]
    assert through, top["silhouette"]
    assert max(len([g for g in r.strip(".").split(".") if g]) for r in through) == 3


async def test_a_script_makes_the_same_bracket_as_data(pool: SandboxPool) -> None:
    scripted = await run_kernel(pool, {"op": "script", "code": BRACKET_SCRIPT})
    assert scripted["ok"], scripted
    assert set(scripted) == {"ok", "error", "scene", "printed", "elapsed_ms"}  # nothing measured
    assert scripted["printed"] == "holes at x = 1 and -1\n"
    made = scripted["scene"]
    assert made["materials"] == bracket()["materials"]
    typed, built = await asyncio.gather(build(pool, bracket()), build(pool, made))
    assert built["summary"] == typed["summary"]
    compared = await run_kernel(pool, {"op": "compare", "scene": made, "target": bracket()})
    assert compared["iou"] == 1.0 and compared["image_similarity"] == 1.0


async def test_a_scene_is_data_never_a_script(pool: SandboxPool) -> None:
    as_scene = {"script": BRACKET_SCRIPT}
    build_it, render_it, compare_it = await asyncio.gather(
        build(pool, as_scene),
        run_kernel(pool, {"op": "render", "scene": as_scene}),
        run_kernel(pool, {"op": "compare", "scene": as_scene, "target": bracket()}),
    )
    for reply in (build_it, render_it, compare_it):
        assert reply["ok"] is False and reply["failed"] == "scene", reply
        assert "unknown key 'script'" in reply["error"]
    target = await run_kernel(pool, {"op": "compare", "scene": bracket(), "target": as_scene})
    assert target["failed"] == "target"


ESCAPES = [  # each reaches past the scene API: to globals, frames, the interpreter
    ("g = box.__globals__", "'__globals__'"),
    ("f = (x for x in []).gi_frame", "'gi_frame'"),
    ("b = __builtins__", "'__builtins__'"),
    ("i = __import__('os')", "'__import__'"),
    ("s = '{0.__globals__}'.format(box)", "'format'"),
    ("match box:\n    case object(__globals__=g):\n        pass", "'__globals__'"),
    ("try:\n    1 / 0\nexcept Exception as e:\n    t = e.__traceback__", "'__traceback__'"),
    ("t = add.__self__", "'__self__'"),
    ("m = math.__loader__", "'__loader__'"),
    ("c = object.__subclasses__()", "'__subclasses__'"),
    ("k = box(1).translate.__func__", "'__func__'"),
]


@pytest.mark.parametrize(("code", "name"), ESCAPES)
async def test_a_script_is_confined_to_the_scene_api(
    pool: SandboxPool, code: str, name: str
) -> None:
    reply = await run_kernel(pool, {"op": "script", "code": code + "\nadd(box(1))\n"})
    assert reply["ok"] is False and reply["failed"] == "scene", reply
    assert name in reply["error"] and "not part of the scene API" in reply["error"]


async def test_cuts_are_checked_by_position_and_size(pool: SandboxPool) -> None:
    """A hole that is a small share of the volume still counts: missing, too small, too large,
    moved or of another shape, it fails `features` (and a moved one `surface` too), while IoU,
    volume and the hole count pass."""
    wide = (40.0, 20.0, 1.0)  # the holes are under 2% of this plate's volume

    def holes(radius: float = 0.4, x: float = 1.0, kind: str = "cylinder") -> dict[str, Any]:
        scene = bracket(size=wide, hole_x=x)
        for cut in scene["objects"][0]["children"][1:]:
            cut["radius"] = radius
            if kind == "box":
                side = radius * math.sqrt(math.pi)  # a square of the circle's area
                at = cut["translate"]
                cut.clear()
                cut.update(type="box", size=[side, side, 3], center=True, translate=at)
        return scene

    target = holes()
    wrong = {
        "tiny": holes(radius=0.1),
        "too small": holes(radius=0.33),
        "too large": holes(radius=0.48),
        "moved": holes(x=1.15),
        "square": holes(kind="box"),
    }
    replies = await asyncio.gather(
        run_kernel(pool, {"op": "compare", "scene": target, "target": target}),
        *(
            run_kernel(pool, {"op": "compare", "scene": s, "target": target})
            for s in wrong.values()
        ),
    )
    same, *judged = replies
    assert all(c["passed"] for c in same["constraints"]), same["constraints"]
    assert [f["iou"] for f in same["features"]] == [1.0, 1.0]
    for name, reply in zip(wrong, judged, strict=True):
        failed = {c["name"] for c in reply["constraints"] if not c["passed"]}
        assert "features" in failed, (name, reply["constraints"])
        assert not failed & {"iou", "volume", "holes", "dims"}, (name, failed)
        detail = next(c["detail"] for c in reply["constraints"] if c["name"] == "features")
        assert "cut(s) wrong: target.objects[0].children[1]" in detail, detail


async def test_a_missing_boss_fails_the_surface_distance(pool: SandboxPool) -> None:
    """A small protrusion left out (no cut to check, IoU and volume within tolerance) is found
    by the Hausdorff distance between the surfaces, measured exactly past the sampling."""
    disc = {"type": "cylinder", "radius": 20, "height": 4, "segments": 96}
    pegs = [{"type": "box", "size": [3, 3, 3], "translate": [x, -1.5, 4]} for x in (-10, 7)]
    target = {"objects": [{"type": "union", "children": [disc, *pegs]}]}
    missing = {"objects": [{"type": "union", "children": [disc, pegs[0]]}]}
    coarse = {"objects": [{"type": "union", "children": [{**disc, "segments": 64}, *pegs]}]}
    judged, close = await asyncio.gather(
        run_kernel(pool, {"op": "compare", "scene": missing, "target": target}),
        run_kernel(pool, {"op": "compare", "scene": coarse, "target": target}),
    )
    failed = {c["name"] for c in judged["constraints"] if not c["passed"]}
    assert failed == {"surface"}, judged["constraints"]
    assert judged["surface"]["hausdorff"] >= 2.9  # the peg's top, 3 above the disc
    assert all(c["passed"] for c in close["constraints"]), close["constraints"]
    assert close["surface"]["hausdorff"] <= 0.02 * math.dist([-20, -20, 0], [20, 20, 7])


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("plate = box([1, 2])\nadd(plate)", "script line 1: box(): box size must be 3 positive"),
        ("a = box(1)\nb = boxx(2)\n", "script line 2: NameError: name 'boxx' is not defined"),
        ("add(box(1)\n", "script line 1: SyntaxError"),
        ("import os", "script line 1: ImportError: a structure script may import only"),
        ("x = 1", "script: it added no shape"),
        ("for r in (1, 0):\n    add(sphere(r))", "script line 2: sphere(): sphere radius must"),
        ("add(difference(box(1)))", "script line 1: difference() needs at least 2 shapes"),
    ],
)
async def test_script_errors_name_the_line(pool: SandboxPool, code: str, error: str) -> None:
    reply = await run_kernel(pool, {"op": "script", "code": code})
    assert not reply["ok"] and reply["failed"] == "scene"
    assert reply["error"].startswith(error), reply["error"]


def _with(scene: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(scene)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


INVALID: list[tuple[list[Any], Any, str]] = [
    (["objects", 0, "children", 1, "radius"], -0.4,
     "objects[0].children[1]: cylinder radius must be a positive number"),
    (["objects", 0, "children", 0, "size"], [4, 0, 1],
     "objects[0].children[0]: box size must be 3 positive numbers"),
    (["objects", 0, "children", 2], {"type": "pyramid"},
     "objects[0].children[2]: unknown type 'pyramid'"),
    (["objects", 0, "children"], [{"type": "box", "size": [1, 1, 1]}],
     "objects[0]: difference children must be a list of at least 2"),
    (["objects", 0, "children", 1, "radious"], 1, "objects[0].children[1]: cylinder has no field"),
    (["objects", 0, "material"], "gold", "objects[0]: material 'gold' is not defined"),
    (["objects", 0, "translate"], [1, 2], "objects[0]: translate must be 3 numbers"),
    (["lights", 0, "direction"], [0, 0, 0], "lights[0]: direction must not be zero"),
    (["materials", "steel", "color"], [2, 0, 0], "materials.steel: color must be 3 numbers in"),
    (["objects"], [], "objects: must be a non-empty list"),
]  # fmt: skip


async def test_invalid_objects_are_refused_with_their_path(pool: SandboxPool) -> None:
    scenes = [_with(bracket(), path, value) for path, value, _ in INVALID]
    replies = await asyncio.gather(*(build(pool, s) for s in scenes))
    for (_, _, error), reply in zip(INVALID, replies, strict=True):
        assert reply["ok"] is False and reply["failed"] == "scene", reply
        assert reply["error"].startswith(error), reply["error"]


async def test_a_broken_target_or_request_is_not_the_scenes_fault(pool: SandboxPool) -> None:
    broken = _with(bracket(), ["objects", 0, "children", 0, "size"], [1, -1, 1])
    target, size, checks, op = await asyncio.gather(
        run_kernel(pool, {"op": "compare", "scene": bracket(), "target": broken}),
        run_kernel(pool, {"op": "render", "scene": bracket(), "size": 4096}),
        run_kernel(pool, {"op": "compare", "scene": bracket(), "target": bracket(),
                          "checks": {"iou_minimum": 0.5}}),
        run_kernel(pool, {"op": "explode", "scene": bracket()}),
    )  # fmt: skip
    assert target["failed"] == "target"
    assert target["error"].startswith("target.objects[0].children[0]: box size")
    assert [r["failed"] for r in (size, checks, op)] == ["request"] * 3
    assert "checks: unknown key 'iou_minimum'" in checks["error"]


async def test_materials_and_lights_are_checked_against_the_target(pool: SandboxPool) -> None:
    red = _with(bracket(), ["materials", "steel", "color"], [0.9, 0.1, 0.1])
    dark = _with(bracket(), ["lights"], [])
    turned = _with(bracket(), ["lights", 0, "direction"], [1, 0, -0.2])
    renamed = bracket()
    renamed["materials"] = {"grey": renamed["materials"]["steel"]}
    renamed["objects"][0]["material"] = "grey"

    async def compare(scene: dict[str, Any], **checks: Any) -> dict[str, Any]:
        request = {"op": "compare", "scene": scene, "target": bracket(), "checks": checks}
        return await run_kernel(pool, request)

    replies = await asyncio.gather(
        compare(red), compare(dark), compare(turned), compare(renamed),
        compare(renamed, material_names=True),
    )  # fmt: skip
    found = [(r["materials_ok"], r["lights_ok"]) for r in replies]
    assert found == [(False, True), (True, False), (True, False), (True, True), (False, True)]
    verdicts = {c["name"]: c for c in replies[0]["constraints"]}
    assert not verdicts["materials"]["passed"] and "0.9" in verdicts["materials"]["detail"]
    assert verdicts["iou"]["passed"]  # the same geometry
    assert replies[0]["image_similarity"] < 0.9  # a red bracket looks different
    assert (
        "0 light(s), want 1"
        in {c["name"]: c for c in replies[1]["constraints"]}["lights"]["detail"]
    )


async def test_a_request_past_its_cpu_time_is_the_requests_fault(pool: SandboxPool) -> None:
    reply = await run_kernel(pool, {"op": "script", "code": "while True:\n    pass\n"}, cpu_s=1)
    assert reply["ok"] is False and reply["problem"] == "input"
    assert "CPU-time limit" in reply["error"]


async def test_a_failed_sandbox_raises(pool: SandboxPool, monkeypatch: pytest.MonkeyPatch) -> None:
    checker = await kernel_pool(pool)
    assert await kernel_pool(checker) is checker  # a pool with the runtime is used as it is

    async def broken(request: ExecRequest) -> ExecResult:
        return ExecResult(ExecStatus.SANDBOX_ERROR, error="cell died")

    monkeypatch.setattr(checker, "run", broken)
    with pytest.raises(SandboxError, match="cell died"):
        await build(pool, bracket())


async def test_the_runtime_is_built_once(
    structure_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "_built", {})  # forget this process's memo: ask the store
    said: list[str] = []
    first = ensure_runtime(progress=said.append)
    assert ensure_runtime(progress=said.append) == first
    assert said == [] and (first / "manifold3d.pyi").exists()
    assert str(first).startswith(str(structure_home))


async def test_the_kernel_imports_only_the_stdlib_numpy_and_manifold3d() -> None:
    tree = ast.parse(runtime.KERNEL.read_text())
    found = {alias.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for alias in n.names}  # fmt: skip
    found |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module}  # fmt: skip
    assert found - set(sys.stdlib_module_names) == {"numpy", "manifold3d"}
