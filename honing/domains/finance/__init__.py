"""The `finance` domain: multi-document financial analysis. Answer a question about a company's
annual report, quarterly CSV and press release (compute a figure, find the wrong figures, check
the release's claims), citing every figure used; judged by rules, never by a model.

    docs      Markdown sections and pipe tables, CSV tables, numbers as written; the DuckDB DDL
    cite      Citation (a table cell or a line) and whether it holds in the documents
    task      FinanceTask: documents, question, value or items, expected citations
    judge     the verdict on an answer: value/items, traceable citations, exact calculation
    query     the DuckDB program the sandbox runs for the `query` tool
    company   a fictional company's books and the documents that tell them (with defects)
    generate  `synthetic-finance`: the seeded questions over them, with planted defects
    env       `FinanceEnv`: DuckDB queries in the sandbox's DuckDB sibling pool, an exact
              calculator (`honing.envs.kits.calculator`), the answer judged

Everything but `env` and `query` (a program only the sandbox runs) is host-side and pure.
References are played through the environment (`play_references`); built-in sets
`examples-finance`, `tempting-finance` (`data/`). docs/envs.md describes the domain.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from honing.domains.base import play_references
from honing.domains.finance.cite import Citation
from honing.domains.finance.env import FinanceEnv
from honing.domains.finance.generate import generate_finance_tasks
from honing.domains.finance.task import FinanceTask
from honing.tasks.domains import Domain, register
from honing.tasks.load import jsonl_set

DATA = Path(__file__).parent / "data"


def _generate(n: int, seed: int, phrasings: str) -> list[FinanceTask]:
    return generate_finance_tasks(n, seed, phrasings)  # type: ignore[arg-type]  # checked there


DOMAIN = register(
    Domain(
        name="finance",
        task=FinanceTask,
        env=FinanceEnv,
        check=play_references(FinanceEnv),
        generators={"finance": _generate},
        heldout_wordings=("finance",),
        sets={"tempting-finance": partial(jsonl_set, "tempting-finance", DATA / "tempting.jsonl")},
        examples=DATA / "examples.jsonl",
        submit_tools=("answer",),
        description="multi-document financial analysis with cited, traceable answers",
    )
)

__all__ = ["DOMAIN", "Citation", "FinanceEnv", "FinanceTask", "generate_finance_tasks"]
