"""The finance domain's tasks: documents, citations, the judge and the generator.

    docs      Markdown sections and pipe tables, CSV tables, numbers as written; the DuckDB DDL
    cite      Citation (a table cell or a line) and whether it holds in the documents
    task      FinanceTask: documents, question, value or items, expected citations
    judge     the verdict on an answer: value/items, traceable citations, exact calculation
    query     the DuckDB program the sandbox runs for the `query` tool
    company   a fictional company's books and the documents that tell them (with defects)
    generate  the seeded questions over them, with planted defects

Everything here is host-side and pure except `query`, a program only the sandbox runs. Not
covered: the environment (`honing.envs.finance`) and the registration (`honing.domains.finance`).
"""

from honing.tasks.finance.cite import Citation
from honing.tasks.finance.generate import generate_finance_tasks
from honing.tasks.finance.task import FinanceTask

__all__ = ["Citation", "FinanceTask", "generate_finance_tasks"]
