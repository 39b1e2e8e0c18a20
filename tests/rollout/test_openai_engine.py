"""The OpenAI-compatible engine through the real openai client, against a real local HTTP server
that answers like vLLM (tests/rollout/fake_openai_server.py): chat with tools and logprobs, token
mode over /v1/completions, token ids returned or not, retries, client errors, timeouts, the
weight-reload endpoints."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from fake_openai_server import EOS_ID, FakeOpenAIServer

from honing.errors import EngineError
from honing.rollout.engines.base import FinishReason, Prompt, SamplingParams, WeightUpdate
from honing.rollout.engines.openai import OpenAIConfig, OpenAIEngine

CHAT = Prompt(messages=[{"role": "user", "content": "hi"}])
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_sql",
            "description": "Run a query.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]


class CharTokenizer:
    """One token per character, as the fake server counts them."""

    eos_token_id = EOS_ID

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids if i != EOS_ID)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def engine_for(server: FakeOpenAIServer, **overrides: Any) -> OpenAIEngine:
    tokenizer = overrides.pop("tokenizer", None)
    settings: dict[str, Any] = {"backoff_s": 0.01, "timeout_s": 5.0, **overrides}
    config = OpenAIConfig(base_url=server.url, model="smol", **settings)
    return OpenAIEngine(config, tokenizer=tokenizer)


async def test_chat_returns_text_logprobs_and_token_ids(server: FakeOpenAIServer) -> None:
    engine = engine_for(server)
    assert not engine.accepts_tokens and engine.tokenizer is None
    sampling = SamplingParams(temperature=0.7, top_p=0.9, top_k=5, max_new_tokens=50, seed=11)
    [gen] = await engine.generate([CHAT], sampling)
    await engine.close()
    assert gen.text == "Hello there"
    assert gen.token_ids == [*(ord(c) for c in "Hello there"), EOS_ID]
    assert len(gen.logprobs) == len(gen.token_ids) and gen.logprobs[0] == pytest.approx(-0.01)
    assert gen.versions == [0] * len(gen.token_ids)
    assert gen.finish_reason == FinishReason.STOP
    assert gen.prompt_tokens == 2 and gen.seconds > 0
    [seen] = server.state.seen
    assert seen.path == "/v1/chat/completions"
    body = seen.body
    assert body["model"] == "smol" and body["messages"] == CHAT.messages
    assert body["logprobs"] is True and body["top_logprobs"] == 0
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (
        0.7,
        0.9,
        50,
        11,
    )
    assert body["return_token_ids"] is True and body["top_k"] == 5
    assert body["include_stop_str_in_output"] is True
    assert "tools" not in body and "stop" not in body


async def test_chat_tool_calls_come_back_parsed(server: FakeOpenAIServer) -> None:
    server.state.respond = lambda _b: json.dumps(
        {"name": "run_sql", "arguments": {"query": "select 1"}}
    )
    engine = engine_for(server)
    prompt = Prompt(messages=[{"role": "user", "content": "count"}], tools=TOOLS)
    [gen] = await engine.generate([prompt], SamplingParams())
    await engine.close()
    assert server.state.seen[0].body["tools"] == TOOLS
    assert gen.finish_reason == FinishReason.STOP  # tool_calls maps to stop
    assert gen.text == ""
    assert gen.tool_calls is not None and len(gen.tool_calls) == 1
    call = gen.tool_calls[0]
    assert call["type"] == "function" and call["id"] == "chatcmpl-tool-1"
    assert call["function"]["name"] == "run_sql"
    assert json.loads(call["function"]["arguments"]) == {"query": "select 1"}


async def test_chat_without_token_ids_keeps_logprobs_and_counts_versions(
    server: FakeOpenAIServer,
) -> None:
    server.state.return_token_ids = False
    engine = engine_for(server)
    [gen] = await engine.generate([CHAT], SamplingParams(stop=["there"], max_new_tokens=100))
    await engine.close()
    assert gen.token_ids == []
    assert gen.text == "Hello there"  # the stop string kept, as honing asks the server
    assert len(gen.logprobs) == len("Hello there") == len(gen.versions)
    assert server.state.seen[0].body["stop"] == ["there"]


async def test_token_mode_uses_completions_with_a_list_of_ids(server: FakeOpenAIServer) -> None:
    engine = engine_for(server, tokenizer=CharTokenizer())
    assert engine.accepts_tokens
    prompts = [Prompt(token_ids=[10, 11, 12]), Prompt(token_ids=[20])]
    server.state.respond = lambda b: "abcdefgh" if b["prompt"] == [10, 11, 12] else "xy"
    first, second = await engine.generate(prompts, SamplingParams(max_new_tokens=4))
    await engine.close()
    assert first.token_ids == [ord(c) for c in "abcd"] and first.text == "abcd"
    assert first.finish_reason == FinishReason.LENGTH
    assert second.token_ids == [ord("x"), ord("y"), EOS_ID] and second.text == "xy"
    assert second.finish_reason == FinishReason.STOP
    assert len(first.logprobs) == 4 and first.prompt_tokens == 3
    bodies = sorted((s.body for s in server.state.seen), key=lambda b: len(b["prompt"]))
    assert [s.path for s in server.state.seen] == ["/v1/completions"] * 2
    assert bodies[1]["prompt"] == [10, 11, 12] and bodies[1]["logprobs"] == 1


async def test_token_ids_from_token_id_logprob_strings(server: FakeOpenAIServer) -> None:
    server.state.return_token_ids = False
    server.state.tokens_as_ids = True  # vLLM --return-tokens-as-token-ids
    engine = engine_for(server, tokenizer=CharTokenizer())
    [gen] = await engine.generate([Prompt(token_ids=[1, 2])], SamplingParams())
    [chat] = await engine.generate([CHAT], SamplingParams())
    await engine.close()
    expected = [*(ord(c) for c in "Hello there"), EOS_ID]
    assert gen.token_ids == expected and chat.token_ids == expected
    assert len(gen.logprobs) == len(expected)


async def test_token_mode_without_ids_fails_clearly_unless_retokenizing(
    server: FakeOpenAIServer,
) -> None:
    server.state.return_token_ids = False
    strict = engine_for(server, tokenizer=CharTokenizer())
    with pytest.raises(EngineError, match=r"no token ids.*return_token_ids"):
        await strict.generate([Prompt(token_ids=[1])], SamplingParams())
    await strict.close()
    lenient = engine_for(server, tokenizer=CharTokenizer(), retokenize=True)
    [gen] = await lenient.generate([Prompt(token_ids=[1])], SamplingParams())
    await lenient.close()
    assert gen.token_ids == [ord(c) for c in "Hello there"] and gen.logprobs == []


async def test_503_is_retried_then_succeeds(server: FakeOpenAIServer) -> None:
    server.state.plan["/v1/chat/completions"] = ["503", "429", "drop"]
    engine = engine_for(server, retries=3)
    [gen] = await engine.generate([CHAT], SamplingParams())
    await engine.close()
    assert gen.text == "Hello there"
    assert len(server.state.seen) == 4


async def test_retries_exhausted_name_the_url_and_status(server: FakeOpenAIServer) -> None:
    server.state.plan["/v1/chat/completions"] = ["503"] * 3
    engine = engine_for(server, retries=2)
    with pytest.raises(EngineError) as err:
        await engine.generate([CHAT], SamplingParams())
    await engine.close()
    message = str(err.value)
    assert f"{server.url}/chat/completions" in message
    assert "after 3 attempt(s)" in message and "HTTP 503" in message
    assert "injected failure 503" in message and "is up and serving 'smol'" in message
    assert len(server.state.seen) == 3


async def test_400_is_not_retried(server: FakeOpenAIServer) -> None:
    server.state.plan["/v1/chat/completions"] = ["400"]
    engine = engine_for(server, retries=3)
    with pytest.raises(EngineError, match=r"HTTP 400 \(not retried.*injected failure 400"):
        await engine.generate([CHAT], SamplingParams())
    await engine.close()
    assert len(server.state.seen) == 1


async def test_an_answer_without_choices_is_an_engine_error(server: FakeOpenAIServer) -> None:
    server.state.plan["/v1/chat/completions"] = ["empty"]
    engine = engine_for(server)
    with pytest.raises(EngineError, match="without choices"):
        await engine.generate([CHAT], SamplingParams())
    await engine.close()


async def test_a_hung_server_times_out_into_engine_error(server: FakeOpenAIServer) -> None:
    server.state.plan["/v1/chat/completions"] = ["hang", "hang"]
    engine = engine_for(server, retries=1, timeout_s=0.3)
    with pytest.raises(EngineError, match=r"after 2 attempt\(s\).*timeout_s=0.3"):
        await engine.generate([CHAT], SamplingParams())
    await engine.close()
    assert len(server.state.seen) == 2


async def test_no_server_at_all_is_a_connection_engine_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    config = OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", retries=1)
    engine = OpenAIEngine(config.model_copy(update={"backoff_s": 0.01}))
    with pytest.raises(EngineError, match="connection failed"):
        await engine.generate([CHAT], SamplingParams())
    await engine.close()


async def test_concurrency_is_bounded_and_batch_order_kept(server: FakeOpenAIServer) -> None:
    server.state.delay_s = 0.05
    server.state.respond = lambda b: str(b["messages"][0]["content"]) * 2
    engine = engine_for(server, max_concurrency=2)
    prompts = [Prompt(messages=[{"role": "user", "content": str(i)}]) for i in range(6)]
    gens = await engine.generate(prompts, SamplingParams())
    await engine.close()
    assert [g.text for g in gens] == [f"{i}{i}" for i in range(6)]
    assert server.state.max_in_flight <= 2 and len(server.state.seen) == 6


async def test_lora_update_loads_the_adapter_and_serves_it(server: FakeOpenAIServer) -> None:
    engine = engine_for(server)
    await engine.update_weights(WeightUpdate(version=3, path="/ckpt/v3", adapter=True))
    assert engine.version == 3 and engine.model == "honing-v3"
    [gen] = await engine.generate([CHAT], SamplingParams())
    await engine.close()
    load, chat = server.state.seen
    assert load.path == "/v1/load_lora_adapter"
    assert load.body == {"lora_name": "honing-v3", "lora_path": "/ckpt/v3"}
    assert chat.body["model"] == "honing-v3" and gen.versions[0] == 3


async def test_full_reload_posts_path_and_version_and_reports_refusals(
    server: FakeOpenAIServer,
) -> None:
    engine = engine_for(server)
    await engine.update_weights(WeightUpdate(version=1, path="/ckpt/v1"))
    assert engine.version == 1 and engine.model == "smol"
    assert server.state.seen[-1].path == "/reload_weights"
    assert server.state.seen[-1].body == {"path": "/ckpt/v1", "version": 1}
    server.state.plan["/reload_weights"] = ["400"]
    with pytest.raises(EngineError, match=r"reload_weights.*HTTP 400.*injected failure 400"):
        await engine.update_weights(WeightUpdate(version=2, path="/missing"))
    assert engine.version == 1  # unchanged: the server refused
    with pytest.raises(EngineError, match="path"):
        await engine.update_weights(WeightUpdate(version=2, state_dict={}))
    await engine.close()
