"""The request records of honing's OpenAI-compatible server, and its errors.

Requests are validated into these pydantic models (unknown top-level fields are a 400 that names
the field, as OpenAI answers); responses are built as OpenAI's JSON shapes in `server.py`.
Besides OpenAI's fields, the vLLM extensions honing's `openai` engine sends are understood:
`top_k`, `return_token_ids` (answered as `token_ids` on the choice and `prompt_token_ids`) and
`include_stop_str_in_output`.

Not covered: n > 1, `best_of`, `echo`, penalties other than 0, `logit_bias`, `response_format`,
multi-modal content parts, audio.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class APIError(Exception):
    """An answer in OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def invalid(exc: ValidationError) -> APIError:
    """A 400 naming the first invalid field of a request."""
    first = exc.errors()[0]
    param = ".".join(str(part) for part in first["loc"]) or None
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = f"unrecognized request argument supplied: {param}"
    elif param:
        message = f"{param}: {message}"
    count = len(exc.errors())
    more = f" (and {count - 1} more error(s))" if count > 1 else ""
    return APIError(400, message + more, param=param, code="invalid_value")


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Request):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class _Sampling(_Request):
    """Fields shared by chat and text completions."""

    model: str
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1, description="vLLM extension; -1 or 0 keep all.")
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    user: str | None = None
    return_token_ids: bool = False
    include_stop_str_in_output: bool = False

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _no_penalty(cls, value: float | None) -> float | None:
        if value:
            raise ValueError("penalties are not supported by this server; leave them at 0")
        return value

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError(
                "n > 1 is not supported: send n separate requests (they are batched together)"
            )
        return value

    @property
    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class ContentPart(_Lenient):
    type: str
    text: str | None = None


class CallFunction(_Lenient):
    name: str
    arguments: str = "{}"


class CallSpec(_Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: CallFunction


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[CallSpec] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The content as one string (text parts joined); other parts are refused."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        texts = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise APIError(
                    400,
                    f"content part of type {part.type!r}: only text parts are supported",
                    param="messages",
                )
            texts.append(part.text)
        return "".join(texts)


class ChatRequest(_Sampling):
    """`POST /v1/chat/completions`."""

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    @field_validator("tools")
    @classmethod
    def _functions(cls, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, tool in enumerate(tools or []):
            function = tool.get("function")
            if tool.get("type", "function") != "function" or not isinstance(function, dict):
                raise ValueError(f'tool {i}: must be {{"type": "function", "function": {{...}}}}')
            if not isinstance(function.get("name"), str) or not function["name"]:
                raise ValueError(f"tool {i}: function.name is required")
        return tools

    @field_validator("tool_choice")
    @classmethod
    def _choice(cls, choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if choice is None or choice in ("auto", "none"):
            return choice
        raise ValueError(
            f"tool_choice {choice!r} is not supported: use 'auto' (the model decides) or 'none'"
        )

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    """`POST /v1/completions`: one prompt, as text or token ids."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, value: bool) -> bool:
        if value:
            raise ValueError("echo is not supported")
        return value

    @field_validator("prompt")
    @classmethod
    def _one_prompt(
        cls, prompt: str | list[int] | list[str] | list[list[int]]
    ) -> str | list[int] | list[str] | list[list[int]]:
        several = isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list))
        if several and len(prompt) != 1:
            raise ValueError(
                "one prompt per request: send several requests (they are batched together)"
            )
        return prompt

    def single(self) -> str | list[int]:
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            inner = prompt[0]
            return inner if isinstance(inner, str) else [int(t) for t in inner]
        return prompt if isinstance(prompt, str) else [int(t) for t in prompt]  # type: ignore[arg-type]


class ReloadRequest(_Request):
    """`POST /reload_weights`: a directory of safetensors files under the model's names."""

    path: str
    version: int | None = None


class LoraRequest(_Request):
    """`POST /v1/load_lora_adapter`: a peft adapter directory, served as `lora_name`."""

    lora_name: str = Field(min_length=1)
    lora_path: str
    version: int | None = None
