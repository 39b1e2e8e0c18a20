"""The `finance` domain: multi-document financial analysis. Answer a question about a company's
annual report, quarterly CSV and press release (compute a figure, find the wrong figures, check
the release's claims), citing every figure used; judged by rules, never by a model.

Tasks: `honing.tasks.finance.task.FinanceTask`; environment: `honing.envs.finance.FinanceEnv`
(DuckDB queries in the sandbox's DuckDB sibling pool, an exact calculator). References are played
through the environment (`play_references`); generator `finance`; built-in sets
`examples-finance`, `tempting-finance`. docs/envs.md describes the domain.
"""

from __future__ import annotations

from functools import partial

from honing.domains.base import play_references
from honing.envs.finance import FinanceEnv
from honing.tasks.builtin import EXAMPLES_DIR, tempting
from honing.tasks.domains import Domain, register
from honing.tasks.finance.generate import generate_finance_tasks
from honing.tasks.finance.task import FinanceTask


def _generate(n: int, seed: int, phrasings: str) -> list[FinanceTask]:
    return generate_finance_tasks(n, seed, phrasings)  # type: ignore[arg-type]  # checked there


DOMAIN = register(
    Domain(
        name="finance",
        task=FinanceTask,
        env=FinanceEnv,
        check=play_references(FinanceEnv),
        generators={"finance": _generate},
        sets={"tempting-finance": partial(tempting, "finance")},
        examples=EXAMPLES_DIR / "finance_examples.jsonl",
        description="multi-document financial analysis with cited, traceable answers",
    )
)
