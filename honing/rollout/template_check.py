"""`honing check-template MODEL`: is a chat template safe for multi-turn, token-faithful rollouts?

    report = check_template(tokenizer)          # or check_model("default", chat_template=None)
    print(report.text()); report.ok

Renders a representative tool-using conversation the way the agent loop builds it and checks
four things: each rendering is a prefix of the next, tokenizing the whole equals tokenizing the
pieces, the end-of-turn token is the eos, and how the tools reach the model (docs/rollout.md,
"The modules in detail"). Each failed check says what breaks and the fix. Not covered: whether
the model was *trained* on this format (only its outputs tell), and templates that need extra
kwargs (documents, …).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from honing.envs.base import Observation, ToolResult, tool_schema
from honing.errors import ConfigError
from honing.rollout.chat import (
    ChatFormat,
    Message,
    TemplateTraits,
    first_messages,
    observation_messages,
)

TOOLS = [
    tool_schema("calculator", "Evaluate an arithmetic expression exactly.",
                {"expression": {"type": "string"}}, ["expression"]),
    tool_schema("answer", "Submit the final answer.", {"value": {"type": "string"}}, ["value"]),
]  # fmt: skip
ASSISTANT_TURNS = [
    '<tool_call>{"name": "calculator", "arguments": {"expression": "17*23"}}</tool_call>',
    "<think>\n17*23 = 391; the task asks for one more.\n</think>\n"
    '<tool_call>{"name": "calculator", "arguments": {"expression": "391+1"}}</tool_call>',
    '<think>\nDone.\n</think>\n<tool_call>{"name": "answer", "arguments": {"value": "392"}}'
    "</tool_call>",
]
RESULTS = ["17*23 = 391", "391+1 = 392"]
RERENDER_FIX = (
    "this template re-renders earlier turns once more messages follow ({what}), so a multi-turn "
    "trajectory would not be a prefix of its own full rendering: use honing's incremental "
    "rendering (the default: each observation is rendered as a delta and earlier tokens are kept "
    "as generated) or pass a corrected template with --chat-template FILE"
)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class TemplateReport:
    model: str
    traits: TemplateTraits
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failed(self, name: str) -> bool:
        return any(c.name == name and not c.ok for c in self.checks)

    def text(self) -> str:
        lines = [f"chat template of {self.model}:"]
        for c in self.checks:
            lines.append(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}")
            if c.fix:
                lines.append(f"         fix: {c.fix}")
        lines.append("template is fine for multi-turn rollouts" if self.ok else
                     "template has problems (see the fixes above)")  # fmt: skip
        return "\n".join(lines)


def conversation(traits: TemplateTraits) -> list[Message]:
    """The representative conversation, as the agent loop would build it for this template."""
    task = Observation(text="Goal: What is 17*23, plus one?", tools=TOOLS)
    messages = first_messages(task, None, describe_tools=not traits.native_tools,
                              system_role=traits.system_role)  # fmt: skip
    for i, turn in enumerate(ASSISTANT_TURNS):
        messages.append({"role": "assistant", "content": turn})
        if i < len(RESULTS):
            result = ToolResult(call_id=f"call_{i}_0", name="calculator", content=RESULTS[i],
                                ok=True)  # fmt: skip
            observed = Observation(text=f"Goal: What is 17*23, plus one?\n\nDone so far: {i + 1} "
                                   "calculator calls", tool_results=[result])  # fmt: skip
            messages.extend(observation_messages(observed, tool_role=traits.tool_role))
    return messages


def check_template(tokenizer: Any, *, chat_template: str | None = None,
                   model: str = "") -> TemplateReport:  # fmt: skip
    """Check `tokenizer`'s chat template (or `chat_template`, a Jinja source, instead)."""
    fmt = ChatFormat(tokenizer, chat_template=chat_template)
    messages = conversation(fmt.traits)
    renders = _renders(fmt, messages)
    prefix = _check_prefix(renders)
    checks = [prefix]
    if prefix.ok:  # the token check compares the pieces of prefix-preserving renderings
        checks.append(_check_tokens(fmt, renders))
    checks += [_check_end_of_turn(fmt), _check_tools(fmt.traits)]
    return TemplateReport(model or getattr(tokenizer, "name_or_path", ""), fmt.traits, checks)


def check_model(spec: str, *, chat_template: str | Path | None = None) -> TemplateReport:
    """`honing check-template MODEL [--chat-template FILE]`: a model name or directory."""
    from honing.rollout.models import load_tokenizer, resolve_model

    source = None
    if chat_template is not None:
        path = Path(chat_template)
        if not path.is_file():
            raise ConfigError(f"--chat-template {path}: no such file")
        source = path.read_text()
    return check_template(load_tokenizer(resolve_model(spec)), chat_template=source, model=spec)


@dataclass(frozen=True)
class _Render:
    label: str  # "messages 1-3 + generation prompt"
    text: str


def _renders(fmt: ChatFormat, messages: list[Message]) -> list[_Render]:
    """The renderings in the order a rollout produces them: each prefix of the conversation,
    with the generation prompt right before each assistant message."""
    out: list[_Render] = []
    for k in range(1, len(messages) + 1):
        prompts = (
            [False, True] if k < len(messages) and messages[k]["role"] == "assistant" else [False]
        )
        for generation_prompt in prompts:
            text = fmt.render(messages[:k], generation_prompt=generation_prompt, tools=TOOLS)
            out.append(_Render(_label(messages, k, generation_prompt), text))
    return out


def _label(messages: list[Message], k: int, generation_prompt: bool) -> str:
    roles = ", ".join(m["role"] for m in messages[:k])
    return f"[{roles}]" + (" + generation prompt" if generation_prompt else "")


def _check_prefix(renders: list[_Render]) -> Check:
    for before, after in itertools.pairwise(renders):
        if after.text.startswith(before.text):
            continue
        at = _first_difference(before.text, after.text)
        what = (
            f"rendering {before.label} is not a prefix of {after.label}: at character {at} it "
            f"had {before.text[at : at + 40]!r} but then {after.text[at : at + 40]!r}"
        )
        return Check("prefix", False, what, RERENDER_FIX.format(what=_rerender_kind(before, after)))
    return Check("prefix", True, f"each of {len(renders)} renderings extends the previous one")


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))  # fmt: skip


def _rerender_kind(before: _Render, after: _Render) -> str:
    gone = [t for t in ASSISTANT_TURNS if t in before.text and t not in after.text]
    if not gone:
        return "it changes an earlier message's rendering"
    if all(t.split("</think>")[-1].strip() in after.text for t in gone if "</think>" in t) and any(
        "</think>" in t for t in gone
    ):
        return "it strips reasoning from earlier assistant turns"
    return "it drops or rewrites earlier assistant turns: their content or tool calls"


def _check_tokens(fmt: ChatFormat, renders: list[_Render]) -> Check:
    incremental: list[int] = []
    covered = ""
    for r in renders:
        incremental += fmt.encode(r.text[len(covered) :])
        covered = r.text
    whole = fmt.encode(covered)
    if whole == incremental:
        return Check("tokens", True, f"{len(whole)} tokens, identical whole and turn by turn")
    at = _first_difference(whole, incremental)
    return Check(
        "tokens", False,
        f"tokenizing the whole conversation differs from tokenizing it turn by turn at token {at}: "
        f"{fmt.decode(whole[at:at + 4])!r} vs {fmt.decode(incremental[at:at + 4])!r} (a merge "
        "across a turn boundary)",
        "honing keeps the engine's tokens and tokenizes only each new delta, so its trajectories "
        "are unaffected; anything that re-tokenizes the text (SFT on the text, a server without "
        "token ids) will see different tokens: make the template end each turn with a special "
        "token or a newline the tokenizer does not merge",
    )  # fmt: skip


def _check_end_of_turn(fmt: ChatFormat) -> Check:
    marker_text = fmt.traits.end_of_turn
    tokenizer = fmt.tokenizer
    if not marker_text:
        return Check("end of turn", False, "the template writes nothing after an assistant "
                     "message, so nothing marks where a turn ends",
                     "close assistant messages with the model's end-of-turn token")  # fmt: skip
    marker = fmt.encode(marker_text)[0]
    name = fmt.decode([marker])
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    if marker not in special:
        return Check("end of turn", False, f"the assistant message ends with {marker_text!r}, "
                     "which does not start with a special token",
                     "close assistant messages with the model's end-of-turn token")  # fmt: skip
    eos = tokenizer.eos_token_id
    if marker != eos:
        eos_name = fmt.decode([eos]) if eos is not None else "none"
        return Check(
            "end of turn", False,
            f"the end-of-turn token {name!r} is not the eos token ({eos_name!r}): generation "
            "would run past the end of the turn",
            f"set eos_token to {name!r} (tokenizer_config.json / generation_config.json) or add "
            f"{name!r} to the engine's stop tokens",
        )  # fmt: skip
    return Check("end of turn", True, f"assistant turns end with {name!r}, the eos token")


def _check_tools(traits: TemplateTraits) -> Check:
    if traits.native_tools:
        how = "the template renders tools= itself"
    elif traits.system_role:
        how = "the template ignores tools=; honing's system prompt lists them and the call format"
    else:
        how = ("the template has neither tools= nor a system role; honing lists the tools in the "
               "first user message")  # fmt: skip
    results = (
        "tool results are 'tool' messages"
        if traits.tool_role
        else "no tool role: tool results are 'user' messages prefixed 'Tool result (name):'"
    )
    return Check("tools", True, f"{how}; {results}")
