"""The engine contract: batched async generation, versioned weights.

    engine = make_engine(...)                       # hf | openai | scripted
    [gen] = await engine.generate([Prompt(token_ids=ids)], SamplingParams(max_new_tokens=64))
    gen.token_ids, gen.text, gen.logprobs, gen.finish_reason, gen.versions
    await engine.update_weights(WeightUpdate(version=3, state_dict=...))

Covered: prompts as token ids or chat messages (`accepts_tokens`), one `Generation` per prompt,
the policy version of every token, and `EngineError` / `WorkerLost` for the engine's own
failures (docs/rollout.md, "The modules in detail"). Not covered: the engines themselves (one
module each beside this one) and the agent loop that turns generations into actions.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from honing.config import StrictModel
from honing.precision import Dtype as Dtype  # re-exported: engines take a weights dtype


class SamplingParams(StrictModel):
    """How to sample one completion."""

    temperature: float = Field(1.0, ge=0, description="0 is greedy decoding.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Keep the k most likely tokens; 0 keeps all.")
    max_new_tokens: int = Field(256, ge=1, description="Tokens to generate at most.")
    stop: list[str] = Field(
        default_factory=list, description="Strings that end the completion (kept in the text)."
    )
    seed: int | None = Field(None, description="Seed of this request's sampling (reproducible).")


class FinishReason(enum.StrEnum):
    STOP = "stop"  # end-of-sequence token or a stop string
    LENGTH = "length"  # max_new_tokens or the context length
    ABORT = "abort"  # the engine was stopped while decoding


@dataclass(frozen=True, slots=True)
class Prompt:
    """What to continue: token ids (token-faithful), or chat messages and tools (chat engines)."""

    token_ids: list[int] | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if (self.token_ids is None) == (self.messages is None):
            raise ValueError("a Prompt has exactly one of token_ids and messages")


@dataclass(frozen=True, slots=True)
class Generation:
    """One completion. `logprobs[i]` and `versions[i]` belong to `token_ids[i]`.

    `tool_calls` is set only by chat engines whose server parsed the calls itself (OpenAI shape);
    token engines leave parsing to the agent loop. `token_ids` may be empty for a chat engine whose
    server does not return them; `logprobs` then holds what the server returned, if anything.
    """

    token_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: FinishReason
    versions: list[int]
    prompt_tokens: int = 0
    seconds: float = 0.0  # from submission to the last token
    tool_calls: list[dict[str, Any]] | None = None

    @property
    def version(self) -> int:
        """The oldest policy version among its tokens (the one staleness is measured by)."""
        return min(self.versions) if self.versions else -1


@dataclass(frozen=True)
class WeightUpdate:
    """New policy weights. `state_dict` (name → tensor, a subset is fine) or `path` (a directory
    of safetensors files, or a LoRA adapter directory when `adapter` is set)."""

    version: int
    state_dict: dict[str, Any] | None = None
    path: str | None = None
    adapter: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Tokenizer(Protocol):
    """The part of a transformers tokenizer the rollout layer uses."""

    eos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


class Engine(Protocol):
    """Batched async generation with versioned weights; see the module docstring."""

    name: str
    accepts_tokens: bool  # True: prompts are token ids; False: chat messages

    @property
    def version(self) -> int:
        """The policy version that the next token will be generated with."""
        ...

    @property
    def tokenizer(self) -> Any | None:
        """The model's tokenizer when the engine decodes locally (token-faithful), else None."""
        ...

    async def generate(
        self, prompts: Sequence[Prompt], sampling: SamplingParams
    ) -> list[Generation]:
        """One generation per prompt, in order. Raises EngineError on engine failure."""
        ...

    async def update_weights(self, update: WeightUpdate) -> None:
        """Load new weights; from the next decoded token on, `version` is `update.version`."""
        ...

    async def close(self) -> None:
        """Release the model, the connections, the worker threads."""
        ...
