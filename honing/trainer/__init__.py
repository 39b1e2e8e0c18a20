"""The trainer layer: learner, weight sync, checkpoints, SFT and the closed loop.

    config      LearnerConfig, LoraSettings
    batching    batch_from_groups (-> TrainBatch of MicroBatch), micro_batches, drop_zero_variance,
                pack
    learner     Learner (.update -> LearnerStats, .logprobs, .weights, .save/.load),
                check_logprob_match
    sync        sync_weights (-> SyncReport): in process (state dict), or to servers (safetensors
                directory or LoRA adapter + reload request), timed and logged
    checkpoint  save_checkpoint / latest_checkpoint / load_checkpoint: atomic, exact resume
    sft         SftConfig, run_sft: supervised fine-tuning on chat JSONL (assistant tokens only)
    traces      tool-use SFT traces from tasks' reference actions played in the real envs
    run_config  TrainConfig: the YAML of `honing train`
    sources     task sources of a run; held-out sets kept unseen
    warm        the warm start of `honing train` (SFT before RL)
    loop        train(): the closed loop with phases, held-out evals, forgetting, checkpoints
    rescore     `honing store rescore`: a run's tasks and settings, every trajectory replayed

Not covered: several PPO epochs per batch, a critic separate from the policy (advantage gae puts a
value head on the policy's trunk), asynchronous overlap of generation and training,
multi-process (FSDP) learners.
"""

from honing.trainer.batching import (
    MicroBatch,
    TrainBatch,
    batch_from_groups,
    drop_zero_variance,
    micro_batches,
    pack,
)
from honing.trainer.config import AdvantageEstimator, LearnerConfig, LoraSettings
from honing.trainer.learner import Learner, LearnerStats, MatchReport, check_logprob_match
from honing.trainer.sync import SyncReport, sync_weights

__all__ = [
    "AdvantageEstimator",
    "Learner",
    "LearnerConfig",
    "LearnerStats",
    "LoraSettings",
    "MatchReport",
    "MicroBatch",
    "SyncReport",
    "TrainBatch",
    "batch_from_groups",
    "check_logprob_match",
    "drop_zero_variance",
    "micro_batches",
    "pack",
    "sync_weights",
]
