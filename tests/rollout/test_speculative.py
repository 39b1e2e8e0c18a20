"""Speculative decoding: prompt lookup and the acceptance rule on hand-made token lists, the
decoder's verify step against transformers' logits, and the hf engine with speculation giving
plain decoding's tokens (greedy, fp32, tiny random Llamas) through stops, budgets, streaming,
sampled rows, batches, weight updates and the prefix cache; the configuration's errors."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from hf_helpers import prompts
from pydantic import ValidationError

from honing.errors import ConfigError
from honing.rollout.engines import make_engine
from honing.rollout.engines.base import FinishReason, Generation, Prompt, SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.rollout.engines.llama_decode import LlamaDecoder
from honing.rollout.engines.speculative import (
    SpeculativeConfig,
    accepted_length,
    prompt_lookup,
)
from honing.rollout.models import load_model, load_tokenizer
from honing.serve.server import background_server
from honing.trainer.run_config import EngineSettings

NGRAM = SpeculativeConfig(method="ngram", tokens=4)
GREEDY = SamplingParams(temperature=0, max_new_tokens=40)


# -- prompt lookup and acceptance: pure functions ------------------------------------------------
def test_prompt_lookup_copies_what_followed_the_last_trigram() -> None:
    # the suffix [1, 2, 3] occurred at 0; what followed it: tokens 3..5
    assert prompt_lookup([1, 2, 3, 4, 1, 2, 3], k=3) == [4, 1, 2]
    assert prompt_lookup([1, 2, 3, 4, 1, 2, 3], k=9) == [4, 1, 2, 3]  # up to the context's end


def test_prompt_lookup_takes_the_latest_occurrence() -> None:
    # [5, 6] occurs at 0 (then 9) and at 3 (then 7): the latest wins
    assert prompt_lookup([5, 6, 9, 5, 6, 7, 5, 6], k=2, max_n=2) == [7, 5]


def test_prompt_lookup_falls_back_to_shorter_suffixes() -> None:
    # [3, 9, 3] and [9, 3] never occurred before; [3] did, at 2, followed by 9, 3
    assert prompt_lookup([1, 2, 3, 9, 3], k=2) == [9, 3]
    assert prompt_lookup([1, 2, 3, 9, 3], k=2, min_n=2) == []
    # [7, 7] at 0 leaves one token before the suffix itself
    assert prompt_lookup([7, 7, 7], k=4) == [7]


def test_prompt_lookup_without_a_match_or_room() -> None:
    assert prompt_lookup([1, 2, 3], k=4) == []
    assert prompt_lookup([4], k=4) == []
    assert prompt_lookup([1, 2, 1], k=0) == []


def test_accepted_length_is_the_matching_prefix_and_one_more() -> None:
    assert accepted_length([5, 6, 7], [5, 6, 8, 9]) == 2 + 1  # 5, 6 confirmed; then 8
    assert accepted_length([5, 6], [5, 6, 1]) == 2 + 1  # all confirmed; then the bonus 1
    assert accepted_length([5, 6], [4, 6, 1]) == 0 + 1  # only the model's own 4
    assert accepted_length([], [3]) == 1


# -- the verify step -----------------------------------------------------------------------------
def reference(model: Any, sequence: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        logits: torch.Tensor = model(input_ids=torch.tensor([sequence])).logits[0].float()
    return logits


def test_score_gives_every_positions_logits_and_rejected_kv_is_overwritten(model: Any) -> None:
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randint(1, 40000, (n,), generator=gen).tolist() for n in (7, 12)]
    decoder = LlamaDecoder(model, slots=2, max_len=64)
    with torch.inference_mode():
        first = decoder.prefill(0, rows).argmax(-1).tolist()
        drafts = [[11, 12, 13], [21]]  # arbitrary: mostly wrong
        chunks = [[t, *d] for t, d in zip(first, drafts, strict=True)]
        logits = decoder.score(chunks, [len(r) for r in rows])
        assert logits.shape[0] == 4 + 2 and logits.dtype == torch.float32
        at = 0
        for row, chunk in zip(rows, chunks, strict=True):
            expected = reference(model, row + chunk)[len(row) :]
            torch.testing.assert_close(logits[at : at + len(chunk)], expected, atol=1e-4, rtol=1e-4)
            at += len(chunk)
        # Both rows keep only their first token: the drafts' KV is overwritten by the next step.
        pairs = zip(rows, first, strict=True)
        seconds = [int(reference(model, [*r, t])[-1].argmax()) for r, t in pairs]
        step = decoder.decode(seconds, [len(r) + 1 for r in rows])
        for i, row in enumerate(rows):
            expected = reference(model, [*row, first[i], seconds[i]])[-1]
            torch.testing.assert_close(step[i], expected, atol=1e-4, rtol=1e-4)


# -- the engine: plain decoding's tokens ---------------------------------------------------------
@pytest.fixture(scope="module")
def sharp_dir(make_random_llama: Callable[[str, float], Path]) -> Path:
    """A random Llama with sharp logits: greedy output falls into loops (drafts often right)
    and has no near-ties for float rounding to flip."""
    return make_random_llama("spec-sharp", 0.2)


@pytest.fixture
def sharp(sharp_dir: Path) -> tuple[Any, Any]:
    return load_model(sharp_dir, "float32"), load_tokenizer(sharp_dir)


def workload(tokenizer: Any) -> list[list[int]]:
    """Chat prompts, and prompts whose continuation repeats what they hold."""
    code = "def area(w, h):\n    return w * h\n\n# the same function, renamed:\ndef area("
    call = '{"name": "search", "arguments": {"query": "red shoes", "limit": 5}} again: {"name": '
    repeats = [list(tokenizer.encode(t)) for t in (code, call, "one two three " * 6)]
    return [*prompts(tokenizer), *repeats]


async def run(engine: HFEngine, ids: list[list[int]], sampling: SamplingParams) -> list[Generation]:
    async with engine:
        return [(await engine.generate([Prompt(token_ids=p)], sampling))[0] for p in ids]


def same(a: list[Generation], b: list[Generation]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids
        assert x.finish_reason == y.finish_reason and x.text == y.text
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)
        assert x.versions == y.versions


async def test_ngram_speculation_gives_plain_greedy_tokens(sharp: tuple[Any, Any]) -> None:
    model, tokenizer = sharp
    ids = workload(tokenizer)
    plain = await run(HFEngine(model, tokenizer, eos_ids=()), ids, GREEDY)
    engine = HFEngine(model, tokenizer, eos_ids=(), speculative=NGRAM)
    fast = await run(engine, ids, GREEDY)
    same(fast, plain)
    assert all(len(g.token_ids) == GREEDY.max_new_tokens for g in fast)
    stats = engine.stats
    assert 0 < stats.accepted_tokens <= stats.draft_tokens
    assert stats.decode_steps < len(ids) * (GREEDY.max_new_tokens - 1)  # fewer steps than tokens


@pytest.mark.parametrize("draft", ["same", "other"])
async def test_a_draft_model_gives_plain_greedy_tokens(
    sharp: tuple[Any, Any], sharp_dir: Path, tiny_model_dir: Path, draft: str
) -> None:
    model, tokenizer = sharp
    ids = workload(tokenizer)[:4]
    path = sharp_dir if draft == "same" else tiny_model_dir  # always right / mostly wrong
    config = SpeculativeConfig(method="draft", tokens=3, draft_model=str(path))
    plain = await run(HFEngine(model, tokenizer), ids, GREEDY)
    engine = HFEngine(model, tokenizer, speculative=config)
    same(await run(engine, ids, GREEDY), plain)
    stats = engine.stats
    if draft == "same":
        assert stats.accepted_tokens == stats.draft_tokens > 0
    else:
        assert stats.draft_tokens > stats.accepted_tokens


@pytest.mark.parametrize("budget", [1, 2, 3, 7])
async def test_never_more_than_max_new_tokens(sharp: tuple[Any, Any], budget: int) -> None:
    model, tokenizer = sharp
    ids = workload(tokenizer)[3:]
    sampling = SamplingParams(temperature=0, max_new_tokens=budget)
    plain = await run(HFEngine(model, tokenizer, eos_ids=()), ids, sampling)
    fast = await run(HFEngine(model, tokenizer, eos_ids=(), speculative=NGRAM), ids, sampling)
    same(fast, plain)
    assert all(len(g.token_ids) == budget and g.finish_reason == "length" for g in fast)


async def test_max_len_bounds_the_drafts(sharp: tuple[Any, Any]) -> None:
    model, tokenizer = sharp
    [ids] = workload(tokenizer)[5:]
    max_len = len(ids) + 6
    plain = await run(HFEngine(model, tokenizer, eos_ids=(), max_len=max_len), [ids], GREEDY)
    engine = HFEngine(model, tokenizer, eos_ids=(), max_len=max_len, speculative=NGRAM)
    same(await run(engine, [ids], GREEDY), plain)
    assert len(plain[0].token_ids) == 6


async def test_stop_strings_and_eos_end_where_plain_decoding_ends(sharp: tuple[Any, Any]) -> None:
    model, tokenizer = sharp
    ids = workload(tokenizer)[3:]
    full = await run(HFEngine(model, tokenizer, eos_ids=()), ids, GREEDY)
    # A stop string and an end token from the middle of each plain completion.
    stop = tokenizer.decode(full[0].token_ids[9:11]).strip() or "x"
    eos = {full[1].token_ids[6]}
    sampling = SamplingParams(temperature=0, max_new_tokens=40, stop=[stop])
    plain = await run(HFEngine(model, tokenizer, eos_ids=eos), ids, sampling)
    fast = await run(HFEngine(model, tokenizer, eos_ids=eos, speculative=NGRAM), ids, sampling)
    same(fast, plain)
    assert plain[0].finish_reason == FinishReason.STOP and len(plain[0].token_ids) <= 11
    assert plain[1].finish_reason == FinishReason.STOP and len(plain[1].token_ids) <= 7


async def test_streaming_sees_every_accepted_token_once(sharp: tuple[Any, Any]) -> None:
    model, tokenizer = sharp
    ids = workload(tokenizer)[3:]
    heard: list[list[tuple[int, float]]] = [[] for _ in ids]
    rows: list[torch.Tensor] = []

    def hear(i: int, token: int, logprob: float, logits: torch.Tensor) -> None:
        heard[i].append((token, logprob))
        rows.append(logits)

    async with HFEngine(model, tokenizer, eos_ids=(), speculative=NGRAM) as engine:
        gens = await engine.generate([Prompt(token_ids=p) for p in ids], GREEDY, on_token=hear)
    for gen, got in zip(gens, heard, strict=True):
        assert [t for t, _ in got] == gen.token_ids
        assert [lp for _, lp in got] == gen.logprobs
    assert all(int(r.argmax()) in {t for g in gens for t in g.token_ids} for r in rows)
    assert len({r.data_ptr() for r in rows}) == len(rows)  # copies, not the reused buffer


def self_draft(path: Path, **settings: Any) -> SpeculativeConfig:
    """The model drafting for itself: every draft right, so every step speculates."""
    return SpeculativeConfig(method="draft", draft_model=str(path), **settings)


async def test_sampled_rows_decode_plainly_beside_speculating_ones(
    sharp: tuple[Any, Any], sharp_dir: Path
) -> None:
    model, tokenizer = sharp
    ids = workload(tokenizer)[3:5]
    hot = SamplingParams(temperature=1.0, max_new_tokens=30, seed=7)

    async def both(engine: HFEngine) -> list[Generation]:
        async with engine:
            return list(
                await asyncio.gather(
                    *(
                        engine.generate([Prompt(token_ids=p)], s)
                        for p, s in ((ids[0], GREEDY), (ids[1], hot), (ids[1], GREEDY))
                    )
                )
            )

    config = self_draft(sharp_dir, max_batch=4)
    plain = await both(HFEngine(model, tokenizer, eos_ids=()))
    engine = HFEngine(model, tokenizer, eos_ids=(), speculative=config)
    fast = await both(engine)
    same([g[0] for g in fast], [g[0] for g in plain])  # the seeded sample too: one draw a token
    assert engine.stats.accepted_tokens > 0 and engine.stats.peak_batch == 3
    assert engine.stats.draft_tokens <= 2 * 4 * GREEDY.max_new_tokens  # the greedy rows' only


async def test_a_batch_above_max_batch_decodes_plainly_and_identically(
    sharp: tuple[Any, Any], sharp_dir: Path
) -> None:
    model, tokenizer = sharp
    ids = workload(tokenizer)

    async def together(engine: HFEngine) -> list[Generation]:
        async with engine:
            return await engine.generate([Prompt(token_ids=p) for p in ids], GREEDY)

    plain = await together(HFEngine(model, tokenizer, eos_ids=()))
    small = HFEngine(model, tokenizer, eos_ids=(), speculative=self_draft(sharp_dir))
    same(await together(small), plain)
    assert small.stats.draft_tokens == 0  # 6 rows, max_batch 1
    every = HFEngine(model, tokenizer, eos_ids=(), speculative=self_draft(sharp_dir, max_batch=8))
    same(await together(every), plain)
    assert every.stats.accepted_tokens > 0


async def test_weight_updates_and_the_prefix_cache_keep_plain_tokens(
    sharp: tuple[Any, Any],
) -> None:
    from honing.rollout.engines.base import WeightUpdate

    model, tokenizer = sharp
    ids = workload(tokenizer)[3]
    noise = torch.Generator().manual_seed(3)
    update = WeightUpdate(
        version=1,
        state_dict={
            n: p + 0.05 * torch.randn(p.shape, generator=noise)
            for n, p in model.named_parameters()
            if "layers.1." in n
        },
    )

    async def turns(engine: HFEngine) -> list[Generation]:
        async with engine:
            [first] = await engine.generate([Prompt(token_ids=ids)], GREEDY)
            later = ids + first.token_ids + ids[:5]  # the next turn continues the first
            [second] = await engine.generate([Prompt(token_ids=later)], GREEDY)
            await engine.update_weights(update)
            [third] = await engine.generate([Prompt(token_ids=later)], GREEDY)
            return [first, second, third]

    plain = await turns(HFEngine(load_model_like(model), tokenizer, eos_ids=()))
    engine = HFEngine(load_model_like(model), tokenizer, eos_ids=(), speculative=NGRAM)
    fast = await turns(engine)
    same(fast, plain)
    assert fast[2].versions == [1] * len(fast[2].token_ids)
    assert engine.stats.cached_tokens > 0


async def test_a_weight_update_mid_generation_lands_between_steps(
    sharp: tuple[Any, Any], sharp_dir: Path
) -> None:
    """The decode thread is held inside the on_token call of one token until an update is
    queued: the update lands after that step. The plain engine, held at the last token the
    speculative one made with the old weights, must then give the same tokens and versions."""
    from honing.rollout.engines.base import WeightUpdate

    model, tokenizer = sharp
    ids = workload(tokenizer)[4]
    noise = torch.Generator().manual_seed(5)
    update = WeightUpdate(
        version=1,
        state_dict={
            n: p + 0.1 * torch.randn(p.shape, generator=noise)
            for n, p in model.named_parameters()
            if "layers.0." in n
        },
    )

    async def held(engine: HFEngine, at: int) -> Generation:
        reached, go = threading.Event(), threading.Event()
        count = [0]

        def hear(i: int, token: int, logprob: float, logits: torch.Tensor) -> None:
            count[0] += 1
            if count[0] == at + 1:  # token index `at`
                reached.set()
                go.wait(30)

        async with engine:
            task = asyncio.create_task(
                engine.generate([Prompt(token_ids=ids)], GREEDY, on_token=hear)
            )
            await asyncio.to_thread(reached.wait, 30)
            updating = asyncio.create_task(engine.update_weights(update))
            while not engine._updates:
                await asyncio.sleep(0.001)
            go.set()
            await updating
            [gen] = await task
            return gen

    engine = HFEngine(
        load_model_like(model), tokenizer, eos_ids=(), speculative=self_draft(sharp_dir)
    )
    fast = await held(engine, 3)
    switch = fast.versions.index(1)
    assert 3 < switch < len(fast.versions) and set(fast.versions[switch:]) == {1}
    plain = await held(HFEngine(load_model_like(model), tokenizer, eos_ids=()), switch - 1)
    same([fast], [plain])
    assert engine.stats.accepted_tokens > 0


def load_model_like(model: Any) -> Any:
    """A copy of `model` (each engine updates its own)."""
    import copy

    return copy.deepcopy(model)


# -- configuration -------------------------------------------------------------------------------
def test_config_errors() -> None:
    with pytest.raises(ValidationError, match="needs draft_model"):
        SpeculativeConfig(method="draft")
    with pytest.raises(ValidationError, match="uses no model"):
        SpeculativeConfig(method="ngram", draft_model="x")
    with pytest.raises(ValidationError, match="ngram_min 3 > ngram_max 2"):
        SpeculativeConfig(method="ngram", ngram_min=3, ngram_max=2)
    with pytest.raises(ValidationError, match="extra"):
        SpeculativeConfig.model_validate({"method": "ngram", "token": 4})
    with pytest.raises(ConfigError, match="speculative decoding is the hf engine's"):
        make_engine("openai:http://localhost:1/v1", speculative=NGRAM)
    settings = EngineSettings.model_validate({"speculative": {"method": "ngram", "tokens": 6}})
    assert settings.speculative == SpeculativeConfig(method="ngram", tokens=6)


def test_a_draft_model_with_another_vocabulary_is_refused(
    model: Any, tokenizer: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    other = load_tokenizer(tiny_model_dir)
    other.add_tokens(["<an-extra-token>"])
    other.save_pretrained(tmp_path)
    load_model(tiny_model_dir, "float32").save_pretrained(tmp_path)
    config = SpeculativeConfig(method="draft", draft_model=str(tmp_path))
    with pytest.raises(ConfigError, match="vocabulary differs"):
        HFEngine(model, tokenizer, speculative=config)


def test_the_generic_decoder_refuses_speculation(model: Any, tokenizer: Any) -> None:
    model.config.attention_bias = True  # the fast path's refusal; the weights are unchanged
    with pytest.raises(ConfigError, match=r"needs the Llama fast path.*projection biases"):
        HFEngine(model, tokenizer, speculative=NGRAM)


def test_serve_decodes_speculatively(sharp_dir: Path) -> None:
    ids = workload(load_tokenizer(sharp_dir))[4]
    answers = []
    for speculative in (None, self_draft(sharp_dir)):
        with background_server(sharp_dir, dtype="float32", speculative=speculative) as running:
            engine = running.server.engine
            assert isinstance(engine, HFEngine) and engine.speculative == speculative
            reply = httpx.post(
                f"{running.base_url}/completions",
                json={
                    "model": running.server.name,
                    "prompt": ids,
                    "max_tokens": 20,
                    "temperature": 0,
                },
                timeout=60,
            ).json()
            answers.append(reply["choices"][0]["text"])
            if speculative is not None:
                assert engine.stats.accepted_tokens > 0
    assert answers[0] == answers[1]


def test_serve_flags_name_their_errors() -> None:
    def serve(*flags: str) -> str:
        argv = [sys.executable, "-m", "honing", "serve", "default", *flags]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0
        return done.stderr

    assert "--speculative 'beam': allowed: ngram, draft" in serve("--speculative", "beam")
    assert "method 'draft' needs draft_model" in serve("--speculative", "draft")
    assert "--speculative-tokens 0: must be at least 1" in serve(
        "--speculative", "ngram", "--speculative-tokens", "0"
    )
