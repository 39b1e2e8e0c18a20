"""The typed task record, one model per domain, told apart by the `domain` field.

Covered: `TaskBase` and the `CodeTask` of the code domain, not yet in a package of its own (the
other domains' are in `honing.domains.<name>.task`), with their fields; every task has `domain`,
`id`, `prompt`, `tags`, an optional `reference` and free `metadata`, and an unknown field is an
error that names it. The union of every registered domain's model is
`honing.tasks.domains.task_adapter()`. docs/tasks.md ("One example per domain", "The modules in
detail") shows and describes each domain. Not covered: loading (`honing.tasks.load`) and checking
references (`honing.tasks.quality`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
)


@dataclass(frozen=True)
class ReferenceVerdict:
    """The quality filter's verdict on one task: its reference (or a repair task's starting
    code) checked by the domain's own judge. `unverified`: the sandbox could not check it."""

    status: Literal["passed", "failed", "unverified"]
    reason: str = ""


class TaskBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: str = Field(description="Which domain's model reads the row (its `Literal`).")
    id: str = Field(min_length=1, description="Unique within a task set.")
    prompt: str = Field(min_length=1, description="What the model is asked.")
    tags: list[str] = Field(default_factory=list, description="Free labels; metrics group by them.")
    reference: str | None = Field(None, description="A known-good solution, checked on load.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Carried, never read.")

    @field_validator("id")
    @classmethod
    def _id_is_clean(cls, value: str) -> str:
        if value != value.strip() or "\n" in value:
            raise ValueError("must not start or end with whitespace or contain a newline")
        return value
