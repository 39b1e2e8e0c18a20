"""The `hf` engine: a local transformers causal LM with continuous batching (CPU, or a GPU).

    engine = HFEngine.load("default")                 # the embedded SmolLM2-135M-Instruct
    async with engine:
        [gen] = await engine.generate([Prompt(token_ids=ids)], SamplingParams(max_new_tokens=64))
        await engine.update_weights(WeightUpdate(version=1, state_dict=learner.state_dict()))

Covered: one decode thread that batches every concurrent `generate` call (Llama-family models
through `llama_decode.LlamaDecoder`, others through the HF forward), seeded sampling per request,
logprobs under `log_softmax(logits / temperature)` before top-k/top-p, stop strings, a prefix
cache across an episode's turns, weight updates between decode steps (partial rollouts),
streaming, greedy speculative decoding (`speculative.py`, off by default), fewer rows decoded
together when the KV cache cannot grow (the others wait and resume from a recomputed context),
EngineError for every failure, and OpenMP workers that spin or sleep by the machine's load
(`openmp.py`); docs/rollout.md ("The modules in detail") says how.
Not covered: LoRA adapters (merge first), prefix caching and speculation on the generic path,
speculation of sampled rows, tensor parallelism, quantised weights.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from honing.errors import ConfigError, EngineError
from honing.precision import resolve as resolve_dtype
from honing.rollout.engines.base import (
    Dtype,
    FinishReason,
    Generation,
    Prompt,
    SamplingParams,
    WeightUpdate,
)
from honing.rollout.engines.llama_decode import (
    Decoder,
    KVMemoryError,
    LlamaDecoder,
    common_prefix_len,
    fast_path_reason,
    make_decoder,
)
from honing.rollout.engines.openmp import Ballast, balance_pool, release_idle_pool
from honing.rollout.engines.speculative import (
    Drafter,
    SpeculativeConfig,
    accepted_length,
    make_drafter,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_LEN = 4096
PREFILL_TOKENS = 8192  # prompt tokens run in one prefill at most (a shared prefix once)


@dataclass(eq=False)
class _Seq:
    """One sequence: its request, its slot's state, what it has produced."""

    prompt: list[int]
    sampling: SamplingParams
    future: Future[Generation]
    submitted: float
    budget: int  # tokens it may still produce in total
    generator: torch.Generator
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finish: FinishReason | None = None
    on_token: Callable[[int, float, torch.Tensor], None] | None = None

    @property
    def context(self) -> list[int]:
        """What a prefill of this sequence runs: its prompt, and the tokens it has produced
        when it was set back to wait (the KV cache could not grow) and resumes."""
        return self.prompt + self.tokens if self.tokens else self.prompt


TokenCallback = Callable[[int, int, float, torch.Tensor], None]
"""`(prompt index, token id, logprob, logits row)`, called as each token is sampled."""


@dataclass
class EngineStats:
    """Prefill counters since the engine started (read them from any thread)."""

    prompt_tokens: int = 0
    """Prompt tokens of the sequences admitted."""
    prefill_tokens: int = 0
    """Of those, tokens whose KV the engine had to compute (not taken from the prefix cache;
    a prefix shared within one prefill batch still counts once per sequence)."""
    cached_tokens: int = 0
    """Of those, tokens whose KV came from the prefix cache."""
    prefix_hits: int = 0
    """Sequences admitted with at least one cached token."""
    decode_steps: int = 0
    """Batched decode steps run."""
    peak_batch: int = 0
    """The most sequences advanced together in one decode step (continuous batching at work
    when above 1)."""
    draft_tokens: int = 0
    """Draft tokens verified (speculative decoding)."""
    accepted_tokens: int = 0
    """Of those, the ones the model's own greedy choice confirmed."""
    preempted: int = 0
    """Sequences set back to wait because the KV cache could not grow for all the rows
    decoded together; each resumed later with its context computed again."""


@dataclass(eq=False)
class _Cached:
    tokens: list[int]  # whose KV fills the slot's first len(tokens) positions
    used: int  # when it was made (a tick of the cache's clock): LRU order. Reading a partial
    # prefix (a system prompt every entry shares) does not count as a use.


@dataclass
class _Placement:
    """How an admitted batch goes into slots first..first + b - 1."""

    order: list[int]  # order[j]: the index (in the batch) of the prompt going to slot first + j
    starts: list[int]  # starts[j]: positions of slot first + j already holding its prompt's KV
    copies: list[tuple[int, int, int]]  # (src, dst, length) to run before the prefill


class _PrefixCache:
    """Which free slots (those past the active ones) hold reusable KV, and of which tokens."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.entries: dict[int, _Cached] = {}
        self.clock = 0

    def clear(self) -> None:
        self.entries.clear()

    def add(self, slot: int, tokens: list[int]) -> None:
        self.clock += 1
        self.entries[slot] = _Cached(tokens, self.clock)

    def _match(self, prompt: list[int], targets: range) -> tuple[int, int | None, bool]:
        """The longest usable cached prefix of `prompt`: (length, slot, whether the prompt
        extends all of the slot's tokens), or (0, None, False)."""
        best: tuple[int, bool, int, int | None, bool] = (0, False, 0, None, False)
        for slot, entry in self.entries.items():
            common = common_prefix_len(entry.tokens, prompt)
            n = min(common, len(prompt) - 1)  # the last prompt token runs, for its logits
            key = (n, slot in targets, entry.used, slot, common == len(entry.tokens))
            if n > 0 and key[:3] > best[:3]:  # ties: a slot of the batch, then most recent
                best = key
        return best[0], best[3], best[4]

    def place(self, first: int, prompts: list[list[int]]) -> _Placement:
        """Assign the batch's prompts to slots first.., reusing cached prefixes; keep the most
        recently used displaced entries in free slots past the batch, evicting older ones."""
        self.clock += 1
        b = len(prompts)
        targets = range(first, first + b)
        matches = [self._match(p, targets) for p in prompts]
        # A prompt extending all of an entry supersedes it: it takes the entry's slot when the
        # batch fills that slot anyway (no copy), and the entry is dropped. A partly reused
        # entry is copied from, and kept.
        consumed = {src for _, src, full in matches if src is not None and full}
        slot_of: dict[int, int] = {}  # prompt index -> slot
        in_place: set[int] = set()
        for i in sorted(range(b), key=lambda i: -matches[i][0]):
            _, src, full = matches[i]
            if full and src is not None and src in targets and src not in in_place:
                slot_of[i] = src
                in_place.add(src)
        free = iter(t for t in targets if t not in in_place)
        for i in range(b):
            if i not in slot_of:
                slot_of[i] = next(free)
        order = [0] * b
        starts = [0] * b
        copies: list[tuple[int, int, int]] = []
        for i, slot in slot_of.items():
            order[slot - first] = i
            n, src, _ = matches[i]
            if src is not None:
                starts[slot - first] = n
                if src != slot:
                    copies.append((src, slot, n))
        # Other entries in the batch's slots are overwritten: move the freshest out, if room.
        kept = {s: e for s, e in self.entries.items() if s not in targets and s not in consumed}
        displaced = [(s, e) for s, e in self.entries.items() if s in targets and s not in consumed]
        empty = [s for s in range(first + b, self.slots) if s not in kept]
        for src, entry in sorted(displaced, key=lambda se: -se[1].used):
            if empty:
                dst = empty.pop()
            else:
                older = [s for s, e in kept.items() if e.used < entry.used]
                if not older:
                    continue
                dst = min(older, key=lambda s: kept[s].used)
            kept[dst] = entry
            copies.append((src, dst, len(entry.tokens)))
        self.entries = kept
        return _Placement(order, starts, copies)


@dataclass(eq=False)
class _Update:
    tensors: dict[str, torch.Tensor]
    version: int
    future: Future[None]


class HFEngine:
    """A local transformers causal LM behind the Engine protocol; see the module docstring."""

    name = "hf"
    accepts_tokens = True

    def __init__(
        self,
        model: str | Path | Any,
        tokenizer: Any | None = None,
        *,
        dtype: Dtype = "auto",
        device: str | None = None,
        max_batch: int = 32,
        max_len: int | None = None,
        version: int = 0,
        seed: int | None = None,
        eos_ids: Collection[int] | None = None,
        prefix_cache: bool = True,
        dequantise: bool = False,
        speculative: SpeculativeConfig | None = None,
    ) -> None:
        """`model`: a model directory (or a built-in name such as "default") or a loaded causal
        LM (used as is: its dtype and device). `max_batch`: sequences decoded together; more
        wait. `max_len`: prompt + completion at most (default: the model's, capped at 4096).
        `eos_ids`: the ids that end a sequence (default: the tokenizer's, the config's and the
        generation config's; empty: never stop on a token, as benchmarks need). `prefix_cache`:
        keep finished sequences' KV for the prompts that continue them (the fast path only;
        see the module docstring). `dequantise`: an int8 model directory is loaded with plain
        weights (`honing.rollout.models.load_model`), which the fast path runs. `speculative`:
        draft tokens verified several at a time (greedy rows, the fast path only; docs/rollout.md,
        "Speculative decoding")."""
        from honing.rollout.models import load_model, load_tokenizer, resolve_model

        if max_batch < 1:
            raise ConfigError(f"max_batch {max_batch}: must be at least 1")
        if isinstance(model, (str, Path)):
            path = resolve_model(str(model))
            target = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
            model = load_model(path, resolve_dtype(dtype, target), dequantise=dequantise)
            model.to(target)
            tokenizer = tokenizer if tokenizer is not None else load_tokenizer(path)
        elif dtype != "auto" and getattr(torch, dtype) != model.dtype:
            raise ConfigError(
                f"dtype {dtype!r} but the model given is {model.dtype}; pass dtype='auto' to use "
                "it as is, or cast it first"
            )
        if tokenizer is None:
            raise ConfigError("HFEngine needs the model's tokenizer when given a model object")
        self.model = model
        self._tokenizer = tokenizer
        config = model.config
        limit = getattr(config, "max_position_embeddings", None) or DEFAULT_MAX_LEN
        self.max_len = max_len or min(limit, DEFAULT_MAX_LEN)
        self.max_batch = max_batch
        self._rows = max_batch  # decoded together now: fewer after the KV cache could not grow
        self.vocab_size = model.get_input_embeddings().weight.shape[0]
        self.eos_ids = _eos_ids(model, tokenizer) if eos_ids is None else frozenset(eos_ids)
        self.fast_path = fast_path_reason(model) is None
        self._decoder: Decoder = make_decoder(model, slots=max_batch, max_len=self.max_len)
        self._cache = (
            _PrefixCache(max_batch)
            if prefix_cache and isinstance(self._decoder, LlamaDecoder)
            else None
        )
        self.speculative = speculative
        self._drafter: Drafter | None = None
        if speculative is not None:
            why = fast_path_reason(model)
            if why is not None:
                raise ConfigError(
                    f"speculative decoding needs the Llama fast path, which this model cannot "
                    f"take: {why}"
                )
            self._drafter = make_drafter(
                speculative, model, tokenizer, slots=max_batch, max_len=self.max_len
            )
        self.stats = EngineStats()
        self._version = version
        self._seeds = random.Random(seed)
        self._lock = threading.Condition()
        self._waiting: deque[_Seq] = deque()
        self._updates: deque[_Update] = deque()
        self._active: list[_Seq] = []
        self._closed = False
        self._ballast = Ballast(torch.get_num_threads())  # load that starts mid-call: openmp.py
        self._thread = threading.Thread(target=self._run, name="hf-engine-decode", daemon=True)
        self._thread.start()
        balance_pool(torch.get_num_threads())  # loading left this thread a pool: see openmp.py

    @classmethod
    def load(cls, spec: str | Path, *, dtype: Dtype = "auto", **kwargs: Any) -> HFEngine:
        """An engine for a model directory or a built-in name ("default")."""
        return cls(spec, dtype=dtype, **kwargs)

    # ---- the Engine protocol -------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    async def generate(
        self,
        prompts: Sequence[Prompt],
        sampling: SamplingParams,
        *,
        on_token: TokenCallback | None = None,
    ) -> list[Generation]:
        """One generation per prompt, in order; `on_token` streams the tokens as they are
        sampled (see the module docstring)."""
        seqs = [self._sequence(p, sampling) for p in prompts]
        if on_token is not None:
            for i, seq in enumerate(seqs):
                seq.on_token = _bind(on_token, i)
        # Whether the decode thread's OpenMP workers spin or sleep, by the load now (openmp.py).
        balance_pool(torch.get_num_threads())
        with self._lock:
            if self._closed:
                raise EngineError("the hf engine is closed")
            self._waiting.extend(seqs)
            self._lock.notify()
        futures = [asyncio.wrap_future(s.future) for s in seqs]
        try:
            return list(await asyncio.gather(*futures))
        except BaseException:
            for s in seqs:  # cancelled or failed: the loop drops what is still running
                s.future.cancel()
            raise

    async def update_weights(self, update: WeightUpdate) -> None:
        if update.adapter:
            raise EngineError("the hf engine cannot load LoRA adapters; merge the adapter first")
        if update.state_dict is not None:
            tensors = dict(update.state_dict)
        elif update.path is not None:
            tensors = await asyncio.to_thread(_read_safetensors, Path(update.path))
        else:
            raise EngineError("a WeightUpdate needs a state_dict or a path")
        self._check_update(tensors)
        pending = _Update(tensors, update.version, Future())
        with self._lock:
            if self._closed:
                raise EngineError("the hf engine is closed")
            self._updates.append(pending)
            self._lock.notify()
        await asyncio.wrap_future(pending.future)

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        await asyncio.to_thread(self._thread.join)
        await asyncio.to_thread(self._ballast.close)

    async def __aenter__(self) -> HFEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- requests --------------------------------------------------------------------------

    def _sequence(self, prompt: Prompt, sampling: SamplingParams) -> _Seq:
        ids = prompt.token_ids
        if ids is None:
            raise EngineError(
                "the hf engine takes token-id prompts (accepts_tokens); render the chat "
                "template with engine.tokenizer first"
            )
        if not ids:
            raise EngineError("empty prompt: the hf engine needs at least one token to continue")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise EngineError(
                f"prompt token ids out of the vocabulary (0..{self.vocab_size - 1}): {bad[:5]}"
            )
        seed = sampling.seed if sampling.seed is not None else self._seeds.getrandbits(63)
        return _Seq(
            prompt=list(ids),
            sampling=sampling,
            future=Future(),
            submitted=time.perf_counter(),
            budget=min(sampling.max_new_tokens, self.max_len - len(ids)),
            generator=torch.Generator().manual_seed(seed),
        )

    def _check_update(self, tensors: dict[str, torch.Tensor]) -> None:
        params = dict(self.model.named_parameters(remove_duplicate=False))
        unknown = sorted(set(tensors) - set(params))
        if unknown:
            raise EngineError(f"weight update names unknown parameters: {unknown[:5]}")
        wrong = [n for n, t in tensors.items() if tuple(t.shape) != tuple(params[n].shape)]
        if wrong:
            raise EngineError(
                f"weight update has wrong shapes for {wrong[:5]} "
                f"(e.g. {tuple(tensors[wrong[0]].shape)} vs {tuple(params[wrong[0]].shape)})"
            )

    # ---- the decode loop (worker thread) ---------------------------------------------------

    def _run(self) -> None:
        crash: BaseException | None = None
        try:
            with torch.inference_mode():
                self._loop()
        except BaseException as exc:  # a bug of the loop itself: nobody may wait forever
            crash = exc
            with self._lock:
                self._closed = True
        self._abort_all(crash)

    def _loop(self) -> None:
        idle = False  # the loop waited for work since it last looked at its rows
        while True:
            with self._lock:
                if not self._has_work():
                    # Out of work: free this thread's OpenMP workers, so that the process's
                    # other torch work (the learner's update, between two generations) finds no
                    # more workers than cores and its own spin (openmp.py): the GRPO step of
                    # benchmarks/grpo_vs_trl.py took 4.3-4.8 s against 5.4-6.0. The next step
                    # makes them again.
                    release_idle_pool()
                    idle = True
                    while not self._has_work():
                        self._lock.wait()
                if self._closed:
                    return
                updates = list(self._updates)
                self._updates.clear()
            for update in updates:
                self._apply(update)
            if idle and self._rows < self.max_batch:
                self._regrow()
            idle = False
            self._admit()
            if self._active:
                self._ballast.tick()
                self._step()

    def _has_work(self) -> bool:
        """Something for the loop to do (closing counts); call with the lock held."""
        return bool(self._closed or self._waiting or self._updates or self._active)

    def _apply(self, update: _Update) -> None:
        try:
            params = dict(self.model.named_parameters(remove_duplicate=False))
            for name, tensor in update.tensors.items():
                params[name].copy_(tensor)
            self._decoder.refresh()
            if self._cache is not None:  # KV of the old weights: recompute the next turns
                self._cache.clear()
            self._version = update.version
            update.future.set_result(None)
        except Exception as exc:
            update.future.set_exception(EngineError(f"applying weights v{update.version}: {exc!r}"))

    def _admit(self) -> None:
        while len(self._active) < self._rows:
            batch: list[_Seq] = []
            longest = shared = 0  # of the batch's prompts; the prefix they all share
            with self._lock:
                while self._waiting and len(self._active) + len(batch) < self._rows:
                    seq = self._waiting[0]
                    context = seq.context
                    if batch:  # the shared prefix runs once, the rest right-padded per row
                        longest = max(longest, len(context))
                        shared = min(shared, common_prefix_len(batch[0].context, context))
                        if shared + (longest - shared) * (len(batch) + 1) > PREFILL_TOKENS:
                            break
                    else:
                        longest = shared = len(context)
                    self._waiting.popleft()
                    if seq.future.cancelled():
                        continue
                    if seq.budget <= 0:
                        seq.finish = FinishReason.LENGTH
                        self._resolve(seq)
                        continue
                    batch.append(seq)
            if not batch:
                return
            try:
                first = len(self._active)
                batch, starts = self._place(first, batch)
                logits = self._decoder.prefill(first, [s.context for s in batch], starts)
                self._active.extend(batch)
                self._sample_and_retire(logits, first)
            except KVMemoryError as exc:
                if not self._make_room(exc, batch):
                    self._fail(batch, exc)
                    self._forget()
            except Exception as exc:
                self._fail(batch, exc)
                self._active = [s for s in self._active if s not in batch]
                self._forget()

    def _place(self, first: int, batch: list[_Seq]) -> tuple[list[_Seq], list[int]]:
        """The batch in slot order and the cached length of each slot (prefix cache)."""
        prompts = [s.context for s in batch]
        if self._cache is None:
            starts = [0] * len(batch)
        else:
            assert isinstance(self._decoder, LlamaDecoder)
            placement = self._cache.place(first, prompts)
            self._decoder.copy(placement.copies)
            batch = [batch[i] for i in placement.order]
            starts = placement.starts
        stats = self.stats
        stats.prompt_tokens += sum(len(p) for p in prompts)
        stats.cached_tokens += sum(starts)
        stats.prefill_tokens += sum(len(p) for p in prompts) - sum(starts)
        stats.prefix_hits += sum(1 for n in starts if n)
        return batch, starts

    def _forget(self) -> None:
        """After a failure, no slot's KV is trusted."""
        if self._cache is not None:
            self._cache.clear()

    def _step(self) -> None:
        tokens = [s.tokens[-1] for s in self._active]
        positions = [len(s.prompt) + len(s.tokens) - 1 for s in self._active]
        stats = self.stats
        stats.decode_steps += 1
        stats.peak_batch = max(stats.peak_batch, len(self._active))
        try:
            drafts = self._drafts()
            if not any(drafts):
                logits = self._decoder.decode(tokens, positions)
                self._sample_and_retire(logits, 0)
                return
            assert isinstance(self._decoder, LlamaDecoder)  # checked with the config
            chunks = [[t, *d] for t, d in zip(tokens, drafts, strict=True)]
            logits = self._decoder.score(chunks, positions)
            self._accept(logits, drafts)
        except KVMemoryError as exc:
            if not self._make_room(exc, []):
                self._fail(self._active, exc)
                self._active = []
                self._forget()
        except Exception as exc:
            self._fail(self._active, exc)
            self._active = []
            self._forget()

    def _make_room(self, exc: KVMemoryError, admitted: list[_Seq]) -> bool:
        """The KV cache could not grow for the rows it holds: decode half as many together from
        now. The sequences being admitted (`admitted`) and the active ones past that half go
        back to the head of the queue with what they have produced; admitted again, each
        prefills its prompt and its tokens as one context and goes on where it stopped
        (preemption by recompute). False when a cache of one slot cannot hold even one sequence
        (or not even the smaller cache fits): the caller fails the calls with `exc`, which says
        what to lower."""
        rows = len(self._active) + len(admitted)
        keep = max(1, rows // 2)
        if not isinstance(self._decoder, LlamaDecoder) or keep >= self._decoder.slots:
            return False
        slots = self._decoder.slots
        try:
            self._decoder.resize(keep)
        except KVMemoryError:
            return False
        active, moved = self._active[:keep], self._active[keep:]
        self._active = active
        self._forget()
        if self._cache is not None:
            self._cache.slots = keep
        with self._lock:
            self._waiting.extendleft(reversed([*moved, *admitted]))
        self._rows = keep
        self.stats.preempted += len(moved)
        log.warning(
            "hf engine: %s; the cache now has %d slot(s), not %d (%d sequence(s) set back to "
            "wait, to resume with their context computed again; engine.slots sets the slots)",
            exc,
            keep,
            slots,
            len(moved) + len(admitted),
        )
        return True

    def _regrow(self) -> None:
        """New work after the loop sat idle, with fewer rows than configured (`_make_room`):
        take them all again, the KV cache back at its initial length (it grows on demand, each
        growth checked), so that the memory the shrunk cache held is not taken at once from what
        else runs then (the learner's update, between two rollouts). Never while work queues:
        rows would be set back again at once. The prefix cache starts empty."""
        assert isinstance(self._decoder, LlamaDecoder)  # only its cache is ever shrunk
        try:
            self._decoder.restart(self.max_batch)
        except KVMemoryError:
            return
        self._forget()
        if self._cache is not None:
            self._cache.slots = self.max_batch
        self._rows = self.max_batch

    def _drafts(self) -> list[list[int]]:
        """Each active row's draft tokens for this step ([] for none): greedy rows only, while
        the batch is small enough to speculate, never past a row's budget."""
        active = self._active
        config = self.speculative
        if self._drafter is None or config is None or len(active) > config.max_batch:
            return [[] for _ in active]
        limits = [
            min(config.tokens, s.budget - len(s.tokens) - 1) if s.sampling.temperature == 0 else 0
            for s in active
        ]
        rows = [i for i, k in enumerate(limits) if k > 0]
        drafts: list[list[int]] = [[] for _ in active]
        if rows:
            contexts = [active[i].prompt + active[i].tokens for i in rows]
            proposed = self._drafter.propose(contexts, [limits[i] for i in rows])
            for i, row in zip(rows, proposed, strict=True):
                drafts[i] = row
        return drafts

    def _sample_and_retire(self, logits: torch.Tensor, first: int) -> None:
        """Sample one token for slots first.. from their logits; retire the finished ones."""
        seqs = self._active[first:]
        chosen, logprobs = _sample(logits, seqs)
        version = self._version
        for row, (seq, token, logprob) in enumerate(zip(seqs, chosen, logprobs, strict=True)):
            self._emit(seq, token, logprob, logits[row], version)
        self._retire()

    def _accept(self, logits: torch.Tensor, drafts: list[list[int]]) -> None:
        """Speculative acceptance: `logits` holds each active row's len(drafts[i]) + 1 rows
        (after its last token, then after each draft token); a row takes its model's tokens up
        to and including the first one that differs from its draft (greedy: those plain
        decoding would have made), fewer if it ends first; then retire the finished ones."""
        seqs = self._active
        owners = [s for s, d in zip(seqs, drafts, strict=True) for _ in range(len(d) + 1)]
        chosen, logprobs = _sample(logits, owners)  # a sampled row has one row: one draw
        version = self._version
        stats = self.stats
        at = 0
        for seq, draft in zip(seqs, drafts, strict=True):
            width = len(draft) + 1
            keep = accepted_length(draft, chosen[at : at + width])
            stats.draft_tokens += len(draft)
            stats.accepted_tokens += keep - 1
            for row in range(at, at + keep):
                if not self._emit(seq, chosen[row], logprobs[row], logits[row], version):
                    break
            at += width
        self._retire()

    def _emit(
        self, seq: _Seq, token: int, logprob: float, logits: torch.Tensor, version: int
    ) -> bool:
        """Append one sampled token to `seq`, stream it, and see whether `seq` is finished;
        whether it goes on."""
        seq.tokens.append(token)
        seq.logprobs.append(logprob)
        seq.versions.append(version)
        if seq.on_token is not None:
            try:
                seq.on_token(token, logprob, logits.clone())  # the next step reuses the buffer
            except Exception as exc:  # the listener's fault: this sequence fails, not the batch
                if not seq.future.done():
                    seq.future.set_exception(EngineError(f"on_token callback: {exc!r}"))
                return False
        if token in self.eos_ids or self._hit_stop(seq):
            seq.finish = FinishReason.STOP
        elif len(seq.tokens) >= seq.budget:
            seq.finish = FinishReason.LENGTH
        return seq.finish is None

    def _hit_stop(self, seq: _Seq) -> bool:
        stops = seq.sampling.stop
        if not stops:
            return False
        window = max(len(s) for s in stops) + 2  # tokens: each decodes to >= 1 char, mostly
        tail = self._tokenizer.decode(seq.tokens[-window:], skip_special_tokens=True)
        return any(s in tail for s in stops)

    def _retire(self) -> None:
        """Resolve finished (and drop cancelled) sequences; refill their slots from the end."""
        done = [s.finish is not None or s.future.done() for s in self._active]
        if not any(done):
            return
        for seq, d in zip(self._active, done, strict=True):
            if d and seq.finish is not None:
                self._resolve(seq)
        keep = len(self._active) - sum(done)
        holes = [i for i in range(keep) if done[i]]
        movers = [i for i in range(keep, len(self._active)) if not done[i]]
        if self._cache is None:
            for hole, mover in zip(holes, movers, strict=True):
                seq = self._active[mover]
                self._decoder.move(mover, hole, len(seq.prompt) + len(seq.tokens))
                self._active[hole] = seq
        else:  # the finished sequences' KV stays cached: each swaps with its mover
            assert isinstance(self._decoder, LlamaDecoder)
            copies = []
            for hole, mover in zip(holes, movers, strict=True):
                seq, gone = self._active[mover], self._active[hole]
                copies.append((mover, hole, len(seq.prompt) + len(seq.tokens)))
                copies.append((hole, mover, len(gone.prompt) + len(gone.tokens)))
                self._active[hole], self._active[mover] = seq, gone
            self._decoder.copy(copies)
            for slot in range(keep, len(self._active)):
                gone = self._active[slot]
                # The last sampled token was never fed: its KV is missing. A sequence admitted
                # before the last weight update holds KV of the old weights: not reusable.
                if gone.tokens and gone.versions[0] == self._version:
                    self._cache.add(slot, gone.prompt + gone.tokens[:-1])
        del self._active[keep:]

    def _resolve(self, seq: _Seq) -> None:
        if seq.future.done():
            return
        text = self._tokenizer.decode(seq.tokens, skip_special_tokens=True)
        seq.future.set_result(
            Generation(
                token_ids=seq.tokens,
                text=text,
                logprobs=seq.logprobs,
                finish_reason=seq.finish or FinishReason.ABORT,
                versions=seq.versions,
                prompt_tokens=len(seq.prompt),
                seconds=time.perf_counter() - seq.submitted,
            )
        )

    def _fail(self, seqs: list[_Seq], exc: BaseException) -> None:
        error = EngineError(f"hf engine decode failed: {exc!r}")
        for seq in seqs:
            if not seq.future.done():
                seq.future.set_exception(error)

    def _drain(self) -> tuple[list[_Seq], list[_Update]]:
        with self._lock:
            waiting, updates = list(self._waiting), list(self._updates)
            self._waiting.clear()
            self._updates.clear()
        return waiting, updates

    def _abort_all(self, crash: BaseException | None) -> None:
        """Closing: sequences in flight end ABORT with what they have; after a crash of the
        loop, everyone waiting gets the EngineError."""
        waiting, updates = self._drain()
        if crash is not None:
            self._fail([*self._active, *waiting], crash)
        for seq in [*self._active, *waiting]:
            seq.finish = FinishReason.ABORT
            self._resolve(seq)
        self._active = []
        reason = f"crashed: {crash!r}" if crash else "closed before the update"
        for update in updates:
            update.future.set_exception(EngineError(f"the hf engine was {reason}"))


def _sample(logits: torch.Tensor, seqs: list[_Seq]) -> tuple[list[int], list[float]]:
    """One token per row and its logprob (see the module docstring), the whole batch at once."""
    temps = [s.sampling.temperature for s in seqs]
    if all(t == 0 for t in temps):  # no [n, vocab] log_softmax: the argmax's is max - logsumexp
        best, chosen = logits.max(-1)
        return chosen.tolist(), (best - torch.logsumexp(logits, -1)).tolist()
    device = logits.device
    temp = torch.tensor([t if t > 0 else 1.0 for t in temps], device=device)
    logp = torch.log_softmax(logits / temp[:, None], -1)
    probs = logp.exp()
    top_k = [s.sampling.top_k for s in seqs]
    if any(k > 0 for k in top_k):
        k_max = max(top_k)
        kth = torch.topk(probs, min(k_max, probs.shape[-1]), -1).values
        index = torch.tensor([min(k, probs.shape[-1]) - 1 if k > 0 else 0 for k in top_k])
        floor = kth.gather(1, index[:, None].to(device))
        floor[torch.tensor([k == 0 for k in top_k], device=device)] = 0.0
        probs = torch.where(probs >= floor, probs, 0.0)
    top_p = [s.sampling.top_p for s in seqs]
    if any(p < 1 for p in top_p):
        sorted_probs, order = torch.sort(probs, -1, descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs  # mass of the tokens ranked above
        mass = sorted_probs.sum(-1, keepdim=True)
        limit = torch.tensor(top_p, device=device)[:, None] * mass
        sorted_probs = torch.where(before < limit, sorted_probs, 0.0)
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_probs)
    cdf = probs.cumsum(-1)
    draws = torch.tensor([1.0 - torch.rand((), generator=s.generator).item() for s in seqs])
    targets = draws.to(device)[:, None] * cdf[:, -1:]
    sampled = torch.searchsorted(cdf, targets)[:, 0].clamp_(max=probs.shape[-1] - 1)
    greedy = torch.tensor([t == 0 for t in temps], device=device)
    chosen = torch.where(greedy, logits.argmax(-1), sampled)
    return chosen.tolist(), logp.gather(1, chosen[:, None])[:, 0].tolist()


def _bind(callback: TokenCallback, index: int) -> Callable[[int, float, torch.Tensor], None]:
    return lambda token, logprob, logits: callback(index, token, logprob, logits)


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    sources = [tokenizer.eos_token_id, getattr(model.config, "eos_token_id", None)]
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        sources.append(getattr(generation, "eos_token_id", None))
    for source in sources:
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, (list, tuple)):
            ids.update(int(i) for i in source)
    return frozenset(ids)


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise EngineError(f"weight update {path}: no safetensors files there")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(load_file(str(file)))
    return tensors
