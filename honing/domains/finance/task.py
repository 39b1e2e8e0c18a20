"""The `finance` task: documents (Markdown with pipe tables, or CSV), a question, and the answer
with the citations that support it.

    FinanceTask(id="acme/growth", prompt="By what percentage did revenue grow ...?",
                documents={"annual_report_2025.md": "...", "quarterly_2025.csv": "..."},
                kind="value", answer="12.8963", tolerance=0.002,
                expected_citations=[Citation(...), Citation(...)],
                reference='{"value": "12.8963", "citations": [...], "calculation": "..."}')

`kind` "value": one number (`answer`, within the relative `tolerance`); "items": the exact set
of `items`, named from `candidates`. `expected_citations` are the cells or lines that hold the
figures the answer needs; each must hold in the documents. `reference` is the JSON arguments of
the `answer` tool. Validation is strict and every error names its field. Not covered: judging
(`honing.domains.finance.judge`) and the environment (`honing.domains.finance.env`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from honing.domains.finance.cite import Citation, same_source, trace
from honing.domains.finance.docs import key, number, parse_documents
from honing.tasks.schema import TaskBase

MAX_DOCUMENTS = 16


class FinanceTask(TaskBase):
    domain: Literal["finance"] = "finance"
    documents: dict[str, str] = Field(
        description="Name (ending in .md or .csv) -> text: Markdown with pipe tables, or CSV."
    )
    kind: Literal["value", "items"] = Field(description="A number, or a set of items.")
    answer: str | None = Field(None, description="value: the number, as a decimal string.")
    tolerance: float = Field(0.0, ge=0, le=0.5, description="value: relative tolerance.")
    items: list[str] = Field(default_factory=list, description="items: the right set.")
    candidates: list[str] = Field(
        default_factory=list, description="items: what the question offers (a superset)."
    )
    expected_citations: list[Citation] = Field(
        min_length=1, description="The cells or lines holding the figures the answer needs."
    )

    @field_validator("documents")
    @classmethod
    def _documents_parse(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("needs at least one document")
        if len(value) > MAX_DOCUMENTS:
            raise ValueError(f"at most {MAX_DOCUMENTS} documents, not {len(value)}")
        parse_documents(value)  # a ValueError names the document
        return value

    @model_validator(mode="after")
    def _answer_matches_kind(self) -> FinanceTask:
        if self.kind == "value":
            if self.answer is None or number(self.answer) is None:
                raise ValueError(f"answer: a value task needs a number, not {self.answer!r}")
            if self.items or self.candidates:
                raise ValueError("items, candidates: only an items task has them")
        else:
            if self.answer is not None:
                raise ValueError("answer: an items task answers with `items`, not `answer`")
            if not self.items or not self.candidates:
                raise ValueError("items, candidates: an items task needs both")
            offered = [key(c) for c in self.candidates]
            if len(set(offered)) != len(offered) or "" in offered:
                raise ValueError("candidates: must be distinct and non-empty")
            wanted = [key(i) for i in self.items]
            if len(set(wanted)) != len(wanted):
                raise ValueError("items: must be distinct")
            missing = [i for i, k in zip(self.items, wanted, strict=True) if k not in offered]
            if missing:
                raise ValueError(f"items: {missing} are not among the candidates")
            if len(wanted) >= len(offered):
                raise ValueError("candidates: must offer at least one item that is not an answer")
        docs = parse_documents(self.documents)
        traces = [trace(docs, c) for c in self.expected_citations]
        for i, found in enumerate(traces):
            if not found.holds:
                raise ValueError(f"expected_citations[{i}]: {found.reason}")
            for j in range(i):
                if same_source(found, traces[j]):
                    raise ValueError(f"expected_citations[{i}]: the same figure as [{j}]")
        return self
