"""The server renders conversations exactly as honing's in-process agent does: honing's chat-mode
agent through the server (honing's `openai` engine, real HTTP, a real math environment in the
sandbox) feeds the model the very token ids of the token-mode agent's trajectory; tool calls come
back parsed (streamed too), and a conversation continuing the server's own output keeps the
model's exact tokens."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from honing.envs.base import EnvConfig
from honing.envs.registry import make_env
from honing.rollout.agent import AgentConfig, run_episode
from honing.rollout.engines.base import FinishReason, Generation, Prompt, SamplingParams
from honing.rollout.engines.openai import OpenAIConfig, OpenAIEngine
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.sandbox import SandboxPool
from honing.serve.chat import ChatRenderer
from honing.serve.protocol import ChatRequest
from honing.serve.server import running_server
from honing.tasks.load import AnyTask, load_tasks

SAMPLING = SamplingParams(max_new_tokens=128)
ON_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")  # where module_pool lives
CALCULATOR: Any = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}


def call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class Recording(ScriptedEngine):
    """The scripted engine, keeping the prompt ids it was asked to continue."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompts: list[list[int]] = []

    async def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams
                       ) -> list[Generation]:  # fmt: skip
        self.prompts += [list(p.token_ids or []) for p in prompts]
        return await super().generate(prompts, sampling)


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="module")
def product() -> AnyTask:
    [task] = [t for t in load_tasks("examples-math").tasks if t.id == "example-math/product"]
    return task  # What is 347 × 86? → 29842


@ON_MODULE_LOOP
async def test_chat_agent_through_the_server_sees_the_token_mode_agents_tokens(
    tok: Any, module_pool: SandboxPool, product: AnyTask
) -> None:
    texts = ["I'll multiply first.\n" + call("calculator", expression="347*86"),
             call("answer", value="29842")]  # fmt: skip
    env = make_env("math", module_pool, EnvConfig())
    in_process = await run_episode(product, env, ScriptedEngine(texts, tokenizer=tok),
                                   AgentConfig(sampling=SAMPLING))  # fmt: skip
    backend = Recording(texts, tokenizer=tok)
    async with running_server(backend, name="scripted") as running:
        # No memory of earlier completions: every prompt is the template's full re-render.
        running.server.renderer = ChatRenderer(tok, memory=0)
        chat = OpenAIEngine(OpenAIConfig(base_url=running.base_url, model="scripted"))
        assert not chat.accepts_tokens
        served = await run_episode(product, make_env("math", module_pool, EnvConfig()), chat,
                                   AgentConfig(sampling=SAMPLING))  # fmt: skip
        await chat.close()
    assert in_process.success and served.success
    assert served.reward == in_process.reward and served.ending == in_process.ending
    turns = [t for t in in_process.turns if t.role == "assistant"]
    assert backend.prompts == [in_process.token_ids[: t.start] for t in turns]
    served_turns = [t for t in served.turns if t.role == "assistant"]
    assert [t.tool_calls for t in served_turns] == [t.tool_calls for t in turns]
    assert [t.text for t in served_turns] == texts  # the raw text, markup included


@ON_MODULE_LOOP
async def test_tool_calls_come_back_parsed_and_streamed(tok: Any) -> None:
    text = "Let me compute.\n" + call("calculator", expression="2+2")
    messages: Any = [{"role": "user", "content": "What is 2+2?"}]
    async with running_server(ScriptedEngine([text], tokenizer=tok), name="scripted") as running:
        client = openai.AsyncOpenAI(base_url=running.base_url, api_key="unused", max_retries=0)
        reply = await client.chat.completions.create(
            model="scripted", messages=messages, tools=[CALCULATOR]
        )
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content == text
        [tool_call] = choice.message.tool_calls or []
        assert tool_call.id == "call_0_0" and tool_call.type == "function"
        assert tool_call.function.name == "calculator"
        assert json.loads(tool_call.function.arguments) == {"expression": "2+2"}

        stream = await client.chat.completions.create(
            model="scripted", messages=messages, tools=[CALCULATOR],
            stream=True,
        )  # fmt: skip
        chunks = [c async for c in stream]
        deltas = [c.choices[0].delta for c in chunks]
        assert "".join(d.content or "" for d in deltas) == text
        [calls] = [d.tool_calls for d in deltas if d.tool_calls]
        assert calls[0].index == 0 and calls[0].function is not None
        assert calls[0].function.name == "calculator" and calls[0].id == "call_0_0"
        assert chunks[-1].choices[0].finish_reason == "tool_calls"

        plain = await client.chat.completions.create(model="scripted", messages=messages,
                                                     tools=[CALCULATOR],
                                                     tool_choice="none")  # fmt: skip
        assert plain.choices[0].message.tool_calls is None
        assert plain.choices[0].finish_reason == "stop"
        await client.close()


def test_tool_calls_without_markup_are_rendered_in_honings_format(tok: Any) -> None:
    arguments = json.dumps({"expression": "2+2"})
    request = ChatRequest.model_validate({
        "model": "m", "tools": [CALCULATOR],
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "calculator", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "4"},
            {"role": "user", "content": "Now answer."},
        ],
    })  # fmt: skip
    messages, tools = ChatRenderer(tok).messages(request)
    assert tools == [CALCULATOR]
    assert messages[0]["role"] == "system" and "<tools>" in messages[0]["content"]
    assert messages[2] == {"role": "assistant", "content": call("calculator", expression="2+2")}
    # SmolLM2's template has no tool role: the result joins the next user message, named.
    assert messages[3] == {"role": "user", "content": "Tool result (calculator):\n4\n\nNow answer."}


def test_tool_call_arguments_past_pythons_json_limits_are_rendered_as_sent(tok: Any) -> None:
    # json.loads raises a plain ValueError past 4,300 digits: the client's text is kept as is.
    arguments = '{"expression": ' + "9" * 5000 + "}"
    request = ChatRequest.model_validate({"model": "m", "messages": [
        {"role": "user", "content": "What is it?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "calculator", "arguments": arguments}}]},
    ]})  # fmt: skip
    messages, _ = ChatRenderer(tok).messages(request)
    sent = json.dumps({"name": "calculator", "arguments": arguments})
    assert messages[-1] == {"role": "assistant", "content": f"<tool_call>{sent}</tool_call>"}


def test_a_continued_conversation_keeps_the_models_own_tokens(tok: Any) -> None:
    renderer = ChatRenderer(tok)
    first = ChatRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "Say hello."}]}
    )
    prompt = renderer.prompt(first)
    assert prompt.reused == 0
    # The model spelled "hello there" one character per token: not how the tokenizer would.
    sampled = [tok.convert_tokens_to_ids(c) for c in "hello"] + [tok.eos_token_id]
    assert tok.encode("hello", add_special_tokens=False) != sampled[:-1]
    reply = renderer.reply(prompt, sampled, finish=FinishReason.STOP, parse_tools=False)
    assert reply.content == "hello" and reply.finish_reason == "stop"
    follow = ChatRequest.model_validate({"model": "m", "messages": [
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": reply.content},
        {"role": "user", "content": "Again."},
    ]})  # fmt: skip
    again = renderer.prompt(follow)
    assert again.token_ids[: len(prompt.token_ids) + len(sampled)] == prompt.token_ids + sampled
    assert again.reused == len(prompt.token_ids) + len(sampled)
    assert tok.decode(again.token_ids) == again.text
    fresh = ChatRenderer(tok, memory=0).prompt(follow)
    assert fresh.text == again.text and fresh.token_ids != again.token_ids
