"""The `structure` domain: model a part or a scene (geometry, materials, lights) with typed
operations or a script, render it, fix it, submit it; judged geometrically, never by a model.

Tasks: `honing.tasks.structure.task.StructureTask`; environment: `honing.envs.structure
.StructureEnv`; the kernel (manifold3d and a numpy renderer) runs in the sandbox with the
"structure" runtime, built from the package index on first use. References are played through
the environment (`play_references`); generator `structure`; built-in set `examples-structure`.
docs/envs.md describes the domain.
"""

from __future__ import annotations

from honing.domains.base import play_references
from honing.envs.structure import StructureEnv
from honing.tasks.builtin import EXAMPLES_DIR
from honing.tasks.domains import Domain, register
from honing.tasks.structure.generate import generate_structure_tasks
from honing.tasks.structure.task import StructureTask


def _generate(n: int, seed: int, phrasings: str) -> list[StructureTask]:
    return generate_structure_tasks(n, seed, phrasings)  # type: ignore[arg-type]  # checked there


DOMAIN = register(
    Domain(
        name="structure",
        task=StructureTask,
        env=StructureEnv,
        check=play_references(StructureEnv),
        generators={"structure": _generate},
        examples=EXAMPLES_DIR / "structure_examples.jsonl",
        description="3D parts and scenes with rendered feedback, checked geometrically",
    )
)
