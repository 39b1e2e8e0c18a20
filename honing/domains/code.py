"""The `code` domain: write (or repair) a Python function that its tests accept.

Tasks: `CodeTask`; environment: `honing.envs.code.CodeEnv`; references judged as the model is
(`honing.tasks.quality.check_code`); generators `code` and `code-repair` (its `phrasings`);
built-in sets `humaneval`, `examples-code`, `tempting-code`. docs/envs.md and docs/tasks.md
describe the domain.
"""

from __future__ import annotations

from functools import partial

from honing.envs.code import CodeEnv
from honing.tasks.builtin import EXAMPLES_DIR, humaneval, tempting
from honing.tasks.domains import Domain, register
from honing.tasks.quality import check_code
from honing.tasks.schema import CodeTask
from honing.tasks.synthetic import generate_code_repair_tasks, generate_code_tasks


def _generate_repair(n: int, seed: int, phrasings: str) -> list[CodeTask]:
    return generate_code_repair_tasks(n, seed, phrasings)  # type: ignore[arg-type]  # checked there


DOMAIN = register(
    Domain(
        name="code",
        task=CodeTask,
        env=CodeEnv,
        check=check_code,
        generators={
            "code": lambda n, seed, phrasings: generate_code_tasks(n, seed),
            "code-repair": _generate_repair,
        },
        sets={"humaneval": humaneval, "tempting-code": partial(tempting, "code")},
        examples=EXAMPLES_DIR / "code_examples.jsonl",
        description="write or repair Python functions against tests",
    )
)
