"""The trainer layer: the learner that turns groups of trajectories into weight updates.

    config     LearnerConfig, LoraSettings
    batching   batch_from_groups (-> TrainBatch of MicroBatch), micro_batches, drop_zero_variance,
               pack
    learner    Learner (.update -> LearnerStats, .logprobs, .weights), check_logprob_match
    sync       sync_weights (-> SyncReport): learner -> in-process engine, timed and logged

Not covered yet: checkpoints and exact resume, SFT, weight sync to servers, the closed loop.
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
