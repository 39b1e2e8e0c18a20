"""The `code` domain: write (or repair) a Python function that its tests accept.

    task         `CodeTask` (`CODE_SOLUTION`: where the solution lives in the workspace)
    env          `CodeEnv`: read, write and run files, run the tests; the submission judged
    judge        the tests run by `codejudge.py` (a program the sandbox runs, never imported),
                 the verdict read back, and the reference check (`check_code`)
    generate     `synthetic-code` (`generate_code_tasks`)
    repair       `synthetic-code-repair` (`generate_code_repair_tasks`: a function with one
                 token broken; `phrasings="heldout"` words about half as training never does)
    sets         `humaneval`, `examples-code`, `tempting-code` (`data/`)
    submissions  a team's wrong submissions and what a submission changes (team traces)

docs/envs.md and docs/tasks.md describe the domain.
"""

from __future__ import annotations

from honing.domains.code.env import CodeEnv
from honing.domains.code.generate import CODE_FAMILIES, generate_code_tasks
from honing.domains.code.judge import check_code, code_program
from honing.domains.code.repair import generate_code_repair_tasks
from honing.domains.code.sets import EXAMPLES, humaneval, tempting
from honing.domains.code.submissions import describe_submission, wrong_submissions
from honing.domains.code.task import CODE_SOLUTION, CodeTask
from honing.tasks.domains import Domain, register


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
        heldout_wordings=("code-repair",),
        sets={"humaneval": humaneval, "tempting-code": tempting},
        examples=EXAMPLES,
        submit_tools=("run_tests",),
        wrong_submissions=wrong_submissions,
        describe_submission=describe_submission,
        plain_program=code_program,
        description="write or repair Python functions against tests",
    )
)

__all__ = ["CODE_FAMILIES", "CODE_SOLUTION", "DOMAIN", "CodeEnv", "CodeTask", "check_code",
           "generate_code_repair_tasks", "generate_code_tasks"]  # fmt: skip
