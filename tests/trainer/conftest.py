"""Models for the trainer tests: a tiny random Llama with SmolLM2's tokenizer (fast, offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from honing.rollout.models import load_tokenizer, resolve_model


@pytest.fixture(scope="session")
def tiny_learner_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama (float32) with SmolLM2's tokenizer, saved as a directory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer(resolve_model("default"))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    out = tmp_path_factory.mktemp("tiny-llama-trainer")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
