"""The hf engine's prefix cache on a tiny random Llama (fp32): multi-turn conversations give the
same tokens and logprobs with the cache as without it (and as transformers' greedy generate),
under slot pressure too; an update invalidates; a prompt that diverges inside a cached prefix
reuses only the part before; the stats count what was saved."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from hf_helpers import hf_greedy, prompts

from honing.rollout.engines.base import Generation, Prompt, SamplingParams, WeightUpdate
from honing.rollout.engines.hf import HFEngine
from honing.rollout.models import load_model

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)


def observation(tokenizer: Any, turn: int) -> list[int]:
    """The rendered delta of a tool observation, as the agent loop appends it."""
    text = f"<|im_end|>\n<|im_start|>user\nresult {turn}: {'ok ' * turn}<|im_end|>\n"
    ids: list[int] = tokenizer.encode(text + "<|im_start|>assistant\n", add_special_tokens=False)
    return ids


async def converse(
    engine: HFEngine,
    tokenizer: Any,
    firsts: list[list[int]],
    sampling: SamplingParams,
    turns: int = 3,
) -> list[list[tuple[list[int], Generation]]]:
    """Concurrent conversations, each turn's prompt = the last prompt + completion + observation."""

    async def one(first: list[int], k: int) -> list[tuple[list[int], Generation]]:
        prompt, out = first, []
        for turn in range(turns):
            seeded = sampling.model_copy(update={"seed": 100 * k + turn})
            [gen] = await engine.generate([Prompt(token_ids=prompt)], seeded)
            out.append((prompt, gen))
            prompt = prompt + gen.token_ids + observation(tokenizer, turn + 1)
        return out

    return list(await asyncio.gather(*(one(p, k) for k, p in enumerate(firsts))))


def perturbed(model_dir: Path, *, seed: int) -> Any:
    """The tiny model with every weight moved: other weights to update the engine with."""
    other = load_model(model_dir, "float32")
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in other.parameters():
            param.add_(torch.randn_like(param) * 0.3)
    return other


def assert_same(
    cached: list[list[tuple[list[int], Generation]]],
    plain: list[list[tuple[list[int], Generation]]],
) -> None:
    for conv_c, conv_p in zip(cached, plain, strict=True):
        for (prompt_c, gen_c), (prompt_p, gen_p) in zip(conv_c, conv_p, strict=True):
            assert prompt_c == prompt_p
            assert gen_c.token_ids == gen_p.token_ids
            assert gen_c.logprobs == pytest.approx(gen_p.logprobs, abs=1e-5)


@pytest.mark.parametrize("sampling", [GREEDY, SamplingParams(temperature=0.8, max_new_tokens=12)])
async def test_multi_turn_matches_no_cache_and_transformers(
    model: Any, tokenizer: Any, sampling: SamplingParams
) -> None:
    firsts = prompts(tokenizer)
    async with HFEngine(model, tokenizer, prefix_cache=False) as engine:
        plain = await converse(engine, tokenizer, firsts, sampling)
        assert engine.stats.cached_tokens == 0
        assert engine.stats.prefill_tokens == engine.stats.prompt_tokens
    async with HFEngine(model, tokenizer) as engine:
        cached = await converse(engine, tokenizer, firsts, sampling)
        stats = engine.stats
    assert_same(cached, plain)
    # Turns 2 and 3 each reuse the previous prompt and completion, less the last sampled token.
    later = [(conv[t - 1], conv[t]) for conv in cached for t in (1, 2)]
    reused = sum(len(prev_prompt) + len(prev.token_ids) - 1 for (prev_prompt, prev), _ in later)
    assert stats.prefix_hits >= len(later) and stats.cached_tokens >= reused
    total = sum(len(prompt) for conv in cached for prompt, _ in conv)
    assert stats.prompt_tokens == total
    assert stats.prefill_tokens == total - stats.cached_tokens
    if sampling.temperature == 0:
        for conv in cached:
            for prompt, gen in conv:
                assert gen.token_ids == hf_greedy(model, prompt, sampling.max_new_tokens)


async def test_eviction_under_slot_pressure_stays_correct(model: Any, tokenizer: Any) -> None:
    base = prompts(tokenizer)
    firsts = [*base, base[0][:-3], base[1][:-5]]  # 5 conversations over 2 slots
    async with HFEngine(model, tokenizer, max_batch=2, prefix_cache=False) as engine:
        plain = await converse(engine, tokenizer, firsts, GREEDY)
    async with HFEngine(model, tokenizer, max_batch=2) as engine:
        cached = await converse(engine, tokenizer, firsts, GREEDY)
        stats = engine.stats
    assert_same(cached, plain)
    assert stats.prefix_hits > 0 and stats.cached_tokens > 0
    for conv in cached:
        for prompt, gen in conv:
            assert gen.token_ids == hf_greedy(model, prompt, GREEDY.max_new_tokens)


async def test_the_least_recently_cached_slot_is_evicted_first(model: Any, tokenizer: Any) -> None:
    """Two slots, three conversations: A1 B1 A2 C1 A3 B2. C1 evicts B (older than A2's entry),
    so A3 continues A2 from the cache and B2 finds only a shared prefix."""
    a, b, c = prompts(tokenizer)
    cache: dict[str, list[int]] = {}  # what the engine should hold, per conversation

    def reusable(prompt: list[int], names: list[str]) -> int:
        best = 0
        for name in names:
            held = cache[name]
            n = next(
                (i for i, (x, y) in enumerate(zip(held, prompt, strict=False)) if x != y), None
            )
            best = max(best, min(len(held), len(prompt)) if n is None else n)
        return min(best, len(prompt) - 1)

    async with HFEngine(model, tokenizer, max_batch=2) as engine:

        async def turn(name: str, prompt: list[int], holding: list[str]) -> list[int]:
            before = engine.stats.cached_tokens
            [gen] = await engine.generate([Prompt(token_ids=prompt)], GREEDY)
            assert engine.stats.cached_tokens - before == reusable(prompt, holding), name
            assert gen.token_ids == hf_greedy(model, prompt, GREEDY.max_new_tokens), name
            cache[name] = prompt + gen.token_ids[:-1]
            return prompt + gen.token_ids + observation(tokenizer, 1)

        a2 = await turn("a", a, [])
        b2 = await turn("b", b, ["a"])
        a3 = await turn("a", a2, ["a", "b"])
        await turn("c", c, ["a", "b"])
        await turn("a", a3, ["a", "c"])
        await turn("b", b2, ["a", "c"])  # b was evicted
        assert reusable(b2, ["b"]) > reusable(b2, ["a", "c"])  # ... which cost something


async def test_an_update_invalidates_the_cache(
    model: Any, tokenizer: Any, tiny_model_dir: Path
) -> None:
    other = perturbed(tiny_model_dir, seed=3)
    first = prompts(tokenizer)[1]
    async with HFEngine(model, tokenizer) as engine:
        [gen] = await engine.generate([Prompt(token_ids=first)], GREEDY)
        second = first + gen.token_ids + observation(tokenizer, 1)
        await engine.update_weights(WeightUpdate(version=1, state_dict=other.state_dict()))
        cached_before = engine.stats.cached_tokens
        [after] = await engine.generate([Prompt(token_ids=second)], GREEDY)
        assert engine.stats.cached_tokens == cached_before  # nothing of the old weights reused
        # The new turn is cached again, under the new weights.
        third = second + after.token_ids + observation(tokenizer, 2)
        [again] = await engine.generate([Prompt(token_ids=third)], GREEDY)
        assert engine.stats.cached_tokens == cached_before + len(second) + len(after.token_ids) - 1
    assert after.token_ids == hf_greedy(other, second, GREEDY.max_new_tokens)
    assert again.token_ids == hf_greedy(other, third, GREEDY.max_new_tokens)


async def test_a_prompt_diverging_inside_a_cached_prefix_reuses_only_before(
    model: Any, tokenizer: Any
) -> None:
    first = prompts(tokenizer)[1]
    async with HFEngine(model, tokenizer) as engine:
        [gen] = await engine.generate([Prompt(token_ids=first)], GREEDY)
        cached = first + gen.token_ids[:-1]
        cut = len(first) - 4
        diverged = [*cached[:cut], cached[cut] + 1, *cached[cut + 1 :], *observation(tokenizer, 1)]
        before = engine.stats.cached_tokens
        [out] = await engine.generate([Prompt(token_ids=diverged)], GREEDY)
        assert engine.stats.cached_tokens - before == cut
        # The same prompt again: the cache holds the diverged conversation now.
        shorter = diverged[:-2]
        [again] = await engine.generate([Prompt(token_ids=shorter)], GREEDY)
        assert engine.stats.cached_tokens - before == cut + len(shorter) - 1
    assert out.token_ids == hf_greedy(model, diverged, GREEDY.max_new_tokens)
    assert again.token_ids == hf_greedy(model, shorter, GREEDY.max_new_tokens)


async def test_a_group_continuing_a_cached_prompt_shares_it(model: Any, tokenizer: Any) -> None:
    """The n samples of one task, after a turn that cached their common prefix: the cached slot
    gives every row the prefix (copied), then the shared rest and each suffix are prefilled."""
    first = prompts(tokenizer)[0]
    async with HFEngine(model, tokenizer) as engine:
        [gen] = await engine.generate([Prompt(token_ids=first)], GREEDY)
        second = first + gen.token_ids + observation(tokenizer, 1)
        mixed = [second, second, [*second[:-2], second[-1]], first + gen.token_ids[:2]]
        before = engine.stats.cached_tokens
        outs = await engine.generate([Prompt(token_ids=p) for p in mixed], GREEDY)
        assert engine.stats.prefix_hits >= 2 and engine.stats.cached_tokens > before
    for p, out in zip(mixed, outs, strict=True):
        assert out.token_ids == hf_greedy(model, p, GREEDY.max_new_tokens)


async def test_a_sequence_in_flight_across_an_update_is_not_cached(
    model: Any, tokenizer: Any, tiny_model_dir: Path
) -> None:
    """Its KV is partly the old weights': its next turn is prefilled anew, with the new ones."""
    other = perturbed(tiny_model_dir, seed=4)
    first = prompts(tokenizer)[1]
    long = SamplingParams(temperature=0, max_new_tokens=40)
    async with HFEngine(model, tokenizer) as engine:
        running = asyncio.ensure_future(engine.generate([Prompt(token_ids=first)], long))
        while engine.stats.decode_steps < 2:  # in flight, past its prefill
            await asyncio.sleep(0.001)
        await engine.update_weights(WeightUpdate(version=1, state_dict=other.state_dict()))
        [gen] = await running
        assert gen.versions[0] == 0 and gen.versions[-1] == 1
        second = first + gen.token_ids + observation(tokenizer, 1)
        cached_before = engine.stats.cached_tokens
        [after] = await engine.generate([Prompt(token_ids=second)], GREEDY)
        assert engine.stats.cached_tokens == cached_before  # no KV of the old weights reused
    assert after.token_ids == hf_greedy(other, second, GREEDY.max_new_tokens)
