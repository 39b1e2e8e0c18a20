"""Smoke run of benchmarks/grpo_vs_trl.py on the tiny random Llama: trl's GRPOTrainer and honing
each take one real step (full fine-tune; LoRA too under `-m slow`), and the script prints its
ratio line last. The shared reward function is checked on hand-written completions. No timing is
asserted."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_scripts import load_benchmark

LAST_LINE = re.compile(r"grpo step: trl (\d+\.\d\d) s; honing (\d+\.\d\d) s; speedup (\d+\.\d)x")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("grpo_vs_trl")


def test_the_shared_reward(bench: ModuleType) -> None:
    reward = bench.multiplication_reward(
        [
            "12 * 34 = 408",  # right: the last number is the product
            [{"role": "assistant", "content": "It is 1,408"}],  # trl's conversational form
            "408 is not it, 407",  # wrong: only the last number counts
            "no idea",
        ],
        [408, 1408, 408, 408],
    )
    expected = [
        1 + 0.1 - 0.002 * 13,
        1 + 0.1 - 0.002 * 11,
        0 + 0.1 - 0.002 * 18,
        0 + 0.0 - 0.002 * 7,
    ]
    assert reward == pytest.approx(expected)


# trl's own FutureWarning (it calls a transformers method renamed in 5.x), not ours.
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
@pytest.mark.parametrize("lora", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_one_step_each_prints_the_ratio_last(
    bench: ModuleType,
    tiny_model_dir: Path,
    lora: bool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("trl", reason="trl is not installed: pip install -e '.[bench]'")
    argv = ["--model", str(tiny_model_dir), "--steps", "1", "--warmup", "0", "--seed", "1",
            "--max-new-tokens", "8"]  # fmt: skip
    bench.main([*argv, "--lora"] if lora else argv)
    lines = capsys.readouterr().out.strip().splitlines()
    match = LAST_LINE.fullmatch(lines[-1])
    assert match, lines[-1]
    for side in ("trl", "honing"):  # each step shows its work: tokens generated and trained
        [step] = [line for line in lines if line.startswith(f"{side} step 1/1:")]
        work = re.search(r"(\d+) tokens generated, (\d+) trained", step)
        assert work, step
        generated, trained = (int(g) for g in work.groups())
        assert 0 < trained <= generated <= 16 * 8, step
    trl_s, honing_s, speedup = (float(g) for g in match.groups())
    assert trl_s > 0 and honing_s > 0
    assert speedup == pytest.approx(trl_s / honing_s, rel=0.05, abs=0.06)
    assert ("LoRA r 16" if lora else "full fine-tune") in lines[0]
    for side in ("trl", "honing"):
        [step] = [line for line in lines if line.startswith(f"{side} step 1/1: ")]
        assert re.search(r"reward mean [+-]\d\.\d{3}, \d+/16 correct", step), step
