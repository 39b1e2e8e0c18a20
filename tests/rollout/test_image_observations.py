"""Image observations through the agent loop: content parts only for a chat engine with
`AgentConfig.images` (a vision model), text unchanged token for token otherwise, the images kept on
the observation turn for the store, and the openai engine sending the parts to the server
(tests/rollout/fake_openai_server.py records what it receives)."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer

from honing.envs.base import Action, Observation, StepInfo, StepResult, ToolResult, tool_schema
from honing.errors import ConfigError
from honing.records import Trajectory
from honing.rollout.agent import AgentConfig, run_episode
from honing.rollout.chat import image_part, message_text, observation_messages
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.openai import OpenAIConfig, OpenAIEngine
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.tasks.load import AnyTask, load_tasks

SAMPLING = SamplingParams(max_new_tokens=128)
TOOLS = [tool_schema("render", "Draw it.", {}, []), tool_schema("submit", "Done.", {}, [])]


def png(width: int = 4, height: int = 3, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A valid RGB PNG of one colour."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))  # fmt: skip


RED, BLUE = png(), png(rgb=(20, 40, 220))


def drawn(update: str | None = None) -> Observation:
    return Observation(text="Goal: draw a square", update=update, tools=TOOLS, tool_results=[
        ToolResult(call_id="c0", name="render", content="a red square", ok=True, images=[RED]),
        ToolResult(call_id="c1", name="render", content="two views", ok=True, images=[RED, BLUE]),
    ])  # fmt: skip


def url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


# -- the messages -------------------------------------------------------------------------------


@pytest.mark.parametrize("tool_role", [False, True])
def test_images_off_the_messages_are_the_text_alone(tool_role: bool) -> None:
    plain = drawn().model_copy(update={"tool_results": [
        r.model_copy(update={"images": []}) for r in drawn().tool_results]})  # fmt: skip
    shown = observation_messages(drawn(), tool_role=tool_role)
    assert shown == observation_messages(plain, tool_role=tool_role)
    assert all(isinstance(m["content"], str) for m in shown)


def test_images_on_the_state_message_carries_them_as_content_parts() -> None:
    messages = observation_messages(drawn(), tool_role=True, images=True)
    assert [m["role"] for m in messages] == ["tool", "tool", "user"]
    assert [m["content"] for m in messages[:2]] == ["a red square", "two views"]  # tools: text
    assert messages[2]["content"] == [
        {"type": "text", "text": "Goal: draw a square"},
        {"type": "text", "text": "Image from render:"},
        {"type": "image_url", "image_url": {"url": url(RED)}},
        {"type": "text", "text": "2 images from render:"},
        {"type": "image_url", "image_url": {"url": url(RED)}},
        {"type": "image_url", "image_url": {"url": url(BLUE)}},
    ]
    assert image_part(RED) == messages[2]["content"][2]
    assert (
        message_text(messages[2])
        == "Goal: draw a square\nImage from render:\n2 images from render:"
    )
    # Without a tool role: one user message, the results' text first, then the images.
    [user] = observation_messages(drawn(), tool_role=False, images=True)
    assert user["content"][0]["text"].startswith("Tool result (render):\na red square\n\n")
    assert [p["type"] for p in user["content"]] == ["text", "text", "image_url", "text",
                                                    "image_url", "image_url"]  # fmt: skip
    # Nothing changed and nothing to restate: the images still get a user message.
    short = observation_messages(drawn(update=""), tool_role=True, restate=False, images=True)
    assert [m["role"] for m in short] == ["tool", "tool", "user"]
    assert short[2]["content"][0] == {"type": "text", "text": "Image from render:"}


def test_results_without_images_keep_plain_messages_even_with_images_on() -> None:
    plain = Observation(text="Goal", tool_results=[ToolResult(call_id="c", name="submit",
                                                              content="ok", ok=True)])  # fmt: skip
    assert observation_messages(plain, tool_role=True, images=True) == [
        {"role": "tool", "tool_call_id": "c", "name": "submit", "content": "ok"},
        {"role": "user", "content": "Goal"},
    ]


# -- the agent loop -----------------------------------------------------------------------------


class DrawingEnv:
    """`render` answers with text and a PNG; `submit` ends the episode with outcome 1."""

    def __init__(self) -> None:
        self.done = False

    async def reset(self, task: AnyTask) -> Observation:
        self.done = False
        return Observation(text="Goal: draw a red square", tools=TOOLS)

    async def step(self, action: Action) -> StepResult:
        [call] = action.tool_calls
        if call.name == "render":
            result = ToolResult(call_id=call.id, name="render", content="a red square", ok=True,
                                images=[RED])  # fmt: skip
            components = {"well_formed": 1.0}
        else:
            self.done = True
            result = ToolResult(call_id=call.id, name="submit", content="judged", ok=True)
            components = {"well_formed": 1.0, "outcome": 1.0}
        observation = Observation(text="State: drawn", update="", tool_results=[result],
                                  tools=TOOLS)  # fmt: skip
        return StepResult(observation=observation, reward=components.get("outcome", 0.0),
                          components=components, done=self.done, info=StepInfo())  # fmt: skip

    async def reject(self, detail: str) -> StepResult:
        raise AssertionError(detail)

    async def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def task() -> AnyTask:
    return load_tasks("examples-structure").tasks[0]


def script(_prompt: Prompt, index: int) -> str:
    name = "render" if index == 0 else "submit"
    return json.dumps({"name": name, "arguments": {}})  # a bare call: structured tool_calls


def assert_kept(traj: Trajectory) -> None:
    render, submit = [t for t in traj.turns if t.role == "tool"]
    assert render.image_data == [RED] and render.images == []  # the writer names the files
    assert submit.image_data == []
    assert traj.success


async def test_a_chat_engine_with_images_on_sends_them_and_the_turn_keeps_them(
    task: AnyTask,
) -> None:
    prompts: list[Prompt] = []

    def respond(prompt: Prompt, index: int) -> str:
        prompts.append(prompt)
        return script(prompt, index)

    config = AgentConfig(sampling=SAMPLING, images=True)
    traj = await run_episode(task, DrawingEnv(), ScriptedEngine(respond), config)
    assert_kept(traj)
    second = prompts[1].messages
    assert second is not None and [m["role"] for m in second][-2:] == ["tool", "user"]
    assert second[-1]["content"][-1] == {"type": "image_url", "image_url": {"url": url(RED)}}
    assert traj.turns[2].text == "a red square\n\nState: drawn\nImage from render:"  # text only


async def test_images_off_a_chat_engine_gets_text_and_the_turn_still_keeps_them(
    task: AnyTask,
) -> None:
    prompts: list[Prompt] = []

    def respond(prompt: Prompt, index: int) -> str:
        prompts.append(prompt)
        return script(prompt, index)

    traj = await run_episode(task, DrawingEnv(), ScriptedEngine(respond),
                             AgentConfig(sampling=SAMPLING))  # fmt: skip
    assert_kept(traj)
    assert all(isinstance(m["content"], str) for m in prompts[1].messages or [])
    assert traj.turns[2].text == "a red square\n\nState: drawn"


async def test_a_token_engine_sees_text_only_and_refuses_images_on(
    task: AnyTask, tiny_model_dir: Path
) -> None:
    tok = load_tokenizer(tiny_model_dir)
    texts = ['<tool_call>{"name": "render", "arguments": {}}</tool_call>',
             '<tool_call>{"name": "submit", "arguments": {}}</tool_call>']  # fmt: skip
    traj = await run_episode(task, DrawingEnv(), ScriptedEngine(texts, tokenizer=tok),
                             AgentConfig(sampling=SAMPLING))  # fmt: skip
    assert_kept(traj)
    observation = tok.decode(traj.token_ids[traj.turns[2].start : traj.turns[2].end])
    assert "a red square" in observation and "image" not in observation.lower()
    with pytest.raises(ConfigError, match="images: true needs a chat engine"):
        await run_episode(task, DrawingEnv(), ScriptedEngine(texts, tokenizer=tok),
                          AgentConfig(sampling=SAMPLING, images=True))  # fmt: skip


# -- the openai engine --------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


async def test_the_openai_engine_sends_the_image_parts_to_the_server(
    server: FakeOpenAIServer, task: AnyTask
) -> None:
    calls = iter(["render", "submit"])
    server.state.respond = lambda _body: json.dumps({"name": next(calls), "arguments": {}})
    engine = OpenAIEngine(OpenAIConfig(base_url=server.url, model="vision", backoff_s=0.01))
    try:
        traj = await run_episode(task, DrawingEnv(), engine,
                                 AgentConfig(sampling=SAMPLING, images=True))  # fmt: skip
    finally:
        await engine.close()
    assert_kept(traj)
    first, second = server.chat_messages()
    assert all(isinstance(m["content"], str) for m in first)
    tool, user = second[-2:]
    assert tool["role"] == "tool" and tool["content"] == "a red square"
    [image] = [p for p in user["content"] if p["type"] == "image_url"]
    assert image["image_url"]["url"] == url(RED)
    sent = image["image_url"]["url"].removeprefix("data:image/png;base64,")
    assert base64.b64decode(sent) == RED


async def test_the_openai_engine_without_images_sends_text(
    server: FakeOpenAIServer, task: AnyTask
) -> None:
    calls = iter(["render", "submit"])
    server.state.respond = lambda _body: json.dumps({"name": next(calls), "arguments": {}})
    engine = OpenAIEngine(OpenAIConfig(base_url=server.url, model="text", backoff_s=0.01))
    try:
        await run_episode(task, DrawingEnv(), engine, AgentConfig(sampling=SAMPLING))
    finally:
        await engine.close()
    for messages in server.chat_messages():
        assert all(isinstance(m["content"], str | None) for m in messages), messages
