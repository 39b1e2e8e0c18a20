"""benchmarks/generation.py's kernel ceiling: honing's own kernels timed alone (the decoder's
linears, its attention call, its prefill) on the tiny random Llama, and the throughput they
would allow. No timing is asserted."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from benchmark_scripts import load_benchmark

from honing.rollout.models import load_model


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("generation")


def test_the_ceiling_counts_the_prefill_once_and_every_step_whole(bench: ModuleType) -> None:
    ceiling = bench.Ceiling(linears_s=0.010, attention_s=0.005, prefill_s=0.2)
    # 2048 tokens over 0.2 s of prefill and 63 steps of 15 ms: 2048 / 1.145 s
    assert ceiling.tok_s(2048, 63) == pytest.approx(1788.65, abs=0.01)


def test_the_kernels_run_on_the_models_own_shapes(bench: ModuleType, tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir, "float32")
    prompts = [[1, 2, 3, 4, 5], list(range(10, 30)), [7] * 9]  # unequal lengths, as chat prompts
    ceiling = bench.kernel_ceiling(model, prompts, new_tokens=8, repeat=2)
    assert ceiling.linears_s > 0 and ceiling.attention_s > 0 and ceiling.prefill_s > 0
    assert 0 < ceiling.tok_s(3 * 8, 7) < float("inf")
