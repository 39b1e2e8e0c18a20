"""The `tools` domain: call the right functions with the right arguments (BFCL's rules).

Tasks: `ToolsTask`; environment: `honing.envs.tools.ToolsEnv`; references judged by the call
matcher (`honing.tasks.quality.check_tools`); generator `tools`; built-in sets `bfcl`,
`examples-tools`, `tempting-tools`. docs/envs.md and docs/tasks.md describe the domain.
"""

from __future__ import annotations

from functools import partial

from honing.envs.tools import ToolsEnv, tools_slip
from honing.tasks.builtin import EXAMPLES_DIR, bfcl, tempting
from honing.tasks.domains import Domain, register
from honing.tasks.quality import check_tools
from honing.tasks.schema import ToolsTask
from honing.tasks.synthetic import generate_tools_tasks


def _generate(n: int, seed: int, phrasings: str) -> list[ToolsTask]:
    return generate_tools_tasks(n, seed, phrasings)  # type: ignore[arg-type]  # checked there


DOMAIN = register(
    Domain(
        name="tools",
        task=ToolsTask,
        env=ToolsEnv,
        check=check_tools,
        generators={"tools": _generate},
        sets={"bfcl": bfcl, "tempting-tools": partial(tempting, "tools")},
        examples=EXAMPLES_DIR / "tools_examples.jsonl",
        description="function calling: unit conversion, calendar, lookup, calculator",
        slip=tools_slip,
    )
)
