"""The conversation of an episode in the model's chat format: prompt, tool calls, observations.

    fmt = ChatFormat.of(tokenizer)               # detects what the chat template supports (cached)
    transcript = fmt.start(observation)          # system prompt (tools) + the task as user message
    transcript.prompt_ids                        # the first prompt, rendered and tokenized once
    content = transcript.add_assistant(engine_token_ids)   # kept as the engine produced them
    action = parse_action(content)               # or MalformedAction saying what is wrong
    delta = transcript.add_observation(result.observation) # only the new tokens to append

Covered: token-faithful transcripts (only the delta of each observation is tokenized, with a
fallback for templates that are not prefix-preserving), tools rendered natively or in the system
prompt, images as content parts for vision models (chat engines only), and parsing tool calls
(docs/rollout.md, "The modules in detail"). Not covered: generating, stepping the environment,
deadlines (`honing.rollout.agent`), checking a template (`honing.rollout.template_check`).
"""

from __future__ import annotations

import base64
import json
import logging
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from honing.envs.base import (
    Action,
    MalformedAction,
    Observation,
    ToolCall,
    ToolResult,
    untrusted_json,
)
from honing.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful assistant that solves tasks by calling tools. Think briefly, then act; "
    "read each tool result before the next step."
)
CALL_FORMAT = (
    "To call a tool, write its name and arguments as JSON inside <tool_call></tool_call> tags; "
    "a message may contain several calls:\n"
    '<tool_call>{"name": "<tool name>", "arguments": {"<argument>": <value>}}</tool_call>\n'
    "The results come back in the next message."
)
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
FENCED_JSON = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.S)
TOOL_ROLE_IN_TEMPLATE = re.compile(r"""['"]tool['"]""")
PROBE = "honing-probe-7f3a"  # text that appears in no template
Message = dict[str, Any]


def describe_tools(tools: Sequence[dict[str, Any]]) -> str:
    """The tool schemas and the call format, for a system prompt (templates without tools)."""
    schemas = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    return f"You can call these tools:\n<tools>\n{schemas}\n</tools>\n\n{CALL_FORMAT}"


def system_message(tools: Sequence[dict[str, Any]], system_prompt: str | None,
                   describe: bool) -> str:  # fmt: skip
    base = DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
    if describe and tools:
        return f"{base}\n\n{describe_tools(tools)}" if base else describe_tools(tools)
    return base


def first_messages(observation: Observation, system_prompt: str | None, *,
                   describe_tools: bool, system_role: bool = True) -> list[Message]:  # fmt: skip
    """The system message (tools described unless the template renders them) and the task."""
    system = system_message(observation.tools, system_prompt, describe_tools)
    if not system:  # system_prompt "" and nothing to describe: no system message at all
        return [{"role": "user", "content": observation.text}]
    if not system_role:  # a template that refuses a system role gets it in the first message
        return [{"role": "user", "content": f"{system}\n\n{observation.text}"}]
    return [{"role": "system", "content": system}, {"role": "user", "content": observation.text}]


def observation_messages(
    observation: Observation, *, tool_role: bool, restate: bool = True, images: bool = False
) -> list[Message]:
    """The messages that show a step's results: tool messages (or a prefixed user message when
    the template has no tool role), then the task state as a user message. `restate=False`
    shows the observation's `update` (what changed) instead of the whole state; the user
    message is left out when that is empty and there are tool results to show. `images=True`
    (a vision model behind a chat engine) adds the results' images to the user message as
    image content parts, each result's after a line naming its tool; otherwise they are not
    shown and every message is text, as a text-only model needs."""
    results = observation.tool_results
    text = observation.text if restate or observation.update is None else observation.update
    drawn = [r for r in results if r.images] if images else []
    if tool_role and results:
        messages: list[Message] = [
            {"role": "tool", "tool_call_id": r.call_id, "name": r.name, "content": r.content}
            for r in results
        ]
        if drawn:
            return [*messages, _with_images(text, drawn)]
        return [*messages, {"role": "user", "content": text}] if text else messages
    shown = [f"Tool result ({r.name}):\n{r.content}" for r in results]
    body = "\n\n".join([*shown, text] if text else shown)
    if drawn:
        return [_with_images(body, drawn)]
    return [{"role": "user", "content": body}]


def image_part(png: bytes) -> dict[str, Any]:
    """A PNG as an OpenAI image content part (a base64 data URL)."""
    url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return {"type": "image_url", "image_url": {"url": url}}


def _with_images(text: str, drawn: Sequence[ToolResult]) -> Message:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for r in drawn:
        label = f"Image from {r.name}:" if len(r.images) == 1 else (
            f"{len(r.images)} images from {r.name}:")  # fmt: skip
        parts.append({"type": "text", "text": label})
        parts.extend(image_part(png) for png in r.images)
    return {"role": "user", "content": parts}


def message_text(message: Message) -> str:
    """A message's text: its content, or the text parts of its content parts, one a line."""
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content
                         if isinstance(part, dict) and part.get("type") == "text")  # fmt: skip
    return str(content)


def openai_tool_calls(action: Action) -> list[dict[str, Any]]:
    """An action's calls in OpenAI's chat shape (arguments as a JSON string)."""
    return [
        {"id": c.id, "type": "function",
         "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
        for c in action.tool_calls
    ]  # fmt: skip


def parse_action(text: str, *, call_prefix: str = "call") -> Action:
    """The action a model's message makes; MalformedAction says which call is wrong and how."""
    blocks = TOOL_CALL.findall(text)
    if text.count("<tool_call>") > len(blocks):
        raise MalformedAction(
            f"tool call {len(blocks) + 1}: <tool_call> is not closed with </tool_call> "
            "(was the message cut off?)"
        )
    if blocks:
        calls = [_tool_call(i, raw, call_prefix) for i, raw in enumerate(blocks)]
        return Action(content=TOOL_CALL.sub("", text).strip(), tool_calls=calls)
    bare = _bare_calls(text)
    if bare is None:
        return Action(content=text)
    return Action(tool_calls=[_tool_call(i, raw, call_prefix) for i, raw in enumerate(bare)])


def _bare_calls(text: str) -> list[Any] | None:
    """A whole message that is a JSON call object (or a list of them), possibly fenced."""
    body = text.strip()
    fenced = FENCED_JSON.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not (body.startswith(("{", "[")) and '"name"' in body):
        return None
    try:
        value = untrusted_json(body)
    except ValueError:
        if '"arguments"' in body or '"parameters"' in body:
            return [body]  # meant as a call: _tool_call reports the JSON error
        return None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, dict) and "name" in v for v in items):
        return None
    return items


def _tool_call(index: int, raw: Any, prefix: str) -> ToolCall:
    where = f"tool call {index + 1}"
    if isinstance(raw, str):
        try:
            raw = untrusted_json(raw)
        except ValueError as exc:
            shown = raw.strip()[:120]
            raise MalformedAction(f"{where}: not valid JSON ({exc}): {shown!r}") from exc
    if not isinstance(raw, dict):
        raise MalformedAction(
            f'{where}: must be a JSON object with "name" and "arguments", '
            f"not a {type(raw).__name__}"
        )
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise MalformedAction(f'{where}: needs "name", the tool\'s name as a string')
    arguments = raw.get("arguments", raw.get("parameters", {}))
    if isinstance(arguments, str):  # some models encode the arguments twice, as OpenAI does
        try:
            arguments = untrusted_json(arguments or "{}")
        except ValueError as exc:
            raise MalformedAction(f"{where} ({name}): arguments are not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise MalformedAction(
            f'{where} ({name}): "arguments" must be a JSON object, not {json.dumps(arguments)[:60]}'
        )
    return ToolCall(id=f"{prefix}_{index}", name=name.strip(), arguments=arguments)


@dataclass(frozen=True)
class TemplateTraits:
    """What a chat template supports, found by rendering probe conversations."""

    native_tools: bool  # renders `tools=` itself
    tool_role: bool  # knows the `tool` role
    system_role: bool  # accepts a system message
    end_of_turn: str  # what follows an assistant message's content, e.g. "<|im_end|>\n"
    stop_ids: frozenset[int]  # tokens that end the model's turn (eos, end-of-turn marker)


class ChatFormat:
    """A tokenizer's chat template, driven incrementally; one per tokenizer (`ChatFormat.of`)."""

    _cache: ClassVar[weakref.WeakKeyDictionary[Any, ChatFormat]] = weakref.WeakKeyDictionary()

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        source = chat_template or getattr(tokenizer, "chat_template", None)
        if not source:
            raise ConfigError(
                "the tokenizer has no chat template: give the model one (a tokenizer_config.json "
                "with chat_template, or --chat-template FILE)"
            )
        self.template_source = source if isinstance(source, str) else json.dumps(source)
        self.traits = self._detect()
        self._warned = False

    @classmethod
    def of(cls, tokenizer: Any) -> ChatFormat:
        """The format of `tokenizer`'s own template, detected once and cached."""
        try:
            found = cls._cache.get(tokenizer)
        except TypeError:  # not weak-referenceable: detect every time
            return cls(tokenizer)
        if found is None:
            found = cls._cache[tokenizer] = cls(tokenizer)
        return found

    def render(self, messages: Sequence[Message], *, generation_prompt: bool,
               tools: Sequence[dict[str, Any]] | None = None) -> str:  # fmt: skip
        text = self.tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools and self.traits.native_tools else None,
            chat_template=self.chat_template,
            add_generation_prompt=generation_prompt,
            tokenize=False,
        )
        return str(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of rendered text (which carries its own special tokens)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False,
                                         clean_up_tokenization_spaces=False))  # fmt: skip

    def start(self, observation: Observation, system_prompt: str | None = None) -> Transcript:
        """The conversation of a new episode, its first prompt rendered and tokenized."""
        return Transcript(self, observation, system_prompt)

    def render_new(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> str:
        """The fallback delta: `messages` and the generation prompt, as the template renders
        them after a fixed short exchange (system, user, assistant; or, for templates that
        re-render assistant turns, system and user), without the exchange."""
        for base in self._bases():
            try:
                before = self.render(base, generation_prompt=False, tools=tools)
                after = self.render([*base, *messages], generation_prompt=True, tools=tools)
            except Exception:  # e.g. "roles must alternate" for the base without an assistant
                continue
            if after.startswith(before):
                return after[len(before) :]
        raise ConfigError(
            "the chat template renders earlier messages differently once more follow, even for a "
            "plain short exchange, so honing cannot append observations to an episode "
            "token-faithfully; run `honing check-template MODEL` and pass a corrected template "
            "with --chat-template FILE"
        )

    def warn_fallback(self) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "the chat template is not prefix-preserving across turns; observations are "
                "rendered incrementally (trajectories stay token-faithful but differ from a "
                "full re-render). `honing check-template MODEL` explains the fix."
            )

    def _bases(self) -> list[list[Message]]:
        head: list[Message] = [{"role": "user", "content": "Hi."}]
        if self.traits.system_role:
            head.insert(0, {"role": "system", "content": "Be brief."})
        return [[*head, {"role": "assistant", "content": "Hello."}], head]

    def _detect(self) -> TemplateTraits:
        def render(messages: list[Message], generation_prompt: bool, **kw: Any) -> str:
            return str(self.tokenizer.apply_chat_template(
                messages, chat_template=self.chat_template, tokenize=False,
                add_generation_prompt=generation_prompt, **kw))  # fmt: skip

        user: Message = {"role": "user", "content": "Hi."}
        try:
            render([{"role": "system", "content": "S."}, user], True)
            system_role = True
        except Exception:  # jinja raise_exception: "system role not supported"
            system_role = False
        head = [{"role": "system", "content": "S."}, user] if system_role else [user]
        probe_tool = {"type": "function", "function": {"name": PROBE, "description": "probe",
                      "parameters": {"type": "object", "properties": {}}}}  # fmt: skip
        try:
            native_tools = PROBE in render(head, True, tools=[probe_tool])
        except Exception:
            native_tools = False
        tool_role = False
        if TOOL_ROLE_IN_TEMPLATE.search(self.template_source):
            tool_message = {"role": "tool", "tool_call_id": "call_0", "name": "f", "content": PROBE}
            try:
                turn = [*head, {"role": "assistant", "content": "x"}, tool_message]
                tool_role = PROBE in render(turn, True)
            except Exception:
                tool_role = False
        closed = render([*head, {"role": "assistant", "content": PROBE}], False)
        end_of_turn = closed[closed.rindex(PROBE) + len(PROBE) :] if PROBE in closed else ""
        stop_ids = {self.tokenizer.eos_token_id} - {None}
        marker = self.encode(end_of_turn)[:1]
        special = set(getattr(self.tokenizer, "all_special_ids", []) or [])
        if marker and marker[0] in special:
            stop_ids.add(marker[0])
        return TemplateTraits(native_tools, tool_role, system_role, end_of_turn,
                              frozenset(int(i) for i in stop_ids))  # fmt: skip


@dataclass(frozen=True)
class Delta:
    """Tokens appended after an assistant turn (loss mask 0) and the text they decode to."""

    token_ids: list[int]
    text: str
    incremental: bool  # True: the full re-render's suffix; False: the fallback rendering


class Transcript:
    """One episode's conversation: the messages, and the text its tokens decode to."""

    def __init__(self, fmt: ChatFormat, observation: Observation,
                 system_prompt: str | None) -> None:  # fmt: skip
        self.fmt = fmt
        self.tools = list(observation.tools)
        traits = fmt.traits
        self.messages = first_messages(observation, system_prompt,
                                       describe_tools=not traits.native_tools,
                                       system_role=traits.system_role)  # fmt: skip
        self.text = fmt.render(self.messages, generation_prompt=True, tools=self.tools)
        self.prompt_ids = fmt.encode(self.text)
        self._content_end = len(self.text)  # where the latest assistant content ends in `text`
        self._stop_text = ""  # the model's own end-of-turn token, when it wrote one

    def add_assistant(self, token_ids: Sequence[int]) -> str:
        """Record the engine's tokens for a turn; returns the message content (the decoded tokens
        without the final end-of-turn token)."""
        ended = bool(token_ids) and token_ids[-1] in self.fmt.traits.stop_ids
        body = token_ids[:-1] if ended else token_ids
        content = self.fmt.decode(body)
        self._stop_text = self.fmt.decode(token_ids[-1:]) if ended else ""
        self.text += content
        self._content_end = len(self.text)
        self.text += self._stop_text
        self.messages.append({"role": "assistant", "content": content})
        return content

    def add_observation(self, new: Sequence[Message]) -> Delta:
        """Append observation messages; returns the delta to append to the token ids."""
        full = self.fmt.render([*self.messages, *new], generation_prompt=True, tools=self.tools)
        covered = self.text[: self._content_end]
        if full.startswith(covered):
            rest, incremental = full[len(covered) :], True
        else:
            self.fmt.warn_fallback()
            rest = self.fmt.traits.end_of_turn + self.fmt.render_new(new, self.tools)
            incremental = False
        # The model's end-of-turn token is already in the tokens; a different stop token (a
        # stop string, another eos) stays, and the template's own marker follows it.
        if self._stop_text and rest.startswith(self._stop_text):
            rest = rest[len(self._stop_text) :]
        self.messages.extend(new)
        self.text += rest
        self._content_end = len(self.text)
        self._stop_text = ""
        return Delta(self.fmt.encode(rest), rest, incremental)
