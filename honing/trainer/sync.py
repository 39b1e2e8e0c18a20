"""Weight sync from the learner to an engine in the same process, timed.

    sync_weights   learner.weights() -> engine.update_weights(WeightUpdate(version, state_dict))
    SyncReport     what was sent and how long it took

In-process only: the hf engine copies the tensors into its own model (for LoRA only the adapted
modules' merged weights travel; the frozen rest is already there). The policy version sent is the
learner's, which counts optimiser steps, so it increments on every sync that follows an update.
Not covered: servers (safetensors files plus a reload request, LoRA adapter hot-load).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from honing.rollout.engines.base import Engine, WeightUpdate
from honing.trainer.learner import Learner

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SyncReport:
    version: int
    tensors: int
    bytes: int
    seconds: float


async def sync_weights(learner: Learner, engine: Engine) -> SyncReport:
    """Send the learner's weights to `engine` as policy version `learner.version`; logged."""
    start = time.perf_counter()
    weights = learner.weights()
    await engine.update_weights(WeightUpdate(version=learner.version, state_dict=weights))
    report = SyncReport(
        version=learner.version,
        tensors=len(weights),
        bytes=sum(t.numel() * t.element_size() for t in weights.values()),
        seconds=time.perf_counter() - start,
    )
    log.info(
        "weight sync v%d: %d tensors, %.1f MB in %.3f s",
        report.version,
        report.tensors,
        report.bytes / 1e6,
        report.seconds,
    )
    return report
