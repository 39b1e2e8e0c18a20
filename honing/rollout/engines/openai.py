"""An engine over any OpenAI-compatible server: vLLM, SGLang, or honing's own server.

    engine = OpenAIEngine(OpenAIConfig(base_url="http://gpu1:8000/v1", model="qwen"))
    [gen] = await engine.generate([Prompt(messages=msgs, tools=tools)], SamplingParams())
    await engine.update_weights(WeightUpdate(version=3, path="/ckpt/v3", adapter=True))

Covered: chat prompts (`/v1/chat/completions`, the server's tool parser; messages go as they
are, so image content parts reach a vision model) and token prompts (`/v1/completions` with
token-id prompts), the token ids a server returns (token-faithful training against a remote
server needs them), retries with backoff on connection errors, 408, 409, 429 and 5xx, and the
weight reload contract (`/reload_weights`, vLLM's LoRA hot-load).
docs/rollout.md ("The modules in detail") gives the request bodies and the rules.
Not covered: streaming, n > 1 per request, prompt logprobs, SGLang's native `/generate` API.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import openai
from pydantic import Field

from honing.config import StrictModel
from honing.errors import EngineError
from honing.rollout.engines.base import (
    FinishReason,
    Generation,
    Prompt,
    SamplingParams,
    WeightUpdate,
)

T = TypeVar("T")

RETRIED_STATUS = frozenset({408, 409, 429})  # and every 5xx
_FINISH = {"length": FinishReason.LENGTH, "abort": FinishReason.ABORT}  # the rest: STOP
_TOKEN_ID_PREFIX = "token_id:"


class OpenAIConfig(StrictModel):
    """Where the server is and how to talk to it."""

    base_url: str = Field(description="The API root, e.g. http://localhost:8000/v1.")
    model: str | None = Field(
        None,
        description="The served model name (GET {base_url}/models lists them); None: the "
        "server's only model, asked once.",
    )
    api_key: str = Field("EMPTY", description="Bearer token; vLLM's --api-key if it has one.")
    timeout_s: float = Field(600.0, gt=0, description="Per-request timeout, each attempt.")
    retries: int = Field(4, ge=0, description="Retries after the first attempt (transient errors).")
    backoff_s: float = Field(0.5, ge=0, description="First retry's backoff; doubles each retry.")
    max_backoff_s: float = Field(30.0, ge=0, description="Backoff cap (before jitter).")
    max_concurrency: int = Field(64, ge=1, description="Requests in flight at most.")
    vllm_extras: bool = Field(
        True,
        description="Send return_token_ids, include_stop_str_in_output and top_k in the body "
        "(vLLM/SGLang extensions); turn off for servers that reject unknown fields.",
    )
    retokenize: bool = Field(
        False,
        description="Token mode: when the server returns no token ids, re-encode the text with "
        "the tokenizer instead of failing (not token-faithful).",
    )
    reload_path: str = Field("/reload_weights", description="Full-weight reload endpoint.")
    lora_load_path: str = Field("/v1/load_lora_adapter", description="LoRA hot-load endpoint.")
    lora_adapters: bool = Field(
        False,
        description="The server hot-loads LoRA adapters (vLLM --enable-lora): a LoRA learner's "
        "weight sync then sends the adapter directory, not the merged model.",
    )


class OpenAIEngine:
    """Generation on a remote OpenAI-compatible server; see the module docstring."""

    name = "openai"
    accepts_state_dict = False  # weights travel as files: WeightUpdate(path=...)

    def __init__(
        self, config: OpenAIConfig, *, tokenizer: Any | None = None, version: int = 0
    ) -> None:
        self.config = config
        self._tokenizer = tokenizer
        self.accepts_tokens = tokenizer is not None
        self._version = version
        self._model = config.model or ""  # the adapter's name after a LoRA update
        self._asked = asyncio.Lock()  # one GET /models when the config names no model
        self._base = config.base_url.rstrip("/")
        self._root = self._base.removesuffix("/v1")
        self._client = openai.AsyncOpenAI(
            base_url=self._base,
            api_key=config.api_key,
            timeout=config.timeout_s,
            max_retries=0,  # retried here, with the errors honing chooses
        )
        self._slots = asyncio.Semaphore(config.max_concurrency)

    @property
    def version(self) -> int:
        return self._version

    @property
    def tokenizer(self) -> Any | None:
        return self._tokenizer

    @property
    def lora_adapters(self) -> bool:
        """Whether the server hot-loads LoRA adapters (`OpenAIConfig.lora_adapters`)."""
        return self.config.lora_adapters

    @property
    def model(self) -> str:
        """The model name requests ask for (the LoRA adapter's after an adapter update)."""
        return self._model

    async def generate(
        self, prompts: Sequence[Prompt], sampling: SamplingParams
    ) -> list[Generation]:
        if len(prompts) == 1:
            return [await self._one(prompts[0], sampling)]
        tasks = [asyncio.ensure_future(self._one(p, sampling)) for p in prompts]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _served_model(self) -> str:
        """The model requests ask for: the configured one, else the server's only model."""
        if self._model:
            return self._model
        async with self._asked:
            if not self._model:
                url = self._base + "/models"
                page = await self._retrying("model list", url, self._client.models.list)
                names = [m.id for m in page.data]
                if len(names) != 1:
                    raise EngineError(
                        f"{url}: the server serves {names or 'no model'}; name the one to use: "
                        f"openai:{self._base}#NAME (or OpenAIConfig.model)"
                    )
                self._model = names[0]
        return self._model

    async def update_weights(self, update: WeightUpdate) -> None:
        if update.path is None:
            raise EngineError(
                "a remote server loads weights from a path: save them to a directory (shared "
                "with the server) and pass WeightUpdate(path=...), not a state dict"
            )
        if update.adapter:
            name = str(update.extra.get("lora_name") or f"honing-v{update.version}")
            url = self._root + self.config.lora_load_path
            body: dict[str, Any] = {"lora_name": name, "lora_path": update.path}
        else:
            name = await self._served_model()
            url = self._root + self.config.reload_path
            body = {"path": update.path, "version": update.version}

        async def post() -> str:
            return await self._client.post(url, cast_to=str, body=body)

        await self._retrying("weight reload", url, post)
        self._model = name
        self._version = update.version

    async def close(self) -> None:
        await self._client.close()

    # -- one request ----------------------------------------------------------------------------

    async def _one(self, prompt: Prompt, sampling: SamplingParams) -> Generation:
        model = await self._served_model()
        version = self._version
        started = time.perf_counter()
        extra: dict[str, Any] = {}
        if self.config.vllm_extras:
            extra = {"return_token_ids": True, "include_stop_str_in_output": True}
            if sampling.top_k:
                extra["top_k"] = sampling.top_k
        elif sampling.top_k:
            raise EngineError("top_k needs vllm_extras: the OpenAI API has no top_k")
        stop: Any = list(sampling.stop) if sampling.stop else openai.omit
        seed: Any = sampling.seed if sampling.seed is not None else openai.omit
        if prompt.token_ids is not None:
            ids = list(prompt.token_ids)

            async def complete() -> Any:
                return await self._client.completions.create(
                    model=model,
                    prompt=ids,
                    logprobs=1,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    max_tokens=sampling.max_new_tokens,
                    stop=stop,
                    seed=seed,
                    extra_body=extra or None,
                )

            reply = await self._retrying("completion", self._base + "/completions", complete)
            gen = self._from_completion(reply, version, len(ids))
        else:
            messages: Any = list(prompt.messages or [])
            tools: Any = list(prompt.tools) if prompt.tools else openai.omit

            async def chat() -> Any:
                return await self._client.chat.completions.create(
                    model=model,
                    messages=messages,
                    tools=tools,
                    logprobs=True,
                    top_logprobs=0,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    max_tokens=sampling.max_new_tokens,
                    stop=stop,
                    seed=seed,
                    extra_body=extra or None,
                )

            reply = await self._retrying("chat completion", self._base + "/chat/completions", chat)
            gen = self._from_chat(reply, version)
        return dataclasses.replace(gen, seconds=time.perf_counter() - started)

    def _from_chat(self, reply: Any, version: int) -> Generation:
        choice = _first_choice(reply, self._base + "/chat/completions")
        message = choice.message
        tokens = [item.token for item in (choice.logprobs.content or [])] if choice.logprobs else []
        logprobs = (
            [float(item.logprob) for item in (choice.logprobs.content or [])]
            if choice.logprobs
            else []
        )
        ids = _extra(choice, "token_ids") or _ids_from_tokens(tokens) or []
        tool_calls = (
            [call.model_dump(exclude_none=True) for call in message.tool_calls]
            if message.tool_calls
            else None
        )
        n = len(ids) or len(logprobs) or _completion_tokens(reply)
        prompt_ids = _extra(reply, "prompt_token_ids") or _extra(choice, "prompt_token_ids")
        return Generation(
            token_ids=[int(t) for t in ids],
            text=message.content or "",
            logprobs=logprobs if len(logprobs) == len(ids) or not ids else [],
            finish_reason=_FINISH.get(choice.finish_reason or "", FinishReason.STOP),
            versions=[version] * n,
            prompt_tokens=_prompt_tokens(reply, prompt_ids),
            tool_calls=tool_calls,
        )

    def _from_completion(self, reply: Any, version: int, prompt_len: int) -> Generation:
        url = self._base + "/completions"
        choice = _first_choice(reply, url)
        lp = choice.logprobs
        tokens = list(lp.tokens or []) if lp else []
        logprobs = (
            [float(x) if x is not None else 0.0 for x in (lp.token_logprobs or [])] if lp else []
        )
        ids = _extra(choice, "token_ids") or _ids_from_tokens(tokens)
        text = choice.text or ""
        if not ids:
            if not (self.config.retokenize and self._tokenizer is not None):
                raise EngineError(
                    f"POST {url}: the server returned no token ids, so the completion cannot be "
                    "kept token-faithful. Use vLLM >= 0.10.2 (return_token_ids, sent when "
                    "vllm_extras is on) or start it with --return-tokens-as-token-ids; or set "
                    "retokenize: true to re-encode the text (may drift from what was sampled)"
                )
            ids = list(self._tokenizer.encode(text, add_special_tokens=False))
            logprobs = []
        if logprobs and len(logprobs) != len(ids):
            logprobs = []  # not aligned with the ids: better none than wrong ones
        return Generation(
            token_ids=[int(t) for t in ids],
            text=text,
            logprobs=logprobs,
            finish_reason=_FINISH.get(choice.finish_reason or "", FinishReason.STOP),
            versions=[version] * len(ids),
            prompt_tokens=_prompt_tokens(reply, None) or prompt_len,
        )

    # -- retries ------------------------------------------------------------------------------

    async def _retrying(self, what: str, url: str, call: Callable[[], Awaitable[T]]) -> T:
        cfg = self.config
        attempts = cfg.retries + 1
        last = ""
        for attempt in range(attempts):
            if attempt:
                backoff = min(cfg.max_backoff_s, cfg.backoff_s * 2 ** (attempt - 1))
                await asyncio.sleep(backoff * random.uniform(0.5, 1.5))
            try:
                async with self._slots:
                    return await call()
            except openai.APITimeoutError:
                last = f"no answer within timeout_s={cfg.timeout_s:g}"
            except openai.APIConnectionError as exc:
                last = f"connection failed ({exc.__cause__ or exc})"
            except openai.APIStatusError as exc:
                status = exc.status_code
                answer = _answer(exc)
                if status not in RETRIED_STATUS and status < 500:
                    raise EngineError(
                        f"POST {url} ({what}): HTTP {status} (not retried, a client error): "
                        f"{answer}. Check the request: the model name {self._model!r} (GET "
                        f"{self._base}/models), max_tokens within the context length, the "
                        "messages and tools, the api_key"
                    ) from exc
                last = f"HTTP {status}: {answer}"
            except openai.APIError as exc:  # an answer the client could not read
                raise EngineError(f"POST {url} ({what}): unusable answer: {exc}") from exc
        raise EngineError(
            f"POST {url} ({what}) failed after {attempts} attempt(s); last: {last}. Check that "
            f"the server at {self._base} is up and serving {self._model!r}, and that it is not "
            "overloaded (raise timeout_s or retries, or lower max_concurrency)"
        )


def _first_choice(reply: Any, url: str) -> Any:
    choices = getattr(reply, "choices", None)
    if not choices:
        raise EngineError(f"POST {url}: the server answered without choices: {reply!r:.300}")
    return choices[0]


def _extra(obj: Any, key: str) -> Any:
    """A field the OpenAI schema lacks (a vLLM extension), if the server sent it."""
    extra = getattr(obj, "model_extra", None) or {}
    return extra.get(key)


def _ids_from_tokens(tokens: Sequence[str]) -> list[int] | None:
    """Token ids from vLLM's `--return-tokens-as-token-ids` logprob tokens (`token_id:123`)."""
    if not tokens or not all(t.startswith(_TOKEN_ID_PREFIX) for t in tokens):
        return None
    try:
        return [int(t[len(_TOKEN_ID_PREFIX) :]) for t in tokens]
    except ValueError:
        return None


def _completion_tokens(reply: Any) -> int:
    usage = getattr(reply, "usage", None)
    return int(usage.completion_tokens) if usage and usage.completion_tokens else 0


def _prompt_tokens(reply: Any, prompt_ids: Sequence[int] | None) -> int:
    usage = getattr(reply, "usage", None)
    if usage and usage.prompt_tokens:
        return int(usage.prompt_tokens)
    return len(prompt_ids or [])


def _answer(exc: openai.APIStatusError) -> str:
    try:
        text = exc.response.text
    except Exception:  # a streamed or closed body
        text = str(exc)
    return " ".join(text.split())[:500] or "(empty body)"
