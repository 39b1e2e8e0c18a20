"""Inference engines behind one contract (`base.Engine`), and `make_engine` to pick one by name.

    make_engine("default")                        hf: the embedded SmolLM2-135M-Instruct, local
    make_engine("model:PATH") / make_engine(PATH) hf: a local transformers model directory
    make_engine("openai:http://host:8000/v1")     openai: a vLLM/SGLang/honing server (chat mode),
                                                  its only model (GET /v1/models)
    make_engine("openai:http://host:8000/v1#name") … with the served model's name

    hf         honing.rollout.engines.hf        continuous batching with a static KV cache
    openai     honing.rollout.engines.openai    any OpenAI-compatible server, retries, reloads
    scripted   honing.rollout.engines.scripted  deterministic completions, simulated latency

Not covered here: remote engine workers on Ray (`honing.rollout.ray`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from honing.errors import ConfigError
from honing.rollout.engines.base import (
    Dtype,
    Engine,
    FinishReason,
    Generation,
    Prompt,
    SamplingParams,
    WeightUpdate,
)

if TYPE_CHECKING:
    from honing.rollout.engines.speculative import SpeculativeConfig


def make_engine(
    spec: str,
    *,
    dtype: Dtype = "auto",
    max_batch: int = 32,
    prefix_cache: bool = True,
    seed: int | None = None,
    tokens_of: str | None = None,
    lora_adapters: bool = False,
    dequantise: bool = False,
    speculative: SpeculativeConfig | None = None,
) -> Engine:
    """The engine a spec names (see the module docstring): the one factory behind `honing
    train`, `eval`, `rollout`, `serve` and `export`. hf: `dtype`, `max_batch` (its decoding
    slots), `prefix_cache`, `seed`, `dequantise` (an int8 export run with plain weights) and
    `speculative` (speculative decoding; off when None).
    openai: `tokens_of`, a model whose tokenizer makes the engine exchange token ids with the
    server (token-faithful rollouts, as training needs), and the server's `lora_adapters`
    (whether it hot-loads LoRA adapters, which weight sync uses)."""
    if spec.startswith("openai:"):
        if speculative is not None:
            raise ConfigError(
                f"engine {spec!r}: speculative decoding is the hf engine's; a server decides its "
                "own (vLLM: --speculative-config; honing serve: --speculative)"
            )
        from honing.rollout.engines.openai import OpenAIConfig, OpenAIEngine

        url, _, model = spec.removeprefix("openai:").partition("#")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"engine {spec!r}: expected openai:http(s)://HOST:PORT/v1[#MODEL]")
        server = OpenAIConfig(base_url=url, model=model or None, lora_adapters=lora_adapters)
        if tokens_of is None:
            return OpenAIEngine(server)
        from transformers import AutoTokenizer

        from honing.rollout.models import resolve_model

        tokenizer = AutoTokenizer.from_pretrained(resolve_model(tokens_of))
        return OpenAIEngine(server, tokenizer=tokenizer)
    if spec.startswith("scripted:"):
        raise ConfigError("the scripted engine is built in code (ScriptedEngine), not by name")
    from honing.rollout.engines.hf import HFEngine

    return HFEngine.load(
        spec.removeprefix("model:"),
        dtype=dtype,
        max_batch=max_batch,
        prefix_cache=prefix_cache,
        seed=seed,
        dequantise=dequantise,
        speculative=speculative,
    )


__all__ = [
    "Dtype",
    "Engine",
    "FinishReason",
    "Generation",
    "Prompt",
    "SamplingParams",
    "WeightUpdate",
    "make_engine",
]
