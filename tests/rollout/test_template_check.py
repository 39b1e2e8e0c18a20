"""check-template: SmolLM2's template passes; templates that break multi-turn rollouts fail with
the reason and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from honing.errors import ConfigError
from honing.rollout.models import load_tokenizer
from honing.rollout.template_check import check_model, check_template

ROW = "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
GEN = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
# Drops the content of every assistant turn but the last (as templates that re-render tool
# calls do).
DROPS_EARLIER_ASSISTANT = (
    "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}"
    "{{ '<|im_start|>assistant\n<|im_end|>\n' }}{% else %}" + ROW + "{% endif %}{% endfor %}" + GEN
)
# Strips <think>…</think> from earlier assistant turns (as Qwen3's template does).
STRIPS_REASONING = (
    "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last "
    "and '</think>' in m['content'] %}"
    "{{ '<|im_start|>assistant\n' + m['content'].split('</think>')[-1].lstrip() + '<|im_end|>\n' }}"
    "{% else %}" + ROW + "{% endif %}{% endfor %}" + GEN
)
# Ends assistant turns with a marker that is not the eos token.
WRONG_EOS = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' + m['content'] + '<|endoftext|>\n' }}"
    "{% else %}" + ROW + "{% endif %}{% endfor %}" + GEN
)


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


def test_smollm2_template_passes(tok: Any) -> None:
    report = check_template(tok, model="smol")
    assert report.ok, report.text()
    assert [c.name for c in report.checks] == ["prefix", "tokens", "end of turn", "tools"]
    assert "honing's system prompt lists them" in report.text()
    assert report.text().endswith("template is fine for multi-turn rollouts")


def test_template_dropping_earlier_assistant_turns_fails_with_the_fix(tok: Any) -> None:
    report = check_template(tok, chat_template=DROPS_EARLIER_ASSISTANT, model="broken")
    assert not report.ok and report.failed("prefix")
    [prefix] = [c for c in report.checks if c.name == "prefix"]
    assert "[system, user, assistant] is not a prefix of [system, user, assistant, user]" in (
        prefix.detail
    )
    assert "drops or rewrites earlier assistant turns" in prefix.fix
    assert "honing's incremental rendering" in prefix.fix and "--chat-template FILE" in prefix.fix
    assert "FAIL] prefix" in report.text()


def test_template_stripping_reasoning_is_named_as_such(tok: Any) -> None:
    report = check_template(tok, chat_template=STRIPS_REASONING)
    [prefix] = [c for c in report.checks if c.name == "prefix"]
    assert not prefix.ok and "strips reasoning from earlier assistant turns" in prefix.fix


def test_end_of_turn_that_is_not_eos_fails(tok: Any) -> None:
    report = check_template(tok, chat_template=WRONG_EOS)
    assert report.failed("end of turn") and not report.failed("prefix")
    [check] = [c for c in report.checks if c.name == "end of turn"]
    assert "'<|endoftext|>' is not the eos token ('<|im_end|>')" in check.detail
    assert "set eos_token to '<|endoftext|>'" in check.fix


def test_check_model_reads_a_template_file(tiny_model_dir: Path, tmp_path: Path) -> None:
    fixed = tmp_path / "template.jinja"
    fixed.write_text(DROPS_EARLIER_ASSISTANT)
    assert check_model(str(tiny_model_dir)).ok
    assert not check_model(str(tiny_model_dir), chat_template=fixed).ok
    with pytest.raises(ConfigError, match="no such file"):
        check_model(str(tiny_model_dir), chat_template=tmp_path / "missing.jinja")
