"""The `math` domain: compute an answer, alone or with a calculator; the answer is judged by
the math checker.

    task      `MathTask`
    env       `MathEnv`: calculator (`honing.envs.kits.calculator`) and answer
    judge     math-verify in the sandbox (`math_equal`), and the reference check (`check_math`)
    generate  `synthetic-math` (`generate_math_tasks`; `phrasings="heldout"` words about half
              as training never does)
    sets      `champ`, `examples-math`, `tempting-math` (`data/`)
    traces    warm-start traces: a calculator call, then the answer (`calculator_plan`)

docs/envs.md ("Domains") and docs/training.md ("The modules in detail") have the rest.
"""

from __future__ import annotations

from honing.domains.math.env import MathEnv
from honing.domains.math.generate import MATH_FAMILIES, generate_math_tasks
from honing.domains.math.judge import check_math
from honing.domains.math.keys import calculation_key
from honing.domains.math.sets import EXAMPLES, champ, tempting
from honing.domains.math.task import MathTask
from honing.domains.math.traces import arithmetic_expression, calculator_plan
from honing.tasks.domains import Domain, register


def _generate(n: int, seed: int, phrasings: str) -> list[MathTask]:
    return generate_math_tasks(n, seed, phrasings)  # type: ignore[arg-type]


DOMAIN = register(
    Domain(
        name="math",
        task=MathTask,
        env=MathEnv,
        check=check_math,
        generators={"math": _generate},
        heldout_wordings=("math",),
        question_key=calculation_key,
        sets={"champ": champ, "tempting-math": tempting},
        examples=EXAMPLES,
        trace_plan=calculator_plan,
        submit_tools=("answer",),
        description="arithmetic and competition math, with a calculator",
    )
)

__all__ = [
    "DOMAIN",
    "MATH_FAMILIES",
    "MathEnv",
    "MathTask",
    "arithmetic_expression",
    "calculator_plan",
    "check_math",
    "generate_math_tasks",
]
