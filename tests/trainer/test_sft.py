"""SFT on a tiny random Llama with SmolLM2's tokenizer: the assistant-only mask, data errors that
name file:line:field, prefix preservation, the loss really dropping, micro-batch equivalence, and
a whole run that saves a merged model the rollout layer loads."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from honing.config import load_yaml_model
from honing.errors import ConfigError
from honing.rollout.chat import ChatFormat
from honing.rollout.models import load_model, load_tokenizer, resolve_model
from honing.trainer.config import LearnerConfig, LoraSettings
from honing.trainer.learner import Learner
from honing.trainer.sft import (
    ChatExample,
    SftConfig,
    SftDataError,
    SftSequence,
    load_chat_data,
    parse_example,
    run_sft,
    sft_loss,
    sft_update,
    tokenize_all,
    tokenize_example,
)

END = "<|im_end|>"
EXPRESSION = {"type": "object", "properties": {"expression": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Arithmetic.",
          "parameters": EXPRESSION}}]  # fmt: skip
ROWS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "Say hello."},
                  {"role": "assistant", "content": "Hello!"}]},
    {"messages": [{"role": "system", "content": "Be terse."},
                  {"role": "user", "content": "Capital of France?"},
                  {"role": "assistant", "content": "Paris."},
                  {"role": "user", "content": "And of Italy?"},
                  {"role": "assistant", "content": "Rome."}]},
    {"messages": [{"role": "user", "content": "What is 347 * 86?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "type": "function", "function": {
                          "name": "calculator", "arguments": '{"expression": "347 * 86"}'}}]},
                  {"role": "tool", "tool_call_id": "c1", "name": "calculator",
                   "content": "347 * 86 = 29842"},
                  {"role": "user", "content": "Now answer."},
                  {"role": "assistant", "content": "29842"}],
     "tools": TOOLS},
    {"messages": [{"role": "user", "content": "Count to three."},
                  {"role": "assistant", "content": "one, two, three"}]},
]  # fmt: skip


def example(row: dict[str, Any], source: str = "t:1") -> ChatExample:
    found, problems = parse_example(row, source)
    assert found is not None, problems
    return found


@pytest.fixture(scope="module")
def fmt(tiny_model_dir: Path) -> ChatFormat:
    return ChatFormat.of(load_tokenizer(tiny_model_dir))


def runs(seq: SftSequence, fmt: ChatFormat) -> list[tuple[int, str]]:
    """(mask value, decoded text) of each run of equal mask values."""
    out = []
    pairs = zip(seq.token_ids, seq.loss_mask, strict=True)
    for value, group in itertools.groupby(pairs, key=lambda p: p[1]):
        out.append((value, fmt.decode([t for t, _ in group])))
    return out


def test_the_mask_covers_exactly_the_assistant_turns_and_their_end_of_turn(
    fmt: ChatFormat,
) -> None:
    seq = tokenize_example(example(ROWS[2]), fmt)
    trained = [text for value, text in runs(seq, fmt) if value]
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "347 * 86"}}</tool_call>'
    assert trained == [call + END, "29842" + END]
    # Everything else is context: the agent's system prompt with the tool described, the task,
    # the tool result shown as the agent shows it (SmolLM2's template has no tool role).
    context = "".join(text for value, text in runs(seq, fmt) if not value)
    assert "You can call these tools:" in context and '"name": "calculator"' in context
    assert "Tool result (calculator):\n347 * 86 = 29842\n\nNow answer." in context
    # Nothing after the last assistant turn; the whole is the template's rendering of it.
    assert fmt.decode(seq.token_ids).endswith("29842" + END)

    seq = tokenize_example(example(ROWS[1]), fmt)
    assert [text for value, text in runs(seq, fmt) if value] == ["Paris." + END, "Rome." + END]
    assert runs(seq, fmt)[2] == (0, "\n<|im_start|>user\nAnd of Italy?<|im_end|>\n"
                                    "<|im_start|>assistant\n")  # fmt: skip


def test_bad_rows_are_all_named_by_file_line_and_field(tmp_path: Path) -> None:
    good = json.dumps(ROWS[0])
    bad = [
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}]}',
        "{not json",
        '{"messages": [{"role": "user", "content": "hi"}]}',
        '{"messages": [{"role": "user", "content": "hi", "score": 1}, '
        '{"role": "assistant", "content": "x"}], "extra": 1}',
        '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": '
        '[{"function": {"name": "f", "arguments": "[1]"}}]}], '
        '"tools": [{"function": {"name": "f"}}]}',
    ]  # fmt: skip
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join([good, *bad]) + "\n")
    with pytest.raises(SftDataError) as caught:
        load_chat_data(str(data))
    text = str(caught.value)
    assert (
        f"{data}:2: field 'messages[1].role': must be one of system, user, assistant, tool" in text
    )
    assert f"{data}:3: not valid JSON" in text
    assert f"{data}:4: field 'messages': no assistant message" in text
    assert f"{data}:5: field 'messages[0].score': unknown field; allowed: role, content" in text
    assert f"{data}:5: field 'extra': unknown field; allowed: messages, tools, id" in text
    assert (
        f"{data}:6: field 'messages[1].tool_calls[0].function.arguments': must be a JSON " in text
    )
    assert len(caught.value.problems) == 6  # every problem, none dropped; the good row is fine
    assert f"{data}:1" not in text


def test_a_template_that_rewrites_earlier_turns_is_an_error_naming_check_template(
    tiny_model_dir: Path,
) -> None:
    # Earlier assistant turns are shortened once more follow (as reasoning-stripping templates do)
    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'assistant' and not loop.last %}{{ m.content[:3] }}"
        "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    fmt = ChatFormat(load_tokenizer(tiny_model_dir), chat_template=template)
    assert tokenize_example(example(ROWS[0]), fmt).tokens > 0  # one turn: nothing to rewrite
    with pytest.raises(ConfigError, match=r"not prefix-preserving.*honing check-template"):
        tokenize_example(example(ROWS[1], "data.jsonl:2"), fmt)


def test_overlong_examples_error_or_truncate_with_a_warning(
    fmt: ChatFormat, caplog: pytest.LogCaptureFixture
) -> None:
    examples = [example(r, f"d.jsonl:{i}") for i, r in enumerate(ROWS, start=1)]
    lengths = [len(tokenize_example(e, fmt).token_ids) for e in examples]
    limit = sorted(lengths)[1] + 1  # two examples fit, two do not
    with pytest.raises(ConfigError, match="2 example\\(s\\) are longer than max_seq_len"):
        tokenize_all(examples, fmt, max_seq_len=limit)
    longest = max(range(4), key=lambda i: lengths[i])
    cut_at = lengths[longest] - 3  # cuts into its last assistant turn, keeps earlier ones
    with caplog.at_level(logging.WARNING):
        seqs = tokenize_all(examples, fmt, max_seq_len=cut_at, overlong="truncate")
    assert max(len(s.token_ids) for s in seqs) == cut_at
    assert "truncated" in caplog.text


def learner_for(model_dir: Path, **config: Any) -> Learner:
    torch.manual_seed(0)
    return Learner(model_dir, LearnerConfig(**config))


def test_sft_steps_reduce_the_loss_on_the_training_examples(
    tiny_model_dir: Path, fmt: ChatFormat
) -> None:
    seqs = [tokenize_example(example(r), fmt) for r in (ROWS[0], ROWS[1], ROWS[3])]
    learner = learner_for(tiny_model_dir, lr=1e-2)
    before = sft_loss(learner, seqs)
    losses = [sft_update(learner, seqs).loss for _ in range(6)]
    after = sft_loss(learner, seqs)
    assert losses[0] == pytest.approx(before, rel=1e-4)  # the step's loss is the batch's mean CE
    assert after < 0.7 * before, (before, losses, after)
    assert learner.steps == learner.version == 6


def test_micro_batched_update_equals_one_batch(tiny_model_dir: Path, fmt: ChatFormat) -> None:
    seqs = [tokenize_example(example(r), fmt) for r in ROWS]
    one = learner_for(tiny_model_dir, micro_batch_tokens=100_000)
    many = learner_for(tiny_model_dir, micro_batch_tokens=1)  # a row per forward pass
    before = [p.detach().clone() for p in one.parameters]
    for learner in (one, many):  # plain SGD at lr 1: the weight change is the (clipped) gradient
        learner.optimizer = torch.optim.SGD(learner.parameters, lr=1.0)  # type: ignore[assignment]
        learner.scheduler = torch.optim.lr_scheduler.LambdaLR(learner.optimizer, lambda _: 1.0)
    a, b = sft_update(one, seqs), sft_update(many, seqs)
    assert (a.micro_batches, b.micro_batches) == (1, len(seqs))
    assert a.tokens == b.tokens == sum(s.tokens for s in seqs)
    assert a.loss == pytest.approx(b.loss, rel=1e-5)
    assert a.grad_norm == pytest.approx(b.grad_norm, rel=1e-5)
    for p0, p, q in zip(before, one.parameters, many.parameters, strict=True):
        assert not torch.equal(p, p0)
        torch.testing.assert_close(p - p0, q - p0, atol=1e-7, rtol=1e-4)


def test_run_sft_with_lora_saves_a_merged_model_the_rollout_layer_loads(
    tiny_model_dir: Path, fmt: ChatFormat, tmp_path: Path
) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    config = SftConfig(
        model=str(tiny_model_dir), data=str(data), out=tmp_path / "run", epochs=2, batch_size=3,
        learner=LearnerConfig(lr=1e-2, lora=LoraSettings(r=8)),
    )  # fmt: skip
    seen: list[int] = []
    result = run_sft(config, on_step=lambda s: seen.append(s.version))
    assert result.steps == 4 and seen == [1, 2, 3, 4]  # 2 batches (3 + 1) per epoch
    assert result.tokens == 2 * sum(tokenize_example(example(r), fmt).tokens for r in ROWS)
    assert result.model_dir == tmp_path / "run" / "model"
    assert json.loads((tmp_path / "run" / "sft.json").read_text())["result"]["steps"] == 4

    path = resolve_model(str(result.model_dir))
    trained = load_model(path, "float32")
    assert not any("lora" in name for name in trained.state_dict())
    base = load_model(tiny_model_dir, "float32").state_dict()
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(trained.state_dict()[q], base[q])  # the adapter is merged in
    assert load_tokenizer(path).chat_template == fmt.tokenizer.chat_template
    seqs = [tokenize_example(example(r), fmt) for r in ROWS]
    assert sft_loss(Learner(path, LearnerConfig()), seqs) < sft_loss(
        Learner(tiny_model_dir, LearnerConfig()), seqs
    )


def test_the_config_loads_from_yaml_with_overrides_and_names_a_misspelt_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sft.yaml"
    path.write_text("data: traces.jsonl\nepochs: 2\nlearner:\n  lr: 1.0e-4\n")
    config = load_yaml_model(path, SftConfig, ["learner.lora.r=8", "batch_size=4"])
    assert (config.epochs, config.batch_size, config.learner.lr) == (2, 4, 1e-4)
    assert config.learner.lora is not None and config.learner.lora.r == 8
    assert config.total_steps(9) == 2 * 3
    path.write_text("data: traces.jsonl\nepoch: 2\n")
    with pytest.raises(ConfigError, match="epoch"):
        load_yaml_model(path, SftConfig)
