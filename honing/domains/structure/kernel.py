"""The structure kernel: builds, measures, renders and compares 3D scenes, inside the sandbox.

A program, not a module of honing: it reads one JSON request on stdin and writes one JSON reply
on stdout, and imports only the stdlib, numpy and manifold3d (the "structure" runtime). Ops:
"build" (a summary), "render" (summary, PNG, ASCII silhouette), "compare" (a scene against a
target: volume IoU, extents, holes, materials, lights, image similarity, constraints) and
"script" (the scene a Python script makes with the small API of `ScriptAPI`, as data only: its
caller builds it in a fresh run, so nothing the script did reaches a measurement or a verdict;
the script is confined to that API by `confine`). A scene is always data, never code; a
tree of typed operations (primitives, booleans, transforms); CSG is manifold3d, so solids are
watertight by construction. Rendering is a numpy z-buffer with flat Lambert shading and PNG by
zlib; the same request always gives byte-identical pixels. Every reply has "ok" and "error"; a
bad scene is {"ok": false, "error": "objects[0].children[1]: ..."}, never an exception.
Request and reply fields: docstrings of `handle`, `summary`, `render_reply` and `compare`.
"""

from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import io
import json
import math
import os
import struct
import sys
import time
import traceback
import zlib
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one job, one core: no BLAS thread pool in the sandbox

import manifold3d as m3d  # noqa: E402
import numpy as np  # noqa: E402

Json = dict[str, Any]

DEFAULT_SEGMENTS = 48
MAX_SEGMENTS = 128
MAX_NODES = 1000
MAX_DEPTH = 40
MAX_TRIANGLES = 200_000
MAX_COORD = 1e6
MAX_LIGHTS = 8
RENDER_SIZES = (16, 1024)
SILHOUETTE = (32, 16)  # columns, rows: a square image in characters about twice as tall as wide
COMPARE_SIZE = 128
VOXELS = 64
DEFAULT_COLOR = (0.72, 0.72, 0.75)
BACKGROUND = (1.0, 1.0, 1.0)
AMBIENT = 0.22
DEFAULT_LIGHTS: list[Json] = [  # a key light from front-right-above and a dim fill
    {"direction": [-0.45, 0.75, -1.0], "intensity": 0.85, "color": [1.0, 1.0, 1.0]},
    {"direction": [0.8, 0.3, -0.35], "intensity": 0.3, "color": [1.0, 1.0, 1.0]},
]
DEFAULT_VIEW = (-55.0, 25.0)  # azimuth, elevation (degrees): a 3/4 view from front-right-above
VIEWS = {
    "iso": DEFAULT_VIEW,
    "front": (-90.0, 0.0),
    "back": (90.0, 0.0),
    "right": (0.0, 0.0),
    "left": (180.0, 0.0),
    "top": (-90.0, 90.0),
    "bottom": (-90.0, -90.0),
}
VIEW_KEYS = ("azimuth", "elevation")
FOV_DEG = 35.0
EDGE_COS = math.cos(math.radians(35.0))  # outline where face normals turn by more than this

COMMON = {"type", "translate", "rotate", "scale", "material", "name"}
FIELDS = {
    "box": ({"size"}, {"center"}),
    "cylinder": ({"radius", "height"}, {"segments", "center"}),
    "cone": ({"radius", "height"}, {"top_radius", "segments", "center"}),
    "sphere": ({"radius"}, {"segments"}),
    "extrude": ({"points", "height"}, {"center"}),
    "union": ({"children"}, set()),
    "difference": ({"children"}, set()),
    "intersection": ({"children"}, set()),
}
BOOLEANS = {
    "union": (m3d.OpType.Add, 1),
    "difference": (m3d.OpType.Subtract, 2),
    "intersection": (m3d.OpType.Intersect, 2),
}
SCENE_KEYS = {"objects", "materials", "lights", "camera"}
CHECKS = {
    "iou_min": 0.9,  # volume IoU at least this
    "dims_tol": 0.02,  # each extent within this fraction of the target's (plus 1e-6)
    "volume_tol": 0.02,  # volume within this fraction of the target's
    "color_tol": 0.1,  # a material colour matches within this on each channel
    "light_angle_deg": 15.0,  # a light's direction matches within this angle
    "light_intensity_tol": 0.2,  # and its intensity within this fraction
    "material_names": False,  # materials must also carry the target's names
    "iou_method": "exact",  # "exact" (booleans, voxels if they fail) or "voxel"
    "feature_iou_min": 0.85,  # each cut feature's void: IoU with the target's at least this
    "feature_pos_tol": 0.1,  # its centre within this fraction of its size (smallest extent)
    "feature_size_tol": 0.15,  # its volume within this fraction of the target's
    "surface_tol": 0.02,  # Hausdorff distance of the surfaces: this fraction of the diagonal
}
FEATURE_MARGIN = 0.5  # a feature is judged in its cutter's box grown by this share of its size
SURFACE_SAMPLES = 4096  # points sampled on each surface (besides its vertices)
SURFACE_SEED = 20261204


class SceneError(Exception):
    """A scene that cannot be built; the message names where and why."""


class RequestError(SceneError):
    """The request itself is malformed (an op, a size, a view, checks)."""


class TargetError(SceneError):
    """The compare target (the task's own scene) cannot be built."""


# -- values ------------------------------------------------------------------------------------
def _is_num(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and abs(value) <= MAX_COORD
    )


def _num(
    node: Json,
    key: str,
    path: str,
    what: str,
    *,
    positive: bool = False,
    minimum: float | None = None,
    default: float | None = None,
) -> float:
    value = node.get(key, default)
    if value is None:
        raise SceneError(f"{path}: {what} is required")
    ok = _is_num(value) and (value > 0 if positive else True)
    ok = ok and (minimum is None or value >= minimum)
    if not ok:
        need = "a positive number" if positive else "a number"
        need = f"a number >= {minimum:g}" if minimum is not None else need
        raise SceneError(f"{path}: {what} must be {need}")
    return float(value)


def _vec(value: Any, path: str, what: str, *, n: int = 3, positive: bool = False) -> list[float]:
    ok = isinstance(value, list | tuple) and len(value) == n and all(_is_num(v) for v in value)
    if ok and positive:
        ok = all(v > 0 for v in value)
    if not ok:
        kind = "positive numbers" if positive else "numbers"
        raise SceneError(f"{path}: {what} must be {n} {kind}")
    return [float(v) for v in value]


def _color(value: Any, path: str, what: str) -> tuple[float, float, float]:
    ok = isinstance(value, list | tuple) and len(value) == 3
    ok = ok and all(_is_num(v) and 0 <= v <= 1 for v in value)
    if not ok:
        raise SceneError(f"{path}: {what} must be 3 numbers in [0, 1] (r, g, b)")
    return (float(value[0]), float(value[1]), float(value[2]))


def _flag(node: Json, key: str, path: str) -> bool:
    value = node.get(key, False)
    if not isinstance(value, bool):
        raise SceneError(f"{path}: {key} must be true or false")
    return value


def _segments(node: Json, path: str) -> int:
    value = node.get("segments", DEFAULT_SEGMENTS)
    if isinstance(value, bool) or not isinstance(value, int) or not 3 <= value <= MAX_SEGMENTS:
        raise SceneError(f"{path}: segments must be an integer from 3 to {MAX_SEGMENTS}")
    return value


def _r(value: float) -> float:
    """A float rounded to 6 significant digits: stable output, no noise digits."""
    return float(f"{value:.6g}") if math.isfinite(value) else 0.0


# -- scenes: validation and CSG ----------------------------------------------------------------
def check_fields(node: Any, path: str) -> str:
    """The node's type, once its fields are the ones that type takes (its values are checked
    where they are used)."""
    if not isinstance(node, dict):
        raise SceneError(f"{path}: must be an object with a 'type', not {type(node).__name__}")
    kind = node.get("type")
    if kind not in FIELDS:
        known = ", ".join(FIELDS)
        raise SceneError(f"{path}: unknown type {kind!r} (one of: {known})")
    required, optional = FIELDS[kind]
    for key in node:
        if key not in COMMON | required | optional:
            takes = ", ".join(sorted(required | optional | COMMON - {"type"}))
            raise SceneError(f"{path}: {kind} has no field {key!r} (it takes: {takes})")
    for key in sorted(required):
        if key not in node:
            raise SceneError(f"{path}: {kind} needs {key!r}")
    name = node.get("name")
    if name is not None and not (isinstance(name, str) and len(name) <= 100):
        raise SceneError(f"{path}: name must be a string of at most 100 characters")
    return str(kind)


def primitive(kind: str, node: Json, path: str) -> Any:
    """The manifold of a primitive node, before its transforms."""
    if kind == "box":
        size = _vec(node.get("size"), path, "box size", positive=True)
        return m3d.Manifold.cube(size, center=_flag(node, "center", path))
    if kind in ("cylinder", "cone"):
        radius = _num(node, "radius", path, f"{kind} radius", positive=True)
        height = _num(node, "height", path, f"{kind} height", positive=True)
        top = radius
        if kind == "cone":
            top = _num(node, "top_radius", path, "cone top_radius", minimum=0.0, default=0.0)
        segments = _segments(node, path)
        center = _flag(node, "center", path)
        return m3d.Manifold.cylinder(height, radius, top, segments, center)
    if kind == "sphere":
        radius = _num(node, "radius", path, "sphere radius", positive=True)
        return m3d.Manifold.sphere(radius, _segments(node, path))
    # extrude: a polygon in the XY plane, extruded along +Z
    points: Any = node.get("points")
    contour: list[list[float]] = []
    if isinstance(points, list) and 3 <= len(points) <= 1000:
        with contextlib.suppress(SceneError):
            contour = [_vec(p, path, "each point", n=2) for p in points]
    if not contour:
        raise SceneError(f"{path}: extrude points must be 3 to 1000 [x, y] pairs")
    height = _num(node, "height", path, "extrude height", positive=True)
    section = m3d.CrossSection([contour], m3d.FillRule.NonZero)
    if section.area() <= 1e-12:
        raise SceneError(f"{path}: extrude points enclose no area")
    solid = m3d.Manifold.extrude(section, height)
    return solid.translate([0.0, 0.0, -height / 2]) if _flag(node, "center", path) else solid


def scale_factors(value: Any, path: str) -> list[float]:
    """A node's scale: one positive number, or 3 nonzero numbers (a negative one mirrors)."""
    if _is_num(value) and value > 0:
        return [float(value)] * 3
    ok = isinstance(value, list | tuple) and len(value) == 3
    if not (ok and all(_is_num(v) and abs(v) > 1e-9 for v in value)):
        raise SceneError(f"{path}: scale must be a positive number or 3 nonzero numbers")
    return [float(v) for v in value]


def transformed(solid: Any, node: Json, path: str) -> Any:
    """`solid` scaled, then rotated (degrees about X, then Y, then Z), then translated."""
    if "scale" in node:
        solid = solid.scale(scale_factors(node["scale"], path))
    if "rotate" in node:
        solid = solid.rotate(_vec(node["rotate"], path, "rotate (degrees about x, y, z)"))
    if "translate" in node:
        solid = solid.translate(_vec(node["translate"], path, "translate"))
    return solid


def check_materials(data: Any, path: str) -> dict[str, tuple[float, float, float]]:
    if not isinstance(data, dict):
        raise SceneError(f"{path}: must be an object of name: {{'color': [r, g, b]}}")
    out = {}
    for name, spec in data.items():
        at = f"{path}.{name}"
        if not isinstance(spec, dict) or set(spec) != {"color"}:
            raise SceneError(f"{at}: must be {{'color': [r, g, b]}} with values in [0, 1]")
        out[name] = _color(spec["color"], at, "color")
    return out


def check_lights(data: Any, path: str) -> list[Json]:
    """Directional lights: direction (where the light travels, normalised), intensity, color."""
    if not isinstance(data, list) or len(data) > MAX_LIGHTS:
        raise SceneError(f"{path}: must be a list of at most {MAX_LIGHTS} lights")
    out = []
    for i, light in enumerate(data):
        at = f"{path}[{i}]"
        allowed = {"direction", "intensity", "color", "type"}
        if not isinstance(light, dict) or not set(light) <= allowed or "direction" not in light:
            raise SceneError(
                f"{at}: must be {{'direction': [x, y, z], 'intensity': n, 'color': [r, g, b]}}"
            )
        if light.get("type", "directional") != "directional":
            raise SceneError(f"{at}: only 'directional' lights are supported")
        direction = _vec(light["direction"], at, "direction")
        norm = math.sqrt(sum(d * d for d in direction))
        if norm < 1e-9:
            raise SceneError(f"{at}: direction must not be zero")
        intensity = _num(light, "intensity", at, "intensity", minimum=0.0, default=1.0)
        color = _color(light.get("color", [1.0, 1.0, 1.0]), at, "color")
        out.append(
            {
                "direction": [d / norm for d in direction],
                "intensity": intensity,
                "color": list(color),
            }
        )
    return out


def check_camera(data: Any, path: str) -> Json | None:
    """An orbit camera {azimuth, elevation, fov} (framed on the scene) or a placed one
    {eye, target, up, fov}."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise SceneError(f"{path}: must be an object")
    orbit, look = {"azimuth", "elevation", "fov_deg"}, {"eye", "target", "up", "fov_deg"}
    fov = _num(data, "fov_deg", path, "fov_deg", default=FOV_DEG)
    if not 5 <= fov <= 120:
        raise SceneError(f"{path}: fov_deg must be from 5 to 120")
    if set(data) <= orbit:
        azimuth = _num(data, "azimuth", path, "azimuth", default=DEFAULT_VIEW[0])
        elevation = _num(data, "elevation", path, "elevation", default=DEFAULT_VIEW[1])
        return {"azimuth": azimuth, "elevation": max(-90.0, min(90.0, elevation)), "fov": fov}
    if set(data) <= look and {"eye", "target"} <= set(data):
        eye = _vec(data["eye"], path, "eye")
        target = _vec(data["target"], path, "target")
        up = _vec(data.get("up", [0.0, 0.0, 1.0]), path, "up")
        if math.dist(eye, target) < 1e-9:
            raise SceneError(f"{path}: eye and target must differ")
        return {"eye": eye, "target": target, "up": up, "fov": fov}
    raise SceneError(
        f"{path}: give either azimuth/elevation (degrees) or eye/target (and up), "
        "each with an optional fov_deg"
    )


class Feature:
    """A cut the target states: a cutter of a `difference` (at `path`) and the body it cuts
    (`base`), both where the scene puts them."""

    def __init__(self, path: str, base: Any, cutter: Any) -> None:
        self.path, self.base, self.cutter = path, base, cutter


class Scene:
    """A validated, built scene: the solid (every object united), per-object solids, which
    material each primitive carries, and the scene's lights and camera."""

    def __init__(self, data: Any, where: str = "", *, features: bool = False) -> None:
        self.where = where
        self.features: list[Feature] | None = [] if features else None
        if not isinstance(data, dict):
            raise SceneError(f"{where or 'scene'}: must be an object with 'objects'")
        for key in data:
            if key not in SCENE_KEYS:
                keys = ", ".join(sorted(SCENE_KEYS))
                raise SceneError(f"{where or 'scene'}: unknown key {key!r} (keys: {keys})")
        self.materials = check_materials(data.get("materials", {}), self._at("materials"))
        self.lights = check_lights(data.get("lights", []), self._at("lights"))
        self.camera = check_camera(data.get("camera"), self._at("camera"))
        self.nodes = 0
        self.origin_material: dict[int, str | None] = {}
        objects = data.get("objects")
        if not isinstance(objects, list) or not objects:
            raise SceneError(f"{self._at('objects')}: must be a non-empty list of objects")
        self.parts: list[tuple[str, Any]] = []
        for i, node in enumerate(objects):
            path = self._at(f"objects[{i}]")
            solid = self.build(node, path, None, 0, self.features)
            label = node.get("name") or f"objects[{i}]"
            self.parts.append((str(label), solid))
        self.solid = m3d.Manifold.batch_boolean([s for _, s in self.parts], m3d.OpType.Add)
        if self.solid.status() != m3d.Error.NoError:
            raise SceneError(f"{where or 'scene'}: geometry failed: {self.solid.status()}")
        if self.solid.num_tri() > MAX_TRIANGLES:
            raise SceneError(
                f"{where or 'scene'}: {self.solid.num_tri()} triangles, over {MAX_TRIANGLES}: "
                "use fewer segments"
            )

    def _at(self, path: str) -> str:
        return f"{self.where}.{path}" if self.where else path

    def build(
        self,
        node: Any,
        path: str,
        inherited: str | None,
        depth: int,
        features: list[Feature] | None = None,
    ) -> Any:
        """The node's solid; with `features`, the cuts of its differences (not those inside a
        cutter) go there, moved as the node and its ancestors move them."""
        kind = check_fields(node, path)
        mine: list[Feature] | None = None if features is None else []
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            where = path if len(path) < 120 else f"{path[:60]}...{path[-40:]}"
            raise SceneError(f"{where}: over {MAX_NODES} nodes or {MAX_DEPTH} levels deep")
        material = node.get("material")
        if material is not None and (
            not isinstance(material, str) or material not in self.materials
        ):
            defined = ", ".join(sorted(self.materials)) or "none"
            raise SceneError(
                f"{path}: material {material!r} is not defined in the scene's materials "
                f"(defined: {defined})"
            )
        own = material if material is not None else inherited
        if kind in BOOLEANS:
            op, least = BOOLEANS[kind]
            children = node["children"]
            if not isinstance(children, list) or not least <= len(children) <= MAX_NODES:
                raise SceneError(f"{path}: {kind} children must be a list of at least {least}")
            solids = []
            cut_material = own
            for i, child in enumerate(children):
                # a cutter that names no material colours its cut like the body it cuts
                carried = own if kind != "difference" or i == 0 else cut_material
                cutter = kind == "difference" and i > 0
                at = f"{path}.children[{i}]"
                solid = self.build(child, at, carried, depth + 1, None if cutter else mine)
                if i == 0 and isinstance(child, dict) and child.get("material") is not None:
                    cut_material = child["material"]
                solids.append(solid)
            solid = m3d.Manifold.batch_boolean(solids, op)
            if mine is not None and kind == "difference":
                mine.extend(
                    Feature(f"{path}.children[{i}]", solids[0], cut)
                    for i, cut in enumerate(solids[1:], 1)
                )
        else:
            solid = primitive(kind, node, path).as_original()
            self.origin_material[solid.original_id()] = own
        solid = transformed(solid, node, path)
        if solid.status() != m3d.Error.NoError:
            raise SceneError(f"{path}: geometry failed: {solid.status()}")
        if features is not None and mine:
            features.extend(
                Feature(f.path, transformed(f.base, node, path), transformed(f.cutter, node, path))
                for f in mine
            )
        return solid


Runs = list[tuple[int, int, str | None]]


def surface(scene: Scene, solid: Any = None) -> tuple[np.ndarray, np.ndarray, Runs]:
    """(vertices (n, 3) float64, triangles (m, 3) int64, runs) of the scene's solid (or of
    `solid`, one of its parts); runs are (first, end, material name or None) over triangles,
    from manifold3d's provenance of each triangle's primitive."""
    mesh = (scene.solid if solid is None else solid).to_mesh()
    verts = np.array(mesh.vert_properties, dtype=np.float64)[:, :3]
    tris = np.array(mesh.tri_verts, dtype=np.int64).reshape(-1, 3)
    merge_from = np.array(mesh.merge_from_vert, dtype=np.int64)
    if merge_from.size:
        index = np.arange(len(verts))
        index[merge_from] = np.array(mesh.merge_to_vert, dtype=np.int64)
        tris = index[tris]
    bounds = [int(i) // 3 for i in np.array(mesh.run_index, dtype=np.int64)]
    origins = [int(o) for o in np.array(mesh.run_original_id, dtype=np.int64)]
    runs = [
        (bounds[i], bounds[i + 1], scene.origin_material.get(origin))
        for i, origin in enumerate(origins)
        if bounds[i + 1] > bounds[i]
    ]
    return verts, tris, runs


def face_colors(scene: Scene, runs: Runs, count: int) -> np.ndarray:
    """The base colour of each of `count` triangles."""
    colors = np.empty((count, 3))
    colors[:] = DEFAULT_COLOR
    for first, end, name in runs:
        if name is not None:
            colors[first:end] = scene.materials[name]
    return colors


def closed_edges(tris: np.ndarray) -> bool:
    """Whether every directed edge occurs once and its reverse once (a closed 2-manifold)."""
    if not len(tris):
        return False
    a, b = tris.ravel(), tris[:, [1, 2, 0]].ravel()
    n = int(tris.max()) + 1
    edges, reverse = np.sort(a * n + b), np.sort(b * n + a)
    return bool((edges[1:] != edges[:-1]).all() and np.array_equal(edges, reverse))


def summary(scene: Scene) -> Json:
    """SUMMARY: bbox [[min], [max]], size, volume, surface_area, components (bodies), cavities
    (closed voids), watertight, genus and holes (through-holes: the genus summed over bodies),
    materials (names on the surface), lights (count), triangles, objects (per top-level object:
    name, bbox, volume)."""
    solid = scene.solid
    _, tris, runs = surface(scene)
    shells = solid.decompose()
    bodies = [s for s in shells if s.volume() > 0]
    genus = sum(max(0, s.genus()) for s in shells)
    objects = []
    for label, part in scene.parts[:50]:
        objects.append({"name": label, "bbox": _bbox(part), "volume": _r(part.volume())})
    bbox = _bbox(solid)
    return {
        "bbox": bbox,
        "size": [_r(bbox[1][i] - bbox[0][i]) for i in range(3)],
        "volume": _r(solid.volume()),
        "surface_area": _r(solid.surface_area()),
        "components": len(bodies),
        "cavities": len(shells) - len(bodies),
        "watertight": bool(not solid.is_empty() and closed_edges(tris)),
        "genus": genus,
        "holes": genus,
        "materials": sorted({name for _, _, name in runs if name is not None}),
        "lights": len(scene.lights),
        "triangles": len(tris),
        "objects": objects,
    }


def _bbox(solid: Any) -> list[list[float]]:
    if solid.is_empty():
        return [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    b = solid.bounding_box()
    return [[_r(b[0]), _r(b[1]), _r(b[2])], [_r(b[3]), _r(b[4]), _r(b[5])]]


# -- rendering ---------------------------------------------------------------------------------
def view_of(value: Any) -> tuple[float, float] | None:
    """(azimuth, elevation) of a request's view: a preset name or {"azimuth", "elevation"}."""
    if value is None:
        return None
    if isinstance(value, str):
        if value not in VIEWS:
            raise RequestError(f"view: unknown preset {value!r} (one of: {', '.join(VIEWS)})")
        return VIEWS[value]
    if not isinstance(value, dict) or not set(value) <= set(VIEW_KEYS):
        raise RequestError("view: must be a preset name or {'azimuth': deg, 'elevation': deg}")
    azimuth = value.get("azimuth", DEFAULT_VIEW[0])
    elevation = value.get("elevation", DEFAULT_VIEW[1])
    if not (_is_num(azimuth) and _is_num(elevation)):
        raise RequestError("view: azimuth and elevation must be numbers (degrees)")
    return float(azimuth), max(-90.0, min(90.0, float(elevation)))


def camera_for(
    scene_camera: Json | None, view: tuple[float, float] | None, lo: np.ndarray, hi: np.ndarray
) -> Json:
    """Eye, target, up and field of view: the request's view, else the scene's camera, else the
    default 3/4 view; an orbit view is framed on the bounding box lo..hi."""
    fov = FOV_DEG if scene_camera is None else scene_camera["fov"]
    if view is None and scene_camera is not None and "eye" in scene_camera:
        return {k: scene_camera[k] for k in ("eye", "target", "up")} | {"fov": fov}
    if view is None:
        view = (
            (scene_camera["azimuth"], scene_camera["elevation"]) if scene_camera else DEFAULT_VIEW
        )
    azimuth, elevation = (math.radians(a) for a in view)
    direction = np.array(
        [
            math.cos(elevation) * math.cos(azimuth),
            math.cos(elevation) * math.sin(azimuth),
            math.sin(elevation),
        ]
    )
    centre = (lo + hi) / 2
    radius = max(float(np.linalg.norm(hi - lo)) / 2, 1e-6)
    distance = radius / math.sin(math.radians(fov) / 2) * 1.08
    up = [0.0, 0.0, 1.0]
    if abs(math.cos(elevation)) < 1e-3:  # straight down or up: the image's top is away from az
        up = [-math.cos(azimuth) * np.sign(elevation), -math.sin(azimuth) * np.sign(elevation), 0]
    eye = centre + distance * direction
    return {
        "eye": eye.tolist(),
        "target": centre.tolist(),
        "up": [float(u) for u in up],
        "fov": fov,
    }


def _look_at(camera: Json) -> tuple[np.ndarray, np.ndarray]:
    eye = np.asarray(camera["eye"], dtype=np.float64)
    forward = np.asarray(camera["target"], dtype=np.float64) - eye
    forward /= np.linalg.norm(forward)
    up = np.asarray(camera["up"], dtype=np.float64)
    right = np.cross(forward, up)
    if np.linalg.norm(right) < 1e-9:  # up along the view: any perpendicular will do
        right = np.cross(forward, [1.0, 0.0, 0.0] if abs(forward[0]) < 0.9 else [0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    return eye, np.stack([right, np.cross(right, forward), -forward])


def _mul(points: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """points @ rows.T without BLAS (deterministic, and no thread pool)."""
    return np.stack([(points * r).sum(axis=-1) for r in rows], axis=-1)


def shade_faces(
    verts: np.ndarray,
    tris: np.ndarray,
    colors: np.ndarray,
    lights: list[Json],
    eye: np.ndarray,
    back: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(RGB, unit normal facing the eye) of each triangle: two-sided flat Lambert shading with
    ambient light and a small Blinn highlight (for a distant viewer along `back`, so that
    coplanar triangles shade alike)."""
    tri = verts[tris]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True) + 1e-12
    view = eye - tri.mean(axis=1)
    view /= np.linalg.norm(view, axis=1, keepdims=True) + 1e-12
    normal = np.where(((normal * view).sum(axis=1) < 0)[:, None], -normal, normal)
    shade = AMBIENT * colors
    for light in lights or DEFAULT_LIGHTS:
        towards = -np.asarray(light["direction"], dtype=np.float64)
        towards /= np.linalg.norm(towards)
        tint = np.asarray(light["color"], dtype=np.float64) * float(light["intensity"])
        lambert = np.clip((normal * towards).sum(axis=1), 0, None)[:, None]
        half = (towards + back) / (np.linalg.norm(towards + back) + 1e-12)
        spec = np.clip((normal * half).sum(axis=1), 0, None)[:, None] ** 32 * 0.12
        shade = shade + (lambert * colors + spec * (lambert > 0)) * tint
    return np.clip(shade, 0, 1), normal


def rasterise(
    verts: np.ndarray,
    tris: np.ndarray,
    colors: np.ndarray,
    lights: list[Json],
    camera: Json,
    size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(size x size x 3 uint8 image, size x size bool mask): a perspective z-buffer over
    triangles clipped at the near plane, flat shaded, outlined at creases and silhouettes, on
    white. Scan conversion is vectorised over chunks of candidate pixels (no loop per
    triangle); ties go to the lower triangle index, so output is deterministic."""
    eye, rows = _look_at(camera)
    shade, normals = shade_faces(verts, tris, colors, lights, eye, rows[2])
    focal = 0.5 * size / math.tan(math.radians(camera["fov"]) / 2)
    cam = _mul(verts - eye, rows)[tris]  # (m, 3, 3): camera looks down -z
    near = 1e-3 * max(1.0, float(np.abs(cam).max()) if cam.size else 1.0)
    depth = -cam[:, :, 2] - near
    behind = depth < 0
    nbehind = behind.sum(axis=1)
    keep = nbehind == 0
    parts, ids = [cam[keep]], [np.flatnonzero(keep)]
    for count, odd in ((1, behind), (2, ~behind)):  # clip: the odd vertex out goes first
        sel = np.flatnonzero(nbehind == count)
        if not len(sel):
            continue
        first = np.argmax(odd[sel], axis=1)
        order = (first[:, None] + np.arange(3)[None]) % 3
        t3 = np.take_along_axis(cam[sel], order[:, :, None], axis=1)
        d3 = np.take_along_axis(depth[sel], order, axis=1)
        a, b, c = t3[:, 0], t3[:, 1], t3[:, 2]
        ab = a + (b - a) * (d3[:, 0] / (d3[:, 0] - d3[:, 1]))[:, None]
        ac = a + (c - a) * (d3[:, 0] / (d3[:, 0] - d3[:, 2]))[:, None]
        if count == 1:
            parts += [np.stack([ab, b, c], 1), np.stack([ab, c, ac], 1)]
            ids += [sel, sel]
        else:
            parts.append(np.stack([a, ab, ac], 1))
            ids.append(sel)
    tri_cam = np.concatenate(parts)
    face = np.concatenate(ids)
    z = -tri_cam[:, :, 2]
    sx = tri_cam[:, :, 0] / z * focal + size / 2
    sy = -tri_cam[:, :, 1] / z * focal + size / 2
    invz_buf = np.full(size * size, -np.inf)
    face_buf = np.full(size * size, -1, dtype=np.int64)
    for px, py, b0, b1, b2, tid in _coverage(sx, sy, size):
        invz = b0 / z[tid, 0] + b1 / z[tid, 1] + b2 / z[tid, 2]  # 1/z is linear on screen
        pix = py * size + px
        order = np.lexsort((tid, -invz, pix))  # per pixel: nearest first, then lower index
        pix, invz, tid = pix[order], invz[order], tid[order]
        lead = np.ones(len(pix), dtype=bool)
        lead[1:] = pix[1:] != pix[:-1]
        pix, invz, tid = pix[lead], invz[lead], tid[lead]
        nearer = invz > invz_buf[pix]
        invz_buf[pix[nearer]] = invz[nearer]
        face_buf[pix[nearer]] = face[tid[nearer]]
    mask = face_buf >= 0
    flat = np.empty((size * size, 3))
    flat[:] = BACKGROUND
    flat[mask] = shade[face_buf[mask]]
    normal_img = np.zeros((size * size, 3))
    normal_img[mask] = normals[face_buf[mask]]
    depth = np.where(mask, 1.0 / np.where(mask, invz_buf, 1.0), 0.0)
    image, mask = flat.reshape(size, size, 3), mask.reshape(size, size)
    edges = outline(mask, normal_img.reshape(size, size, 3), depth.reshape(size, size))
    image[edges] *= 0.35
    return (image * 255 + 0.5).astype(np.uint8), mask


def outline(mask: np.ndarray, normals: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Pixels on a silhouette (the covered side), a crease (normals turn by more than 35
    degrees) or an occlusion edge (depth jumps by more than 5%)."""
    edges = np.zeros(mask.shape, dtype=bool)
    for axis in (0, 1):
        head = (slice(None, -1), slice(None)) if axis == 0 else (slice(None), slice(None, -1))
        tail = (slice(1, None), slice(None)) if axis == 0 else (slice(None), slice(1, None))
        m0, m1 = mask[head], mask[tail]
        d0, d1 = depth[head], depth[tail]
        turn = (normals[head] * normals[tail]).sum(axis=-1) < EDGE_COS
        crease = m0 & m1 & (turn | (np.abs(d0 - d1) > 0.05 * np.minimum(d0, d1)))
        border = m0 != m1
        edges[head] |= crease | (border & m0)
        edges[tail] |= border & m1
    return edges


def _spans(
    sx: np.ndarray, sy: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(triangle, row, first column, count) of the row spans of candidate pixels: each row a
    triangle crosses, from its leftmost to its rightmost edge there, widened by a pixel (the
    barycentric test decides)."""
    ymin = np.clip(np.floor(sy.min(axis=1)), 0, size).astype(np.int64)
    ymax = np.clip(np.ceil(sy.max(axis=1)), -1, size - 1).astype(np.int64)
    onscreen = (sx.max(axis=1) >= 0) & (sx.min(axis=1) < size) & (ymax >= ymin)
    rows = np.where(onscreen, ymax - ymin + 1, 0)
    tri = np.repeat(np.arange(len(sx)), rows)
    row = ymin[tri] + np.arange(int(rows.sum())) - np.repeat(np.cumsum(rows) - rows, rows)
    cy = row + 0.5
    left = np.full(len(tri), np.inf)
    right = np.full(len(tri), -np.inf)
    for i, j in ((0, 1), (1, 2), (2, 0)):
        xa, ya, xb, yb = sx[tri, i], sy[tri, i], sx[tri, j], sy[tri, j]
        crosses = (np.minimum(ya, yb) - 0.5 <= cy) & (cy <= np.maximum(ya, yb) + 0.5)
        flat = yb == ya
        x = xa + np.clip((cy - ya) / np.where(flat, 1.0, yb - ya), 0, 1) * (xb - xa)
        xl = np.where(flat, np.minimum(xa, xb), x)
        xr = np.where(flat, np.maximum(xa, xb), x)
        left = np.where(crosses, np.minimum(left, xl), left)
        right = np.where(crosses, np.maximum(right, xr), right)
    first = np.clip(np.floor(left - 0.5) - 1, 0, size).astype(np.int64)
    last = np.clip(np.ceil(right - 0.5) + 1, -1, size - 1).astype(np.int64)
    count = np.where(np.isfinite(left), np.maximum(last - first + 1, 0), 0)
    return tri, row, first, count


def _coverage(sx: np.ndarray, sy: np.ndarray, size: int, chunk: int = 1 << 20) -> Any:
    """For chunks of row spans: (px, py, b0, b1, b2, triangle) of each pixel centre a
    triangle covers, with its barycentric coordinates; about `chunk` candidates at a time."""
    x0, x1, x2 = sx.T
    y0, y1, y2 = sy.T
    area = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)
    keep = np.abs(area) > 1e-12
    index = np.flatnonzero(keep)
    tri, row, first, count = _spans(sx[keep], sy[keep], size)
    tri = index[tri]
    total = np.cumsum(count)
    start = 0
    while start < len(count):
        base = total[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(total, base + chunk, side="right")))
        cnt = count[start:stop]
        span = np.repeat(np.arange(start, stop), cnt)
        px = first[span] + np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        py = row[span]
        g = tri[span]
        cx, cy = px + 0.5, py + 0.5
        b0 = ((x1[g] - cx) * (y2[g] - cy) - (x2[g] - cx) * (y1[g] - cy)) / area[g]
        b1 = ((x2[g] - cx) * (y0[g] - cy) - (x0[g] - cx) * (y2[g] - cy)) / area[g]
        b2 = 1 - b0 - b1
        inside = (b0 >= 0) & (b1 >= 0) & (b2 >= 0)
        yield px[inside], py[inside], b0[inside], b1[inside], b2[inside], g[inside]
        start = stop


def render_scene(
    scene: Scene,
    size: int,
    view: tuple[float, float] | None,
    bounds: tuple[np.ndarray, np.ndarray] | None = None,
    camera: Json | None = None,
) -> Json:
    """Image, mask and camera of `scene` rendered at `size`: from `view`, else `camera`
    (default: the scene's own), else the default view; `bounds` frames an orbit view (default:
    the scene's bounding box)."""
    verts, tris, runs = surface(scene)
    if bounds is None:
        lo, hi = (np.array(b, dtype=np.float64) for b in _bbox(scene.solid))
    else:
        lo, hi = bounds
    placed = camera_for(scene.camera if camera is None else camera, view, lo, hi)
    if not len(tris):
        image = np.full((size, size, 3), 255, dtype=np.uint8)
        return {"image": image, "mask": np.zeros((size, size), bool), "camera": placed}
    colors = face_colors(scene, runs, len(tris))
    image, mask = rasterise(verts, tris, colors, scene.lights, placed, size)
    return {"image": image, "mask": mask, "camera": placed}


def png(image: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of an (h, w, 3) uint8 array (stdlib only; byte-stable)."""
    height, width, _ = image.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), image.reshape(height, width * 3)], 1)

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )


def silhouette(mask: np.ndarray, cols: int = SILHOUETTE[0], rows: int = SILHOUETTE[1]) -> str:
    """The render's mask as rows of '#' (at least 35% covered) and '.'."""
    h, w = mask.shape
    ys = np.linspace(0, h, rows + 1).astype(int)
    xs = np.linspace(0, w, cols + 1).astype(int)
    cover = np.add.reduceat(np.add.reduceat(mask.astype(np.float64), ys[:-1], 0), xs[:-1], 1)
    cover /= np.outer(np.diff(ys), np.diff(xs))
    return "\n".join("".join("#" if c >= 0.35 else "." for c in row) for row in cover)


def render_reply(scene: Scene, request: Json) -> Json:
    """RENDER: png_b64 (size x size RGB PNG, default 256), silhouette (32 x 16 characters of
    the same mask), view (the azimuth/elevation used, or the scene camera's eye/target) and
    coverage (the fraction of the image the scene covers)."""
    size = request.get("size", 256)
    lo, hi = RENDER_SIZES
    if isinstance(size, bool) or not isinstance(size, int) or not lo <= size <= hi:
        raise RequestError(f"size: must be an integer from {lo} to {hi}")
    view = view_of(request.get("view"))
    shot = render_scene(scene, size, view)
    camera = scene.camera
    if view is None and camera is not None and "eye" in camera:
        described: Json = {"eye": camera["eye"], "target": camera["target"]}
    else:
        if view is None:
            view = (camera["azimuth"], camera["elevation"]) if camera else DEFAULT_VIEW
        described = {"azimuth": view[0], "elevation": view[1]}
    return {
        "png_b64": base64.b64encode(png(shot["image"])).decode("ascii"),
        "silhouette": silhouette(shot["mask"]),
        "view": described,
        "coverage": _r(float(shot["mask"].mean())),
    }


# -- comparison --------------------------------------------------------------------------------
def voxelize(
    verts: np.ndarray, tris: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int = VOXELS
) -> np.ndarray:
    """Solid occupancy (n, n, n) of a closed mesh over [lo, hi], by the parity of crossings of
    a ray along z through each column's cell centres."""
    step = (hi - lo) / n
    grid = (verts - lo) / step - 0.5 + np.array([1.234567e-4, 2.345678e-4, 0.0])
    t = grid[tris]
    x0, x1, x2 = t[:, :, 0].T
    y0, y1, y2 = t[:, :, 1].T
    z0, z1, z2 = t[:, :, 2].T
    area = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)
    xmin = np.clip(np.ceil(np.minimum(np.minimum(x0, x1), x2)), 0, n).astype(np.int64)
    xmax = np.clip(np.floor(np.maximum(np.maximum(x0, x1), x2)), -1, n - 1).astype(np.int64)
    ymin = np.clip(np.ceil(np.minimum(np.minimum(y0, y1), y2)), 0, n).astype(np.int64)
    ymax = np.clip(np.floor(np.maximum(np.maximum(y0, y1), y2)), -1, n - 1).astype(np.int64)
    width = np.clip(xmax - xmin + 1, 0, None)
    height = np.clip(ymax - ymin + 1, 0, None)
    count = np.where(np.abs(area) > 1e-12, width * height, 0)
    tid = np.repeat(np.arange(len(tris)), count)
    local = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    px = xmin[tid] + local % width[tid]
    py = ymin[tid] + local // width[tid]
    a = area[tid]
    b0 = ((x1[tid] - px) * (y2[tid] - py) - (x2[tid] - px) * (y1[tid] - py)) / a
    b1 = ((x2[tid] - px) * (y0[tid] - py) - (x0[tid] - px) * (y2[tid] - py)) / a
    b2 = 1 - b0 - b1
    inside = (b0 >= 0) & (b1 >= 0) & (b2 >= 0)
    zc = (b0 * z0[tid] + b1 * z1[tid] + b2 * z2[tid])[inside]
    cell = np.clip(np.ceil(zc), 0, n).astype(np.int64)  # first cell centre above the crossing
    hist = np.zeros((n, n, n + 1), np.int32)
    np.add.at(hist, (px[inside], py[inside], cell), 1)
    return (np.cumsum(hist, axis=2)[:, :, :n] & 1).astype(bool)


def volume_iou(a: Scene, b: Scene, method: str) -> tuple[float, str]:
    """(IoU, "exact" or "voxel"): exact from boolean volumes, else 64^3 voxels over the union
    of both bounding boxes (padded 2%)."""
    va, vb = a.solid.volume(), b.solid.volume()
    if method == "exact":
        with contextlib.suppress(Exception):
            inter = (a.solid ^ b.solid).volume()
            union = va + vb - inter
            return (inter / union if union > 0 else 1.0), "exact"
    lo = np.minimum(_bbox(a.solid)[0], _bbox(b.solid)[0])
    hi = np.maximum(_bbox(a.solid)[1], _bbox(b.solid)[1])
    pad = np.maximum((hi - lo) * 0.02, 1e-6)
    lo, hi = lo - pad, hi + pad
    grids = []
    for scene in (a, b):
        verts, tris, _ = surface(scene)
        grids.append(voxelize(verts, tris, lo, hi) if len(tris) else np.zeros((VOXELS,) * 3, bool))
    union_count = int((grids[0] | grids[1]).sum())
    return (int((grids[0] & grids[1]).sum()) / union_count if union_count else 1.0), "voxel"


def image_similarity(a: Scene, b: Scene) -> float:
    """1 - the mean absolute RGB difference (0..1) of two 128 x 128 renders from the same
    camera (the target's, else the default 3/4 view, framed on both bounding boxes), over the
    pixels either covers: the white background does not count."""
    lo = np.minimum(_bbox(a.solid)[0], _bbox(b.solid)[0]).astype(np.float64)
    hi = np.maximum(_bbox(a.solid)[1], _bbox(b.solid)[1]).astype(np.float64)
    camera = b.camera or {"azimuth": DEFAULT_VIEW[0], "elevation": DEFAULT_VIEW[1], "fov": FOV_DEG}
    shots = [render_scene(s, COMPARE_SIZE, None, (lo, hi), camera) for s in (a, b)]
    covered = shots[0]["mask"] | shots[1]["mask"]
    if not covered.any():
        return 1.0
    diff = np.abs(shots[0]["image"].astype(np.int64) - shots[1]["image"].astype(np.int64))
    return 1.0 - float(diff[covered].mean()) / 255.0


def centroid(solid: Any) -> np.ndarray:
    """The centre of mass of a closed solid (signed tetrahedra from the origin)."""
    mesh = solid.to_mesh()
    verts = np.array(mesh.vert_properties, dtype=np.float64)[:, :3]
    t = verts[np.array(mesh.tri_verts, dtype=np.int64).reshape(-1, 3)]
    six_v = np.einsum("ij,ij->i", t[:, 0], np.cross(t[:, 1], t[:, 2]))
    total = float(six_v.sum())
    if abs(total) < 1e-12:
        return verts.mean(axis=0) if len(verts) else np.zeros(3)
    return np.asarray((six_v[:, None] * t.sum(axis=1)).sum(axis=0) / (4 * total))


def feature_report(scene: Scene, target: Scene, checks: Json) -> tuple[bool, str, list[Json]]:
    """Every cut the target states (each cutter of its differences), checked by position and
    size: in the stock around the cut (the body it cuts, within the cutter's box grown by
    FEATURE_MARGIN of its size), the scene's void must match the target's void: IoU at least
    feature_iou_min, centres within feature_pos_tol of the cut's size, volumes within
    feature_size_tol. A cut missing, too small, too large or misplaced fails, however small a
    share of the whole volume it is. (passed, detail, one record per feature)."""
    records: list[Json] = []
    for feature in target.features or []:
        b = feature.cutter.bounding_box()
        lo, hi = np.array(b[:3]), np.array(b[3:])
        grow = np.maximum((hi - lo) * FEATURE_MARGIN, 1e-6)
        zone = m3d.Manifold.cube((hi - lo + 2 * grow).tolist()).translate((lo - grow).tolist())
        stock = feature.base ^ zone
        want, have = stock - target.solid, stock - scene.solid
        v_want, v_have = want.volume(), have.volume()
        if v_want <= 1e-9 * max(stock.volume(), 1e-12):
            continue  # the cut removes nothing from the target: nothing is stated there
        w_lo, w_hi = (np.array(v) for v in _bbox(want))
        size = max(float((w_hi - w_lo).min()), 1e-9)
        inter = (want ^ have).volume() if v_have > 0 else 0.0
        iou = inter / (v_want + v_have - inter)
        off = float(np.linalg.norm(centroid(have) - centroid(want))) if v_have > 0 else math.inf
        ratio = v_have / v_want
        ok = (
            iou >= float(checks["feature_iou_min"])
            and off <= float(checks["feature_pos_tol"]) * size
            and abs(ratio - 1) <= float(checks["feature_size_tol"])
        )
        records.append(
            {
                "path": feature.path,
                "passed": bool(ok),
                "iou": _r(iou),
                "offset": _r(off) if math.isfinite(off) else None,
                "volume": {"scene": _r(v_have), "target": _r(v_want)},
                "size": _r(size),
            }
        )
    failed = [r for r in records if not r["passed"]]
    if not records:
        return True, "the target states no cut", records
    if not failed:
        return True, f"{len(records)} cut(s) in place", records
    shown = [
        f"{r['path']}: void IoU {r['iou']:.2f}, volume {r['volume']['scene']:g} vs "
        f"{r['volume']['target']:g}, centre "
        + ("missing" if r["offset"] is None else f"off by {r['offset']:g}")
        for r in failed[:4]
    ]
    more = f" (and {len(failed) - 4} more)" if len(failed) > 4 else ""
    detail = f"{len(failed)} of {len(records)} cut(s) wrong: " + "; ".join(shown) + more
    return False, detail, records


def surface_points(solid: Any, n: int = SURFACE_SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """(points, triangles (m, 3, 3)): `n` points drawn on the surface by area (seeded: the same
    mesh gives the same points) and every vertex."""
    mesh = solid.to_mesh()
    verts = np.array(mesh.vert_properties, dtype=np.float64)[:, :3]
    t = verts[np.array(mesh.tri_verts, dtype=np.int64).reshape(-1, 3)]
    if not len(t):
        return np.zeros((0, 3)), np.zeros((0, 3, 3))
    area = 0.5 * np.linalg.norm(np.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]), axis=1)
    total = float(area.sum())
    rng = np.random.default_rng(SURFACE_SEED)
    pick = rng.choice(len(t), size=n, p=area / total) if total > 0 else np.zeros(n, np.int64)
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1
    u, v = np.where(flip, 1 - u, u), np.where(flip, 1 - v, v)
    tri = t[pick]
    drawn = tri[:, 0] + u[:, None] * (tri[:, 1] - tri[:, 0]) + v[:, None] * (tri[:, 2] - tri[:, 0])
    return np.concatenate([drawn, verts]), t


def to_triangles(points: np.ndarray, tris: np.ndarray, budget: int = 1 << 18) -> np.ndarray:
    """For each point (k, 3), its exact distance to the nearest of the triangles (m, 3, 3):
    the closest point of each triangle by its Voronoi regions (vertex, edge or face)."""
    out = np.empty(len(points))
    a, b, c = tris[:, 0], tris[:, 1], tris[:, 2]
    ab, ac, bc = b - a, c - a, c - b
    step = max(1, budget // max(len(tris), 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(0, len(points), step):
            p = points[i : i + step, None, :]
            ap, bp, cp = p - a, p - b, p - c
            d1, d2 = (ab * ap).sum(-1), (ac * ap).sum(-1)
            d3, d4 = (ab * bp).sum(-1), (ac * bp).sum(-1)
            d5, d6 = (ab * cp).sum(-1), (ac * cp).sum(-1)
            va, vb, vc = d3 * d6 - d5 * d4, d5 * d2 - d1 * d6, d1 * d4 - d3 * d2
            denom = va + vb + vc
            v, w = vb / denom, vc / denom
            closest = a + ab * v[..., None] + ac * w[..., None]  # inside the face
            regions = [  # later ones win: vertex, then edge, regions override the face
                ((va <= 0) & (d4 - d3 >= 0) & (d5 - d6 >= 0),
                 b + bc * ((d4 - d3) / ((d4 - d3) + (d5 - d6)))[..., None]),
                ((vb <= 0) & (d2 >= 0) & (d6 <= 0), a + ac * (d2 / (d2 - d6))[..., None]),
                ((vc <= 0) & (d1 >= 0) & (d3 <= 0), a + ab * (d1 / (d1 - d3))[..., None]),
                ((d6 >= 0) & (d5 <= d6), np.broadcast_to(c, closest.shape)),
                ((d3 >= 0) & (d4 <= d3), np.broadcast_to(b, closest.shape)),
                ((d1 <= 0) & (d2 <= 0), np.broadcast_to(a, closest.shape)),
            ]  # fmt: skip
            for mask, at in regions:
                closest = np.where(mask[..., None], at, closest)
            gap = np.linalg.norm(p - closest, axis=-1)
            corners = np.sqrt(np.minimum(np.minimum((ap * ap).sum(-1), (bp * bp).sum(-1)),
                                         (cp * cp).sum(-1)))  # fmt: skip
            gap = np.where(np.isfinite(gap), np.minimum(gap, corners), corners)
            out[i : i + step] = gap.min(axis=1)
    return out


def nearest(a: np.ndarray, b: np.ndarray, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """(for each point of `a` the distance to the nearest point of `b`, and the same from `b`
    to `a`), by |a|^2 + |b|^2 - 2 a.b: centre both sets near the origin first (the
    cancellation's error grows with |a|^2)."""
    there, back = np.empty(len(a)), np.full(len(b), np.inf)
    b2 = np.einsum("ij,ij->i", b, b)
    for i in range(0, len(a), chunk):
        part = a[i : i + chunk]
        d2 = np.einsum("ij,ij->i", part, part)[:, None] + b2[None, :] - 2.0 * (part @ b.T)
        there[i : i + chunk] = d2.min(axis=1)
        np.minimum(back, d2.min(axis=0), out=back)
    return np.sqrt(np.maximum(there, 0.0)), np.sqrt(np.maximum(back, 0.0))


def surface_distance(scene: Scene, target: Scene, checks: Json) -> tuple[bool, str, Json]:
    """The symmetric Hausdorff distance between the two surfaces, over points sampled on each
    (`surface_points`), and their Chamfer distance (the mean). Passes when the Hausdorff
    distance is within surface_tol of the target's bounding-box diagonal. A point's distance to
    the other side's samples bounds its distance to that surface from above; each point past
    the limit is measured exactly against the other side's triangles (`to_triangles`), the
    farthest first, so the sampling's spacing never fails a model and never hides a gap."""
    mine, my_tris = surface_points(scene.solid)
    theirs, their_tris = surface_points(target.solid)
    if not len(mine) or not len(theirs):
        return False, "an empty surface", {"chamfer": None, "hausdorff": None}
    middle = (mine.mean(axis=0) + theirs.mean(axis=0)) / 2
    mine, theirs = mine - middle, theirs - middle
    my_tris, their_tris = my_tris - middle, their_tris - middle
    there, back = nearest(mine, theirs)
    lo, hi = (np.array(v) for v in _bbox(target.solid))
    limit = float(checks["surface_tol"]) * float(np.linalg.norm(hi - lo))
    worst = 0.0  # the largest exact distance past the limit
    for points, bound, tris in ((mine, there, their_tris), (theirs, back, my_tris)):
        order = np.argsort(-bound)
        order = order[bound[order] > limit]
        for i in range(0, len(order), 256):
            rows = order[i : i + 256]
            bound[rows] = to_triangles(points[rows], tris)
            worst = max(worst, float(bound[rows].max()))
            if worst > limit:
                break  # one point past the limit decides (the other side is still looked at)
    chamfer = (float(there.mean()) + float(back.mean())) / 2  # of upper bounds: at most this
    if worst > limit:
        detail = f"surface distance: Hausdorff at least {worst:.3g}, allowed {limit:.3g}"
        return False, detail, {"chamfer": _r(chamfer), "hausdorff": _r(worst)}
    hausdorff = max(float(there.max()), float(back.max()))
    detail = f"surface distance: Hausdorff at most {hausdorff:.3g} (allowed {limit:.3g})"
    return True, detail, {"chamfer": _r(chamfer), "hausdorff": _r(hausdorff)}


def _surface_colors(scene: Scene) -> dict[str | None, tuple[float, float, float]]:
    _, _, runs = surface(scene)
    names = {name for _, _, name in runs}
    return {n: scene.materials[n] if n is not None else DEFAULT_COLOR for n in names}


def materials_match(a: Scene, b: Scene, checks: Json) -> tuple[bool, str]:
    """Whether the scene's surface colours match the target's (each within color_tol), and
    with material_names, under the same names; always when the target names no material."""
    mine, theirs = _surface_colors(a), _surface_colors(b)
    tol = float(checks["color_tol"])
    if not any(n is not None for n in theirs):
        return True, "the target names no material"

    def close(c1: tuple[float, ...], c2: tuple[float, ...]) -> bool:
        return max(abs(x - y) for x, y in zip(c1, c2, strict=True)) <= tol

    if checks["material_names"]:
        if set(mine) != set(theirs):
            want = sorted(str(n) for n in theirs)
            return False, f"materials {sorted(str(n) for n in mine)}, want {want}"
        off = [str(n) for n in theirs if not close(mine[n], theirs[n])]
        return not off, f"colours differ: {off}" if off else "names and colours match"
    missing = [c for c in theirs.values() if not any(close(c, m) for m in mine.values())]
    extra = [c for c in mine.values() if not any(close(c, t) for t in theirs.values())]
    if missing or extra:
        return False, f"colours missing {_rgb(missing)}, not in the target {_rgb(extra)}"
    return True, f"{len(theirs)} colour(s) match"


def _rgb(colors: list[tuple[float, float, float]]) -> list[list[float]]:
    return sorted([_r(v) for v in c] for c in colors)


def lights_match(a: Scene, b: Scene, checks: Json) -> tuple[bool, str]:
    """Whether each target light has its own scene light of about the same direction,
    intensity and colour (and the counts agree); always when the target sets no light."""
    if not b.lights:
        return True, "the target sets no light"
    if len(a.lights) != len(b.lights):
        return False, f"{len(a.lights)} light(s), want {len(b.lights)}"
    free = list(range(len(a.lights)))
    cos_tol = math.cos(math.radians(float(checks["light_angle_deg"])))
    share, tint_tol = float(checks["light_intensity_tol"]), float(checks["color_tol"])
    for j, want in enumerate(b.lights):  # each in turn takes the closest free light that fits
        fits = []
        for i in free:
            have = a.lights[i]
            cos = sum(x * y for x, y in zip(have["direction"], want["direction"], strict=True))
            near = abs(have["intensity"] - want["intensity"]) <= share * want["intensity"] + 1e-9
            tint = max(abs(x - y) for x, y in zip(have["color"], want["color"], strict=True))
            if cos >= cos_tol and near and tint <= tint_tol:
                fits.append((-cos, i))
        if not fits:
            return False, f"no light matches the target's lights[{j}]"
        free.remove(min(fits)[1])
    return True, f"{len(b.lights)} light(s) match"


def _checks(value: Any) -> Json:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise RequestError("checks: must be an object")
    out = dict(CHECKS)
    for key, given in value.items():
        if key not in CHECKS:
            raise RequestError(f"checks: unknown key {key!r} (keys: {', '.join(CHECKS)})")
        if key == "material_names":
            if not isinstance(given, bool):
                raise RequestError("checks.material_names: must be true or false")
        elif key == "iou_method":
            if given not in ("exact", "voxel"):
                raise RequestError("checks.iou_method: must be 'exact' or 'voxel'")
        elif not (_is_num(given) and given >= 0):
            raise RequestError(f"checks.{key}: must be a number >= 0")
        out[key] = given
    return out


def compare(scene: Scene, target: Scene, checks: Json) -> Json:
    """COMPARE (scene against target, built with its features): iou and iou_method, volume,
    dims ({x, y, z: {scene, target}}), center_offset, holes, components, watertight (each
    {scene, target}), materials_ok, lights_ok, image_similarity (see `image_similarity`),
    features (`feature_report`'s records), surface ({chamfer, hausdorff}), constraints (name,
    passed, detail: iou, dims, volume, holes, components, watertight, materials, lights,
    features, surface)."""
    mine, theirs = summary(scene), summary(target)
    iou, method = volume_iou(scene, target, checks["iou_method"])
    cuts_ok, cuts_detail, cuts = feature_report(scene, target, checks)
    near_ok, near_detail, distance = surface_distance(scene, target, checks)
    dims = {
        axis: {"scene": mine["size"][i], "target": theirs["size"][i]}
        for i, axis in enumerate("xyz")
    }
    centre = [
        _r(
            (mine["bbox"][0][i] + mine["bbox"][1][i] - theirs["bbox"][0][i] - theirs["bbox"][1][i])
            / 2
        )
        for i in range(3)
    ]
    off_axes = [
        f"{axis} {d['scene']:g} vs {d['target']:g}"
        for axis, d in dims.items()
        if abs(d["scene"] - d["target"]) > float(checks["dims_tol"]) * abs(d["target"]) + 1e-6
    ]
    vol_s, vol_t = mine["volume"], theirs["volume"]
    vol_ok = abs(vol_s - vol_t) <= float(checks["volume_tol"]) * abs(vol_t) + 1e-9
    mat_ok, mat_detail = materials_match(scene, target, checks)
    light_ok, light_detail = lights_match(scene, target, checks)

    def pair(key: str) -> Json:
        return {"scene": mine[key], "target": theirs[key]}

    constraints = [
        _constraint(
            "iou",
            iou >= float(checks["iou_min"]),
            f"volume IoU {iou:.4f} ({method}), need >= {checks['iou_min']:g}",
        ),
        _constraint("dims", not off_axes, "; ".join(off_axes) or "extents match"),
        _constraint("volume", vol_ok, f"volume {vol_s:g}, target {vol_t:g}"),
        _constraint(
            "holes",
            mine["holes"] == theirs["holes"],
            f"{mine['holes']} through-hole(s), target {theirs['holes']}",
        ),
        _constraint(
            "components",
            mine["components"] == theirs["components"],
            f"{mine['components']} body(ies), target {theirs['components']}",
        ),
        _constraint(
            "watertight",
            mine["watertight"],
            "closed 2-manifold" if mine["watertight"] else "not a closed solid",
        ),
        _constraint("materials", mat_ok, mat_detail),
        _constraint("lights", light_ok, light_detail),
        _constraint("features", cuts_ok, cuts_detail),
        _constraint("surface", near_ok, near_detail),
    ]
    return {
        "iou": _r(iou),
        "iou_method": method,
        "volume": pair("volume"),
        "dims": dims,
        "center_offset": centre,
        "holes": pair("holes"),
        "components": pair("components"),
        "watertight": pair("watertight"),
        "materials_ok": mat_ok,
        "lights_ok": light_ok,
        "image_similarity": _r(image_similarity(scene, target)),
        "features": cuts,
        "surface": distance,
        "constraints": constraints,
        "summary": mine,
    }


def _constraint(name: str, passed: bool, detail: str) -> Json:
    return {"name": name, "passed": bool(passed), "detail": detail}


# -- scripts -----------------------------------------------------------------------------------
SCRIPT = "<script>"
SAFE_BUILTINS = {
    *("abs", "all", "any", "bool", "callable", "dict", "divmod", "enumerate", "filter"),
    *("float", "format", "frozenset", "hash", "int", "isinstance", "issubclass", "iter", "len"),
    *("list", "map", "max", "min", "next", "object", "pow", "print", "property", "range"),
    *("repr", "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum"),
    *("super", "tuple", "zip", "classmethod", "__build_class__", "NotImplemented"),
    *("Exception", "ArithmeticError", "AssertionError", "IndexError", "KeyError"),
    *("RuntimeError", "StopIteration", "TypeError", "ValueError", "ZeroDivisionError"),
}
SCRIPT_MODULES = {"math"}
# Attribute names a script may not use: the routes from the objects it is handed to frames,
# code, globals and the interpreter (str.format reaches attributes by name, so it goes too).
CONFINED_PREFIXES = ("_", "gi_", "cr_", "ag_", "f_", "tb_", "co_")
CONFINED_NAMES = {"format", "format_map", "mro"}


class Node(dict):  # type: ignore[type-arg]
    """A shape made by a script: a plain dict (it is the scene's JSON) whose transforms return
    new shapes, and + (union), - (difference), & (intersection)."""

    def translate(self, v: Any) -> Node:
        return ScriptAPI.translate(self, v)

    def rotate(self, v: Any) -> Node:
        return ScriptAPI.rotate(self, v)

    def scale(self, v: Any) -> Node:
        return ScriptAPI.scale(self, v)

    def __add__(self, other: Any) -> Node:
        return ScriptAPI.union(self, other)

    def __sub__(self, other: Any) -> Node:
        return ScriptAPI.difference(self, other)

    def __and__(self, other: Any) -> Node:
        return ScriptAPI.intersection(self, other)


def _shape(kind: str, **fields: Any) -> Node:
    """A node whose fields and values are checked where the script made it."""
    node = Node(type=kind, **{k: v for k, v in fields.items() if v is not None})
    check_fields(node, f"{kind}()")
    if kind not in BOOLEANS:
        primitive(kind, node, f"{kind}()")
    elif len(node["children"]) < BOOLEANS[kind][1]:
        raise SceneError(f"{kind}() needs at least {BOOLEANS[kind][1]} shapes")
    return node


def _shapes(items: tuple[Any, ...], what: str) -> list[Node]:
    """Shapes given one by one or in lists, as nodes."""
    out: list[Node] = []
    for item in items:
        for shape in item if isinstance(item, list | tuple) else [item]:
            if not isinstance(shape, dict):
                raise SceneError(
                    f"{what}: expected a shape (from box(), union()...), not {type(shape).__name__}"
                )
            out.append(shape if isinstance(shape, Node) else Node(shape))
    return out


def _listed(value: Any) -> Any:
    return [_listed(v) for v in value] if isinstance(value, list | tuple) else value


class ScriptAPI:
    """What a structure script sees, besides `math` and safe builtins. Shapes:
    box(size, center=False) (size: [x, y, z] or one number), cylinder(radius, height,
    segments=48, center=False), cone(radius, height, top_radius=0, segments=48, center=False),
    sphere(radius, segments=48), extrude(points, height, center=False); union(*shapes),
    difference(base, *cutters), intersection(*shapes). translate(shape, [x, y, z]),
    rotate(shape, [rx, ry, rz]) (degrees) and scale(shape, s) return new shapes, as do
    shape.translate(...), a + b, a - b and a & b. set_material(shape, name, color=None) and
    set_name(shape, name) change the shape. material(name, [r, g, b]); add_light([dx, dy, dz],
    intensity=1.0, color=[1, 1, 1]); set_camera(azimuth=, elevation=) or (eye=, target=);
    add(*shapes) puts shapes in the scene (else the variable `result` is the scene)."""

    def __init__(self) -> None:
        self.objects: list[Node] = []
        self.materials: Json = {}
        self.lights: list[Json] = []
        self.camera: Json | None = None

    @staticmethod
    def box(size: Any, center: bool = False) -> Node:
        return _shape("box", size=[size] * 3 if _is_num(size) else _listed(size), center=center)

    @staticmethod
    def cylinder(radius: Any, height: Any, segments: Any = None, center: bool = False) -> Node:
        return _shape("cylinder", radius=radius, height=height, segments=segments, center=center)

    @staticmethod
    def cone(
        radius: Any, height: Any, top_radius: Any = 0.0, segments: Any = None, center: bool = False
    ) -> Node:
        return _shape(
            "cone",
            radius=radius,
            height=height,
            top_radius=top_radius,
            segments=segments,
            center=center,
        )

    @staticmethod
    def sphere(radius: Any, segments: Any = None) -> Node:
        return _shape("sphere", radius=radius, segments=segments)

    @staticmethod
    def extrude(points: Any, height: Any, center: bool = False) -> Node:
        return _shape("extrude", points=_listed(points), height=height, center=center)

    @staticmethod
    def union(*shapes: Any) -> Node:
        return _shape("union", children=_shapes(shapes, "union()"))

    @staticmethod
    def difference(base: Any, *cutters: Any) -> Node:
        children = _shapes((base,), "difference()") + _shapes(cutters, "difference()")
        return _shape("difference", children=children)

    @staticmethod
    def intersection(*shapes: Any) -> Node:
        return _shape("intersection", children=_shapes(shapes, "intersection()"))

    # On one node: scale, then rotate, then translate; a transform out of that order nests.
    @staticmethod
    def translate(shape: Any, v: Any) -> Node:
        move = _vec(_listed(v), "translate()", "translate")
        out = Node(_shapes((shape,), "translate()")[0])
        if "translate" in out:
            move = [a + b for a, b in zip(out["translate"], move, strict=True)]
        out["translate"] = move
        return out

    @staticmethod
    def rotate(shape: Any, v: Any) -> Node:
        angles = _vec(_listed(v), "rotate()", "rotate (degrees)")
        out = Node(_shapes((shape,), "rotate()")[0])
        if {"rotate", "translate"} & set(out):
            out = Node(type="union", children=[out])
        out["rotate"] = angles
        return out

    @staticmethod
    def scale(shape: Any, v: Any) -> Node:
        factors = scale_factors(_listed(v), "scale()")
        out = Node(_shapes((shape,), "scale()")[0])
        if {"scale", "rotate", "translate"} & set(out):
            out = Node(type="union", children=[out])
        out["scale"] = factors
        return out

    def set_material(self, shape: Any, name: Any, color: Any = None) -> Node:
        if not isinstance(name, str):
            raise SceneError("set_material(): the name must be a string")
        if color is not None:
            self.material(name, color)
        node = _shapes((shape,), "set_material()")[0]
        node["material"] = name
        return node

    @staticmethod
    def set_name(shape: Any, name: Any) -> Node:
        node = _shapes((shape,), "set_name()")[0]
        node["name"] = name
        return node

    def material(self, name: Any, color: Any) -> str:
        if not isinstance(name, str):
            raise SceneError("material(): the name must be a string")
        self.materials[name] = {"color": list(_color(_listed(color), "material()", "color"))}
        return name

    def add_light(self, direction: Any, intensity: Any = 1.0, color: Any = (1.0, 1.0, 1.0)) -> None:
        light = {"direction": _listed(direction), "intensity": intensity, "color": _listed(color)}
        check_lights([light], "add_light()")
        self.lights.append(light)

    def set_camera(self, **camera: Any) -> None:
        self.camera = {k: _listed(v) for k, v in camera.items()}
        check_camera(self.camera, "set_camera()")

    def add(self, *shapes: Any) -> None:
        self.objects.extend(_shapes(shapes, "add()"))

    def namespace(self) -> Json:
        names = [n for n in vars(ScriptAPI) if n[0] != "_" and n not in ("namespace", "scene")]
        safe = {name: getattr(builtins, name) for name in SAFE_BUILTINS if hasattr(builtins, name)}
        safe["__import__"] = _script_import
        space: Json = {name: getattr(self, name) for name in names}
        space.update({"__builtins__": safe, "__name__": "__script__", "math": math})
        return space

    def scene(self, space: Json) -> Json:
        objects = self.objects
        if not objects and "result" in space:
            objects = _shapes((space["result"],), "result")
        if not objects:
            raise SceneError("it added no shape: call add(shape), or set result")
        scene: Json = {"objects": objects}
        if self.materials:
            scene["materials"] = self.materials
        if self.lights:
            scene["lights"] = self.lights
        if self.camera is not None:
            scene["camera"] = self.camera
        return scene


def _script_import(name: str, *args: Any, **kwargs: Any) -> Any:
    if name not in SCRIPT_MODULES:
        raise ImportError(f"a structure script may import only: {', '.join(SCRIPT_MODULES)}")
    return __import__(name, *args, **kwargs)


def confine(tree: ast.AST) -> None:
    """Refuse a script that names what lies past the scene API: an attribute (or a class
    pattern's attribute) in CONFINED_PREFIXES or CONFINED_NAMES, or a dunder name such as
    `__builtins__`. SceneError "script line N: ..." names the first one."""
    for node in ast.walk(tree):
        found: list[str] = []
        if isinstance(node, ast.Attribute):
            found = [node.attr]
        elif isinstance(node, ast.MatchClass):
            found = list(node.kwd_attrs)
        elif isinstance(node, ast.Name) and node.id.startswith("__"):
            raise SceneError(
                f"script line {node.lineno}: the name {node.id!r} is not part of the scene API"
            )
        for name in found:
            if name.startswith(CONFINED_PREFIXES) or name in CONFINED_NAMES:
                line = getattr(node, "lineno", "?")
                raise SceneError(
                    f"script line {line}: the attribute {name!r} is not part of the scene API"
                )


def run_script(code: Any) -> tuple[Json, str]:
    """(scene JSON, what the script printed) of a structure script. A failure is a SceneError
    "script line N: Type: message" (N: the script's last line in the traceback)."""
    if not isinstance(code, str) or not code.strip():
        raise SceneError("script: code must be a non-empty string")
    api = ScriptAPI()
    space = api.namespace()
    printed = io.StringIO()
    try:
        tree = ast.parse(code, SCRIPT)
    except SyntaxError as exc:
        raise SceneError(f"script line {exc.lineno}: SyntaxError: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, nesting past the parser
        raise SceneError(f"script: cannot be parsed: {type(exc).__name__}") from None
    confine(tree)
    try:
        compiled = compile(tree, SCRIPT, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise SceneError(f"script: cannot be compiled: {type(exc).__name__}: {exc}") from None
    try:
        with contextlib.redirect_stdout(printed):
            exec(compiled, space)
        scene = json.loads(json.dumps(api.scene(space)))  # plain JSON, a copy
    except BaseException as exc:  # whatever the script raised, SystemExit included, is its own
        if isinstance(exc, KeyboardInterrupt):
            raise
        lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == SCRIPT]
        where = f"script line {lines[-1]}" if lines else "script"
        kind = "" if isinstance(exc, SceneError) else f"{type(exc).__name__}: "
        raise SceneError(f"{where}: {kind}{exc}") from None
    return scene, printed.getvalue()[-2000:]


# -- requests ---------------------------------------------------------------------------------
def handle(request: Any) -> Json:
    """One request {"op": ...}. A SCENE is always data (the scene's JSON), never code.
    build:   {"scene"} -> {"summary"}
    render:  {"scene", "size"?, "view"?} -> {"summary", "png_b64", "silhouette", "view",
             "coverage"}; view: a preset (iso, front, back, left, right, top, bottom) or
             {"azimuth", "elevation"} in degrees (azimuth from +x towards +y, z up)
    compare: {"scene", "target", "checks"?} -> `compare`'s fields (checks: `CHECKS`)
    script:  {"code"} -> {"scene", "printed"}: only the scene the script made, as data, and
             what it printed. A script's run measures nothing: its process is the script's,
             so its caller builds the scene it made in a run of its own (a "build")."""
    if not isinstance(request, dict):
        raise RequestError("request: must be a JSON object with 'op'")
    op = request.get("op")
    if op == "script":
        scene, printed = run_script(request.get("code"))
        return {"scene": scene, "printed": printed}
    if op not in ("build", "render", "compare"):
        raise RequestError(f"request: unknown op {op!r} (build, render, compare or script)")
    for key in ("scene", "target") if op == "compare" else ("scene",):
        if key not in request:
            raise RequestError(f"request: {key!r} is required")
    if op == "compare":
        checks = _checks(request.get("checks"))
        try:
            target = Scene(request["target"], "target", features=True)
        except SceneError as exc:
            text = str(exc)
            raise TargetError(text if text.startswith("target") else f"target: {text}") from None
        return on_scene(lambda: compare(Scene(request["scene"]), target, checks))
    if op == "render":
        view_of(request.get("view"))  # a bad view is the request's fault, whatever the scene
    return on_scene(lambda: _measured(Scene(request["scene"]), request, op))


def _measured(scene: Scene, request: Json, op: str) -> Json:
    reply: Json = {"summary": summary(scene)}
    if op == "render":
        reply.update(render_reply(scene, request))
    return reply


def on_scene(work: Any) -> Json:
    """`work()`, where the model's scene is built, measured or compared: whatever fails there
    fails on the scene (a SceneError naming the exception), never as the kernel's own failure.
    The target and the request are checked before."""
    try:
        return dict(work())
    except SceneError:
        raise
    except Exception as exc:
        tail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        raise SceneError(f"the kernel failed on this scene: {tail[:300]}") from None


def main() -> None:
    """Reply to the request on stdin. With ok false, "failed" says whose input was at fault:
    "scene" (the model's), "target" (the task's) or "request" (the caller's); "internal": true
    marks a failure of the kernel itself (no verdict)."""
    started = time.perf_counter()
    reply: Json
    try:
        request = json.loads(sys.stdin.read())
    except (ValueError, RecursionError) as exc:
        reply = {"ok": False, "error": f"request: not JSON: {exc}", "failed": "request"}
    else:
        try:
            reply = {"ok": True, "error": None, **handle(request)}
        except SceneError as exc:
            failed = {RequestError: "request", TargetError: "target"}.get(type(exc), "scene")
            reply = {"ok": False, "error": str(exc), "failed": failed}
        except Exception as exc:  # the kernel's own failure: never a verdict on the scene
            tail = traceback.format_exception_only(type(exc), exc)[-1].strip()
            reply = {"ok": False, "error": f"kernel error: {tail}", "internal": True}
    reply["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 1)
    sys.stdout.write(json.dumps(reply, allow_nan=False) + "\n")


if __name__ == "__main__":
    main()
