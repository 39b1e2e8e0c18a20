"""The `structure` task: a part or scene described in words, and the target it must match.

    StructureTask(id="bracket/3", prompt="Model a bracket: ...", target={"objects": [...]},
                  reference='{"objects": [...]}', checks={"iou_min": 0.95})

`target` is a scene of the structure kernel (`honing.domains.structure.kernel`: a tree of typed
operations, materials, lights); the model never sees it. `checks` override the kernel's
tolerances (`kernel.CHECKS`: volume IoU, extents, volume, colours, lights, material names);
`required` names the constraints that decide the outcome (default: all of them). `reference`
is a scene (JSON) or a script that builds it. Not covered: building, rendering or judging
(`honing.domains.structure.env` through the kernel in the sandbox).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from honing.tasks.schema import TaskBase

CONSTRAINTS = (
    "iou",
    "dims",
    "volume",
    "holes",
    "components",
    "watertight",
    "materials",
    "lights",
    "features",
    "surface",
)
CHECK_KEYS = (
    "iou_min",
    "dims_tol",
    "volume_tol",
    "color_tol",
    "light_angle_deg",
    "light_intensity_tol",
    "material_names",
    "iou_method",
    "feature_iou_min",
    "feature_pos_tol",
    "feature_size_tol",
    "surface_tol",
)


class StructureTask(TaskBase):
    domain: Literal["structure"] = "structure"
    target: dict[str, Any] = Field(description="The scene to match (kernel JSON), never shown.")
    checks: dict[str, Any] = Field(
        default_factory=dict, description="Tolerances, overriding the kernel's defaults."
    )
    required: list[str] = Field(
        default_factory=lambda: list(CONSTRAINTS),
        description="The constraints the outcome needs (all by default).",
    )
    image_min: float | None = Field(
        None, ge=0, le=1, description="Rendered-image similarity the outcome needs, if any."
    )

    @field_validator("target")
    @classmethod
    def _target_has_objects(cls, value: dict[str, Any]) -> dict[str, Any]:
        objects = value.get("objects")
        if not isinstance(objects, list) or not objects:
            raise ValueError("must be a scene with a non-empty 'objects' list")
        return value

    @field_validator("checks")
    @classmethod
    def _known_checks(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(CHECK_KEYS))
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; known: {', '.join(CHECK_KEYS)}")
        return value

    @field_validator("required")
    @classmethod
    def _known_constraints(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(CONSTRAINTS))
        if unknown:
            raise ValueError(f"unknown constraint(s) {unknown}; known: {', '.join(CONSTRAINTS)}")
        return value
