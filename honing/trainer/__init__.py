"""The trainer layer: learner, weight sync, checkpoints, SFT and the closed loop.

    learner, config    Learner (.update, .logprobs, .weights, .save/.load), LearnerConfig
    batching, sync     groups -> TrainBatch of MicroBatch; sync_weights to the engine or servers
    checkpoint         save / latest / load checkpoints: atomic, exact resume
    remote             a run directory mirrored to an fsspec URL (s3://), committed, pulled
    sft, traces, warm  SFT on chat JSONL, reference-action traces, the warm start of a run
    run_config, run_dir, sources   TrainConfig (the YAML), the run directory, task sources
    loop, heldout, result          train(): the closed loop, its held-out evaluation, its reports
    gains, precision               the held-out accounting; the run's dtype and start-up check
    rescore            `honing store rescore`: every trajectory of a run replayed

Not covered: several PPO epochs per batch, a critic separate from the policy (advantage gae puts a
value head on the policy's trunk), asynchronous overlap of generation and training,
multi-process (FSDP) learners.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Loaded on first use, so that the torch-free modules (run_dir, run_config, gains, sources)
# can be imported without torch: `honing report` and `honing export` read runs through them.
_HOMES = {
    "batching": ("MicroBatch", "TrainBatch", "batch_from_groups", "drop_zero_variance",
                 "micro_batches", "pack"),
    "config": ("AdvantageEstimator", "LearnerConfig", "LoraSettings"),
    "learner": ("Learner", "LearnerStats", "MatchReport", "check_logprob_match"),
    "sync": ("SyncReport", "sync_weights"),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'honing.trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(f"honing.trainer.{module}"), name)


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
