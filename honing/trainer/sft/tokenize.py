"""SFT examples as tokens: rendered exactly as the agent loop renders, with the loss mask.

    seq = tokenize_example(example, ChatFormat.of(tokenizer))  # SftSequence: ids + mask
    sequences = tokenize_all(examples, fmt, max_seq_len=2048, overlong="error")

Covered: the messages the agent would have shown the model for an example (`agent_messages`:
its system prompt, `<tool_call>` text or native tool calls, tool results), tokenising turn by
turn with mask 1 on assistant tokens and the end-of-turn token that closes them (0 on an
assistant message of `weight` 0, kept as context), the check that
the template is prefix-preserving, and the `overlong` policy (docs/training.md, "The modules in
detail"). Not covered: reading or checking rows (`honing.trainer.sft.data`), packing several
examples into one row, training (`update`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from honing.envs.base import Observation, ToolResult
from honing.errors import ConfigError
from honing.rollout.chat import ChatFormat, Message, observation_messages, system_message
from honing.trainer.sft.data import MAX_PROBLEMS_SHOWN, ChatExample, ChatMessage, ChatToolCall

log = logging.getLogger(__name__)


def tool_call_text(calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, one a line: the call
    format honing's system prompt asks for and `parse_action` reads."""
    return "\n".join(
        "<tool_call>"
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + "</tool_call>"
        for name, arguments in calls
    )


def agent_messages(example: ChatExample, fmt: ChatFormat) -> list[Message]:
    """The messages the agent loop would render for `example` with `fmt`'s template (see the
    module docstring)."""
    traits = fmt.traits
    messages = list(example.messages)
    system: str | None = None
    if messages[0].role == "system":
        system = messages.pop(0).content
    if example.tools:
        system = system_message(example.tools, system, not traits.native_tools)
    out: list[Message] = []
    results: list[ChatMessage] = []  # tool messages waiting to be shown in a user message
    for m in messages:
        if m.role == "tool" and not traits.tool_role:
            results.append(m)
            continue
        if results:
            out.append(_results_message(results, m.content if m.role == "user" else None))
            results = []
            if m.role == "user":  # the task state after the results: in the same message
                continue
        out.append(_message(m, traits.native_tools))
    if results:
        out.append(_results_message(results, None))
    if system:
        if traits.system_role:
            out.insert(0, {"role": "system", "content": system})
        elif out and out[0]["role"] == "user":
            out[0] = {**out[0], "content": f"{system}\n\n{out[0]['content']}"}
        else:
            out.insert(0, {"role": "user", "content": system})
    return out


def _results_message(results: list[ChatMessage], user_text: str | None) -> Message:
    """Tool results as one user message, as the agent shows them to a template without a tool
    role (`observation_messages`), with the user message that follows them, if any."""
    shown = [ToolResult(call_id=r.tool_call_id or "", name=r.name or "tool", content=r.content,
                        ok=True) for r in results]  # fmt: skip
    if user_text is not None:
        observation = Observation(text=user_text, tool_results=shown)
        [message] = observation_messages(observation, tool_role=False)
        return message
    return {"role": "user", "content": "\n\n".join(f"Tool result ({r.name}):\n{r.content}"
                                                    for r in shown)}  # fmt: skip


def _arguments(call: ChatToolCall) -> dict[str, Any]:
    args = call.function.arguments
    value = json.loads(args or "{}") if isinstance(args, str) else args
    assert isinstance(value, dict)  # checked when the row was read
    return value


def _message(m: ChatMessage, native_tools: bool) -> Message:
    if m.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": m.tool_call_id or "",
            "name": m.name or "",
            "content": m.content,
        }
    if m.role != "assistant" or not m.tool_calls:
        return {"role": m.role, "content": m.content}
    if native_tools:
        calls = [
            {
                "id": c.id or f"call_{i}",
                "type": "function",
                "function": {"name": c.function.name, "arguments": _arguments(c)},
            }
            for i, c in enumerate(m.tool_calls)
        ]
        return {"role": "assistant", "content": m.content, "tool_calls": calls}
    text = tool_call_text([(c.function.name, _arguments(c)) for c in m.tool_calls])
    return {"role": "assistant", "content": f"{m.content}\n{text}" if m.content else text}


@dataclass(frozen=True, slots=True)
class SftSequence:
    """One tokenised example: `loss_mask[i]` is 1 when token i is an assistant token."""

    token_ids: list[int]
    loss_mask: list[int]
    source: str = ""

    @property
    def tokens(self) -> int:
        return sum(self.loss_mask)


def tokenize_example(example: ChatExample, fmt: ChatFormat) -> SftSequence:
    """Token ids and the assistant-only loss mask (see the module docstring); ConfigError when
    the template is not prefix-preserving."""
    messages = agent_messages(example, fmt)
    weights = iter([m.weight for m in example.messages if m.role == "assistant"])
    tools = example.tools
    ids: list[int] = []
    mask: list[int] = []
    covered = ""  # the text that `ids` decode to
    end_of_turn = fmt.traits.end_of_turn
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        weight = next(weights)  # assistant messages render one to one, in order
        before = fmt.render(messages[:i], generation_prompt=True, tools=tools) if i else ""
        after = fmt.render(messages[: i + 1], generation_prompt=False, tools=tools)
        if not before.startswith(covered) or not after.startswith(before):
            raise _not_prefix_preserving(example, i)
        turn = after[len(before) :]
        if not end_of_turn or not turn.endswith(end_of_turn):
            raise ConfigError(
                f"{example.source or 'an example'}: messages[{i}]: the chat template does not "
                f"close the assistant turn with its end-of-turn marker {end_of_turn!r}, so the "
                "end of the turn cannot be trained; run `honing check-template MODEL`"
            )
        body = turn[: len(turn) - len(end_of_turn)]
        closer = fmt.encode(end_of_turn)
        stop = next((k for k, t in enumerate(closer) if t in fmt.traits.stop_ids), None)
        closing = closer if stop is None else closer[: stop + 1]
        context = fmt.encode(before[len(covered) :])
        content = fmt.encode(body) + closing
        ids += context + content
        mask += [0] * len(context) + [weight] * len(content)
        covered = before + body + fmt.decode(closing)
    return SftSequence(ids, mask, example.source)


def _not_prefix_preserving(example: ChatExample, index: int) -> ConfigError:
    return ConfigError(
        f"{example.source or 'an example'}: the chat template renders the turns before "
        f"messages[{index}] differently once more messages follow (it is not prefix-preserving), "
        "so the assistant tokens cannot be found by rendering prefixes and would not match what "
        "the agent loop samples; run `honing check-template MODEL` to see how to fix the template"
    )


def tokenize_all(
    examples: Sequence[ChatExample],
    fmt: ChatFormat,
    *,
    max_seq_len: int,
    overlong: Literal["error", "truncate"] = "error",
) -> list[SftSequence]:
    """Every example tokenised, with the `overlong` policy applied (see the module docstring)."""
    sequences = [tokenize_example(e, fmt) for e in examples]
    long = [s for s in sequences if len(s.token_ids) > max_seq_len]
    if not long:
        return sequences
    if overlong == "error":
        listed = "\n".join(
            f"  {s.source or '?'}: {len(s.token_ids)} tokens" for s in long[:MAX_PROBLEMS_SHOWN]
        )
        raise ConfigError(
            f"{len(long)} example(s) are longer than max_seq_len={max_seq_len} tokens:\n{listed}\n"
            "raise max_seq_len, shorten them, or set overlong=truncate"
        )
    cut: list[SftSequence] = []
    lost = 0
    for s in sequences:
        if len(s.token_ids) <= max_seq_len:
            cut.append(s)
            continue
        kept = SftSequence(s.token_ids[:max_seq_len], s.loss_mask[:max_seq_len], s.source)
        if kept.tokens == 0:
            raise ConfigError(
                f"{s.source or 'an example'}: no assistant token within the first "
                f"max_seq_len={max_seq_len} tokens; raise max_seq_len or shorten the example"
            )
        lost += s.tokens - kept.tokens
        cut.append(kept)
    log.warning(
        "sft: %d example(s) truncated to max_seq_len=%d tokens; %d assistant tokens lost",
        len(long),
        max_seq_len,
        lost,
    )
    return cut
