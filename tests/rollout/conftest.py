"""Models for the rollout tests: the embedded default's tokenizer (real chat template) on a tiny
random-weight Llama built from a config, so that decoding is fast and nothing is downloaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from honing.rollout.models import load_model, load_tokenizer, resolve_model


@pytest.fixture(scope="session")
def smol_dir() -> Path:
    """The embedded SmolLM2-135M-Instruct (converted from GGUF once, then cached)."""
    return resolve_model("default")


@pytest.fixture(scope="session")
def tiny_model_dir(smol_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Llama with SmolLM2's tokenizer and chat template, saved as a directory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer(smol_dir)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    out = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture
def model(tiny_model_dir: Path) -> Any:
    """The tiny model, loaded fresh in fp32 (exact comparisons with HF's own forward)."""
    return load_model(tiny_model_dir, "float32")


@pytest.fixture
def tokenizer(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)
