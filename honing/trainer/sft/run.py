"""An SFT run: `honing sft CONFIG`, the warm start before `honing train`.

    config = SftConfig(data="traces.jsonl", out=Path("runs/sft"))
    result = run_sft(config)  # -> runs/sft/model (`model: runs/sft/model`), runs/sft/sft.json

Covered: the config, the deterministic shuffle and batches of each epoch, progress logs, and
saving the model merged (LoRA folded in) with its tokenizer. Of `LearnerConfig` it uses the
optimiser, schedule, batching, LoRA and dtype settings; the RL fields are ignored. Not covered:
periodic checkpoints and resume (a run is short; the learner's save/load apply to it),
evaluation during SFT, multi-GPU.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from honing.config import StrictModel
from honing.errors import ConfigError
from honing.rollout.chat import ChatFormat
from honing.trainer.config import LearnerConfig
from honing.trainer.learner import Learner
from honing.trainer.sft.data import load_chat_data
from honing.trainer.sft.tokenize import tokenize_all
from honing.trainer.sft.update import SftStats, sft_update

log = logging.getLogger(__name__)


class SftConfig(StrictModel):
    """`honing sft CONFIG`: supervised fine-tuning on chat data."""

    model: str = Field(
        "default", description="The model to start from: a directory, or 'default' (SmolLM2)."
    )
    data: str = Field(description="Training conversations: JSONL (or Parquet), path or URL.")
    out: Path = Field(
        Path("runs/sft"),
        description="Run directory; the trained model goes to OUT/model (LoRA merged in).",
    )
    learner: LearnerConfig = Field(
        default_factory=LearnerConfig,
        description="Optimiser, schedule, micro-batching, LoRA and precision, as for `honing "
        "train` (the RL fields are not used). Its defaults are the RL learner's (full fine-tune, "
        "lr 1e-5); SFT with LoRA usually wants learner.lora set and lr around 1e-4 to 2e-4.",
    )
    epochs: int = Field(1, ge=1, description="Passes over the data.")
    batch_size: int = Field(8, ge=1, description="Sequences per optimiser step.")
    max_seq_len: int = Field(2048, ge=2, description="Longest example in tokens.")
    overlong: Literal["error", "truncate"] = Field(
        "error",
        description="A longer example: 'error' (listed), or 'truncate' to its first max_seq_len "
        "tokens (with a warning counting the assistant tokens lost).",
    )
    seed: int = Field(0, description="Seeds the shuffle and torch (LoRA initialisation).")
    log_every: int = Field(1, ge=1, description="Log progress every this many steps.")

    def total_steps(self, examples: int) -> int:
        return self.epochs * math.ceil(examples / self.batch_size)


@dataclass(frozen=True)
class SftResult:
    """What `run_sft` did and where the model is."""

    model_dir: Path  # OUT/model: a full transformers directory with the tokenizer
    steps: int
    examples: int
    tokens: int  # assistant tokens trained on, over all epochs
    first_loss: float  # the first step's loss
    final_loss: float  # the mean loss of the last epoch's steps
    seconds: float
    tokens_per_s: float  # tokens forwarded (context included) per second of training

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "model_dir": str(self.model_dir),
            "steps": self.steps,
            "examples": self.examples,
            "tokens": self.tokens,
            "first_loss": self.first_loss,
            "final_loss": self.final_loss,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
        }


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The example order of one epoch: a deterministic shuffle of range(n)."""
    order = list(range(n))
    random.Random(f"honing.sft/{seed}/{epoch}").shuffle(order)
    return order


def batches(n: int, config: SftConfig) -> Iterator[tuple[int, list[int]]]:
    """(epoch, example indices) of every optimiser step, in order."""
    for epoch in range(config.epochs):
        order = epoch_order(n, config.seed, epoch)
        for i in range(0, n, config.batch_size):
            yield epoch, order[i : i + config.batch_size]


def run_sft(config: SftConfig, *, on_step: Callable[[SftStats], None] | None = None) -> SftResult:
    """Train `config.model` on `config.data` and save it to OUT/model (see the module docstring);
    `on_step` sees every step's stats."""
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    examples = load_chat_data(config.data)
    learner = Learner(config.model, config.learner)
    if learner.tokenizer is None:
        raise ConfigError(f"model {config.model!r}: no tokenizer found beside the weights")
    fmt = ChatFormat.of(learner.tokenizer)
    sequences = tokenize_all(
        examples, fmt, max_seq_len=config.max_seq_len, overlong=config.overlong
    )
    total = config.total_steps(len(sequences))
    lcfg = config.learner
    if lcfg.schedule == "cosine" and lcfg.schedule_steps != total:
        log.warning(
            "sft: learner.schedule_steps=%d but the run has %d steps; the cosine schedule will %s",
            lcfg.schedule_steps,
            total,
            "not reach 0" if lcfg.schedule_steps > total else "stay at 0 at the end",
        )
    log.info(
        "sft: %d examples (%d assistant tokens) from %s, %d epoch(s), %d steps of %d; "
        "model %s (%s)",
        len(sequences),
        sum(s.tokens for s in sequences),
        config.data,
        config.epochs,
        total,
        config.batch_size,
        config.model,
        "LoRA" if lcfg.lora else "full fine-tune",
    )
    started = time.perf_counter()
    first_loss: float | None = None
    trained = forwarded = 0
    epoch_losses: list[float] = []
    current_epoch = 0
    for epoch, rows in batches(len(sequences), config):
        if epoch != current_epoch:
            current_epoch, epoch_losses = epoch, []
        stats = sft_update(learner, [sequences[r] for r in rows])
        first_loss = stats.loss if first_loss is None else first_loss
        epoch_losses.append(stats.loss)
        trained += stats.tokens
        forwarded += stats.context_tokens
        if on_step is not None:
            on_step(stats)
        step = learner.steps
        if step % config.log_every == 0 or step == total:
            elapsed = time.perf_counter() - started
            eta = elapsed / step * (total - step)
            log.info(
                "sft: step %d/%d (epoch %d) loss %.4f, %.0f tokens/s, lr %.2e, ETA %s",
                step,
                total,
                epoch + 1,
                stats.loss,
                forwarded / max(elapsed, 1e-9),
                stats.lr,
                _duration(eta),
            )
    seconds = time.perf_counter() - started
    model_dir = save_model(learner, config.out / "model")
    result = SftResult(
        model_dir=model_dir,
        steps=learner.steps,
        examples=len(sequences),
        tokens=trained,
        first_loss=first_loss if first_loss is not None else float("nan"),
        final_loss=sum(epoch_losses) / max(len(epoch_losses), 1),
        seconds=seconds,
        tokens_per_s=forwarded / max(seconds, 1e-9),
    )
    summary = {"config": config.model_dump(mode="json"), "result": result.to_json_dict()}
    (config.out / "sft.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info(
        "sft: done: %d steps in %s, loss %.4f -> %.4f; model saved to %s",
        result.steps,
        _duration(seconds),
        result.first_loss,
        result.final_loss,
        model_dir,
    )
    return result


def save_model(learner: Learner, path: Path) -> Path:
    """The learner's model as a full transformers directory with its tokenizer (LoRA merged into
    the base: the learner's model is the merged one afterwards, so call this last)."""
    model = learner.model
    if learner.config.lora is not None:
        model = model.merge_and_unload()
        learner.model = model
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    if learner.tokenizer is not None:
        learner.tokenizer.save_pretrained(path)
    return path


def sft_main(config: SftConfig) -> SftResult:
    """The `honing sft CONFIG` command: run, then print the result's one-line summary."""
    result = run_sft(config)
    print(
        f"sft: {result.steps} steps on {result.examples} examples in {_duration(result.seconds)}"
        f", loss {result.first_loss:.3f} -> {result.final_loss:.3f}, "
        f"{result.tokens_per_s:.0f} tokens/s; model: {result.model_dir}"
    )
    return result


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"
