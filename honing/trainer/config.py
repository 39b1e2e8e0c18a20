"""The learner's configuration section: algorithm, optimiser, schedule, batching, LoRA, precision,
and the critic of advantage `gae` (gamma, lam, critic_lr, value_coef, value_clip); and the run's
`risk` section: how risk is priced in training and how exploration follows it.

Covered: `LearnerConfig` and its `LoraSettings`; `RiskSettings` and its `ExploreSettings`. Not
covered: the run's other sections (rollout, tasks, evaluation, checkpoints), which the closed
loop's config composes next to these.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from honing.config import StrictModel
from honing.rl import Aggregation, KLEstimator, PolicyLossKind

AdvantageEstimator = Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "passk", "gae", "distill"]

# The settings of the critic (advantage gae) alone: changing one for another estimator is an error
# (it would have no effect), not a silent no-op.
CRITIC_SETTINGS = ("gamma", "lam", "critic_lr", "value_coef", "value_clip")
CRITIC_LR_FACTOR = 10.0


class LoraSettings(StrictModel):
    """A LoRA adapter (Hu et al. 2021) on the named linear modules; the base stays frozen."""

    r: int = Field(16, ge=1, description="Rank of the adapter's A and B matrices.")
    alpha: float = Field(32.0, gt=0, description="Scale numerator: the update is alpha / r * B A.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter's input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="Names (suffixes) of the linear modules that get an adapter.",
    )
    top_layers: int | None = Field(
        None,
        ge=1,
        description="Adapt only the last N decoder layers (None: all). The backward pass then "
        "stops at the lowest adapted layer: a step costs much less on a CPU.",
    )


class LearnerConfig(StrictModel):
    """How the learner turns groups of trajectories into one optimiser step."""

    advantage: AdvantageEstimator = Field(
        "grpo",
        description="Advantage estimator over each group's outcome rewards (honing.rl.advantages); "
        "passk: train pass@passk_k rather than pass@1, for tasks the policy rarely solves "
        "(binary rewards; honing.rl.passk_advantages); "
        "gae: PPO with a learned critic (a value head on the policy's last hidden states); "
        "distill: on-policy distillation from `teacher`, per token, no reward (`honing distill`).",
    )
    passk_k: int = Field(
        4,
        ge=1,
        description="advantage passk: the k of pass@k, below the group size n (with k = n every "
        "mixed group passes at k and trains nothing); 1 is GRPO with the population std.",
    )
    teacher: str | None = Field(
        None,
        description="advantage distill: the teacher model (a directory or built-in name, with the "
        "student's tokenizer); each sampled token's advantage is its teacher logprob minus the "
        "student's (honing.rl.distill_advantages).",
    )
    distill_clip: float | None = Field(
        None,
        gt=0,
        description="advantage distill: bound each token's |advantage| (None: unbounded).",
    )
    gamma: float = Field(
        1.0,
        ge=0,
        le=1,
        description="gae: discount per model token (1, as verl and OpenRLHF: the outcome reaches "
        "every token of an episode undiscounted).",
    )
    lam: float = Field(
        0.95,
        ge=0,
        le=1,
        description="gae: GAE's lambda (OpenRLHF's default; verl uses 1.0): lower leans on the "
        "critic, less variance and more bias.",
    )
    critic_lr: float | None = Field(
        None,
        gt=0,
        description="gae: peak learning rate of the value head's own AdamW (same schedule shape "
        "as the policy's); None: 10 x lr (verl's defaults give the critic 10x the actor's rate).",
    )
    value_coef: float = Field(
        0.1,
        ge=0,
        description="gae: weight of the value loss's gradient into the shared trunk (the policy's "
        "trained weights); the head itself always learns from the full value loss. 0: the head "
        "is a probe on the policy's features and the critic never moves the policy.",
    )
    value_clip: float = Field(
        0.2,
        gt=0,
        description="gae: a value may move at most this far from its value at scoring time "
        "(PPO's clipped value loss, honing.rl.value_loss).",
    )
    policy_loss: PolicyLossKind = Field(
        "ppo",
        description="The policy loss (honing.rl.losses), each decoupled from the behaviour policy "
        "by the capped importance weight: ppo (Schulman et al. 2017, clip-higher as DAPO); gspo "
        "(Zheng et al. 2025, 'Group Sequence Policy Optimization': one length-normalised ratio "
        "per sequence, clipped per sequence; needs aggregation: sequence, and far smaller clip "
        "bounds than PPO's, the paper's are eps_low 3e-4, eps_high 4e-4: set them); cispo "
        "(MiniMax-M1, 2025: the ratio clipped to [1 - eps_low, 1 + eps_high] as a detached "
        "weight, every token keeps its gradient; the paper sets no lower bound, eps_low >= 1).",
    )
    aggregation: Aggregation = Field(
        "token",
        description="How per-token losses are averaged: token (DAPO), sequence (GRPO), "
        "constant (Dr.GRPO, divides by norm_len).",
    )
    norm_len: int = Field(
        512,
        ge=1,
        description="The fixed normaliser of aggregation 'constant': use the generation budget "
        "(max_new_tokens).",
    )
    eps_low: float = Field(0.2, ge=0, description="Lower clip bound of the ratio: 1 - eps_low.")
    eps_high: float = Field(
        0.28, ge=0, description="Upper clip bound: 1 + eps_high (clip-higher when > eps_low)."
    )
    process_weight: float = Field(
        0.0,
        ge=0,
        description="Weight of the turn-level (process) advantages added to each turn's tokens "
        "(MT-GRPO, honing.rl.turn_level_advantages); with gae, the weight of each turn's process "
        "reward placed on its last token. 0 uses the outcome alone.",
    )
    process_components: list[str] = Field(
        default_factory=lambda: ["well_formed", "tool_ok", "constraints"],
        description="Reward components whose sum is a turn's process reward.",
    )
    kl_coef: float = Field(
        0.0, ge=0, description="Weight of the KL term to the reference model; 0 loads no reference."
    )
    kl_estimator: KLEstimator = Field("k3", description="KL estimator (honing.rl.kl).")
    dynamic_sampling: bool = Field(
        True,
        description="Drop groups whose rewards are all equal (DAPO): they carry no signal "
        "(see keep_process_groups for those whose turns differ).",
    )
    scale_by_kept: bool = Field(
        False,
        description="With dynamic_sampling: take each update's step at lr x the share of its "
        "groups kept (kept / drawn), so that an update left with one group of eight moves an "
        "eighth as far, as GRPO's mean over every group's tokens would; off: a full step on "
        "whatever was kept (docs/training.md, 'Keeping the best checkpoint').",
    )
    keep_process_groups: bool = Field(
        False,
        description="With dynamic_sampling and process_weight > 0: keep a group whose outcomes "
        "are equal when its process rewards differ at some turn k (among its k-th turns), so "
        "that some process advantage the loss would use is nonzero "
        "(honing.trainer.batching.process_signal); the update counts such groups apart, in "
        "process_only_groups. Off by default: on the quickstart it cost RL gain "
        "(docs/training.md, 'Signal where groups starve').",
    )
    lr: float = Field(1e-5, gt=0, description="Peak learning rate of AdamW.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW's decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW's (beta1, beta2).")
    warmup_steps: int = Field(0, ge=0, description="Updates of linear warm-up from 0 to lr.")
    schedule: Literal["constant", "cosine"] = Field(
        "constant", description="Learning rate after warm-up: constant, or cosine decay to 0."
    )
    schedule_steps: int = Field(
        1000,
        ge=1,
        description="Updates over which the cosine schedule decays (warm-up included).",
    )
    max_grad_norm: float = Field(
        1.0, gt=0, description="Clip the global gradient norm to this value."
    )
    micro_batch_tokens: int = Field(
        4096,
        ge=1,
        description="Padded tokens per forward pass; a longer sequence gets a pass of its own.",
    )
    temperature: float = Field(
        1.0,
        ge=0,
        description="Temperature the logprobs are scored at: the sampling temperature (0 is "
        "greedy and scored at 1, as the engine does). honing train takes it from "
        "agent.temperature, and setting it there is an error.",
    )
    shared_prefix: bool = Field(
        True,
        description="Run the prompt prefix a micro-batch's rows share once (exact; a group's n "
        "samples of one prompt cost it once).",
    )
    lora: LoraSettings | None = Field(None, description="A LoRA adapter; None trains every weight.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="float32, or bfloat16 autocast for the forward pass (weights stay float32). "
        "auto: the engine's dtype when the run states one, else float32 "
        "(honing.trainer.precision). bfloat16 pays only on CPUs with native bf16 (AVX512-BF16, "
        "AMX) or on GPUs; without it the CPU emulates bf16 and an update is several times slower.",
    )
    max_importance_weight: float = Field(
        2.0,
        ge=1,
        description="Cap of the decoupled-PPO importance weight exp(proximal - behaviour).",
    )
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="Drop tokens more than this many policy versions old; None keeps all.",
    )
    zero_grad_warn_after: int = Field(
        3, ge=1, description="Warn after this many consecutive updates with a zero gradient."
    )

    @model_validator(mode="after")
    def _check(self) -> LearnerConfig:
        b1, b2 = self.betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"betas {self.betas}: each must be in [0, 1)")
        if self.policy_loss == "gspo" and self.aggregation != "sequence":
            raise ValueError(
                f"policy_loss gspo averages over sequences (its ratio is one per sequence): set "
                f"aggregation: sequence, not {self.aggregation!r}"
            )
        if self.advantage == "distill" and self.teacher is None:
            raise ValueError(
                "advantage distill needs a teacher: set learner.teacher to a model directory "
                "(e.g. the RL-trained export)"
            )
        if self.advantage != "distill" and (
            self.teacher is not None or self.distill_clip is not None
        ):
            raise ValueError(
                f"learner.teacher and distill_clip are for advantage distill, not "
                f"{self.advantage!r}: set advantage: distill, or drop them"
            )
        if self.advantage == "distill" and self.process_weight > 0:
            raise ValueError(
                "advantage distill takes each token's advantage from the teacher; "
                "process_weight adds reward-based ones: drop process_weight"
            )
        if self.advantage != "passk" and self.passk_k != type(self).model_fields["passk_k"].default:
            raise ValueError(
                f"learner.passk_k is {self.passk_k}, but it sets the k of advantage passk and "
                f"does nothing with advantage {self.advantage!r}: set advantage: passk, or drop it"
            )
        if self.advantage != "gae":
            changed = [
                name
                for name in CRITIC_SETTINGS
                if getattr(self, name) != type(self).model_fields[name].default
            ]
            if changed:
                raise ValueError(
                    f"{', '.join(changed)} configure the critic of advantage 'gae' and do "
                    f"nothing with advantage {self.advantage!r}: set advantage: gae, or drop them"
                )
        return self

    @property
    def critic_learning_rate(self) -> float:
        """The value head's peak learning rate: `critic_lr`, or 10 x `lr` when it is None. Why
        10x: the head starts at zero and must reach the scale of the returns within a few
        updates, while the trunk it reads is pretrained; verl (1e-5 vs 1e-6) and OpenRLHF (9e-6
        vs 5e-7) give their critics 10-20x the actor's rate."""
        return self.critic_lr if self.critic_lr is not None else CRITIC_LR_FACTOR * self.lr


RiskMode = Literal["off", "penalty", "constrained"]


class ExploreSettings(StrictModel):
    """Per-task sampling temperature (honing.rl.risk.explore_temperature): hotter on tasks the
    policy rarely solves, cooler where its episodes take risky actions. Each task's history is
    its last `window` training episodes."""

    enabled: bool = Field(False, description="Off: every task samples at agent.temperature.")
    rarely: float = Field(
        0.25, ge=0, le=1, description="A task solved less often than this is sampled hotter."
    )
    boost: float = Field(
        0.5, ge=0, description="A never-solved task samples at temperature x (1 + boost)."
    )
    caution: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Temperature x (1 - caution x the task's risk rate): cooler where risk "
        "events cluster.",
    )
    min_well_formed: float = Field(
        0.5,
        ge=0,
        le=1,
        description="A rarely solved task is sampled hotter only while at least this share of "
        "its recent episodes were well-formed (0: always).",
    )
    low: float = Field(0.3, ge=0, description="Lowest temperature a task gets.")
    high: float = Field(1.5, ge=0, description="Highest temperature a task gets.")
    window: int = Field(16, ge=1, description="Episodes of a task's history that count.")

    @model_validator(mode="after")
    def _check(self) -> ExploreSettings:
        if self.low > self.high:
            raise ValueError(f"low {self.low} > high {self.high}")
        return self


class RiskSettings(StrictModel):
    """How the episodes' risk cost (honing.risk: the severities of their risk events) is
    used in training. Risk is detected, stored and reported in every mode."""

    mode: RiskMode = Field(
        "off",
        description="off: measured, not trained on; penalty: train on outcome - weight x cost; "
        "constrained: keep the mean cost under `budget` with a learned Lagrange multiplier.",
    )
    weight: float = Field(
        1.0,
        ge=0,
        description="penalty: the fixed weight of the cost (1: one high-severity event costs as "
        "much as the outcome is worth); constrained: the multiplier's starting value.",
    )
    budget: float = Field(
        0.05,
        ge=0,
        description="constrained: the mean risk cost per episode to stay under (0.05: about one "
        "high-severity event in 20 episodes).",
    )
    multiplier_lr: float = Field(
        2.0,
        gt=0,
        description="constrained: the multiplier's step per unit of (mean cost - budget), each "
        "update.",
    )
    max_multiplier: float = Field(
        5.0, gt=0, description="constrained: the multiplier never exceeds this."
    )
    explore: ExploreSettings = ExploreSettings()

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        return "off" if value is False else value  # YAML reads a bare `off` as false

    @model_validator(mode="after")
    def _check(self) -> RiskSettings:
        unused = {
            "off": ("weight", "budget", "multiplier_lr", "max_multiplier"),
            "penalty": ("budget", "multiplier_lr", "max_multiplier"),
            "constrained": (),
        }[self.mode]
        changed = [
            name for name in unused if getattr(self, name) != type(self).model_fields[name].default
        ]
        if changed:
            raise ValueError(
                f"{', '.join(changed)} do nothing in risk mode {self.mode!r}: set mode: "
                "penalty or constrained, or drop them"
            )
        return self
