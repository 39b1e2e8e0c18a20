"""Batched generation: honing's `hf` engine against transformers' `model.generate`.

What is compared
----------------
The embedded default model (SmolLM2-135M-Instruct, `resolve_model("default")`), loaded once; both
sides use that same model object, in the engine's automatic dtype (bfloat16 where the CPU computes
it fast — AMX / AVX512-BF16 — else float32; `--dtype` overrides). The workload is 32 varied chat
prompts, each rendered with the model's chat template, and 64 new tokens for each, greedy:

* transformers: one `model.generate` call on the left-padded batch, `do_sample=False`,
  `max_new_tokens=64, min_new_tokens=64` (EOS suppressed, so every row makes 64 tokens), under
  `torch.inference_mode()`.
* honing: `HFEngine(model, tokenizer, eos_ids=(), prefix_cache=False)` (never stops on a token,
  so every sequence makes 64; no cache of the warm-up's prompts, which hf.generate lacks), the 32
  prompts given to one `generate` call with `SamplingParams(temperature=0,
  max_new_tokens=64)` (the engine batches them: one prefill, then 63 batched decode steps).

Both sides are warmed up first (a short generation of the same batch). Throughput is 32 × 64
generated tokens over the wall time of the call, prefill included. As a check that both do the
same work, the number of rows whose tokens agree is printed — up to the first EOS, which
transformers suppresses (min_new_tokens) and honing emits and continues after (fp32 agrees up to
rare near-ties; bf16 rounding differs between the two forwards, so bf16 rows may diverge).

The machine is shared, so run it a few times and read the range.

Usage: python benchmarks/generation.py [--dtype auto|float32|bfloat16] [--repeat N] [--threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import torch

from honing.precision import auto_dtype
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.rollout.models import load_model, load_tokenizer, resolve_model

BATCH = 32
NEW_TOKENS = 64
TOPICS = [
    "the water cycle",
    "prime numbers",
    "how a bicycle stays upright",
    "the French revolution",
    "photosynthesis",
    "binary search",
    "why the sky is blue",
    "compound interest",
    "black holes",
    "the Python GIL",
    "sourdough bread",
    "plate tectonics",
    "the immune system",
    "public-key cryptography",
    "the Pythagorean theorem",
    "volcanoes",
]
ASKS = [
    "Explain {} to a ten-year-old.",
    "Write three short facts about {}.",
    "What is the most surprising thing about {}?",
    "Summarise {} in two sentences.",
]


def chat_prompts(tokenizer: Any) -> list[list[int]]:
    out = []
    for i in range(BATCH):
        text = ASKS[i % len(ASKS)].format(TOPICS[i % len(TOPICS)])
        if i % 3 == 0:
            text += " Please be precise, and mention one common misconception about it."
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        out.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return out


def run_transformers(
    model: Any, tokenizer: Any, prompts: list[list[int]], n: int
) -> tuple[float, list[list[int]]]:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    longest = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (longest - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts])
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            pad_token_id=pad,
        )
    seconds = time.perf_counter() - start
    return seconds, out[:, longest:].tolist()


async def run_honing(
    engine: HFEngine, prompts: list[list[int]], n: int
) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    gens = await engine.generate(
        [Prompt(token_ids=p) for p in prompts], SamplingParams(temperature=0, max_new_tokens=n)
    )
    seconds = time.perf_counter() - start
    assert all(len(g.token_ids) == n for g in gens), "every sequence must make n tokens"
    return seconds, [g.token_ids for g in gens]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per side (best kept)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = auto_dtype(torch.device("cpu")) if args.dtype == "auto" else args.dtype
    path = resolve_model("default")
    tokenizer = load_tokenizer(path)
    model = load_model(path, dtype)
    prompts = chat_prompts(tokenizer)
    total = BATCH * NEW_TOKENS
    print(
        f"model {path.name}, {dtype}, {torch.get_num_threads()} threads; {BATCH} prompts of "
        f"{min(map(len, prompts))}-{max(map(len, prompts))} tokens, {NEW_TOKENS} new tokens each",
        flush=True,
    )

    # No prefix cache: the warm-up's prompts would be cached, and hf.generate has no such cache.
    engine = HFEngine(model, tokenizer, max_batch=BATCH, eos_ids=(), prefix_cache=False)
    try:
        run_transformers(model, tokenizer, prompts, 4)
        await run_honing(engine, prompts, 4)
        print("warmed up", flush=True)
        hf_times, honing_times = [], []
        for r in range(args.repeat):
            seconds, hf_tokens = run_transformers(model, tokenizer, prompts, NEW_TOKENS)
            hf_times.append(seconds)
            print(
                f"[{r + 1}/{args.repeat}] hf.generate {seconds:.2f}s ({total / seconds:.0f} tok/s)",
                flush=True,
            )
            seconds, honing_tokens = await run_honing(engine, prompts, NEW_TOKENS)
            honing_times.append(seconds)
            print(
                f"[{r + 1}/{args.repeat}] honing      {seconds:.2f}s ({total / seconds:.0f} tok/s)",
                flush=True,
            )
        # transformers suppresses EOS (min_new_tokens) where honing emits it and goes on, so
        # rows are compared up to honing's first EOS.
        eos = tokenizer.eos_token_id
        same = sum(
            a[: b.index(eos) if eos in b else None] == b[: b.index(eos) if eos in b else None]
            for a, b in zip(hf_tokens, honing_tokens, strict=True)
        )
        print(f"rows with identical tokens (up to an EOS): {same}/{BATCH}", flush=True)
    finally:
        await engine.close()
    hf_rate, honing_rate = total / min(hf_times), total / min(honing_times)
    print(
        f"generation: hf.generate {hf_rate:.0f} tok/s; honing {honing_rate:.0f} tok/s; "
        f"speedup {honing_rate / hf_rate:.1f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
