"""One GRPO step: trl's `GRPOTrainer` against honing's engine + learner, same model, same work.

What is compared
----------------
One GRPO optimiser step on CPU for each side, in one process, in one precision for both
(`--dtype`: auto is bfloat16 where the CPU has native bf16, AMX or AVX512-BF16, else float32):

* the model: the embedded default (SmolLM2-135M-Instruct, `resolve_model("default")`, never
  downloaded; `--model DIR` for another local directory), its weights in float32; with
  bfloat16, trl trains under its `bf16=True` (autocast) and generates with the model it trains,
  honing's learner autocasts to bfloat16 (`dtype: bfloat16`) and its engine holds bfloat16
  weights; a full fine-tune, or `--lora` (r 16, alpha 32, q/k/v/o projections) on both sides;
* the prompts: 2-digit multiplications in the chat template ("What is 47 * 83? ..."), 2 prompts
  per step, each sampled 8 times (group size 8, 16 completions per step), up to 32 new tokens, at
  temperature 1 (no top-k, no top-p), seeded; step k uses prompts 2k and 2k+1 on both sides;
* the reward: one function object, `multiplication_reward`, called by both: 1 when the last
  number of the completion is the product, plus 0.1 when it contains a number at all, minus
  0.002 per character (a length term, so that a group's rewards differ even when no completion
  is right, and the gradient is not zero);
* the algorithm: GRPO advantages (group mean and unbiased std), the clipped ratio with
  epsilon 0.2 on both sides, token-level aggregation (trl's default loss `dapo`), no KL term
  (trl's default beta 0.0: no reference model on either side), one pass over each batch
  (num_iterations 1), AdamW (betas 0.9/0.999, no weight decay) at a constant learning rate
  (default 1e-6, trl's default), gradients clipped to norm 1.0.

What one step is
----------------
* trl: the trainer's step, from `on_step_begin` to `on_step_end` of a `TrainerCallback`: it
  generates the 16 completions with `model.generate` on the training model, scores them,
  computes advantages, then one forward/backward and the optimiser step (one per generation:
  per_device_train_batch_size 16, gradient_accumulation_steps 1, steps_per_generation 1, so trl
  computes no separate old-policy logprobs). Gradient checkpointing is off (trl turns it on by
  default; on 135M parameters it only costs time), logging, saving and reporting are off.
* honing: `HFEngine.generate` of the 16 prompts (engine seeded), the reward, `Trajectory` /
  `Group` records, `Learner.update(groups)` (the learner is its own copy of the model; the engine
  never shares it), then `sync_weights(learner, engine)` — the copy of the new weights into the
  engine that trl does not need (it generates with the model it trains).

Each side runs `--warmup` untimed steps (1), then `--steps` timed ones (3); the per-step times,
the split of each step into generation+scoring vs the rest, the tokens generated and trained on
(equal work: both train on every completion token), and each step's rewards are printed.
The last line compares the medians: `grpo step: trl X s; honing Y s; speedup Z.Zx`.

Not measured: quality (3 steps at lr 1e-6 do not move the rewards), GPUs, vLLM. The machine may be
shared: the times are noisy, run it again and read the range.

Usage: python benchmarks/grpo_vs_trl.py [--steps 3] [--warmup 1] [--lora] [--lr 1e-6]
       [--dtype auto|float32|bfloat16] [--threads N] [--model DIR] [--seed 0]
Needs trl: pip install -e '.[bench]'.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import random
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from honing.precision import native_bf16
from honing.records import Group, Trajectory
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.rollout.models import load_model, load_tokenizer, resolve_model
from honing.trainer import Learner, LearnerConfig, LoraSettings, sync_weights

GROUP = 8
PROMPTS_PER_STEP = 2
LORA_R, LORA_ALPHA, LORA_TARGETS = 16, 32, ["q_proj", "k_proj", "v_proj", "o_proj"]
EPSILON = 0.2


@dataclass(frozen=True, slots=True)
class Settings:
    model: Path
    steps: int
    warmup: int
    lora: bool
    lr: float
    max_new_tokens: int
    seed: int
    dtype: str = "float32"

    @property
    def total_steps(self) -> int:
        return self.warmup + self.steps

    def __str__(self) -> str:
        return (
            f"model {self.model.name}, {self.dtype}, {torch.get_num_threads()} threads; "
            f"{'LoRA r 16' if self.lora else 'full fine-tune'}; {PROMPTS_PER_STEP} prompts x "
            f"{GROUP} = {PROMPTS_PER_STEP * GROUP} completions per step, up to "
            f"{self.max_new_tokens} new tokens, temperature 1; lr {self.lr:g}, clip {EPSILON}, "
            f"no KL; {self.warmup} warm-up + {self.steps} timed steps per side"
        )


@dataclass(frozen=True, slots=True)
class Problem:
    question: str
    answer: int

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.question}]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step of one side: its wall time and where it went, and its 16 rewards."""

    seconds: float
    generate_s: float  # generation + scoring (+ advantages, for trl)
    rewards: list[float]
    sync_s: float = 0.0  # honing: the weight copy into the engine (trl has none)
    generated: int = 0  # completion tokens generated
    trained: int = 0  # completion tokens the loss covered

    def __str__(self) -> str:
        correct = sum(r >= 1.0 for r in self.rewards)
        return (
            f"{self.seconds:.2f}s (generate+score {self.generate_s:.2f}s, update "
            f"{self.seconds - self.generate_s - self.sync_s:.2f}s"
            + (f", sync {self.sync_s:.2f}s" if self.sync_s else "")
            + f"); {self.generated} tokens generated, {self.trained} trained; reward mean "
            f"{statistics.fmean(self.rewards):+.3f}, {correct}/{len(self.rewards)} correct"
        )


def problems(count: int, seed: int) -> list[Problem]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        out.append(Problem(f"What is {a} * {b}? Answer with just the number.", a * b))
    return out


def _text(completion: Any) -> str:
    """A completion as trl passes it: a string, or a list of messages (conversational)."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m["content"]) for m in completion)


def multiplication_reward(
    completions: Sequence[Any], answer: Sequence[int], **_: Any
) -> list[float]:
    """1 if the last number is the product, +0.1 for any number, -0.002 per character."""
    out = []
    for completion, expected in zip(completions, answer, strict=True):
        text = _text(completion)
        numbers = [n.replace(",", "") for n in re.findall(r"-?\d[\d,]*", text)]
        correct = bool(numbers) and numbers[-1] == str(expected)
        out.append(float(correct) + 0.1 * bool(numbers) - 0.002 * len(text))
    return out


class Recorder:
    """Calls the shared reward function and keeps what it returned, call by call."""

    def __init__(self, fn: Callable[..., list[float]]) -> None:
        self.fn = fn
        self.calls: list[list[float]] = []
        self.__name__ = fn.__name__  # trl names its reward metrics after it

    def __call__(
        self, completions: Sequence[Any], answer: Sequence[int], **kw: Any
    ) -> list[float | None]:
        rewards = self.fn(completions, answer, **kw)
        self.calls.append(rewards)
        return list(rewards)


# ---- trl --------------------------------------------------------------------------------------


def run_trl(settings: Settings, data: list[Problem]) -> list[StepRecord]:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl.trainer.grpo_config import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    reward = Recorder(multiplication_reward)
    generate_s: list[float] = []
    tokens: list[int] = []  # completion tokens of each generation (trl trains on all of them)

    class StepTimer(TrainerCallback):
        """Times each optimiser step and shows it as soon as it ends."""

        def __init__(self) -> None:
            self.begin = 0.0
            self.records: list[StepRecord] = []

        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self.begin = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            seconds = time.perf_counter() - self.begin
            if len(generate_s) != len(self.records) + 1 or len(reward.calls) != len(generate_s):
                raise RuntimeError(
                    f"trl step {len(self.records) + 1}: {len(generate_s)} generations and "
                    f"{len(reward.calls)} reward calls so far; expected one of each per step"
                )
            self.records.append(StepRecord(seconds, generate_s[-1], reward.calls[-1],
                                           generated=tokens[-1], trained=tokens[-1]))  # fmt: skip
            show("trl", len(self.records) - 1, settings, self.records[-1])

    peft_config = None
    if settings.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=LORA_R,
            lora_alpha=LORA_ALPHA,
            lora_dropout=0.0,
            target_modules=LORA_TARGETS,
            task_type="CAUSAL_LM",
        )
    dataset = Dataset.from_list([{"prompt": p.messages, "answer": p.answer} for p in data])
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            max_steps=settings.total_steps,
            per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
            gradient_accumulation_steps=1,
            num_generations=GROUP,
            max_completion_length=settings.max_new_tokens,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            num_iterations=1,
            beta=0.0,
            epsilon=EPSILON,
            epsilon_high=EPSILON,
            loss_type="dapo",
            scale_rewards="group",
            learning_rate=settings.lr,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            adam_beta1=0.9,
            adam_beta2=0.999,
            max_grad_norm=1.0,
            shuffle_dataset=False,
            seed=settings.seed,
            use_cpu=True,
            bf16=settings.dtype == "bfloat16",
            fp16=False,
            activation_checkpointing=False,  # trl's default is on (gradient_checkpointing)
            use_vllm=False,
            report_to="none",
            logging_strategy="no",
            save_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
            log_completions=False,
        )
        trainer = GRPOTrainer(
            model=load_model(settings.model, "float32"),
            reward_funcs=reward,
            args=config,
            train_dataset=dataset,
            processing_class=load_tokenizer(settings.model),
            callbacks=[timer],
            peft_config=peft_config,
        )
        trainer.remove_callback(PrinterCallback)  # its end-of-training dict; ours show each step
        generate_and_score = trainer._generate_and_score_completions

        def timed(batch: Any) -> Any:
            start = time.perf_counter()
            try:
                out = generate_and_score(batch)
                tokens.append(int(out["completion_mask"].sum()))
                return out
            finally:
                generate_s.append(time.perf_counter() - start)

        trainer._generate_and_score_completions = timed  # type: ignore[method-assign,assignment]
        trainer.train()
    if len(timer.records) != settings.total_steps:
        raise RuntimeError(f"trl ran {len(timer.records)} steps, not {settings.total_steps}")
    return timer.records[settings.warmup :]


# ---- honing -----------------------------------------------------------------------------------


def trajectory(
    problem: Problem,
    prompt: list[int],
    ids: list[int],
    logprobs: list[float],
    versions: list[int],
    reward: float,
    sample: int,
    group_id: str,
) -> Trajectory:
    return Trajectory(
        task_id=problem.question,
        domain="math",
        sample=sample,
        group_id=group_id,
        token_ids=prompt + ids,
        loss_mask=[0] * len(prompt) + [1] * len(ids),
        logprobs=[0.0] * len(prompt) + logprobs,
        versions=[-1] * len(prompt) + versions,
        prompt_len=len(prompt),
        components={"outcome": reward},
        reward=reward,
        success=reward >= 1.0,
    )


async def honing_step(
    engine: HFEngine, learner: Learner, batch: list[Problem], step: int, settings: Settings
) -> StepRecord:
    tokenizer = engine.tokenizer
    start = time.perf_counter()
    prompt_ids = [
        list(
            tokenizer.apply_chat_template(
                p.messages, add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
        )
        for p in batch
    ]
    prompts = [Prompt(token_ids=ids) for ids in prompt_ids for _ in range(GROUP)]
    gens = await engine.generate(
        prompts, SamplingParams(temperature=1.0, max_new_tokens=settings.max_new_tokens)
    )
    rewards = multiplication_reward(
        [[{"role": "assistant", "content": g.text}] for g in gens],
        [p.answer for p in batch for _ in range(GROUP)],
    )
    generated = time.perf_counter()
    groups = []
    for k, problem in enumerate(batch):
        group_id = f"s{step}p{k}"
        trajs = [
            trajectory(problem, prompt_ids[k], g.token_ids, g.logprobs, g.versions, r, i, group_id)
            for i, (g, r) in enumerate(
                zip(
                    gens[k * GROUP : (k + 1) * GROUP],
                    rewards[k * GROUP : (k + 1) * GROUP],
                    strict=True,
                )
            )
        ]
        groups.append(Group(problem.question, group_id, trajs))
    stats = learner.update(groups)
    if not stats.stepped:
        raise RuntimeError(f"honing's learner took no step at step {step}: {stats}")
    sync = await sync_weights(learner, engine)
    return StepRecord(time.perf_counter() - start, generated - start, rewards, sync.seconds,
                      generated=sum(len(g.token_ids) for g in gens),
                      trained=stats.tokens)  # fmt: skip


async def run_honing(settings: Settings, data: list[Problem]) -> list[StepRecord]:
    config = LearnerConfig(
        advantage="grpo",
        aggregation="token",
        eps_low=EPSILON,
        eps_high=EPSILON,
        kl_coef=0.0,
        dynamic_sampling=False,  # trl keeps zero-variance groups too
        lr=settings.lr,
        weight_decay=0.0,
        betas=(0.9, 0.999),
        schedule="constant",
        max_grad_norm=1.0,
        temperature=1.0,
        dtype="bfloat16" if settings.dtype == "bfloat16" else "float32",
        lora=LoraSettings(
            r=LORA_R, alpha=float(LORA_ALPHA), dropout=0.0, target_modules=LORA_TARGETS
        )
        if settings.lora
        else None,
    )
    learner = Learner(settings.model, config)  # its own copy of the weights
    engine = HFEngine(settings.model, dtype=settings.dtype, seed=settings.seed)  # type: ignore[arg-type]
    records = []
    try:
        for step in range(settings.total_steps):
            batch = data[step * PROMPTS_PER_STEP : (step + 1) * PROMPTS_PER_STEP]
            records.append(await honing_step(engine, learner, batch, step, settings))
            show("honing", step, settings, records[-1])
    finally:
        await engine.close()
    return records[settings.warmup :]


# ---- main -------------------------------------------------------------------------------------


def show(side: str, step: int, settings: Settings, record: StepRecord) -> None:
    label = (
        "warm-up" if step < settings.warmup else f"{step - settings.warmup + 1}/{settings.steps}"
    )
    print(f"{side} step {label}: {record}", flush=True)


def parse(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first, per side")
    parser.add_argument("--lora", action="store_true", help="LoRA on both sides (else full)")
    parser.add_argument("--lr", type=float, default=1e-6, help="learning rate of both sides")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--model", default="default", help="a local model directory")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dtype",
        choices=["auto", "float32", "bfloat16"],
        default="auto",
        help="both sides' precision; auto: bfloat16 where the CPU has native bf16, else float32",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be at least 1 and --warmup at least 0")
    if args.threads and args.threads != torch.get_num_threads():
        torch.set_num_threads(args.threads)  # only then: it slows attention (docs/rollout.md)
    return Settings(
        model=resolve_model(args.model),
        steps=args.steps,
        warmup=args.warmup,
        lora=args.lora,
        lr=args.lr,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        dtype=args.dtype if args.dtype != "auto" else ("bfloat16" if native_bf16() else "float32"),
    )


def main(argv: Sequence[str] | None = None) -> None:
    settings = parse(argv)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    data = problems(settings.total_steps * PROMPTS_PER_STEP, settings.seed)
    print(settings, flush=True)
    trl_records = run_trl(settings, data)
    gc.collect()
    honing_records = asyncio.run(run_honing(settings, data))
    trl_s = statistics.median(r.seconds for r in trl_records)
    honing_s = statistics.median(r.seconds for r in honing_records)
    print(f"grpo step: trl {trl_s:.2f} s; honing {honing_s:.2f} s; speedup {trl_s / honing_s:.1f}x")


if __name__ == "__main__":
    main()
