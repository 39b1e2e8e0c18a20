"""The chat format: parsing tool calls, and rendering turns token-faithfully with real templates."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from honing.domains.math.env import TOOLS
from honing.envs.base import Action, MalformedAction, Observation, ToolResult
from honing.errors import ConfigError
from honing.rollout.chat import CALL_FORMAT, ChatFormat, observation_messages, parse_action
from honing.rollout.models import load_tokenizer

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "17*23"}}</tool_call>'
TASK = Observation(text="Goal: What is 17*23?", tools=TOOLS)

# ChatML with native tools and a tool role, in the manner of Qwen2.5's template.
NATIVE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>\n"
    'Call a tool with <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% elif m.role != 'system' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# SmolLM2's template, except that assistant turns lose their content once another message
# follows (as templates that strip reasoning or re-render tool calls do).
DROPS_EARLIER_ASSISTANT = (
    "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}"
    "{{ '<|im_start|>assistant\n<|im_end|>\n' }}{% else %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


def engine_tokens(tok: Any, text: str, *, eos: bool = True) -> list[int]:
    """What a token engine answers for `text`: its tokens, then eos unless cut off."""
    return list(tok.encode(text, add_special_tokens=False)) + ([tok.eos_token_id] if eos else [])


def step_result(content: str, state: str = "Goal: What is 17*23?") -> Observation:
    return Observation(text=state, tools=TOOLS,
                       tool_results=[ToolResult(call_id="call_0_0", name="calculator",
                                                content=content, ok=True)])  # fmt: skip


# -- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "calls", "content"),
    [
        (CALL, [("calculator", {"expression": "17*23"})], ""),
        (
            "Let me compute.\n" + CALL + '\n<tool_call>{"name": "answer", "arguments": '
            '{"value": "391"}}</tool_call>',
            [("calculator", {"expression": "17*23"}), ("answer", {"value": "391"})],
            "Let me compute.",
        ),
        ('{"name": "answer", "arguments": {"value": "391"}}', [("answer", {"value": "391"})], ""),
        ('```json\n{"name": "run_tests", "arguments": {}}\n```', [("run_tests", {})], ""),
        (
            '[{"name": "a", "parameters": {"x": 1}}, {"name": "b"}]',
            [("a", {"x": 1}), ("b", {})],
            "",
        ),
        (  # arguments encoded twice, as in OpenAI's wire format
            '<tool_call>{"name": "f", "arguments": "{\\"x\\": 2}"}</tool_call>',
            [("f", {"x": 2})],
            "",
        ),
        ("```python\ndef f():\n    return 1\n```", [], "```python\ndef f():\n    return 1\n```"),
        ("So the answer is \\boxed{391}.", [], "So the answer is \\boxed{391}."),
        ('{"answer": 391}', [], '{"answer": 391}'),  # JSON, but not a call
    ],
)
def test_parse_action(text: str, calls: list[tuple[str, dict[str, Any]]], content: str) -> None:
    action = parse_action(text, call_prefix="call_3")
    assert [(c.name, c.arguments) for c in action.tool_calls] == calls
    assert action.content == content
    assert [c.id for c in action.tool_calls] == [f"call_3_{i}" for i in range(len(calls))]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}</tool_call>',
         r"tool call 1: not valid JSON \(Expecting ',' delimiter"),
        (CALL + '<tool_call>{"arguments": {}}</tool_call>', r'tool call 2: needs "name"'),
        ('<tool_call>{"name": "answer", "arguments": ["391"]}</tool_call>',
         r'tool call 1 \(answer\): "arguments" must be a JSON object, not \["391"\]'),
        ("<tool_call>[1, 2]</tool_call>", "tool call 1: must be a JSON object .* not a list"),
        ('<tool_call>{"name": "answer", "argu', "tool call 1: <tool_call> is not closed"),
        ('{"name": "answer", "arguments": {"value": 3}', "tool call 1: not valid JSON"),
    ],
)  # fmt: skip
def test_parse_action_says_what_is_malformed(text: str, message: str) -> None:
    with pytest.raises(MalformedAction, match=message):
        parse_action(text)


HUGE = "9" * 5000  # json.loads raises a plain ValueError past Python's 4,300-digit limit
DEEP = "[" * 5000 + "]" * 5000  # and RecursionError past its recursion limit
DIGITS = "Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f'<tool_call>{{"name": "answer", "arguments": {{"value": {HUGE}}}}}</tool_call>',
         f"tool call 1: not valid JSON ({DIGITS}): "),
        (f'<tool_call>{{"name": "answer", "arguments": "{{\\"value\\": {HUGE}}}"}}</tool_call>',
         f"tool call 1 (answer): arguments are not JSON: {DIGITS}"),
        (f'{{"name": "answer", "arguments": {{"value": {HUGE}}}}}',  # a bare call
         f"tool call 1: not valid JSON ({DIGITS}): "),
        (f'<tool_call>{{"name": "answer", "arguments": {{"value": {DEEP}}}}}</tool_call>',
         "tool call 1: not valid JSON (nested too deep (maximum recursion depth exceeded"),
    ],
)  # fmt: skip
def test_json_past_pythons_limits_is_a_malformed_action(text: str, message: str) -> None:
    with pytest.raises(MalformedAction) as caught:
        parse_action(text)
    assert str(caught.value).startswith(message)


def test_json_past_pythons_limits_not_meant_as_a_call_is_text() -> None:
    text = f'{{"name": "n", "value": {HUGE}}}'  # no "arguments", like '{"answer": 391}' above
    assert parse_action(text) == Action(content=text)


# -- SmolLM2's template -------------------------------------------------------------------------


def test_smollm2_template_gets_tools_in_the_system_prompt(tok: Any) -> None:
    fmt = ChatFormat.of(tok)
    assert ChatFormat.of(tok) is fmt  # detected once per tokenizer
    traits = fmt.traits
    assert not traits.native_tools and not traits.tool_role and traits.system_role
    assert traits.end_of_turn == "<|im_end|>\n" and traits.stop_ids == {tok.eos_token_id}
    transcript = fmt.start(TASK, system_prompt="Solve it.")
    system = transcript.messages[0]["content"]
    assert system.startswith("Solve it.\n\n") and CALL_FORMAT in system
    assert '"name": "calculator"' in system and '"name": "answer"' in system
    assert transcript.messages[1] == {"role": "user", "content": TASK.text}
    assert tok.decode(transcript.prompt_ids) == transcript.text
    assert transcript.text.endswith("<|im_start|>assistant\n")


def test_smollm2_turns_are_appended_as_deltas(tok: Any) -> None:
    fmt = ChatFormat.of(tok)
    transcript = fmt.start(TASK)
    ids = list(transcript.prompt_ids)
    model = engine_tokens(tok, CALL)
    assert transcript.add_assistant(model) == CALL  # the eos is not part of the content
    ids += model
    delta = transcript.add_observation(observation_messages(step_result("17*23 = 391"),
                                                            tool_role=False))  # fmt: skip
    assert delta.incremental and delta.text.startswith("\n<|im_start|>user\nTool result (calc")
    assert "<|im_end|>" not in delta.text[:2]  # the model's own eos closed its turn
    ids += delta.token_ids
    cut = engine_tokens(tok, "The answer is 39", eos=False)  # cut off by a length limit
    transcript.add_assistant(cut)
    ids += cut
    delta = transcript.add_observation(observation_messages(step_result("x"), tool_role=False))
    assert delta.text.startswith("<|im_end|>\n") and delta.token_ids[0] == tok.eos_token_id
    ids += delta.token_ids
    full = tok.apply_chat_template(transcript.messages, tokenize=False, add_generation_prompt=True)
    # Nothing re-tokenized, yet the tokens are exactly the template's rendering of it all.
    assert tok.decode(ids) == full == transcript.text
    assert ids[: len(transcript.prompt_ids)] == transcript.prompt_ids


def test_an_agent_that_does_not_restate_shows_only_what_changed() -> None:
    result = Observation(text="Goal: What is 17*23?\n\nDone so far: ...", update="",
                         tool_results=[ToolResult(call_id="c", name="calculator",
                                                  content="17*23 = 391", ok=True)])  # fmt: skip
    [whole] = observation_messages(result, tool_role=False)
    [short] = observation_messages(result, tool_role=False, restate=False)
    assert whole["content"].endswith("Done so far: ...")
    assert short["content"] == "Tool result (calculator):\n17*23 = 391"
    assert [m["role"] for m in observation_messages(result, tool_role=True, restate=False)] == [
        "tool"
    ]
    erred = result.model_copy(update={"update": "Latest errors:\n- x", "tool_results": []})
    assert observation_messages(erred, tool_role=True, restate=False) == [
        {"role": "user", "content": "Latest errors:\n- x"}
    ]


# -- other templates ----------------------------------------------------------------------------


def test_native_tools_and_tool_role(tok: Any) -> None:
    fmt = ChatFormat(tok, chat_template=NATIVE)
    assert fmt.traits.native_tools and fmt.traits.tool_role
    transcript = fmt.start(TASK)
    assert CALL_FORMAT not in transcript.text  # the template describes its own call format
    assert "# Tools\n<tools>" in transcript.text and '"name": "calculator"' in transcript.text
    ids = list(transcript.prompt_ids)
    model = engine_tokens(tok, CALL)
    transcript.add_assistant(model)
    ids += model
    new = observation_messages(step_result("17*23 = 391", "Goal: state"), tool_role=True)
    assert [m["role"] for m in new] == ["tool", "user"] and new[0]["tool_call_id"] == "call_0_0"
    delta = transcript.add_observation(new)
    assert delta.incremental
    assert delta.text == ("\n<|im_start|>user\n<tool_response>\n17*23 = 391\n</tool_response>"
                          "<|im_end|>\n<|im_start|>user\nGoal: state<|im_end|>\n"
                          "<|im_start|>assistant\n")  # fmt: skip
    ids += delta.token_ids
    assert tok.decode(ids) == fmt.render(transcript.messages, generation_prompt=True, tools=TOOLS)


def test_template_that_rerenders_earlier_turns_falls_back_to_deltas(
    tok: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fmt = ChatFormat(tok, chat_template=DROPS_EARLIER_ASSISTANT)
    transcript = fmt.start(TASK)
    ids = list(transcript.prompt_ids)
    model = engine_tokens(tok, CALL)
    transcript.add_assistant(model)
    ids += model
    new = observation_messages(step_result("17*23 = 391"), tool_role=False)
    with caplog.at_level(logging.WARNING, logger="honing.rollout.chat"):
        delta = transcript.add_observation(new)
        transcript.add_assistant(engine_tokens(tok, "ok"))
        transcript.add_observation(new)
    assert not delta.incremental
    assert sum("not prefix-preserving" in r.getMessage() for r in caplog.records) == 1
    # the rest of the end-of-turn marker, then the new messages as the template renders them
    assert delta.text == "\n" + fmt.render(new, generation_prompt=True)
    ids += delta.token_ids
    # The model's call stays in the tokens, though a full re-render would drop it.
    assert CALL in tok.decode(ids)
    assert CALL not in fmt.render(transcript.messages, generation_prompt=True)
    assert tok.decode(ids) == transcript.text[: len(tok.decode(ids))]


def test_a_tokenizer_without_a_template_is_refused(tok: Any) -> None:
    class Bare:
        chat_template = None
        eos_token_id = tok.eos_token_id

    with pytest.raises(ConfigError, match="no chat template"):
        ChatFormat(Bare())
