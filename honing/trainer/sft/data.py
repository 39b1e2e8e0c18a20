"""SFT data: the chat-example format, reading a file of it, and checking every row.

    examples = load_chat_data("data.jsonl")  # validated rows; every bad row named, none dropped
    example, problems = parse_example(row, "data.jsonl:3")

Covered: the row schema (OpenAI chat messages, tool calls and tool schemas), the checks a row
must pass to be trainable, and `SftDataError`, which lists every problem as FILE:LINE: field
(docs/training.md, "The modules in detail"). Not covered: rendering or tokenising an example
(`honing.trainer.sft.tokenize`), training (`update`, `run`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError

from honing.config import StrictModel
from honing.errors import ConfigError

MAX_PROBLEMS_SHOWN = 20
ROLES = ("system", "user", "assistant", "tool")


class FunctionCall(StrictModel):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(
        default_factory=dict, description="A JSON object, or a string holding one (OpenAI)."
    )


class ChatToolCall(StrictModel):
    """A tool call in OpenAI's chat shape."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(StrictModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ChatToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None  # the tool's name, on a tool message
    weight: Literal[0, 1] = Field(
        1,
        description="Assistant messages: 1 trains on it, 0 keeps it as context only (a "
        "mistake the rest of the conversation answers).",
    )


class ChatExample(StrictModel):
    """One training conversation; `source` is where it came from (`FILE:LINE`)."""

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    id: str | None = None
    _source: str = PrivateAttr("")

    @property
    def source(self) -> str:
        return self._source

    def at(self, source: str) -> ChatExample:
        """This example, remembering where it came from (for error messages)."""
        self._source = source
        return self


_ALLOWED = {
    "": "messages, tools, id",
    "messages[]": "role, content, tool_calls, tool_call_id, name",
    "messages[].tool_calls[]": "id, type, function",
    "messages[].tool_calls[].function": "name, arguments",
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one row."""

    source: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        field = f" field '{self.field}':" if self.field else ""
        return f"{where}:{field} {self.message}"


class SftDataError(ConfigError):
    """Rows of an SFT data file that are not valid examples; `problems` lists them all."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems[:MAX_PROBLEMS_SHOWN])
        more = len(problems) - MAX_PROBLEMS_SHOWN
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(
            f"{source}: {len(problems)} problem(s) in the SFT data; fix or remove these rows "
            f'(each row: {{"messages": [{{"role": ..., "content": ...}}, ...], '
            f'"tools": [...]}}):\n{shown}{tail}'
        )


def load_chat_data(spec: str) -> list[ChatExample]:
    """The examples of a JSONL/Parquet file (path or fsspec URL); SftDataError lists every bad
    row."""
    from honing.tasks.load import UnreadableRow, read_rows

    examples: list[ChatExample] = []
    problems: list[Problem] = []
    for source, line, row in read_rows(spec):
        where = f"{source}:{line}" if line is not None else source
        if isinstance(row, UnreadableRow):
            problems.append(Problem(source, line, None, row.reason))
            continue
        example, found = parse_example(row, where)
        problems += [Problem(source, line, f, m) for f, m in found]
        if example is not None:
            examples.append(example)
    if problems:
        raise SftDataError(spec, problems)
    if not examples:
        raise ConfigError(f"{spec}: no examples (an empty file?)")
    return examples


def parse_example(row: Any, source: str = "") -> tuple[ChatExample | None, list[tuple[str, str]]]:
    """A row as an example, or the (field, message) problems that make it none."""
    if not isinstance(row, dict):
        return None, [("(row)", f"must be a JSON object, not {type(row).__name__}")]
    try:
        example = ChatExample.model_validate(_without_nulls(row)).at(source)
    except ValidationError as exc:
        return None, [_describe(err) for err in exc.errors()]
    problems = _check_example(example)
    return (None, problems) if problems else (example, [])


def _check_example(ex: ChatExample) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if ex.messages[0].role not in ("system", "user"):
        problems.append(("messages[0].role", "the conversation must start with system or user"))
    learnable = False
    for i, m in enumerate(ex.messages):
        if m.role == "system" and i > 0:
            problems.append((f"messages[{i}].role", "system is allowed only as the first message"))
        if m.tool_calls and m.role != "assistant":
            problems.append((f"messages[{i}].tool_calls", "only assistant messages make calls"))
        if m.role == "assistant":
            if not m.content and not m.tool_calls:
                problems.append(
                    (f"messages[{i}]", "an assistant message needs content or tool_calls")
                )
            learnable = learnable or m.weight == 1
        elif m.weight != 1:
            problems.append((f"messages[{i}].weight", "only assistant messages have a weight"))
        for j, call in enumerate(m.tool_calls):
            if isinstance(call.function.arguments, str):
                try:
                    value = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError as exc:
                    value = exc
                if not isinstance(value, dict):
                    problems.append(
                        (
                            f"messages[{i}].tool_calls[{j}].function.arguments",
                            "must be a JSON object (or a string holding one)",
                        )
                    )
    if not learnable:
        problems.append(
            ("messages", "no assistant message of weight 1: nothing to learn from this row")
        )
    if any(m.tool_calls for m in ex.messages) and not ex.tools:
        problems.append(
            (
                "tools",
                "required when an assistant message has tool_calls: the "
                "schemas of the tools it may call",
            )
        )
    for k, tool in enumerate(ex.tools):
        spec = tool.get("function", tool)
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            problems.append(
                (
                    f"tools[{k}]",
                    'must be an OpenAI tool schema: {"type": "function", '
                    '"function": {"name": ..., "parameters": {...}}}',
                )
            )
    return problems


def _describe(err: Any) -> tuple[str, str]:
    path = ""
    for part in err["loc"]:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    kind = err["type"]
    if kind == "literal_error" and path.endswith(".role"):
        return path, f"must be one of {', '.join(ROLES)}"
    if kind == "extra_forbidden":
        parent = re.sub(r"\[\d+\]", "[]", path.rpartition(".")[0] if "." in path else "")
        allowed = _ALLOWED.get(parent)
        return path, "unknown field" + (f"; allowed: {allowed}" if allowed else "")
    if kind == "missing":
        return path, "required field is missing"
    return path, str(err["msg"])


def _without_nulls(value: Any) -> Any:
    """A null means "absent" (Parquet pads every row with every key; OpenAI writes content
    null beside tool_calls)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
