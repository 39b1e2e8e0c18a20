"""Helpers shared by the hf engine's tests: chat prompts as token ids, and HF's own greedy decode
(the reference the engine must equal)."""

from __future__ import annotations

from typing import Any

import torch

TEXTS = ["What is 17*23?", "Write a haiku about the sea, please.", "hi"]


def prompts(tokenizer: Any) -> list[list[int]]:
    """Three chat prompts of different lengths, rendered with the tokenizer's template."""
    rendered = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        for text in TEXTS
    ]
    return [list(tokenizer.encode(r, add_special_tokens=False)) for r in rendered]


def hf_greedy(model: Any, ids: list[int], n: int) -> list[int]:
    """`n` tokens of `model.generate` greedy after `ids`."""
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
            max_new_tokens=n,
            do_sample=False,
            pad_token_id=model.config.eos_token_id,
        )
    return list(out[0, len(ids) :].tolist())
