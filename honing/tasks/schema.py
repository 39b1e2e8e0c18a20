"""The typed task record, one model per domain, told apart by the `domain` field.

    code   write or fix a Python function: `entry_point`, `tests` (Python source that raises when a
           solution is wrong; when it defines `check(candidate)`, as HumanEval does, the verifier
           calls it with the entry point)
    math   a final-answer problem: `answer`, compared symbolically and numerically, not as text
    tools  call the right functions with the right arguments: `functions` (their schemas) and
           `expected_calls` (BFCL's form; see `honing.tasks.toolcalls`); the reference is a JSON
           list of calls `[{"name", "arguments"}]`
    sql    answer a question about tables with DuckDB: `tables`, `answer`, `rules`; the reference
           is a SQL query whose single value is the answer

Every task has `id`, `prompt`, `tags`, an optional `reference` (a known-good solution: for code, the
full source of a solution; for math, a final answer or worked solution ending in one; for tools,
the calls) and free
`metadata`. Unknown fields are errors that name the field. Domains added by later layers (sql,
…) join the `Task` union here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator


class TaskBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

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


class CodeTask(TaskBase):
    domain: Literal["code"] = "code"
    entry_point: str = Field(min_length=1, description="The function the solution must define.")
    tests: str = Field(min_length=1, description="Python that raises when the solution is wrong.")


class MathTask(TaskBase):
    domain: Literal["math"] = "math"
    answer: str = Field(min_length=1, description="The final answer (a number or expression).")


class ToolsTask(TaskBase):
    domain: Literal["tools"] = "tools"
    functions: list[dict[str, Any]] = Field(
        description="Functions the model may call: {name, description, parameters (JSON schema)}."
    )
    expected_calls: list[dict[str, dict[str, list[Any]]]] = Field(
        description="Calls that solve the task, BFCL style: {name: {argument: [accepted values]}} "
        'with "" meaning the argument may be left out; [] means: call nothing.'
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


class AnswerRule(BaseModel):
    """One check of a sql task's answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["numeric", "mentions", "traceable"] = Field(
        description="numeric: the answer's number equals `answer` within `tolerance` (relative); "
        "mentions: the answer contains `text` (e.g. the id of an anomalous row); traceable: the "
        "answer shows the SQL that produces its number."
    )
    tolerance: float = Field(0.0, ge=0)
    text: str | None = None


class SqlTask(TaskBase):
    domain: Literal["sql"] = "sql"
    tables: dict[str, str] = Field(
        description="Table name → CSV text, or the path/URL of a .csv or .parquet file."
    )
    answer: str = Field(min_length=1, description="The expected final answer.")
    rules: list[AnswerRule] = Field(
        default_factory=lambda: [AnswerRule(kind="numeric")],
        description="How an answer is judged; by default its number must equal `answer`.",
    )


Task = Annotated[CodeTask | MathTask | ToolsTask | SqlTask, Field(discriminator="domain")]
DOMAINS = ("code", "math", "tools", "sql")
TASK_ADAPTER: TypeAdapter[CodeTask | MathTask | ToolsTask | SqlTask] = TypeAdapter(Task)
