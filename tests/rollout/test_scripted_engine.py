"""The scripted engine: deterministic completions (token and chat modes), the simulated batching
server's arithmetic (simulated times are exact, so they are asserted, not wall-clock times),
versions across weight updates, failure injection and cancellation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from honing.errors import EngineError
from honing.rollout.engines.base import FinishReason, Prompt, SamplingParams, WeightUpdate
from honing.rollout.engines.scripted import LatencyModel, ScriptedEngine
from honing.rollout.models import load_tokenizer

S = SamplingParams(max_new_tokens=64)
P = Prompt(token_ids=[1, 2, 3])


@pytest.fixture(scope="module")
def tok(smol_dir: Path) -> Any:
    return load_tokenizer(smol_dir)


async def test_token_mode_is_the_encoded_text_then_eos(tok: Any) -> None:
    engine = ScriptedEngine(["Hello there, world.", "second"], tokenizer=tok, version=7)
    assert engine.accepts_tokens and engine.tokenizer is tok
    a, b, c = await engine.generate([P, P, P], S)
    ids = tok.encode("Hello there, world.", add_special_tokens=False)
    assert a.token_ids == [*ids, tok.eos_token_id]
    assert a.text == "Hello there, world."
    assert a.finish_reason == FinishReason.STOP
    assert a.versions == [7] * len(a.token_ids) and a.version == 7
    assert len(a.logprobs) == len(a.token_ids) and all(lp < 0 for lp in a.logprobs)
    assert a.prompt_tokens == 3
    assert b.text == "second" and c.text == a.text  # the sequence is cycled
    again = ScriptedEngine(["Hello there, world."], tokenizer=tok)
    [a2] = await again.generate([P], S)
    assert a2.logprobs == a.logprobs  # deterministic


async def test_stop_string_cuts_after_the_token_that_completes_it(tok: Any) -> None:
    engine = ScriptedEngine(["<tool>run()</tool> and then more text"], tokenizer=tok)
    [gen] = await engine.generate([P], SamplingParams(stop=["</tool>"]))
    assert gen.text.endswith("</tool>")
    assert "more" not in gen.text
    assert gen.finish_reason == FinishReason.STOP
    assert tok.eos_token_id not in gen.token_ids
    full = tok.encode("<tool>run()</tool> and then more text", add_special_tokens=False)
    assert gen.token_ids == full[: len(gen.token_ids)]  # a prefix of what the model "said"
    assert "</tool>" not in tok.decode(gen.token_ids[:-1])  # and the shortest such prefix


async def test_max_new_tokens_truncates_with_length(tok: Any) -> None:
    engine = ScriptedEngine(["one two three four five six seven eight"], tokenizer=tok)
    [gen] = await engine.generate([P], SamplingParams(max_new_tokens=3))
    assert len(gen.token_ids) == 3 and gen.finish_reason == FinishReason.LENGTH
    assert gen.text == tok.decode(gen.token_ids)
    # exactly room for the text and its eos: a natural stop
    n = len(tok.encode("hi", add_special_tokens=False)) + 1
    [fits] = await ScriptedEngine(["hi"], tokenizer=tok).generate(
        [P], SamplingParams(max_new_tokens=n)
    )
    assert fits.finish_reason == FinishReason.STOP and fits.token_ids[-1] == tok.eos_token_id


async def test_callable_sees_the_prompt_and_the_call_index() -> None:
    seen: list[tuple[str, int]] = []

    def respond(prompt: Prompt, index: int) -> str:
        assert prompt.messages is not None
        seen.append((prompt.messages[-1]["content"], index))
        return f"answer {index}"

    engine = ScriptedEngine(respond)
    msgs = [Prompt(messages=[{"role": "user", "content": q}]) for q in ("a", "b")]
    first = await engine.generate(msgs, S)
    [third] = await engine.generate(msgs[:1], S)
    assert [g.text for g in first] == ["answer 0", "answer 1"] and third.text == "answer 2"
    assert seen == [("a", 0), ("b", 1), ("a", 2)]


async def test_chat_mode_text_only_and_json_tool_calls() -> None:
    call = json.dumps({"name": "run_sql", "arguments": {"query": "select 1"}})
    engine = ScriptedEngine([call, "plain words here STOP not this"])
    assert not engine.accepts_tokens and engine.tokenizer is None
    prompt = Prompt(messages=[{"role": "user", "content": "go"}])
    [tool, plain] = await engine.generate([prompt, prompt], SamplingParams(stop=["STOP"]))
    assert tool.token_ids == [] and tool.logprobs == []
    assert tool.tool_calls is not None and len(tool.tool_calls) == 1
    fn = tool.tool_calls[0]["function"]
    assert fn["name"] == "run_sql" and json.loads(fn["arguments"]) == {"query": "select 1"}
    assert tool.text == call
    assert plain.tool_calls is None
    assert plain.text == "plain words here STOP" and plain.finish_reason == FinishReason.STOP
    assert plain.versions == [0] * 6  # one per simulated token (4 characters)
    [short] = await engine.generate([prompt], SamplingParams(max_new_tokens=2))
    assert short.finish_reason == FinishReason.LENGTH and len(short.text) == 8


async def test_without_latency_generate_never_suspends(tok: Any) -> None:
    engine = ScriptedEngine(["fast"], tokenizer=tok, latency=LatencyModel(slots=1))
    coro = engine.generate([P, P], S)
    with pytest.raises(StopIteration) as done:
        coro.send(None)  # one send runs it to completion: nothing was awaited
    gens = done.value.value
    assert [g.text for g in gens] == ["fast", "fast"] and all(g.seconds == 0 for g in gens)
    assert engine.stats.requests == 2 and engine.stats.tokens == 2 * len(gens[0].token_ids)
    assert engine.busy_fraction == 0.0


async def test_queueing_beyond_slots_follows_the_step_arithmetic() -> None:
    # 4 prompts of 5 simulated tokens ("x" * 20 = 5 tokens), 2 slots, 10 ms per step:
    # two finish after 5 steps, the other two wait 5 steps and finish after 10.
    engine = ScriptedEngine(["x" * 20], latency=LatencyModel(slots=2, per_token_s=0.01))
    prompt = Prompt(messages=[{"role": "user", "content": ""}])
    gens = await engine.generate([prompt] * 4, S)
    assert [g.seconds for g in gens] == pytest.approx([0.05, 0.05, 0.10, 0.10])
    stats = engine.stats
    assert stats.queue_wait_s == pytest.approx(0.10)
    assert stats.busy_slot_s == pytest.approx(4 * 0.05)
    assert stats.tokens == 20 and stats.requests == 4
    assert 0 < stats.busy_fraction <= 1


async def test_prefill_delays_the_step_a_sequence_joins() -> None:
    engine = ScriptedEngine(
        ["x" * 8],  # 2 tokens
        latency=LatencyModel(slots=4, per_token_s=0.01, prefill_per_token_s=0.001),
    )
    [gen] = await engine.generate([Prompt(token_ids=list(range(30)))], S)
    assert gen.seconds == pytest.approx(0.030 + 2 * 0.01)
    assert gen.prompt_tokens == 30


async def test_hundreds_of_concurrent_requests_are_simulated_exactly() -> None:
    engine = ScriptedEngine(["x" * 40], latency=LatencyModel(slots=100, per_token_s=0.002))
    prompt = Prompt(messages=[{"role": "user", "content": ""}])
    gens = await engine.generate([prompt] * 300, S)  # 10 tokens each, 3 waves of 100
    waves = sorted({round(g.seconds, 6) for g in gens})
    assert waves == pytest.approx([0.02, 0.04, 0.06])
    assert [round(g.seconds, 6) for g in gens] == sorted(round(g.seconds, 6) for g in gens)

    calls = await asyncio.gather(*(engine.generate([prompt], S) for _ in range(250)))
    assert len(calls) == 250 and engine.stats.requests == 550
    assert engine.stats.tokens == 5500


async def test_a_weight_update_applies_from_the_next_token_of_sequences_in_flight(
    tok: Any,
) -> None:
    text = " ".join(["word"] * 99)  # 99 tokens + eos, 5 ms each: 0.5 s of simulated decoding
    engine = ScriptedEngine([text], tokenizer=tok, latency=LatencyModel(per_token_s=0.005))
    task = asyncio.create_task(engine.generate([P], SamplingParams(max_new_tokens=200)))
    await asyncio.sleep(0.05)
    await engine.update_weights(WeightUpdate(version=1))
    assert engine.version == 1
    [gen] = await task
    assert len(gen.versions) == len(gen.token_ids) == 100
    switch = gen.versions.index(1)
    assert 0 < switch < 100
    assert gen.versions == [0] * switch + [1] * (100 - switch)
    assert gen.version == 0
    [later] = await engine.generate([P], SamplingParams(max_new_tokens=2))
    assert later.versions == [1, 1]


async def test_fail_on_raises_engine_error_and_hang_on_never_returns() -> None:
    engine = ScriptedEngine(
        ["ok"],
        latency=LatencyModel(slots=1, per_token_s=0.001),
        fail_on=lambda _p, i: i == 1,
        hang_on=lambda _p, i: i in (2, 4),
    )
    prompt = Prompt(messages=[{"role": "user", "content": ""}])
    [first] = await engine.generate([prompt], S)
    assert first.text == "ok"
    with pytest.raises(EngineError, match="call 1"):
        await engine.generate([prompt], S)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(engine.generate([prompt], S), 0.05)
    [after] = await engine.generate([prompt], S)  # the hung call held no slot
    assert after.text == "ok"
    # close() ends a hung call and a call in flight with EngineError
    hung = asyncio.create_task(engine.generate([prompt], S))  # call 4 hangs
    await asyncio.sleep(0)
    engine._hang_on = None
    engine._respond = lambda _p, _i: "x" * 4000
    busy = asyncio.create_task(engine.generate([prompt], SamplingParams(max_new_tokens=2000)))
    await asyncio.sleep(0.01)
    await engine.close()
    for task in (hung, busy):
        with pytest.raises(EngineError, match="closed"):
            await task


async def test_a_cancelled_request_frees_its_slot_at_once() -> None:
    # one slot; a 1000-token request (10 s simulated) is cancelled, the queued one runs next
    engine = ScriptedEngine(
        lambda _p, i: "x" * 4000 if i == 0 else "x" * 4,
        latency=LatencyModel(slots=1, per_token_s=0.01),
    )
    prompt = Prompt(messages=[{"role": "user", "content": ""}])
    big = asyncio.create_task(engine.generate([prompt], SamplingParams(max_new_tokens=2000)))
    await asyncio.sleep(0)
    small = asyncio.create_task(engine.generate([prompt], S))
    await asyncio.sleep(0.02)
    big.cancel()
    [gen] = await asyncio.wait_for(small, 5)
    assert gen.text == "xxxx"
    assert gen.seconds < 1.0  # simulated: it waited for the cancellation, not for 10 s
    assert big.cancelled()
