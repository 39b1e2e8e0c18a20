"""Chat requests rendered to token ids exactly as honing's own agent renders them, and completions
turned back into OpenAI messages.

    renderer = ChatRenderer(tokenizer)
    prompt = renderer.prompt(request)                # messages + tools -> Rendered(text, token_ids)
    reply = renderer.reply(prompt, gen.token_ids, finish, parse_tools=True)
    reply.content, reply.tool_calls, reply.finish_reason

The prompt is what `honing.rollout.chat.Transcript` renders for the token-mode agent; `content`
is the model's raw text, tool-call markup included, also returned parsed as `tool_calls`; a
conversation that continues one of the renderer's recent completions is encoded as those exact
ids plus the newly rendered suffix. docs/serving.md has the rules.

Not covered: templates that re-render earlier turns (they get the full re-render, not the
agent's fallback delta), `tool_choice` naming a function or "required".
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from honing.envs.base import MalformedAction, untrusted_json
from honing.rollout.chat import ChatFormat, Message, describe_tools, openai_tool_calls, parse_action
from honing.rollout.engines.base import FinishReason
from honing.serve.protocol import APIError, CallSpec, ChatMessage, ChatRequest

MEMORY = 1024  # completions remembered for token-faithful continuation


@dataclass(frozen=True)
class Rendered:
    """A chat prompt: the template's text and the ids the engine continues."""

    text: str
    token_ids: list[int]
    turn: int  # assistant messages before the completion (numbers its tool call ids)
    reused: int  # leading ids taken from a remembered completion


@dataclass(frozen=True)
class Reply:
    """A completion as an assistant message."""

    content: str
    tool_calls: list[dict[str, Any]] | None
    finish_reason: str  # stop | length | tool_calls | abort


@dataclass(frozen=True)
class _Remembered:
    covered: str  # the prompt text and the completion's content
    stop_text: str  # the end-of-turn token the model wrote, when it did
    token_ids: list[int]  # prompt + completion


class ChatRenderer:
    """One tokenizer's chat format, driven as honing's agent drives it; see the module docstring."""

    def __init__(self, tokenizer: Any, *, memory: int = MEMORY) -> None:
        self.fmt = ChatFormat.of(tokenizer)
        self.memory = memory
        self._seen: OrderedDict[str, _Remembered] = OrderedDict()

    # -- prompts ------------------------------------------------------------------------------

    def messages(self, request: ChatRequest) -> tuple[list[Message], list[dict[str, Any]]]:
        """The template's messages and tools for a request (see the module docstring)."""
        traits = self.fmt.traits
        tools = list(request.tools or []) if request.tool_choice != "none" else []
        out: list[Message] = []
        calls_by_id: dict[str, str] = {}
        pending: list[str] = []  # tool results waiting for a user message (no tool role)
        for i, message in enumerate(request.messages):
            role = "system" if message.role == "developer" else message.role
            text = message.text()
            if role == "assistant":
                self._flush(pending, out)
                text = _with_markup(text, message.tool_calls or [])
                for call in message.tool_calls or []:
                    if call.id:
                        calls_by_id[call.id] = call.function.name
                out.append({"role": "assistant", "content": text})
            elif role == "tool":
                name = message.name or calls_by_id.get(message.tool_call_id or "")
                if name is None:
                    raise APIError(
                        400,
                        f"messages.{i}: a tool message needs `name` or a `tool_call_id` of an "
                        "earlier assistant tool call",
                        param=f"messages.{i}",
                    )
                if traits.tool_role:
                    out.append({"role": "tool", "tool_call_id": message.tool_call_id or "",
                                "name": name, "content": text})  # fmt: skip
                else:
                    pending.append(f"Tool result ({name}):\n{text}")
            elif role == "user" and pending:
                out.append({"role": "user", "content": "\n\n".join([*pending, text])})
                pending.clear()
            else:
                self._flush(pending, out)
                out.append({"role": role, "content": text})
        self._flush(pending, out)
        if tools and not traits.native_tools:
            described = describe_tools(tools)
            if out and out[0]["role"] == "system":
                base = out[0]["content"]
                out[0] = {
                    "role": "system",
                    "content": f"{base}\n\n{described}" if base else described,
                }
            else:
                out.insert(0, {"role": "system", "content": described})
        if not traits.system_role and out and out[0]["role"] == "system":
            system = out.pop(0)["content"]
            if out and out[0]["role"] == "user":
                out[0] = {"role": "user", "content": f"{system}\n\n{out[0]['content']}"}
            else:
                out.insert(0, {"role": "user", "content": system})
        return out, tools

    @staticmethod
    def _flush(pending: list[str], out: list[Message]) -> None:
        if pending:
            out.append({"role": "user", "content": "\n\n".join(pending)})
            pending.clear()

    def prompt(self, request: ChatRequest) -> Rendered:
        """The request's prompt, its ids continuing a remembered completion where one fits."""
        messages, tools = self.messages(request)
        try:
            text = self.fmt.render(messages, generation_prompt=True, tools=tools)
        except Exception as exc:  # jinja's raise_exception: roles must alternate, ...
            raise APIError(400, f"the chat template refused the messages: {exc}",
                           param="messages") from exc  # fmt: skip
        turn = sum(1 for m in request.messages if m.role == "assistant")
        found = self._continued(text)
        if found is None:
            return Rendered(text, self.fmt.encode(text), turn, 0)
        rest = text[len(found.covered) :]
        if found.stop_text and rest.startswith(found.stop_text):
            rest = rest[len(found.stop_text) :]  # the model's own end-of-turn token is in the ids
        ids = [*found.token_ids, *self.fmt.encode(rest)]
        return Rendered(text, ids, turn, len(found.token_ids))

    def _continued(self, text: str) -> _Remembered | None:
        best: _Remembered | None = None
        for entry in reversed(self._seen.values()):
            if text.startswith(entry.covered) and (
                best is None or len(entry.covered) > len(best.covered)
            ):
                best = entry
        if best is not None:
            self._seen.move_to_end(best.covered)
        return best

    # -- replies ------------------------------------------------------------------------------

    def split(self, token_ids: Sequence[int]) -> tuple[list[int], list[int]]:
        """(content ids, the final end-of-turn id if the model wrote one), as Transcript does."""
        ids = list(token_ids)
        if ids and ids[-1] in self.fmt.traits.stop_ids:
            return ids[:-1], ids[-1:]
        return ids, []

    def content(self, token_ids: Sequence[int]) -> str:
        return self.fmt.decode(self.split(token_ids)[0])

    def reply(self, prompt: Rendered, token_ids: Sequence[int], finish: FinishReason, *,
              parse_tools: bool, stops: Sequence[str] = (),
              keep_stop: bool = True) -> Reply:  # fmt: skip
        """The assistant message of a completion; remembers it for continuation."""
        body, end = self.split(token_ids)
        content = self.fmt.decode(body)
        if not keep_stop:
            content = cut_at_stop(content, stops)
        self.remember(prompt, content, [*body, *end], self.fmt.decode(end) if end else "")
        calls = None
        if parse_tools:
            try:
                action = parse_action(content, call_prefix=f"call_{prompt.turn}")
            except MalformedAction:
                action = None  # the caller's agent sees the malformed text and judges it
            if action is not None and action.tool_calls:
                calls = openai_tool_calls(action)
        reason = {FinishReason.LENGTH: "length", FinishReason.ABORT: "abort"}.get(finish, "stop")
        if calls and reason == "stop":
            reason = "tool_calls"
        return Reply(content, calls, reason)

    def remember(self, prompt: Rendered, content: str, ids: list[int], stop_text: str) -> None:
        covered = prompt.text + content
        self._seen[covered] = _Remembered(covered, stop_text, [*prompt.token_ids, *ids])
        self._seen.move_to_end(covered)
        while len(self._seen) > self.memory:
            self._seen.popitem(last=False)


def _with_markup(content: str, calls: Sequence[CallSpec]) -> str:
    """An assistant message's content with its tool calls written in honing's format, unless the
    content already carries them."""
    if not calls or "<tool_call>" in content:
        return content
    blocks = []
    for call in calls:
        try:
            arguments = untrusted_json(call.function.arguments or "{}")
        except ValueError:
            arguments = call.function.arguments
        body = json.dumps({"name": call.function.name, "arguments": arguments}, ensure_ascii=False)
        blocks.append(f"<tool_call>{body}</tool_call>")
    return "\n".join([content, *blocks] if content else blocks)


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """`text` up to the first stop string (OpenAI leaves stop strings out of the output)."""
    cuts = [text.find(s) for s in stops if s and s in text]
    return text[: min(cuts)] if cuts else text


__all__ = ["ChatMessage", "ChatRenderer", "Rendered", "Reply", "cut_at_stop"]
