"""Smoke run of benchmarks/speculative.py on the tiny random Llama: both sides decode the
tool-call and code-edit turns, the greedy outputs are compared, and the last line has the
format; the turns are rendered with the chat template. No timing is asserted."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_scripts import load_benchmark

from honing.rollout.models import load_tokenizer

LAST_LINE = re.compile(
    r"speculative: plain [\d.]+ tok/s; speculative [\d.]+ tok/s; speedup [\d.]+x; "
    r"acceptance \d+%"
)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("speculative")


def test_the_last_line(bench: ModuleType) -> None:
    assert bench.last_line(10.0, 25.0, 0.4321) == (
        "speculative: plain 10.0 tok/s; speculative 25.0 tok/s; speedup 2.5x; acceptance 43%"
    )


def test_the_turns_repeat_their_prompts(bench: ModuleType, smol_dir: Path) -> None:
    tokenizer = load_tokenizer(smol_dir)
    tools = [tokenizer.decode(p) for p in bench.tool_call_turns(tokenizer)]
    edits = [tokenizer.decode(p) for p in bench.code_edit_turns(tokenizer)]
    assert len(tools) == len(bench.TOOL_ASKS) and len(edits) == len(bench.EDITS)
    assert all("search_flights" in t and "<tool_call>" in t for t in tools)
    assert all("```python\ndef " in e for e in edits)
    assert all(t.endswith("<|im_start|>assistant\n") for t in [*tools, *edits])


def test_a_tiny_run_prints_its_line(
    bench: ModuleType, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench.main(["--model", str(tiny_model_dir), "--turns", "1", "--max-new-tokens", "6",
                "--repeat", "1"])  # fmt: skip
    lines = capsys.readouterr().out.strip().splitlines()
    assert LAST_LINE.fullmatch(lines[-1]), lines[-1]
    assert lines[-2] == "greedy outputs identical: 2/2 turns"
    assert [line.split(":")[0] for line in lines[-4:-2]] == ["tool-call", "code-edit"]
