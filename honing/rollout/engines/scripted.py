"""A deterministic engine with a simulated continuous-batching server, for tests and benchmarks.

    engine = ScriptedEngine(["I'll look.", '{"name": "finish", "arguments": {}}'],
                            tokenizer=tok, latency=LatencyModel(slots=32, per_token_s=0.002))
    [gen] = await engine.generate([Prompt(token_ids=ids)], SamplingParams(max_new_tokens=64))
    engine.stats.busy_fraction

Covered: scripted responses (by call index, or by seed for deterministic runs), a token engine
with a tokenizer and a chat engine without one, an event-driven latency model of a
continuous-batching server, versions across weight updates, and failure and hang injection
(docs/rollout.md, "The modules in detail"). Not covered: sampling (the text is the script's),
real tokenisation costs, KV-cache memory limits.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import json
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

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

CHARS_PER_TOKEN = 4  # chat mode (no tokenizer): one simulated token per 4 characters
_CACHE_SIZE = 4096  # completions kept per engine (scripts repeat their texts)


class LatencyModel(StrictModel):
    """A simulated continuous-batching server."""

    slots: int = Field(32, ge=1, description="Sequences decoded at once; more requests queue.")
    per_token_s: float = Field(
        0.0, ge=0, description="One decode step (every active sequence advances one token)."
    )
    prefill_per_token_s: float = Field(
        0.0, ge=0, description="Prefill cost per prompt token, added to the step a sequence joins."
    )


@dataclass(frozen=True, slots=True)
class ScriptedStats:
    """Counters since creation or `reset_stats()`."""

    requests: int  # prompts submitted
    tokens: int  # tokens generated (simulated tokens in chat mode)
    queue_wait_s: float  # total time prompts waited for a free slot
    busy_fraction: float  # time-weighted occupied slots / slots (0 without a latency model)
    busy_slot_s: float  # ∫ occupied slots dt, in slot-seconds of simulated time
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class _Completion:
    """What a response text becomes under some sampling limits (cached: scripts repeat)."""

    token_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: FinishReason
    n_tokens: int  # tokens the simulated server decodes
    tool_calls: list[dict[str, Any]] | None


@dataclass(slots=True)
class _Plan:
    """One prompt's completion, decided at submission; only timing and versions come later."""

    completion: _Completion
    prompt_tokens: int


@dataclass(slots=True)
class _Seq:
    plan: _Plan
    submitted: float
    future: asyncio.Future[tuple[list[int], float]]
    first_step: int = 0  # the global decode step that makes its first token
    last_step: int = 0
    state: str = "queued"  # queued | active | done | cancelled

    def __lt__(self, other: _Seq) -> bool:
        return self.last_step < other.last_step


@dataclass(slots=True)
class _Counters:
    requests: int = 0
    tokens: int = 0
    queue_wait_s: float = 0.0
    since: float = field(default_factory=time.monotonic)
    busy_area: float = 0.0  # ∫ active slots dt since `since`


def _logprob(token_id: int, position: int) -> float:
    return -0.05 - ((token_id * 31 + position * 17) % 100) / 50.0


class ScriptedEngine:
    """Deterministic completions, optionally behind a simulated batching server; see the module
    docstring."""

    name = "scripted"

    def __init__(
        self,
        respond: Callable[[Prompt, int], str] | Sequence[str],
        *,
        tokenizer: Any | None = None,
        latency: LatencyModel | None = None,
        version: int = 0,
        fail_on: Callable[[Prompt, int], bool] | None = None,
        hang_on: Callable[[Prompt, int], bool] | None = None,
        by_seed: bool = False,
    ) -> None:
        if isinstance(respond, str):
            raise TypeError("respond must be a callable or a sequence of texts, not one string")
        if not callable(respond):
            texts = list(respond)
            if not texts:
                raise ValueError("respond: an empty sequence of texts")
            self._respond: Callable[[Prompt, int], str] = lambda _p, i: texts[i % len(texts)]
        else:
            self._respond = respond
        if tokenizer is not None and tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos_token_id; the scripted engine ends with it")
        self._tokenizer = tokenizer
        self.accepts_tokens = tokenizer is not None
        self._latency = latency or LatencyModel()
        self._instant = self._latency.per_token_s == 0 and self._latency.prefill_per_token_s == 0
        self._fail_on = fail_on
        self._hang_on = hang_on
        self._version = version
        self._calls = 0
        self._by_seed = by_seed
        self._completions: dict[tuple[Any, ...], _Completion] = {}
        self._closed = False
        self._hanging: set[asyncio.Future[None]] = set()
        # simulation state: a global decode-step counter and the time its last step completed
        self._step = 0
        self._t_step = time.monotonic()
        self._prefill = 0.0  # extra seconds of the step in progress (prefills of joiners)
        self._queue: deque[_Seq] = deque()
        self._heap: list[_Seq] = []  # active sequences by last_step (cancelled ones lazily)
        self._active = 0
        self._area_t = time.monotonic()
        self._version_steps: list[int] = [0]  # version_values[i] holds from step version_steps[i]
        self._version_values: list[int] = [version]
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._c = _Counters()

    # -- the Engine protocol ------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    @property
    def tokenizer(self) -> Any | None:
        return self._tokenizer

    async def generate(
        self, prompts: Sequence[Prompt], sampling: SamplingParams
    ) -> list[Generation]:
        if self._closed:
            raise EngineError("the scripted engine is closed")
        plans: list[_Plan] = []
        hang = False
        for prompt in prompts:
            index = self._calls
            self._calls += 1
            if self._fail_on is not None and self._fail_on(prompt, index):
                raise EngineError(f"scripted failure injected on call {index} (fail_on)")
            if self._hang_on is not None and self._hang_on(prompt, index):
                hang = True
            key = (sampling.seed or 0) if self._by_seed else index
            plans.append(self._plan(prompt, self._respond(prompt, key), sampling))
        self._c.requests += len(plans)
        if hang:
            await self._hang()
        if self._instant:
            return [
                self._finish(plan, [self._version] * plan.completion.n_tokens, 0.0)
                for plan in plans
            ]
        return await self._simulate(plans)

    async def update_weights(self, update: WeightUpdate) -> None:
        if not self._instant:
            self._advance(time.monotonic())
            # tokens of steps after the last completed one carry the new version
            if self._version_steps[-1] == self._step + 1:
                self._version_values[-1] = update.version
            else:
                self._version_steps.append(self._step + 1)
                self._version_values.append(update.version)
        self._version = update.version

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        error = EngineError("the scripted engine was closed while the request was in flight")
        for seq in [*self._queue, *self._heap]:
            if seq.state in ("queued", "active") and not seq.future.done():
                seq.future.set_exception(error)
            seq.state = "cancelled"
        self._queue.clear()
        self._heap.clear()
        self._active = 0
        for fut in self._hanging:
            if not fut.done():
                fut.set_exception(error)

    # -- stats --------------------------------------------------------------------------------

    @property
    def busy_fraction(self) -> float:
        """Time-weighted occupied slots / slots since creation or `reset_stats()`."""
        return self.stats.busy_fraction

    @property
    def stats(self) -> ScriptedStats:
        now = time.monotonic()
        elapsed = now - self._c.since
        area = self._c.busy_area + self._active * max(0.0, now - self._area_t)
        busy = 0.0 if self._instant or elapsed <= 0 else area / (self._latency.slots * elapsed)
        return ScriptedStats(
            requests=self._c.requests,
            tokens=self._c.tokens,
            queue_wait_s=self._c.queue_wait_s,
            busy_fraction=min(1.0, busy),
            busy_slot_s=area,
            elapsed_s=elapsed,
        )

    def reset_stats(self) -> None:
        now = time.monotonic()
        self._area_t = max(self._area_t, now)
        self._c = _Counters(since=now)

    # -- completions --------------------------------------------------------------------------

    def _plan(self, prompt: Prompt, text: str, sampling: SamplingParams) -> _Plan:
        if prompt.token_ids is not None:
            prompt_tokens = len(prompt.token_ids)
        else:
            chars = sum(len(str(m.get("content") or "")) for m in prompt.messages or [])
            prompt_tokens = -(-chars // CHARS_PER_TOKEN)
        key = (text, sampling.max_new_tokens, *sampling.stop)
        completion = self._completions.get(key)
        if completion is None:
            if self._tokenizer is None:
                completion = self._complete_chat(text, sampling)
            else:
                completion = self._complete_tokens(text, sampling)
            if len(self._completions) >= _CACHE_SIZE:
                self._completions.clear()
            self._completions[key] = completion
        return _Plan(completion, prompt_tokens)

    def _complete_tokens(self, text: str, sampling: SamplingParams) -> _Completion:
        assert self._tokenizer is not None
        ids = list(self._tokenizer.encode(text, add_special_tokens=False))
        full = [*ids, int(self._tokenizer.eos_token_id)]
        end = len(full)
        reason = FinishReason.STOP
        stop_at = self._stop_index(ids, text, sampling.stop)
        if stop_at is not None:
            end = stop_at
        if sampling.max_new_tokens < end:
            end, reason = sampling.max_new_tokens, FinishReason.LENGTH
        kept = full[:end]
        return _Completion(
            token_ids=kept,
            text=self._tokenizer.decode(kept, skip_special_tokens=True),
            logprobs=[_logprob(t, i) for i, t in enumerate(kept)],
            finish_reason=reason,
            n_tokens=len(kept),
            tool_calls=None,
        )

    def _complete_chat(self, text: str, sampling: SamplingParams) -> _Completion:
        reason = FinishReason.STOP
        cut = min(
            (text.find(s) + len(s) for s in sampling.stop if s and s in text), default=len(text)
        )
        text = text[:cut]
        limit = sampling.max_new_tokens * CHARS_PER_TOKEN
        if len(text) > limit:
            text, reason = text[:limit], FinishReason.LENGTH
        return _Completion(
            token_ids=[],
            text=text,
            logprobs=[],
            finish_reason=reason,
            n_tokens=max(1, -(-len(text) // CHARS_PER_TOKEN)),
            tool_calls=_tool_calls(text),
        )

    def _stop_index(self, ids: list[int], text: str, stop: Sequence[str]) -> int | None:
        """The fewest leading tokens whose decode contains a stop string, as a decoding server
        would stop; None when no stop string occurs."""
        stops = [s for s in stop if s and s in text]
        if not stops:
            return None
        assert self._tokenizer is not None
        decode = self._tokenizer.decode

        def hit(k: int) -> bool:
            prefix = decode(ids[:k], skip_special_tokens=True)
            return any(s in prefix for s in stops)

        if not hit(len(ids)):  # the text has it but the token decode does not (odd tokenizers)
            return None
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if hit(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _finish(self, plan: _Plan, versions: list[int], seconds: float) -> Generation:
        c = plan.completion
        self._c.tokens += c.n_tokens
        return Generation(  # copies: the cached completion must not be mutated through a result
            token_ids=c.token_ids[:],
            text=c.text,
            logprobs=c.logprobs[:],
            finish_reason=c.finish_reason,
            versions=versions,
            prompt_tokens=plan.prompt_tokens,
            seconds=seconds,
            tool_calls=[{**call, "function": {**call["function"]}} for call in c.tool_calls]
            if c.tool_calls
            else None,
        )

    async def _hang(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._hanging.add(fut)
        try:
            await fut
        finally:
            self._hanging.discard(fut)

    # -- the simulated server -----------------------------------------------------------------

    async def _simulate(self, plans: list[_Plan]) -> list[Generation]:
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        self._advance(now)
        seqs = [_Seq(plan=p, submitted=now, future=loop.create_future()) for p in plans]
        self._queue.extend(seqs)
        self._admit(now)
        self._reschedule()
        out: list[Generation] = []
        try:
            for seq in seqs:
                versions, finished_at = await seq.future
                out.append(self._finish(seq.plan, versions, finished_at - seq.submitted))
        except BaseException:
            self._abort(seqs)
            raise
        return out

    def _advance(self, now: float) -> None:
        """Bring the simulation up to `now`: complete the steps that have passed, finish the
        sequences they end, admit queued ones into the freed slots."""
        dt = self._latency.per_token_s
        while self._heap:
            top = self._heap[0]
            if top.state != "active":
                heapq.heappop(self._heap)
                continue
            t_end = self._t_step + self._prefill + (top.last_step - self._step) * dt
            if t_end > now:
                break
            self._step, self._t_step, self._prefill = top.last_step, t_end, 0.0
            while self._heap and (
                self._heap[0].last_step <= self._step or self._heap[0].state != "active"
            ):
                seq = heapq.heappop(self._heap)
                if seq.state == "active":
                    self._complete(seq, t_end)
            self._admit(t_end)
        if self._active and dt > 0:
            elapsed = now - self._t_step - self._prefill
            top = self._heap[0]  # active: the loop above popped the cancelled ones
            if elapsed >= dt:
                k = min(int(elapsed // dt), top.last_step - self._step - 1)
                self._step += k
                self._t_step += self._prefill + k * dt
                self._prefill = 0.0
        self._admit(now)

    def _admit(self, t: float) -> None:
        slots = self._latency.slots
        while self._queue and self._active < slots:
            seq = self._queue.popleft()
            if self._active == 0:
                self._t_step, self._prefill = t, 0.0  # the server was idle: a step starts now
            self._set_active(+1, t)
            seq.state = "active"
            seq.first_step = self._step + 1
            seq.last_step = self._step + seq.plan.completion.n_tokens
            self._prefill += self._latency.prefill_per_token_s * seq.plan.prompt_tokens
            self._c.queue_wait_s += max(0.0, t - seq.submitted)
            heapq.heappush(self._heap, seq)

    def _complete(self, seq: _Seq, t: float) -> None:
        seq.state = "done"
        self._set_active(-1, t)
        if not seq.future.done():
            seq.future.set_result((self._versions(seq.first_step, seq.plan.completion.n_tokens), t))

    def _versions(self, first_step: int, n: int) -> list[int]:
        steps, values = self._version_steps, self._version_values
        i = bisect.bisect_right(steps, first_step) - 1
        if i == len(steps) - 1:
            return [values[i]] * n
        out: list[int] = []
        for s in range(first_step, first_step + n):
            while i + 1 < len(steps) and steps[i + 1] <= s:
                i += 1
            out.append(values[i])
        return out

    def _set_active(self, delta: int, t: float) -> None:
        t = max(t, self._area_t)
        self._c.busy_area += self._active * (t - max(self._area_t, self._c.since))
        self._area_t = t
        self._active += delta

    def _abort(self, seqs: list[_Seq]) -> None:
        now = time.monotonic()
        self._advance(now)
        for seq in seqs:
            if seq.state == "queued":
                seq.state = "cancelled"
                self._queue.remove(seq)
            elif seq.state == "active":
                seq.state = "cancelled"  # left in the heap, skipped when it surfaces
                self._set_active(-1, now)
        self._admit(now)
        if not self._closed:
            self._reschedule()

    def _reschedule(self) -> None:
        while self._heap and self._heap[0].state != "active":
            heapq.heappop(self._heap)
        if not self._heap:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            return
        dt = self._latency.per_token_s
        at = self._t_step + self._prefill + (self._heap[0].last_step - self._step) * dt
        if self._timer is not None:
            if self._timer_at == at:
                return
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_at = at
        self._timer = loop.call_later(max(0.0, at - time.monotonic()), self._on_timer, at)

    def _on_timer(self, at: float) -> None:
        self._timer = None
        if self._closed:
            return
        self._advance(max(time.monotonic(), at))
        self._reschedule()


def _tool_calls(text: str) -> list[dict[str, Any]] | None:
    """OpenAI-shape tool calls when `text` is exactly a JSON call spec (or a list of them)."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        spec = json.loads(stripped)
    except ValueError:
        return None
    specs = spec if isinstance(spec, list) else [spec]
    calls: list[dict[str, Any]] = []
    for i, item in enumerate(specs):
        if not (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("arguments", {}), dict)
        ):
            return None
        calls.append(
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {
                    "name": item["name"],
                    "arguments": json.dumps(item.get("arguments", {})),
                },
            }
        )
    return calls or None
