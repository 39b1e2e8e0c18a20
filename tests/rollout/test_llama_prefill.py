"""`LlamaDecoder.prefill` on a tiny random Llama (fp32) with prompts of unequal lengths: the
logits of each prompt's last token equal transformers' own forward, whether the rows start at 0
or continue cached prefixes of different lengths, and the projections run on the real tokens
only (padding to the longest chunk would multiply their work)."""

from __future__ import annotations

from typing import Any

import torch

from honing.rollout.engines.llama_decode import LlamaDecoder


def ids(n: int, seed: int) -> list[int]:
    drawn = torch.randint(1, 40000, (n,), generator=torch.Generator().manual_seed(seed))
    return [int(t) for t in drawn]


def last_logits(model: Any, prompt: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([prompt])).logits[0, -1].float()


def projected_rows(decoder: LlamaDecoder) -> list[int]:
    """Wrap the first layer's q/k/v projection; the list fills with the rows of each call."""
    rows: list[int] = []
    norm_w, qkv, *rest = decoder.layers[0]

    def spy(x: torch.Tensor) -> torch.Tensor:
        rows.append(x.numel() // x.shape[-1])
        return qkv(x)

    decoder.layers[0] = (norm_w, spy, *rest)
    return rows


def test_unequal_prompts_from_zero_match_transformers_without_padding(model: Any) -> None:
    prompts = [ids(3, 1), ids(29, 2), ids(11, 3)]  # no common prefix: each row from position 0
    decoder = LlamaDecoder(model, slots=4, max_len=128)
    rows = projected_rows(decoder)
    with torch.inference_mode():
        logits = decoder.prefill(0, prompts)
    assert rows == [3 + 29 + 11]
    for i, prompt in enumerate(prompts):
        torch.testing.assert_close(logits[i], last_logits(model, prompt), atol=1e-4, rtol=1e-4)


def test_rows_continuing_cached_prefixes_of_different_lengths_match_transformers(
    model: Any,
) -> None:
    firsts = [ids(20, 4), ids(7, 5), ids(33, 6)]
    decoder = LlamaDecoder(model, slots=4, max_len=128)
    with torch.inference_mode():
        decoder.prefill(0, firsts)
        rows = projected_rows(decoder)
        # Each row continues its slot's prompt with a turn of its own length.
        seconds = [firsts[0] + ids(5, 7), firsts[1] + ids(16, 8), firsts[2] + ids(1, 9)]
        logits = decoder.prefill(0, seconds, [len(f) for f in firsts])
    assert rows == [5 + 16 + 1]
    for i, prompt in enumerate(seconds):
        torch.testing.assert_close(logits[i], last_logits(model, prompt), atol=1e-4, rtol=1e-4)
