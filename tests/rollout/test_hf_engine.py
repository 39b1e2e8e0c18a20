"""The hf engine on a tiny random Llama (fp32, so it can be compared with transformers exactly):
greedy parity with `model.generate`, logprobs against a teacher-forced forward, continuous batching
versus sequential calls, seeded sampling, stopping, weight updates mid-generation, failures."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from hf_helpers import hf_greedy, prompts

from honing.errors import EngineError
from honing.rollout.engines import hf as hf_module
from honing.rollout.engines.base import FinishReason, Prompt, SamplingParams, WeightUpdate
from honing.rollout.engines.hf import HFEngine
from honing.rollout.engines.openmp import release_idle_pool
from honing.rollout.models import load_model

GREEDY = SamplingParams(temperature=0, max_new_tokens=24)


def teacher_forced(
    model: Any, ids: list[int], tokens: list[int], temperature: float
) -> list[float]:
    with torch.inference_mode():
        logits = model(torch.tensor([ids + tokens])).logits[0].float()
    logits = logits[len(ids) - 1 : len(ids) - 1 + len(tokens)]
    logp = torch.log_softmax(logits / (temperature or 1.0), -1)
    return logp.gather(1, torch.tensor(tokens)[:, None])[:, 0].tolist()


async def test_greedy_matches_transformers_generate(model: Any, tokenizer: Any) -> None:
    async with HFEngine(model, tokenizer) as engine:
        assert engine.fast_path and engine.accepts_tokens and engine.tokenizer is tokenizer
        ids = prompts(tokenizer)
        gens = await engine.generate([Prompt(token_ids=p) for p in ids], GREEDY)
    for p, gen in zip(ids, gens, strict=True):
        assert gen.token_ids == hf_greedy(model, p, GREEDY.max_new_tokens)
        assert gen.prompt_tokens == len(p)
        assert gen.text == tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        assert gen.versions == [0] * len(gen.token_ids)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
async def test_logprobs_match_a_teacher_forced_forward(
    model: Any, tokenizer: Any, temperature: float
) -> None:
    sampling = SamplingParams(temperature=temperature, top_p=0.9, max_new_tokens=16, seed=1)
    async with HFEngine(model, tokenizer) as engine:
        ids = prompts(tokenizer)
        gens = await engine.generate([Prompt(token_ids=p) for p in ids], sampling)
    for p, gen in zip(ids, gens, strict=True):
        expected = teacher_forced(model, p, gen.token_ids, temperature)
        assert gen.logprobs == pytest.approx(expected, abs=1e-4)


async def test_concurrent_calls_give_the_sequential_tokens(model: Any, tokenizer: Any) -> None:
    ids = prompts(tokenizer)
    requests = [(ids[i % 3][: 5 + 7 * i], 4 + 5 * i) for i in range(6)]  # lengths and budgets vary
    async with HFEngine(model, tokenizer, max_batch=3) as engine:  # 6 requests over 3 slots
        sequential = []
        for p, n in requests:
            [gen] = await engine.generate(
                [Prompt(token_ids=p)], SamplingParams(temperature=0, max_new_tokens=n)
            )
            sequential.append(gen)
        calls = [
            engine.generate([Prompt(token_ids=p)], SamplingParams(temperature=0, max_new_tokens=n))
            for p, n in requests
        ]
        concurrent = [g for [g] in await asyncio.gather(*calls)]
    assert [g.token_ids for g in concurrent] == [g.token_ids for g in sequential]
    for (_, n), gen in zip(requests, concurrent, strict=True):
        assert len(gen.token_ids) == n or gen.finish_reason is FinishReason.STOP


async def test_seeded_sampling_is_reproducible(model: Any, tokenizer: Any) -> None:
    [p] = prompts(tokenizer)[:1]

    def params(seed: int) -> SamplingParams:
        return SamplingParams(temperature=1.0, top_k=50, max_new_tokens=12, seed=seed)

    async with HFEngine(model, tokenizer) as engine:
        [a] = await engine.generate([Prompt(token_ids=p)], params(7))
        # The same seed again, this time sharing decode steps with other requests.
        b, _ = await engine.generate([Prompt(token_ids=p), Prompt(token_ids=p[:4])], params(7))
        [c] = await engine.generate([Prompt(token_ids=p)], params(8))
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


async def test_stop_strings_and_lengths_set_the_finish_reason(model: Any, tokenizer: Any) -> None:
    p = prompts(tokenizer)[1]
    async with HFEngine(model, tokenizer, max_len=len(p) + 5) as engine:
        [full] = await engine.generate(
            [Prompt(token_ids=p)], SamplingParams(temperature=0, max_new_tokens=3)
        )
        assert full.finish_reason is FinishReason.LENGTH and len(full.token_ids) == 3
        [capped] = await engine.generate([Prompt(token_ids=p)], GREEDY)
        assert capped.finish_reason is FinishReason.LENGTH and len(capped.token_ids) == 5
        [none] = await engine.generate([Prompt(token_ids=p + p)], GREEDY)
        assert none.finish_reason is FinishReason.LENGTH and none.token_ids == []

    async with HFEngine(model, tokenizer) as engine:
        sampled = SamplingParams(temperature=1.0, max_new_tokens=24, seed=0)
        [long] = await engine.generate([Prompt(token_ids=p)], sampled)
        # The first visible token past the third that the text before it does not contain.
        stop, at = next(
            (text, i)
            for i in range(3, len(long.token_ids))
            if (text := tokenizer.decode(long.token_ids[i : i + 1]).strip())
            and text not in tokenizer.decode(long.token_ids[:i])
        )
        with_stop = sampled.model_copy(update={"stop": [stop]})
        [cut] = await engine.generate([Prompt(token_ids=p)], with_stop)
    assert cut.finish_reason is FinishReason.STOP
    assert stop in cut.text and len(cut.token_ids) == at + 1
    assert cut.token_ids == long.token_ids[: len(cut.token_ids)]
    assert stop not in tokenizer.decode(cut.token_ids[:-1], skip_special_tokens=True)


async def test_eos_ends_a_sequence_and_is_kept(model: Any, tokenizer: Any) -> None:
    p = prompts(tokenizer)[0]
    with torch.no_grad():  # make the EOS id the most likely next token everywhere
        model.lm_head.weight[tokenizer.eos_token_id] = model.model.norm.weight.sign() * 10
    async with HFEngine(model, tokenizer) as engine:
        [gen] = await engine.generate([Prompt(token_ids=p)], GREEDY)
    assert gen.token_ids == [tokenizer.eos_token_id]
    assert gen.finish_reason is FinishReason.STOP and gen.text == ""


async def test_update_weights_mid_generation(
    model: Any, tokenizer: Any, tiny_model_dir: Path
) -> None:
    p = prompts(tokenizer)[0]
    long = SamplingParams(temperature=0, max_new_tokens=150)
    other = load_model(tiny_model_dir, "float32")
    torch.manual_seed(1)
    with torch.no_grad():
        for name in (
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.1.mlp.gate_proj.weight",
        ):
            other.get_parameter(name).normal_(0, 0.5)
    new = {n: t.clone() for n, t in other.state_dict().items() if "layers.1" in n or "embed" in n}
    new["model.layers.0.self_attn.q_proj.weight"] = other.get_parameter(
        "model.layers.0.self_attn.q_proj.weight"
    ).clone()
    async with HFEngine(model, tokenizer, max_batch=2) as engine:
        [before] = await engine.generate([Prompt(token_ids=p)], long)
        task = asyncio.create_task(engine.generate([Prompt(token_ids=p)], long))
        await asyncio.sleep(0)  # the call is queued
        while engine._waiting or not engine._active or len(engine._active[0].tokens) < 3:
            await asyncio.sleep(0.001)
        await engine.update_weights(WeightUpdate(version=1, state_dict=new))
        assert engine.version == 1
        [mixed] = await task
        [after] = await engine.generate([Prompt(token_ids=p)], GREEDY)
    switch = mixed.versions.index(1)
    assert 3 <= switch < len(mixed.versions) and set(mixed.versions[switch:]) == {1}
    assert mixed.token_ids[:switch] == before.token_ids[:switch]
    assert mixed.token_ids != before.token_ids[: len(mixed.token_ids)]
    assert after.versions == [1] * len(after.token_ids)
    assert after.token_ids == hf_greedy(other, p, GREEDY.max_new_tokens)  # fused copies refreshed


async def test_update_weights_from_a_safetensors_directory(
    model: Any, tokenizer: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    other = load_model(tiny_model_dir, "float32")
    torch.manual_seed(2)
    with torch.no_grad():
        for param in other.parameters():
            param.add_(torch.randn_like(param) * 0.3)
    other.save_pretrained(tmp_path)
    p = prompts(tokenizer)[2]
    async with HFEngine(model, tokenizer) as engine:
        await engine.update_weights(WeightUpdate(version=5, path=str(tmp_path)))
        [gen] = await engine.generate([Prompt(token_ids=p)], GREEDY)
    assert gen.versions == [5] * len(gen.token_ids)
    assert gen.token_ids == hf_greedy(other, p, GREEDY.max_new_tokens)


async def test_bad_requests_and_updates_raise_engine_error(model: Any, tokenizer: Any) -> None:
    async with HFEngine(model, tokenizer) as engine:
        for prompt in (
            Prompt(messages=[{"role": "user", "content": "hi"}]),
            Prompt(token_ids=[]),
            Prompt(token_ids=[1, 10**7]),
        ):
            with pytest.raises(EngineError):
                await engine.generate([prompt], GREEDY)
        with pytest.raises(EngineError, match="unknown"):
            await engine.update_weights(WeightUpdate(version=1, state_dict={"nope": torch.ones(1)}))
        with pytest.raises(EngineError, match="shape"):
            bad = {"model.norm.weight": torch.ones(3)}
            await engine.update_weights(WeightUpdate(version=1, state_dict=bad))
        with pytest.raises(EngineError, match="LoRA"):
            await engine.update_weights(WeightUpdate(version=1, path="x", adapter=True))
        assert engine.version == 0


async def test_a_failing_step_fails_its_callers_and_the_engine_goes_on(
    model: Any, tokenizer: Any
) -> None:
    p = prompts(tokenizer)[0]
    async with HFEngine(model, tokenizer) as engine:
        decode = engine._decoder.decode

        def broken(tokens: list[int], positions: list[int]) -> torch.Tensor:
            engine._decoder.decode = decode  # type: ignore[method-assign]
            raise RuntimeError("boom")

        engine._decoder.decode = broken  # type: ignore[method-assign]
        with pytest.raises(EngineError, match="boom"):
            await engine.generate([Prompt(token_ids=p)], GREEDY)
        [gen] = await engine.generate([Prompt(token_ids=p)], GREEDY)
    assert gen.token_ids == hf_greedy(model, p, GREEDY.max_new_tokens)


async def test_cancel_frees_the_slot_and_close_aborts(model: Any, tokenizer: Any) -> None:
    p = prompts(tokenizer)[0]
    engine = HFEngine(model, tokenizer, max_batch=1)
    endless = SamplingParams(temperature=0, max_new_tokens=100_000)
    task = asyncio.create_task(engine.generate([Prompt(token_ids=p)], endless))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [gen] = await asyncio.wait_for(engine.generate([Prompt(token_ids=p)], GREEDY), 30)
    assert len(gen.token_ids) > 0  # the only slot was given back

    in_flight = asyncio.create_task(engine.generate([Prompt(token_ids=p)], endless))
    await asyncio.sleep(0)  # the call is queued
    while engine._waiting or not engine._active:
        await asyncio.sleep(0.001)
    await engine.close()
    [aborted] = await in_flight
    assert aborted.finish_reason is FinishReason.ABORT and aborted.token_ids
    with pytest.raises(EngineError, match="closed"):
        await engine.generate([Prompt(token_ids=p)], GREEDY)
    with pytest.raises(EngineError, match="closed"):
        await engine.update_weights(WeightUpdate(version=1, state_dict={}))


async def test_other_architectures_take_the_generic_path(tokenizer: Any) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=512,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    gpt2 = GPT2LMHeadModel(config).eval()  # type: ignore[no-untyped-call]
    ids = prompts(tokenizer)[:2]
    async with HFEngine(gpt2, tokenizer, max_batch=2) as engine:
        assert not engine.fast_path
        gens = await engine.generate([Prompt(token_ids=p) for p in ids], GREEDY)
    for p, gen in zip(ids, gens, strict=True):
        assert gen.token_ids == hf_greedy(gpt2, p, GREEDY.max_new_tokens)


async def test_a_group_of_identical_prompts_shares_its_prefill(model: Any, tokenizer: Any) -> None:
    p = prompts(tokenizer)[1]  # the n samples of one task: the whole prompt is shared
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8)
    async with HFEngine(model, tokenizer) as engine:
        group = await engine.generate([Prompt(token_ids=p)] * 4, sampling)
        [greedy] = await engine.generate([Prompt(token_ids=p)], GREEDY)
    assert greedy.token_ids == hf_greedy(model, p, GREEDY.max_new_tokens)
    assert len({tuple(g.token_ids) for g in group}) > 1  # unseeded samples differ
    for gen in group:
        assert gen.logprobs == pytest.approx(teacher_forced(model, p, gen.token_ids, 1.0), abs=1e-4)


async def test_a_crashed_loop_fails_everyone_instead_of_hanging(model: Any, tokenizer: Any) -> None:
    p = prompts(tokenizer)[0]
    engine = HFEngine(model, tokenizer)

    def broken() -> None:
        raise RuntimeError("loop bug")

    engine._admit = broken  # type: ignore[method-assign]
    with pytest.raises(EngineError, match="loop bug"):
        await asyncio.wait_for(engine.generate([Prompt(token_ids=p)], GREEDY), 30)
    with pytest.raises(EngineError, match="closed"):
        await engine.generate([Prompt(token_ids=p)], GREEDY)
    await engine.close()


async def test_a_shared_prefix_counts_once_toward_a_prefill_batch(
    model: Any, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight prompts with one long system prompt and short different ends: their padded length
    is far above the prefill budget, their shared prefix once plus the ends is not, so they are
    admitted in one prefill (not one each); outputs as transformers' greedy decode."""
    from honing.rollout.engines import hf

    system = tokenizer.encode("You are a careful assistant. " * 8, add_special_tokens=False)
    firsts = [system + p for p in prompts(tokenizer)]
    batch = [firsts[i % len(firsts)] + [100 + i] for i in range(8)]
    shared = len(system)
    ends = max(len(p) for p in batch) - shared
    monkeypatch.setattr(hf, "PREFILL_TOKENS", shared + 8 * ends)  # < 8 * the longest prompt
    assert 8 * max(len(p) for p in batch) > hf.PREFILL_TOKENS
    sizes: list[int] = []
    async with HFEngine(model, tokenizer, max_batch=8) as engine:
        prefill = engine._decoder.prefill

        def counted(first: int, ids: list[list[int]], starts: Any = None) -> torch.Tensor:
            sizes.append(len(ids))
            return prefill(first, ids, starts)

        monkeypatch.setattr(engine._decoder, "prefill", counted)
        outs = await engine.generate([Prompt(token_ids=p) for p in batch], GREEDY)
    assert sizes == [8]
    for p, out in zip(batch, outs, strict=True):
        assert out.token_ids == hf_greedy(model, p, GREEDY.max_new_tokens)


def test_a_model_spec_names_what_the_directory_is(tmp_path: Path) -> None:
    """A LoRA adapter export is not a model: the error says how to get one; a directory without
    config.json and a missing path are named too."""
    from honing.errors import ConfigError
    from honing.rollout.models import resolve_model

    adapter = tmp_path / "export"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"is a LoRA adapter .*honing export RUN --merge-lora"):
        resolve_model(str(adapter))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"is not a transformers model directory"):
        resolve_model(str(empty))
    with pytest.raises(ConfigError, match=r"no such directory"):
        resolve_model(str(tmp_path / "missing"))
    (empty / "config.json").write_text("{}")
    assert resolve_model(str(empty)) == empty


async def test_streamed_logits_rows_stay_those_of_their_token(model: Any, tokenizer: Any) -> None:
    # The decoder reuses its logits buffer each step: a row kept by a listener must not change.
    heard: list[tuple[int, int, float, torch.Tensor]] = []
    async with HFEngine(model, tokenizer) as engine:
        ids = prompts(tokenizer)
        gens = await engine.generate(
            [Prompt(token_ids=p) for p in ids],
            GREEDY,
            on_token=lambda i, token, logprob, row: heard.append((i, token, logprob, row)),
        )
    assert len(heard) == sum(len(g.token_ids) for g in gens)
    for _, token, logprob, row in heard:
        assert int(row.argmax()) == token
        assert float(torch.log_softmax(row, -1)[token]) == pytest.approx(logprob, abs=1e-5)


async def test_an_idle_engine_frees_its_decode_threads_openmp_workers(
    model: Any, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of work, the decode thread frees its OpenMP workers (openmp.py), so that the
    process's other torch work (a learner's update between two generations) does not find more
    workers than cores and sleep between its ops."""
    released: list[tuple[str, int]] = []  # (thread, decode steps so far) of each call
    engines: list[HFEngine] = []

    def record() -> bool:
        steps = engines[0].stats.decode_steps if engines else 0
        released.append((threading.current_thread().name, steps))
        return release_idle_pool()

    monkeypatch.setattr(hf_module, "release_idle_pool", record)
    async with HFEngine(model, tokenizer) as engine:
        engines.append(engine)
        [p] = prompts(tokenizer)[:1]
        await engine.generate([Prompt(token_ids=p)], GREEDY)
        deadline = time.monotonic() + 10
        while not any(steps > 0 for _, steps in released):  # after it decoded, idle again
            assert time.monotonic() < deadline, f"no release after decoding: {released}"
            await asyncio.sleep(0.01)
    assert {name for name, _ in released} == {"hf-engine-decode"}


async def test_a_kv_cache_that_cannot_grow_fails_the_calls_with_what_to_change(
    model: Any, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The KV cache grows (doubling) as sequences lengthen. When the host cannot hold the grown
    one, the kernel would kill the process and the run with it, silently: instead the growth is
    refused before the allocation and every waiting call fails with what to lower."""
    from honing.rollout.engines import llama_decode

    monkeypatch.setattr(llama_decode, "INITIAL_CAPACITY", 16)
    async with HFEngine(model, tokenizer, max_batch=3) as engine:
        ids = prompts(tokenizer)
        fits = await engine.generate([Prompt(token_ids=p) for p in ids], GREEDY)  # grows freely
        assert all(len(g.token_ids) == GREEDY.max_new_tokens for g in fits)
        monkeypatch.setattr(llama_decode, "available_bytes", lambda device: 1024)
        long = SamplingParams(temperature=0, max_new_tokens=80)  # past the capacity it reached
        with pytest.raises(EngineError, match=r"KV cache would grow to \d+ positions for each of "
                           r"3 slots: .* GiB more, and 0.0 GiB are available on cpu\. Decode "
                           r"fewer sequences together \(`engine.slots`"):  # fmt: skip
            await engine.generate([Prompt(token_ids=p) for p in ids], long)


async def test_rows_the_kv_cache_cannot_hold_wait_and_resume_where_they_stopped(
    model: Any,
    tokenizer: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """When the host can hold the grown KV cache for half the rows but not for all of them
    (an evaluation of many long episodes beside another run), half the rows go back to wait
    with the tokens they have, and resume later from a prefill of their prompt and those
    tokens: the same greedy tokens and logprobs as with memory to spare, nothing failed. Work
    that comes after the engine sat idle takes all its rows again, and sets them back again as
    needed (a lone call too: its cache shrinks to its one slot); the memory back, all rows are
    decoded together. (Without the set-back every call fails, as the test above shows.)"""
    from honing.rollout.engines import llama_decode

    monkeypatch.setattr(llama_decode, "INITIAL_CAPACITY", 16)
    ids = prompts(tokenizer) * 2  # 6 rows
    assert max(len(p) for p in ids) < 64 < min(len(p) for p in ids) + 60
    long = SamplingParams(temperature=0, max_new_tokens=60)
    async with HFEngine(model, tokenizer, max_batch=6) as engine:
        spare = await engine.generate([Prompt(token_ids=p) for p in ids], long)
    async with HFEngine(model, tokenizer, max_batch=6) as engine:
        decoder = engine._decoder
        assert isinstance(decoder, llama_decode.LlamaDecoder)
        position = decoder.kv.element_size() * decoder.kv.numel() // (6 * 16)  # one slot's
        # Room for 6 rows of 64 positions or 3 of 128, not for 6 of 128.
        free = llama_decode.available_bytes
        monkeypatch.setattr(llama_decode, "available_bytes", lambda device: 3 * 128 * position)
        # One entry each time the decode loop runs out of work (it then frees its pool).
        idles: list[int] = []
        monkeypatch.setattr(
            hf_module, "release_idle_pool", lambda: (idles.append(1), release_idle_pool())
        )

        async def then_idle(call: Any) -> Any:
            """`call`'s result once the loop has run out of work after it (so that the next
            call finds it idle and takes all its rows)."""
            before = len(idles)
            result = await call
            deadline = time.monotonic() + 30
            while len(idles) == before:
                assert time.monotonic() < deadline, "the decode loop never ran out of work"
                await asyncio.sleep(0.01)
            return result

        with caplog.at_level("WARNING", logger="honing.rollout.engines.hf"):
            tight = await then_idle(engine.generate([Prompt(token_ids=p) for p in ids], long))
        assert engine.stats.preempted == 3
        assert "the cache now has 3 slot(s), not 6 (3 sequence(s) set back" in caplog.text
        assert "KV cache would grow to 128 positions for each of 6 slots" in caplog.text
        [alone] = await then_idle(engine.generate([Prompt(token_ids=ids[0])], long))
        assert alone.token_ids == spare[0].token_ids
        assert "the cache now has 1 slot(s), not 6 (0 sequence(s) set back" in caplog.text
        monkeypatch.setattr(llama_decode, "available_bytes", free)
        engine.stats = hf_module.EngineStats()
        again = await engine.generate([Prompt(token_ids=p) for p in ids], long)
        assert engine.stats.peak_batch == 6 and engine.stats.preempted == 0
    for a, b, c in zip(spare, tight, again, strict=True):
        assert a.token_ids == b.token_ids == c.token_ids
        assert len(b.token_ids) == 60 or b.finish_reason is FinishReason.STOP
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
        assert b.versions == [0] * len(b.token_ids)


def test_available_bytes_reads_the_hosts_available_memory() -> None:
    from honing.rollout.engines.llama_decode import available_bytes

    free = available_bytes(torch.device("cpu"))
    assert free is not None and 0 < free < 2**50
