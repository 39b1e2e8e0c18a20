"""The `structure` domain: model a part or a scene (geometry, materials, lights) with typed
operations or a script, render it, fix it, submit it; judged geometrically, never by a model.

    task      `StructureTask`
    env       `StructureEnv`: operations or a script, rendered feedback, the submission judged
    kernel    the program the sandbox runs (manifold3d and a numpy renderer): it builds, renders
              and checks a scene; never imported on the host
    runtime   the "structure" runtime (built from the package index on first use) and the
              kernel's runs (`run_kernel`, `kernel_pool`)
    generate  `synthetic-structure` (`generate_structure_tasks`)

References are played through the environment (`play_references`); the built-in set
`examples-structure` is in `data/`. docs/envs.md describes the domain.
"""

from __future__ import annotations

from pathlib import Path

from honing.domains.base import play_references
from honing.domains.structure.env import StructureEnv
from honing.domains.structure.generate import generate_structure_tasks
from honing.domains.structure.task import StructureTask
from honing.tasks.domains import Domain, register

EXAMPLES = Path(__file__).parent / "data" / "examples.jsonl"


def _generate(n: int, seed: int, phrasings: str) -> list[StructureTask]:
    return generate_structure_tasks(n, seed, phrasings)  # type: ignore[arg-type]  # checked there


DOMAIN = register(
    Domain(
        name="structure",
        task=StructureTask,
        env=StructureEnv,
        check=play_references(StructureEnv),
        generators={"structure": _generate},
        heldout_wordings=("structure",),
        examples=EXAMPLES,
        submit_tools=("submit",),
        description="3D parts and scenes with rendered feedback, checked geometrically",
    )
)

__all__ = ["DOMAIN", "StructureEnv", "StructureTask", "generate_structure_tasks"]
