"""The `tools` domain: call the right functions with the right arguments (BFCL's rules), or run
them to reach an answer.

    task       `ToolsTask`
    functions  the executable tools as a task declares them (`TOOL_FUNCTIONS`)
    env        `ToolsEnv`: runs them (the calculator is `honing.envs.kits.calculator`), judges
               the calls or the answer; `tools_slip` for recovery traces
    judge      the call matcher (BFCL's AST rules) and the reference check (`check_tools`)
    generate   `synthetic-tools` (`generate_tools_tasks`; `phrasings="heldout"` words about half
               as training never does)
    sets       `bfcl`, `examples-tools`, `tempting-tools` (`data/`)

docs/envs.md and docs/tasks.md describe the domain.
"""

from __future__ import annotations

from honing.domains.tools.env import ToolsEnv, tools_slip
from honing.domains.tools.generate import TOOLS_FAMILIES, generate_tools_tasks
from honing.domains.tools.judge import check_tools
from honing.domains.tools.sets import EXAMPLES, bfcl, tempting
from honing.domains.tools.task import ToolsTask
from honing.tasks.domains import Domain, register


def _generate(n: int, seed: int, phrasings: str) -> list[ToolsTask]:
    return generate_tools_tasks(n, seed, phrasings)  # type: ignore[arg-type]  # checked there


DOMAIN = register(
    Domain(
        name="tools",
        task=ToolsTask,
        env=ToolsEnv,
        check=check_tools,
        generators={"tools": _generate},
        heldout_wordings=("tools",),
        sets={"bfcl": bfcl, "tempting-tools": tempting},
        examples=EXAMPLES,
        submit_tools=("answer",),
        description="function calling: unit conversion, calendar, lookup, calculator",
        slip=tools_slip,
    )
)

__all__ = ["DOMAIN", "TOOLS_FAMILIES", "ToolsEnv", "ToolsTask", "check_tools",
           "generate_tools_tasks"]  # fmt: skip
