"""`LlamaDecoder.decode` on a tiny random Llama (fp32): rows at unequal positions, through the
KV cache's growth, give transformers' own logits; the fused attention (no shared prefix) and the
shared-prefix read agree; the logits buffer it reuses is overwritten only by the next step."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from honing.rollout.engines import llama_decode
from honing.rollout.engines.llama_decode import LlamaDecoder


def ids(n: int, seed: int) -> list[int]:
    drawn = torch.randint(1, 40000, (n,), generator=torch.Generator().manual_seed(seed))
    return [int(t) for t in drawn]


def reference(model: Any, sequence: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        logits: torch.Tensor = model(input_ids=torch.tensor([sequence])).logits[0, -1].float()
    return logits


def greedy_steps(decoder: LlamaDecoder, prompts: list[list[int]], steps: int) -> list[list[int]]:
    """Prefill, then `steps` greedy decode steps; each row's tokens (prompt included)."""
    rows = [list(p) for p in prompts]
    with torch.inference_mode():
        logits = decoder.prefill(0, prompts)
        for _ in range(steps):
            for row, token in zip(rows, logits.argmax(-1).tolist(), strict=True):
                row.append(token)
            logits = decoder.decode([r[-1] for r in rows], [len(r) - 1 for r in rows])
    return rows


def test_unequal_rows_through_cache_growth_match_transformers(
    model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llama_decode, "INITIAL_CAPACITY", 8)  # doubles twice below
    prompts = [ids(3, 1), ids(14, 2), ids(6, 3)]
    decoder = LlamaDecoder(model, slots=4, max_len=64)
    rows = [list(p) for p in prompts]
    with torch.inference_mode():
        logits = decoder.prefill(0, prompts)
        for _ in range(12):  # the longest row reaches position 25: capacity 8 -> 16 -> 32
            for row, token in zip(rows, logits.argmax(-1).tolist(), strict=True):
                row.append(token)
            logits = decoder.decode([r[-1] for r in rows], [len(r) - 1 for r in rows])
            for i, row in enumerate(rows):
                torch.testing.assert_close(logits[i], reference(model, row), atol=1e-4, rtol=1e-4)
    assert decoder.capacity == 32


def test_fused_attention_and_the_shared_prefix_read_give_the_same_tokens(model: Any) -> None:
    system = ids(40, 4)  # longer than MIN_SHARED_READ: the cascade reads it once for all rows
    prompts = [system + ids(n, 5 + n) for n in (3, 9, 5)]
    fused = LlamaDecoder(model, slots=4, max_len=128, cascade=False)
    shared = LlamaDecoder(model, slots=4, max_len=128)
    assert greedy_steps(fused, prompts, 10) == greedy_steps(shared, prompts, 10)
    assert shared.shared_length(3) >= 40 and fused.shared_length(3) == 0


def test_the_logits_buffer_is_reused_by_the_next_step_only(model: Any) -> None:
    prompts = [ids(5, 6), ids(9, 7)]
    decoder = LlamaDecoder(model, slots=2, max_len=64)
    with torch.inference_mode():
        first = decoder.prefill(0, prompts)
        tokens = first.argmax(-1).tolist()
        step = decoder.decode(tokens, [5, 9])
        kept = step.clone()
        torch.testing.assert_close(step[1], reference(model, prompts[1] + tokens[1:]))
        decoder.decode(step.argmax(-1).tolist(), [6, 10])
    assert not torch.equal(step, kept)  # the documented reuse: callers keep a copy if needed


def test_a_decoder_built_under_no_grad_runs_with_grad_on(model: Any) -> None:
    # The cache's K and V are views of one tensor: views made in no_grad mode cannot be written
    # in place where grad mode is on (the engine's thread, or a caller, may run either way).
    with torch.no_grad():
        decoder = LlamaDecoder(model, slots=2, max_len=64)
    prompt = ids(6, 8)
    logits = decoder.prefill(0, [prompt]).detach()
    torch.testing.assert_close(logits[0], reference(model, prompt), atol=1e-4, rtol=1e-4)
