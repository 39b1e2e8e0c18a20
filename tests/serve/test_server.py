"""`honing serve` through the official openai client (sync and async) and honing's own `openai`
engine, on a real port, over the tiny random Llama: models, chat with logprobs, greedy output ==
the in-process engine, real streaming, continuous batching of concurrent requests, weight reload,
LoRA hot-load, token mode, and OpenAI-shaped errors."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch

from honing.rollout.chat import ChatFormat
from honing.rollout.engines.base import Prompt, SamplingParams, WeightUpdate
from honing.rollout.engines.hf import HFEngine
from honing.rollout.engines.openai import OpenAIConfig, OpenAIEngine
from honing.rollout.models import load_tokenizer
from honing.serve.server import RunningServer, background_server

pytestmark = pytest.mark.dtype  # run again under each forced auto dtype (make test)

MESSAGES: Any = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three prime numbers and explain why they are prime."},
]


@pytest.fixture(scope="module")
def running(tiny_model_dir: Path) -> Iterator[RunningServer]:
    with background_server(tiny_model_dir, dtype="float32", max_batch=8) as running:
        yield running


@pytest.fixture(scope="module")
def name(running: RunningServer) -> str:
    return running.server.name


@pytest.fixture(scope="module")
def client(running: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=running.base_url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="module")
def local(tiny_model_dir: Path) -> Iterator[HFEngine]:
    """The same model in process (its own engine), for output comparisons."""
    engine = HFEngine(tiny_model_dir, dtype="float32", max_batch=2)
    yield engine
    asyncio.run(engine.close())


def prompt_ids(tok: Any, messages: list[dict[str, Any]]) -> list[int]:
    fmt = ChatFormat.of(tok)
    return fmt.encode(fmt.render(messages, generation_prompt=True))


def engine_view(running: RunningServer) -> HFEngine:
    engine = running.server.engine
    assert isinstance(engine, HFEngine)
    return engine


def test_models_lists_the_directory_name_and_health_answers(
    client: openai.OpenAI, running: RunningServer, tiny_model_dir: Path
) -> None:
    assert [m.id for m in client.models.list()] == [tiny_model_dir.name]
    health = httpx.get(running.url + "/health").json()
    assert health["status"] == "ok" and health["model"] == tiny_model_dir.name
    assert health["adapter"] is None


async def test_greedy_chat_equals_the_in_process_engine_with_logprobs(
    client: openai.OpenAI, name: str, tok: Any, local: HFEngine
) -> None:
    reply = client.chat.completions.create(
        model=name,
        messages=MESSAGES,
        logprobs=True,
        top_logprobs=3,
        extra_body={"return_token_ids": True},
        temperature=0,
        max_tokens=12,
    )
    ids = prompt_ids(tok, MESSAGES)
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    [gen] = await local.generate([Prompt(token_ids=ids)], greedy)
    choice = reply.choices[0]
    extra = choice.model_extra or {}
    assert (reply.model_extra or {})["prompt_token_ids"] == ids
    assert extra["token_ids"] == gen.token_ids
    assert choice.message.content == ChatFormat.of(tok).decode(gen.token_ids)
    assert choice.finish_reason == gen.finish_reason.value == "length"
    assert reply.usage is not None and reply.usage.prompt_tokens == len(ids)
    assert reply.usage.completion_tokens == 12
    assert reply.system_fingerprint == "honing-v0"
    assert choice.logprobs is not None and choice.logprobs.content is not None
    content = choice.logprobs.content
    assert [c.logprob for c in content] == pytest.approx(gen.logprobs, abs=1e-4)
    for item, token in zip(content, gen.token_ids, strict=True):
        assert item.token == tok.decode([token])
        tops = [t.logprob for t in item.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert item.top_logprobs[0].token == item.token  # greedy: the chosen is the most likely
        assert tops[0] == pytest.approx(item.logprob, abs=1e-5)


def test_streaming_concatenates_to_the_non_streamed_text(client: openai.OpenAI, name: str) -> None:
    whole = client.chat.completions.create(
        model=name, messages=MESSAGES, temperature=0, max_tokens=12
    )
    chunks = list(
        client.chat.completions.create(
            model=name,
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
            temperature=0,
            max_tokens=12,
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) > 2
    assert "".join(texts) == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == "length" and set(finals[:-1]) == {None}
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None and usage.completion_tokens == 12


async def test_tokens_are_streamed_while_the_engine_is_still_decoding(
    running: RunningServer, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decode loop is held after a few steps: the client must already have tokens."""
    engine = engine_view(running)
    decoder: Any = engine._decoder
    original = decoder.decode
    held = threading.Event()
    release = threading.Event()
    resumed = threading.Event()  # the loop goes on: released, or the failsafe ran out
    steps = 0

    def gated(tokens: list[int], positions: list[int]) -> Any:
        nonlocal steps
        steps += 1
        if steps == 3:
            held.set()
            release.wait(30)  # the failsafe: a buffering server gets its tokens only after it
            resumed.set()
        return original(tokens, positions)

    monkeypatch.setattr(decoder, "decode", gated)
    client = openai.AsyncOpenAI(base_url=running.base_url, api_key="unused", max_retries=0)
    stream = await client.chat.completions.create(
        model=name,
        messages=MESSAGES,
        stream=True,
        temperature=0,
        max_tokens=24,
        extra_body={"return_token_ids": True},
    )
    tokens = 0

    async def read() -> None:
        nonlocal tokens
        async for chunk in stream:
            ids = (chunk.choices[0].model_extra or {}).get("token_ids") if chunk.choices else None
            tokens += len(ids or [])

    reader = asyncio.create_task(read())
    try:
        assert await asyncio.to_thread(held.wait, 30), "the decode loop never reached step 3"
        # The client reads on while the loop stays held (a loaded one may not have read the
        # first chunks yet); a buffering server sends nothing until the end.
        deadline = time.monotonic() + 10
        while tokens < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        streamed_while_held = tokens
        assert not resumed.is_set()
    finally:
        release.set()
    await reader
    assert streamed_while_held >= 2  # the prefill's token and the first decode step's
    assert tokens == 24
    await client.close()


async def test_concurrent_requests_share_decode_steps(
    running: RunningServer, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first decode step waits until all four requests reached the engine; then the engine
    must decode them together (its peak batch counts the sequences of one step)."""
    engine = engine_view(running)
    decoder: Any = engine._decoder
    original = decoder.decode

    def gated(tokens: list[int], positions: list[int]) -> Any:
        deadline = time.monotonic() + 30
        while running.server.in_flight < 4 and time.monotonic() < deadline:
            time.sleep(0.005)
        return original(tokens, positions)

    monkeypatch.setattr(decoder, "decode", gated)
    engine.stats.peak_batch = 0
    client = openai.AsyncOpenAI(base_url=running.base_url, api_key="unused", max_retries=0)
    questions = [f"Question {i}: what is {i} + {i}?" for i in range(4)]
    replies = await asyncio.gather(
        *[
            client.chat.completions.create(
                model=name, temperature=0, max_tokens=8, messages=[{"role": "user", "content": q}]
            )
            for q in questions
        ]
    )
    await client.close()
    assert all(r.usage is not None and r.usage.completion_tokens >= 1 for r in replies)
    assert engine.stats.peak_batch >= 2


async def test_honing_openai_engine_in_token_and_chat_mode(
    running: RunningServer, name: str, tok: Any, local: HFEngine
) -> None:
    ids = prompt_ids(tok, MESSAGES)
    greedy = SamplingParams(temperature=0, max_new_tokens=10)
    [want] = await local.generate([Prompt(token_ids=ids)], greedy)
    tokens = OpenAIEngine(OpenAIConfig(base_url=running.base_url, model=name), tokenizer=tok)
    assert tokens.accepts_tokens
    [gen] = await tokens.generate([Prompt(token_ids=ids)], greedy)
    assert gen.token_ids == want.token_ids and gen.text == want.text
    assert gen.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert gen.prompt_tokens == len(ids) and gen.finish_reason.value == "length"
    chat = OpenAIEngine(OpenAIConfig(base_url=running.base_url, model=name))
    [reply] = await chat.generate([Prompt(messages=MESSAGES)], greedy)
    assert reply.token_ids == want.token_ids
    assert reply.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert reply.prompt_tokens == len(ids) and reply.tool_calls is None
    await tokens.close()
    await chat.close()


def test_completions_stop_strings_and_text_prompts(client: openai.OpenAI, name: str) -> None:
    whole = client.completions.create(
        model=name, prompt="The capital of France is", temperature=0, max_tokens=12
    )
    text = whole.choices[0].text
    assert whole.usage is not None and whole.usage.completion_tokens == 12
    stop = text[3:5]
    assert stop.strip()
    cut = client.completions.create(
        model=name, prompt="The capital of France is", temperature=0, max_tokens=12, stop=[stop]
    )
    assert (
        cut.choices[0].text == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    )
    kept = client.completions.create(
        model=name,
        prompt="The capital of France is",
        temperature=0,
        max_tokens=12,
        stop=[stop],
        extra_body={"include_stop_str_in_output": True},
    )
    assert kept.choices[0].text.startswith(text[: text.index(stop) + len(stop)])


def perturbed(source: Path, out: Path, scale: float) -> Path:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(source / "model.safetensors"))
    generator = torch.Generator().manual_seed(1)
    changed = {n: t + scale * torch.randn(t.shape, generator=generator) for n, t in tensors.items()}
    out.mkdir(parents=True, exist_ok=True)
    save_file(changed, str(out / "model.safetensors"))
    return out


async def test_reload_weights_changes_the_output_and_the_version(
    running: RunningServer,
    client: openai.OpenAI,
    name: str,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    before = client.chat.completions.create(
        model=name, messages=MESSAGES, temperature=0, max_tokens=12
    )
    engine = OpenAIEngine(OpenAIConfig(base_url=running.base_url, model=name))
    new = perturbed(tiny_model_dir, tmp_path / "v5", 0.5)
    try:
        await engine.update_weights(WeightUpdate(version=5, path=str(new)))
        after = client.chat.completions.create(
            model=name, messages=MESSAGES, temperature=0, max_tokens=12
        )
        assert after.choices[0].message.content != before.choices[0].message.content
        assert after.system_fingerprint == "honing-v5"
        assert httpx.get(running.url + "/health").json()["version"] == 5
    finally:
        await engine.update_weights(WeightUpdate(version=6, path=str(tiny_model_dir)))
        await engine.close()
    again = client.chat.completions.create(
        model=name, messages=MESSAGES, temperature=0, max_tokens=12
    )
    assert again.choices[0].message.content == before.choices[0].message.content


def make_adapter(model_dir: Path, out: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """A peft LoRA adapter with random (non-zero) factors, and peft's own merged weights."""
    from peft import LoraConfig, get_peft_model

    from honing.rollout.models import load_model

    torch.manual_seed(3)
    model = load_model(model_dir, "float32")
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    peft_model = get_peft_model(model, config)
    peft_model.save_pretrained(str(out))
    merged = peft_model.merge_and_unload()
    return out, {n: p.detach().clone() for n, p in merged.named_parameters()}


async def test_lora_adapter_hot_load_serves_the_merged_weights(
    running: RunningServer,
    client: openai.OpenAI,
    name: str,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    before = client.chat.completions.create(
        model=name, messages=MESSAGES, temperature=0, max_tokens=12
    )
    path, want = make_adapter(tiny_model_dir, tmp_path / "adapter")
    engine = OpenAIEngine(OpenAIConfig(base_url=running.base_url, model=name))
    try:
        await engine.update_weights(
            WeightUpdate(version=9, path=str(path), adapter=True, extra={"lora_name": "tuned"})
        )
        assert engine.model == "tuned"
        assert [m.id for m in client.models.list()] == [name, "tuned"]
        served = dict(engine_view(running).model.named_parameters())
        for param, tensor in want.items():
            torch.testing.assert_close(served[param], tensor, rtol=1e-5, atol=1e-5)
        after = client.chat.completions.create(
            model="tuned", messages=MESSAGES, temperature=0, max_tokens=12
        )
        assert after.choices[0].message.content != before.choices[0].message.content
        # The adapter request carries no version (vLLM's body): the server counts one up.
        version = httpx.get(running.url + "/health").json()["version"]
        assert after.system_fingerprint == f"honing-v{version}" != before.system_fingerprint
    finally:
        await engine.update_weights(WeightUpdate(version=10, path=str(tiny_model_dir)))
        await engine.close()
    assert [m.id for m in client.models.list()] == [name]  # a full reload drops the adapter


def test_errors_are_openai_shaped(running: RunningServer, client: openai.OpenAI, name: str) -> None:
    url = running.base_url + "/chat/completions"
    bad_json = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400
    error = bad_json.json()["error"]
    assert (
        set(error) == {"message", "type", "param", "code"} and "not valid JSON" in error["message"]
    )
    # json.loads raises a plain ValueError past 4,300 digits: still the client's error, not a 500
    digits = httpx.post(url, content=b'{"max_tokens": ' + b"9" * 5000 + b"}")
    assert digits.status_code == 400
    assert "not valid JSON: Exceeds the limit (4300 digits)" in digits.json()["error"]["message"]

    with pytest.raises(openai.BadRequestError) as two:
        client.chat.completions.create(model=name, messages=MESSAGES, n=2)
    assert two.value.status_code == 400 and "n > 1 is not supported" in two.value.message
    body: Any = two.value.body
    assert body["param"] == "n"

    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-4", messages=MESSAGES)
    assert name in unknown.value.message and "gpt-4" in unknown.value.message

    typo = httpx.post(url, json={"model": name, "messages": MESSAGES, "temprature": 0})
    assert typo.status_code == 400 and "temprature" in typo.json()["error"]["message"]
    choice = httpx.post(url, json={"model": name, "messages": MESSAGES, "tool_choice": "required"})
    assert choice.status_code == 400 and "tool_choice" in choice.json()["error"]["message"]
    vocab = httpx.post(
        running.base_url + "/completions", json={"model": name, "prompt": [10**9], "max_tokens": 2}
    )
    assert vocab.status_code == 400 and "vocabulary" in vocab.json()["error"]["message"]
    route = httpx.get(running.base_url + "/nowhere")
    assert route.status_code == 404 and route.json()["error"]["type"] == "not_found_error"
    missing = httpx.post(running.url + "/reload_weights", json={"path": "/no/such/dir"})
    assert missing.status_code == 400 and "/no/such/dir" in missing.json()["error"]["message"]
    lora = httpx.post(
        running.base_url + "/load_lora_adapter",
        json={"lora_name": "x", "lora_path": "/no/such/adapter"},
    )
    assert lora.status_code == 400 and "peft LoRA adapter" in lora.json()["error"]["message"]
    assert json.loads(httpx.get(running.url + "/health").text)["status"] == "ok"


def test_an_export_is_served_with_the_agent_settings_it_was_trained_with(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """honing_agent.json beside the weights: /v1/models lists it, and a chat request without
    max_tokens gets the trained turn length, not the rest of the context."""
    import shutil

    from honing.rollout.saved_agent import SavedAgent, save_agent

    model = tmp_path / "exported"
    shutil.copytree(tiny_model_dir, model)
    agent = SavedAgent(system_prompt="", max_turns=2, max_new_tokens=3, max_total_tokens=512)
    save_agent(model, agent)
    with background_server(model, dtype="float32", max_batch=2) as running:
        client = openai.OpenAI(base_url=running.base_url, api_key="none")
        [listed] = client.models.list().data
        assert (listed.model_extra or {})["honing_agent"] == agent.model_dump(mode="json")
        reply = client.chat.completions.create(model="exported", messages=MESSAGES, temperature=0)
        asked = client.chat.completions.create(
            model="exported", messages=MESSAGES, temperature=0, max_tokens=7
        )
    assert reply.usage is not None and asked.usage is not None
    assert reply.usage.completion_tokens <= 3 and reply.choices[0].finish_reason == "length"
    assert asked.usage.completion_tokens == 7  # a request that says how many gets them
