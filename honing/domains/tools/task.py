"""The tools domain's task: functions to call, and either the calls that solve it (BFCL's form)
or the final answer an executed episode must reach, with its call budget and risky tools."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from honing.tasks.schema import TaskBase


class ToolsTask(TaskBase):
    domain: Literal["tools"] = "tools"
    functions: list[dict[str, Any]] = Field(
        description="Functions the model may call: {name, description, parameters (JSON schema)}."
    )
    expected_calls: list[dict[str, dict[str, list[Any]]]] = Field(
        default_factory=list,
        description="Calls that solve the task, BFCL style: {name: {argument: [accepted values]}} "
        'with "" meaning the argument may be left out; [] means: call nothing. Judged when '
        "`answer` is not set (single-turn function calling).",
    )
    answer: str | None = Field(
        None,
        description="When set, the tools are executed and the episode is judged by the final "
        "answer (given with the `answer` tool) instead of by the calls.",
    )
    max_calls: int | None = Field(None, ge=1, description="Call budget of an episode.")
    forbidden_tools: list[str] = Field(default_factory=list, description="Tools not to call.")
    irreversible_tools: list[str] = Field(
        default_factory=list,
        description="Functions whose effect cannot be undone (a payment, a deletion, a message "
        "sent): allowed, but each call is a risk event (`irreversible_tool`). Each must be one "
        "of `functions`.",
    )
    facts: dict[str, str] = Field(
        default_factory=dict,
        description="What the `lookup` tool knows (`pop_record` reads and removes): key → value.",
    )

    @field_validator("expected_calls")
    @classmethod
    def _one_function_each(
        cls, value: list[dict[str, dict[str, list[Any]]]]
    ) -> list[dict[str, dict[str, list[Any]]]]:
        for entry in value:
            if len(entry) != 1:
                raise ValueError("each expected call names exactly one function")
        return value

    @model_validator(mode="after")
    def _irreversible_tools_are_functions(self) -> ToolsTask:
        declared = {f.get("name") for f in self.functions}
        unknown = [name for name in self.irreversible_tools if name not in declared]
        if unknown:
            raise ValueError(f"irreversible_tools {unknown} are not among the functions")
        return self
