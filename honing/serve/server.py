"""`honing serve DIR`: an OpenAI-compatible server over a model directory.

    serve("exported/", port=8000)                         # blocking; Ctrl-C / SIGTERM stop it
    async with running_server("exported/", port=0) as running:   # in process (tests)
        openai.OpenAI(base_url=running.base_url, api_key="x").chat.completions.create(...)

Endpoints: `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus: requests, tokens,
generation latency, requests in flight), `POST /v1/chat/completions`, `POST /v1/completions`,
and the weight endpoints of vLLM that honing's `openai` engine calls (`POST /reload_weights`,
`POST /v1/load_lora_adapter`). Every request calls `engine.generate` for its one prompt; the `hf`
engine's continuous batching decodes the requests in flight together, and streams token by token
(`speculative`: greedy requests decoded speculatively, `honing.rollout.engines.speculative`).
Chat rendering is `honing.serve.chat`'s; errors are OpenAI-shaped. docs/serving.md has
the fields, the weight and adapter semantics and the status codes.

Not covered: authentication (any api key is accepted), n > 1, several adapters at once, prompt
logprobs, embeddings, the Responses API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from aiohttp import web
from pydantic import BaseModel, ValidationError

from honing.envs.base import untrusted_json
from honing.errors import ConfigError, EngineError, ServeError
from honing.observe.prometheus import CONTENT_TYPE, ServeMetrics, render
from honing.rollout.engines import make_engine
from honing.rollout.engines.base import (
    Dtype,
    Engine,
    Generation,
    Prompt,
    SamplingParams,
    WeightUpdate,
)
from honing.rollout.engines.hf import HFEngine
from honing.rollout.engines.speculative import SpeculativeConfig
from honing.rollout.saved_agent import SavedAgent, load_agent
from honing.serve.chat import ChatRenderer, Rendered, cut_at_stop
from honing.serve.lora import read_adapter
from honing.serve.protocol import (
    APIError,
    ChatRequest,
    CompletionRequest,
    LoraRequest,
    ReloadRequest,
    invalid,
)

log = logging.getLogger(__name__)
R = TypeVar("R", bound=BaseModel)
Listener = Callable[[int, float, "torch.Tensor | None"], None]


@dataclass(frozen=True, slots=True)
class _Token:
    id: int
    logprob: float
    top: list[tuple[int, float]]  # the k most likely (id, logprob) at this position


@dataclass
class _Adapter:
    name: str
    path: str
    targets: list[str]
    created: int = field(default_factory=lambda: int(time.time()))


class ModelServer:
    """The handlers over one engine; `app()` is the aiohttp application."""

    def __init__(
        self, engine: Engine, *, name: str, root: str = "", agent: SavedAgent | None = None
    ) -> None:
        tokenizer = engine.tokenizer
        if not engine.accepts_tokens or tokenizer is None:
            raise ConfigError(
                f"honing serve needs a token engine with its tokenizer, not {engine.name!r}"
            )
        self.engine = engine
        self.name = name
        self.root = root
        self.agent = agent  # the settings it was trained with (honing_agent.json), if known
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer)
        self.created = int(time.time())
        self.in_flight = 0  # requests inside engine.generate now
        self.metrics = ServeMetrics()  # GET /metrics
        self.adapter: _Adapter | None = None
        self._base: dict[str, torch.Tensor] = {}  # base weights of modules an adapter touched
        self._weights = asyncio.Lock()

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._count, _errors], client_max_size=64 * 2**20)
        app.add_routes([
            web.get("/health", self.health),
            web.get("/metrics", self.prometheus),
            web.get("/v1/models", self.models),
            web.post("/v1/chat/completions", self.chat),
            web.post("/v1/completions", self.completions),
            web.post("/reload_weights", self.reload_weights),
            web.post("/v1/load_lora_adapter", self.load_lora_adapter),
        ])  # fmt: skip
        return app

    # -- information --------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        return [self.name, *([self.adapter.name] if self.adapter else [])]

    async def health(self, request: web.Request) -> web.Response:
        adapter = self.adapter.name if self.adapter else None
        return web.json_response({"status": "ok", "model": self.name, "adapter": adapter,
                                  "version": self.engine.version,
                                  "in_flight": self.in_flight})  # fmt: skip

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(body=render(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE})  # fmt: skip

    @web.middleware
    async def _count(
        self, request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:  # fmt: skip
        """Counts each answered request by route (its pattern: unknown paths are "other")."""
        response = await handler(request)
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "other"
        self.metrics.requests.labels(route, str(response.status)).inc()
        return response

    async def models(self, request: web.Request) -> web.Response:
        max_len = getattr(self.engine, "max_len", None)
        data = [{"id": self.name, "object": "model", "created": self.created, "owned_by": "honing",
                 "root": self.root or self.name, "parent": None, "max_model_len": max_len,
                 "version": self.engine.version}]  # fmt: skip
        if self.agent is not None:
            data[0]["honing_agent"] = self.agent.model_dump(mode="json")
        if self.adapter is not None:
            data.append({"id": self.adapter.name, "object": "model",
                         "created": self.adapter.created, "owned_by": "honing",
                         "root": self.adapter.path, "parent": self.name,
                         "max_model_len": max_len, "version": self.engine.version})  # fmt: skip
        return web.json_response({"object": "list", "data": data})

    def _model(self, model: str) -> str:
        if model not in self.names:
            raise APIError(404, f"the model {model!r} does not exist; this server serves: "
                           f"{', '.join(self.names)}", param="model",
                           code="model_not_found")  # fmt: skip
        return model

    # -- generation ---------------------------------------------------------------------------

    def _sampling(self, request: ChatRequest | CompletionRequest, limit: int | None,
                  prompt_len: int) -> SamplingParams:  # fmt: skip
        max_len = getattr(self.engine, "max_len", None)
        if max_len is not None and prompt_len >= max_len:
            raise APIError(400, f"the prompt has {prompt_len} tokens; this model's context is "
                           f"{max_len}: shorten the conversation", param="messages",
                           code="context_length_exceeded")  # fmt: skip
        if limit is None:
            limit = max_len - prompt_len if max_len is not None else 1024
        return SamplingParams(
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            top_k=max(request.top_k or 0, 0),
            max_new_tokens=limit,
            stop=request.stops,
            seed=request.seed,
        )

    def _check_ids(self, ids: list[int]) -> None:
        vocab = len(self.tokenizer)
        if not ids:
            raise APIError(400, "the prompt is empty", param="prompt")
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise APIError(400, f"prompt token ids out of the vocabulary (0..{vocab - 1}): "
                           f"{bad[:5]}", param="prompt")  # fmt: skip

    async def _generate(self, ids: list[int], sampling: SamplingParams,
                        listener: Listener | None) -> Generation:  # fmt: skip
        """One completion; `listener(token, logprob, logits row)` hears each token as it is
        sampled (after the fact for engines without the streaming hook, with no row)."""
        self.in_flight += 1
        self.metrics.in_flight.inc()
        started = time.perf_counter()
        try:
            prompt = Prompt(token_ids=ids)
            if listener is not None and isinstance(self.engine, HFEngine):
                hook = listener
                [gen] = await self.engine.generate(
                    [prompt], sampling, on_token=lambda _, t, lp, row: hook(t, lp, row)
                )
                self._measure(ids, gen, started)
                return gen
            [gen] = await self.engine.generate([prompt], sampling)
            self._measure(ids, gen, started)
        finally:
            self.in_flight -= 1
            self.metrics.in_flight.dec()
        if listener is not None:
            logprobs = gen.logprobs or [0.0] * len(gen.token_ids)
            for token, logprob in zip(gen.token_ids, logprobs, strict=False):
                listener(token, logprob, None)
        return gen

    def _measure(self, ids: list[int], gen: Generation, started: float) -> None:
        self.metrics.latency.observe(time.perf_counter() - started)
        self.metrics.prompt_tokens.inc(len(ids))
        self.metrics.completion_tokens.inc(len(gen.token_ids))

    @staticmethod
    def _token(token: int, logprob: float, row: torch.Tensor | None, k: int,
               temperature: float) -> _Token:  # fmt: skip
        if not k or row is None:
            return _Token(token, logprob, [])
        scaled = row.float() / (temperature if temperature > 0 else 1.0)
        values, ids = torch.log_softmax(scaled, -1).topk(min(k, row.shape[-1]))
        return _Token(token, logprob, list(zip(ids.tolist(), values.tolist(), strict=True)))

    # -- chat completions ---------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        req = await _parse(request, ChatRequest)
        model = self._model(req.model)
        prompt = self.renderer.prompt(req)
        self._check_ids(prompt.token_ids)
        limit = req.limit or (self.agent.max_new_tokens if self.agent is not None else None)
        sampling = self._sampling(req, limit, len(prompt.token_ids))
        k = (req.top_logprobs or 0) if req.logprobs else 0
        parse_tools = bool(req.tools) and req.tool_choice != "none"
        if req.stream:
            return await self._chat_stream(request, req, model, prompt, sampling, k, parse_tools)
        tokens: list[_Token] = []

        def hear(token: int, logprob: float, row: torch.Tensor | None) -> None:
            tokens.append(self._token(token, logprob, row, k, sampling.temperature))

        gen = await self._engine_call(self._generate(prompt.token_ids, sampling,
                                                     hear if k else None))  # fmt: skip
        if not k:
            tokens = [_Token(t, lp, []) for t, lp in zip(gen.token_ids, gen.logprobs, strict=False)]
        reply = self.renderer.reply(prompt, gen.token_ids, gen.finish_reason,
                                    parse_tools=parse_tools, stops=req.stops,
                                    keep_stop=req.include_stop_str_in_output)  # fmt: skip
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        choice: dict[str, Any] = {
            "index": 0, "message": message, "finish_reason": reply.finish_reason,
            "logprobs": {"content": [self._chat_logprob(t) for t in tokens]} if req.logprobs
            else None,
        }  # fmt: skip
        body = self._envelope("chat.completion", model, [choice], gen)
        body["usage"] = _usage(len(prompt.token_ids), len(gen.token_ids))
        if req.return_token_ids:
            choice["token_ids"] = gen.token_ids
            body["prompt_token_ids"] = prompt.token_ids
        return web.json_response(body)

    async def _chat_stream(self, request: web.Request, req: ChatRequest, model: str,
                           prompt: Rendered, sampling: SamplingParams, k: int,
                           parse_tools: bool) -> web.StreamResponse:  # fmt: skip
        fmt = self.renderer.fmt
        usage = req.stream_options is not None and req.stream_options.include_usage
        stream = _SSE(request, self._envelope("chat.completion.chunk", model, [], None), usage)
        first: dict[str, Any] = {"role": "assistant", "content": ""}
        extra: dict[str, Any] = (
            {"prompt_token_ids": prompt.token_ids} if req.return_token_ids else {}
        )
        await stream.open()
        await stream.send([_delta(first)], **extra)
        keep_stop = req.include_stop_str_in_output
        text = _Incremental(fmt.decode, sampling.stop if not keep_stop else [])
        held: list[int] = []  # an end-of-turn token: content only if more tokens follow

        async def on_token(token: _Token) -> None:
            ids = held + ([] if token.id in fmt.traits.stop_ids else [token.id])
            held[:] = [token.id] if token.id in fmt.traits.stop_ids else []
            choice = _delta({"content": text.add(ids)})
            if req.logprobs:
                choice["logprobs"] = {"content": [self._chat_logprob(token)]}
            if req.return_token_ids:
                choice["token_ids"] = [token.id]
            await stream.send([choice])

        gen = await self._streamed(stream, prompt.token_ids, sampling, k, on_token)
        if gen is None:
            return stream.response
        reply = self.renderer.reply(prompt, gen.token_ids, gen.finish_reason,
                                    parse_tools=parse_tools, stops=sampling.stop,
                                    keep_stop=keep_stop)  # fmt: skip
        rest = text.finish(reply.content)
        if rest:
            await stream.send([_delta({"content": rest})])
        if reply.tool_calls:
            calls = [{"index": i, **call} for i, call in enumerate(reply.tool_calls)]
            await stream.send([_delta({"tool_calls": calls})])
        await stream.send([_delta({}, reply.finish_reason)])
        await stream.close(_usage(len(prompt.token_ids), len(gen.token_ids)))
        return stream.response

    def _chat_logprob(self, token: _Token) -> dict[str, Any]:
        def entry(token_id: int, logprob: float) -> dict[str, Any]:
            text = self.renderer.fmt.decode([token_id])
            return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

        return {**entry(token.id, token.logprob),
                "top_logprobs": [entry(i, lp) for i, lp in token.top]}  # fmt: skip

    async def _streamed(
        self,
        stream: _SSE,
        ids: list[int],
        sampling: SamplingParams,
        k: int,
        on_token: Callable[[_Token], Awaitable[None]],
    ) -> Generation | None:
        """Run one generation, awaiting `on_token` for each token as it is sampled; None if the
        client went away or the engine failed (the stream then carries the error)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[_Token | None] = asyncio.Queue()

        def hear(token: int, logprob: float, row: torch.Tensor | None) -> None:
            item = self._token(token, logprob, row, k, sampling.temperature)
            loop.call_soon_threadsafe(queue.put_nowait, item)

        task = asyncio.ensure_future(self._generate(ids, sampling, hear))
        # Queued after every token: the tokens reach the loop before the generation resolves.
        task.add_done_callback(lambda _: loop.call_soon(queue.put_nowait, None))
        try:
            while (item := await queue.get()) is not None:
                await on_token(item)
            return task.result()
        except (EngineError, ConnectionResetError) as exc:
            if isinstance(exc, EngineError):
                log.warning("engine failure while streaming: %s", exc)
                await stream.fail(APIError(500, str(exc), type="server_error"))
            return None
        finally:
            if not task.done():
                task.cancel()

    # -- text completions ---------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        req = await _parse(request, CompletionRequest)
        model = self._model(req.model)
        prompt = req.single()
        ids = list(self.tokenizer.encode(prompt)) if isinstance(prompt, str) else prompt
        self._check_ids(ids)
        sampling = self._sampling(req, req.max_tokens, len(ids))
        k = req.logprobs or 0
        want_logprobs = req.logprobs is not None
        keep_stop = req.include_stop_str_in_output

        def decode(token_ids: list[int]) -> str:
            return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

        if req.stream:
            usage = req.stream_options is not None and req.stream_options.include_usage
            stream = _SSE(request, self._envelope("text_completion", model, [], None), usage)
            await stream.open()
            text = _Incremental(decode, sampling.stop if not keep_stop else [])

            async def on_token(token: _Token) -> None:
                choice: dict[str, Any] = {"index": 0, "text": text.add([token.id]),
                                          "logprobs": None, "finish_reason": None}  # fmt: skip
                if want_logprobs:
                    choice["logprobs"] = self._text_logprobs([token], 0)
                if req.return_token_ids:
                    choice["token_ids"] = [token.id]
                await stream.send([choice])

            gen = await self._streamed(stream, ids, sampling, k, on_token)
            if gen is None:
                return stream.response
            final = gen.text if keep_stop else cut_at_stop(gen.text, sampling.stop)
            await stream.send([{"index": 0, "text": text.finish(final), "logprobs": None,
                                "finish_reason": _finish(gen)}])  # fmt: skip
            await stream.close(_usage(len(ids), len(gen.token_ids)))
            return stream.response
        tokens: list[_Token] = []

        def hear(token: int, logprob: float, row: torch.Tensor | None) -> None:
            tokens.append(self._token(token, logprob, row, k, sampling.temperature))

        gen = await self._engine_call(self._generate(ids, sampling, hear if k else None))
        if not k:
            tokens = [_Token(t, lp, []) for t, lp in zip(gen.token_ids, gen.logprobs, strict=False)]
        choice = {
            "index": 0, "text": gen.text if keep_stop else cut_at_stop(gen.text, sampling.stop),
            "finish_reason": _finish(gen),
            "logprobs": self._text_logprobs(tokens, 0) if want_logprobs else None,
        }  # fmt: skip
        if req.return_token_ids:
            choice["token_ids"] = gen.token_ids
            choice["prompt_token_ids"] = ids
        body = self._envelope("text_completion", model, [choice], gen)
        body["usage"] = _usage(len(ids), len(gen.token_ids))
        return web.json_response(body)

    def _text_logprobs(self, tokens: list[_Token], offset: int) -> dict[str, Any]:
        texts = [str(self.tokenizer.decode([t.id])) for t in tokens]
        offsets = []
        for text in texts:
            offsets.append(offset)
            offset += len(text)
        return {
            "tokens": texts,
            "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [{str(self.tokenizer.decode([i])): lp for i, lp in t.top}
                             for t in tokens],
            "text_offset": offsets,
        }  # fmt: skip

    # -- weights ------------------------------------------------------------------------------

    async def reload_weights(self, request: web.Request) -> web.Response:
        req = await _parse(request, ReloadRequest)
        path = Path(req.path)
        if not path.exists():
            raise APIError(400, f"{path} does not exist (a directory of safetensors files, seen "
                           "from the server's machine)", param="path")  # fmt: skip
        async with self._weights:
            version = req.version if req.version is not None else self.engine.version + 1
            update = WeightUpdate(version=version, path=str(path))
            await self._engine_call(self.engine.update_weights(update), refused=True)
            self.adapter, self._base = None, {}
        log.info("serving weights v%d from %s", version, path)
        return web.json_response({"status": "ok", "version": version, "model": self.name})

    async def load_lora_adapter(self, request: web.Request) -> web.Response:
        req = await _parse(request, LoraRequest)
        if req.lora_name == self.name:
            raise APIError(400, f"lora_name {req.lora_name!r} is the base model's name; choose "
                           "another", param="lora_name")  # fmt: skip
        model = getattr(self.engine, "model", None)
        if model is None:
            raise APIError(400, f"the {self.engine.name} engine cannot load adapters",
                           param="lora_path")  # fmt: skip
        try:
            adapter = await asyncio.to_thread(read_adapter, Path(req.lora_path))
        except ServeError as exc:
            raise APIError(400, str(exc), param="lora_path") from exc
        async with self._weights:
            params = dict(model.named_parameters(remove_duplicate=False))
            for name in adapter.targets:
                if name not in self._base and name in params:
                    self._base[name] = params[name].detach().clone()
            try:
                tensors = adapter.merge(self._base)
            except ServeError as exc:
                raise APIError(400, str(exc), param="lora_path") from exc
            previous = self.adapter.targets if self.adapter else []
            for name in previous:  # modules the new adapter leaves alone get their base back
                tensors.setdefault(name, self._base[name])
            version = req.version if req.version is not None else self.engine.version + 1
            update = WeightUpdate(version=version, state_dict=tensors)
            await self._engine_call(self.engine.update_weights(update), refused=True)
            self.adapter = _Adapter(req.lora_name, req.lora_path, adapter.targets)
        log.info("serving adapter %s (v%d) from %s", req.lora_name, version, req.lora_path)
        return web.json_response({"status": "ok", "version": version, "model": req.lora_name})

    # -- helpers ------------------------------------------------------------------------------

    async def _engine_call(self, call: Awaitable[Any], *, refused: bool = False) -> Any:
        """An engine call; its EngineError becomes a 400 when the request was refused (weights
        that do not fit), else a 500 (the engine failed)."""
        try:
            return await call
        except EngineError as exc:
            if refused:
                raise APIError(400, str(exc), param="path") from exc
            log.warning("engine failure: %s", exc)
            raise APIError(500, str(exc), type="server_error") from exc

    def _envelope(self, kind: str, model: str, choices: list[dict[str, Any]],
                  gen: Generation | None) -> dict[str, Any]:  # fmt: skip
        version = gen.version if gen is not None and gen.versions else self.engine.version
        prefix = "chatcmpl" if kind.startswith("chat") else "cmpl"
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()),
                "model": model, "system_fingerprint": f"honing-v{version}",
                "choices": choices}  # fmt: skip


class _Incremental:
    """Text decoded from growing token ids, released as it becomes final (see the module
    docstring: incomplete UTF-8 and possible stop-string starts are held back)."""

    def __init__(self, decode: Callable[[list[int]], str], stops: list[str]) -> None:
        self.decode = decode
        self.stops = [s for s in stops if s]
        self.ids: list[int] = []
        self.sent = ""
        self.stopped = False

    def add(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        if self.stopped:
            return ""
        text = self.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        if self.stops:
            cut = cut_at_stop(text, self.stops)
            if cut != text:
                self.stopped = True
                text = cut
            else:
                text = text[: len(text) - (max(len(s) for s in self.stops) - 1)]
        return self._release(text)

    def finish(self, final: str) -> str:
        """What is left to send of the final text."""
        return self._release(final)

    def _release(self, text: str) -> str:
        if not text.startswith(self.sent) or len(text) <= len(self.sent):
            return ""
        new = text[len(self.sent) :]
        self.sent = text
        return new


class _SSE:
    """One server-sent-events answer in OpenAI's chunk format."""

    def __init__(self, request: web.Request, envelope: dict[str, Any], usage: bool) -> None:
        self.request = request
        self.envelope = envelope
        self.usage = usage
        self.response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                    "Cache-Control": "no-cache"})  # fmt: skip

    async def open(self) -> None:
        await self.response.prepare(self.request)

    async def send(self, choices: list[dict[str, Any]], **extra: Any) -> None:
        body = {**self.envelope, "choices": choices, **extra}
        if self.usage:
            body["usage"] = None
        await self._write(body)

    async def close(self, usage: dict[str, int]) -> None:
        if self.usage:
            await self._write({**self.envelope, "choices": [], "usage": usage})
        await self.response.write(b"data: [DONE]\n\n")
        await self.response.write_eof()

    async def fail(self, error: APIError) -> None:
        try:
            await self._write(error.body())
            await self.response.write(b"data: [DONE]\n\n")
            await self.response.write_eof()
        except ConnectionResetError:
            pass

    async def _write(self, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False)
        await self.response.write(f"data: {data}\n\n".encode())


def _delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


def _finish(gen: Generation) -> str:
    return gen.finish_reason.value


async def _parse(request: web.Request, model: type[R]) -> R:
    try:
        raw = untrusted_json(await request.text())
    except ValueError as exc:  # not JSON, or not UTF-8 (UnicodeDecodeError)
        raise APIError(400, f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise invalid(exc) from exc


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except APIError as exc:
        return web.json_response(exc.body(), status=exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = f"{request.method} {request.path}: {exc.reason}"
        kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
        return web.json_response(APIError(exc.status, message, type=kind).body(),
                                 status=exc.status)  # fmt: skip
    except ConnectionResetError:  # the client left: nobody to answer
        raise
    except Exception as exc:  # a bug: logged here, never a traceback in the answer
        log.exception("%s %s failed", request.method, request.path)
        error = APIError(500, f"internal server error: {type(exc).__name__}: {exc}",
                         type="server_error")  # fmt: skip
        return web.json_response(error.body(), status=500)


# -- running it ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunningServer:
    """A started server: `url` is its root (http://host:port), `base_url` the API root."""

    url: str
    server: ModelServer

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


@asynccontextmanager
async def running_server(
    model: str | Path | Engine,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    name: str | None = None,
    dtype: Dtype = "auto",
    max_batch: int = 32,
    speculative: SpeculativeConfig | None = None,
) -> AsyncIterator[RunningServer]:
    """Serve `model` (a model directory, a built-in name, or a token engine with its tokenizer)
    on host:port (0: a free port) until the block exits; an engine built here is closed then.
    `speculative`: the engine built here decodes speculatively (an engine given is used as is)."""
    owned = isinstance(model, (str, Path))
    if isinstance(model, (str, Path)):
        source = Path(model)
        engine: Engine = await asyncio.to_thread(
            make_engine, f"model:{model}", dtype=dtype, max_batch=max_batch,
            speculative=speculative,
        )  # fmt: skip
        served = name or (source.name if source.exists() else str(model))
        root = str(source)
        agent = load_agent(source) if source.is_dir() else None
    else:
        if speculative is not None:
            raise ConfigError("speculative: an engine given is served as built; build it so")
        engine, served, root, agent = model, name or model.name, "", None
    try:
        server = ModelServer(engine, name=served, root=root, agent=agent)
        runner = web.AppRunner(server.app(), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            bound = runner.addresses[0][1]
            shown = f"[{host}]" if ":" in host else host
            yield RunningServer(f"http://{shown}:{bound}", server)
        finally:
            await runner.cleanup()
    finally:
        if owned:
            await engine.close()


@contextmanager
def background_server(
    model: str | Path | Engine,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    name: str | None = None,
    dtype: Dtype = "auto",
    max_batch: int = 32,
    speculative: SpeculativeConfig | None = None,
    timeout_s: float = 300.0,
) -> Iterator[RunningServer]:
    """`running_server` on its own event loop in a background thread, for synchronous callers
    (tests, notebooks): the block runs while the server answers; leaving it stops the server."""
    ready = threading.Event()
    started: list[RunningServer] = []
    failed: list[BaseException] = []
    stop: list[Callable[[], object]] = []

    async def main() -> None:
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        try:
            async with running_server(model, host=host, port=port, name=name, dtype=dtype,
                                      max_batch=max_batch,
                                      speculative=speculative) as running:  # fmt: skip
                started.append(running)
                stop.append(lambda: loop.call_soon_threadsafe(done.set))
                ready.set()
                await done.wait()
        except BaseException as exc:
            failed.append(exc)
            ready.set()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="honing-serve", daemon=True)
    thread.start()
    if not ready.wait(timeout_s):
        raise EngineError(f"the server did not start within {timeout_s:g}s")
    if failed:
        raise failed[0]
    try:
        yield started[0]
    finally:
        stop[0]()
        thread.join(timeout_s)


def serve(
    model_dir: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str | None = None,
    dtype: Dtype = "auto",
    max_batch: int = 32,
    speculative: SpeculativeConfig | None = None,
) -> None:
    """Serve a model directory until SIGINT or SIGTERM (blocking); prints the URL once ready."""
    asyncio.run(_serve(model_dir, host=host, port=port, name=name, dtype=dtype,
                       max_batch=max_batch, speculative=speculative))  # fmt: skip


async def _serve(model_dir: str | Path, *, host: str, port: int, name: str | None, dtype: Dtype,
                 max_batch: int, speculative: SpeculativeConfig | None) -> None:  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with running_server(model_dir, host=host, port=port, name=name, dtype=dtype,
                                  max_batch=max_batch,
                                  speculative=speculative) as running:  # fmt: skip
            model = getattr(running.server.engine, "model", None)
            weights = str(model.dtype).removeprefix("torch.") if model is not None else "?"
            print(f"serving {running.server.name!r} at {running.base_url} in {weights} "
                  "(OpenAI-compatible; Ctrl-C stops)", flush=True)  # fmt: skip
            await stop.wait()
            print("stopping: finishing the requests in flight", flush=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
