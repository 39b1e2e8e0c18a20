"""int8 weight-only quantisation of an exported model, measured against the unquantised one.

    quantize_int8(src_dir, dest_dir, "fp32")      # torchao Int8WeightOnlyConfig, safetensors
    comparison = compare(run_config, src_dir, dest_dir, dtype="fp32")
    comparison.line()   # "int8 vs fp32: 220 MB vs 538 MB (0.41x), ... held-out 56% vs 56%"

The quantised directory is what transformers' `TorchAoConfig` writes, so
`AutoModelForCausalLM.from_pretrained(DIR)` loads it back quantised, with torchao installed
(`pip install 'honing[export]'`). Every `nn.Linear` weight is int8, one scale per output row; the
embedding (and an LM head tied to it) is not quantised. Both models are measured with the same
settings: size on disk, CPU decode speed, held-out success (the int8 model with its weights
dequantised once: `make_engine(..., dequantise=True)`). docs/export.md has how each is measured.

Not covered: int4 or activation quantisation, GPU speed, calibration data sets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from honing.errors import ExportError
from honing.export.model import TORCH_DTYPES, ExportDtype, for_older_readers
from honing.rollout.models import is_quantised
from honing.trainer.run_config import TrainConfig

log = logging.getLogger(__name__)

SPEED_PROMPT = "Explain in a few sentences why the sky is blue."
ENGINE_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class HeldoutScore:
    """One held-out set's end-to-end success."""

    set: str
    passed: int
    total: int  # judged episodes: the infra failures are left out
    infra_failed: int
    success: float | None  # None when no episode could be judged


@dataclass(frozen=True)
class Measurement:
    """One model directory, measured."""

    label: str  # fp32, bf16, fp16 or int8
    weight_bytes: int
    tokens_per_s: float
    heldout: tuple[HeldoutScore, ...]
    eval_s: float

    @property
    def success(self) -> float | None:
        """Pooled over the held-out sets (their judged episodes)."""
        total = sum(s.total for s in self.heldout)
        return sum(s.passed for s in self.heldout) / total if total else None


@dataclass(frozen=True)
class Comparison:
    """The int8 model against the unquantised one."""

    reference: Measurement
    quantised: Measurement
    new_tokens: int
    threads: int
    heldout_limit: int | None

    def line(self) -> str:
        r, q = self.reference, self.quantised
        return (
            f"{q.label} vs {r.label}: {q.weight_bytes / 1e6:.0f} MB vs {r.weight_bytes / 1e6:.0f} "
            f"MB ({q.weight_bytes / r.weight_bytes:.2f}x), CPU decode {q.tokens_per_s:.1f} vs "
            f"{r.tokens_per_s:.1f} tokens/s ({q.tokens_per_s / r.tokens_per_s:.2f}x), held-out "
            f"success {_percent(q)} vs {_percent(r)}"
        )


def _percent(m: Measurement) -> str:
    s = m.success
    if s is None:
        return f"n/a (infra failures {sum(h.infra_failed for h in m.heldout)})"
    passed = sum(h.passed for h in m.heldout)
    total = sum(h.total for h in m.heldout)
    infra = sum(h.infra_failed for h in m.heldout)
    return f"{100 * s:.0f}% ({passed}/{total}; infra failures {infra})"


# -- quantising --------------------------------------------------------------------------------


def _torchao() -> Any:
    logging.getLogger("torchao").setLevel(logging.ERROR)  # optional kernels it cannot load here
    try:
        import torchao.quantization as quantization
    except ImportError as e:
        raise ExportError(
            "--quantize int8 needs torchao: pip install 'honing[export]' (or torchao)"
        ) from e
    return quantization


def quantize_int8(src: Path, dest: Path, dtype: ExportDtype) -> None:
    """The model directory `src` with its linear weights int8 (torchao weight-only, per row),
    the rest in `dtype`, written to `dest` with the tokenizer and generation config."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, TorchAoConfig

    quantization = _torchao()
    started = time.perf_counter()
    config = TorchAoConfig(quantization.Int8WeightOnlyConfig())
    model = AutoModelForCausalLM.from_pretrained(
        str(src), dtype=TORCH_DTYPES[dtype], quantization_config=config
    )
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(dest))
    AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(dest))
    for_older_readers(dest)
    log.info("quantize: int8 weights written to %s in %.0f s", dest, time.perf_counter() - started)


# -- measuring ---------------------------------------------------------------------------------


def weight_bytes(directory: Path) -> int:
    """Bytes of the weight files of a model directory."""
    return sum(p.stat().st_size for p in directory.rglob("*.safetensors"))


class _Decoder:
    """One model directory loaded for timing greedy decoding."""

    def __init__(self, directory: Path, dtype: ExportDtype) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if is_quantised(directory):
            _torchao()
        self.model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=TORCH_DTYPES[dtype])
        self.model.eval()  # type: ignore[no-untyped-call]
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        self.inputs: Any = tokenizer.apply_chat_template(
            [{"role": "user", "content": SPEED_PROMPT}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )

    @torch.inference_mode()
    def tokens_per_s(self, n: int) -> float:
        started = time.perf_counter()
        out = self.model.generate(
            **self.inputs,
            do_sample=False,
            max_new_tokens=n,
            min_new_tokens=n,
            pad_token_id=self.model.generation_config.pad_token_id,
        )
        seconds = time.perf_counter() - started
        assert out.shape[1] - self.inputs["input_ids"].shape[1] == n
        return n / seconds


def decode_speeds(
    directories: list[Path], dtype: ExportDtype, new_tokens: int, rounds: int = 3
) -> list[float]:
    """Greedy tokens/s of each directory (see the module docstring): after a warm-up, the models
    take turns for `rounds` timed runs each, and each keeps its best, so that load from other
    processes on a shared machine hits both alike."""
    decoders = [_Decoder(d, dtype) for d in directories]
    for decoder in decoders:
        decoder.tokens_per_s(4)  # warm-up: first-call allocations and kernel selection
    best = [0.0] * len(decoders)
    for _ in range(rounds):
        for i, decoder in enumerate(decoders):
            best[i] = max(best[i], decoder.tokens_per_s(new_tokens))
    return best


async def heldout_scores(
    config: TrainConfig,
    directory: Path,
    dtype: ExportDtype,
    sets: dict[str, Any],
    pool: Any,
    label: str,
) -> tuple[tuple[HeldoutScore, ...], float]:
    """Each held-out set played by an hf engine over `directory`; the scores and seconds."""
    from honing.eval.model import EnginePlayer
    from honing.eval.runner import evaluate
    from honing.rollout.engines import make_engine

    started = time.perf_counter()
    agent = config.agent_config(config.eval.temperature, config.seed)
    env = config.env_config
    engine = make_engine(
        str(directory),
        dtype=ENGINE_DTYPES[dtype],  # type: ignore[arg-type]
        max_batch=config.engine.slots,
        prefix_cache=config.engine.prefix_cache,
        seed=config.seed,
        dequantise=True,
    )
    scores = []
    try:
        for name, taskset in sets.items():
            player = EnginePlayer(engine, agent, name=label)
            report = await evaluate(taskset, player, pool, k=config.eval.k, config=env)
            e2e = report.end_to_end
            scores.append(
                HeldoutScore(name, e2e.passed, e2e.total, e2e.infra_failed, e2e.success_rate)
            )
            log.info("quantize: held-out %s, %s model: %d/%d", name, label, e2e.passed, e2e.total)
    finally:
        await engine.close()
    return tuple(scores), time.perf_counter() - started


def compare(
    config: TrainConfig,
    reference: Path,
    quantised: Path,
    *,
    dtype: ExportDtype,
    heldout_limit: int | None = None,
    new_tokens: int = 64,
) -> Comparison:
    """Measure both directories (see the module docstring)."""
    from honing.sandbox import SandboxPool
    from honing.trainer.sources import heldout_sets

    sets = heldout_sets(config, heldout_limit)
    labels = {reference: dtype, quantised: "int8"}
    speeds = dict(
        zip(
            (reference, quantised),
            decode_speeds([reference, quantised], dtype, new_tokens),
            strict=True,
        )
    )
    log.info(
        "quantize: CPU decode %.1f tokens/s (%s), %.1f (int8)",
        speeds[reference],
        dtype,
        speeds[quantised],
    )

    async def both() -> dict[Path, tuple[tuple[HeldoutScore, ...], float]]:
        if not sets:
            return {reference: ((), 0.0), quantised: ((), 0.0)}
        async with SandboxPool(config.sandbox) as pool:
            return {
                d: await heldout_scores(config, d, dtype, sets, pool, labels[d])
                for d in (reference, quantised)
            }

    scores = asyncio.run(both())
    measured = {
        d: Measurement(
            label=labels[d],
            weight_bytes=weight_bytes(d),
            tokens_per_s=speeds[d],
            heldout=scores[d][0],
            eval_s=scores[d][1],
        )
        for d in (reference, quantised)
    }
    return Comparison(
        reference=measured[reference],
        quantised=measured[quantised],
        new_tokens=new_tokens,
        threads=torch.get_num_threads(),
        heldout_limit=heldout_limit,
    )
