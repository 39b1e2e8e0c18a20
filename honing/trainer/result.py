"""What `honing train` reports: one update (`StepReport`, its log line) and the whole run
(`TrainResult`, written as RUN/result.json by `result_json`).

    report.line(total, eta_s)    "step 3/7 [main] success 50% (infra failures 0) reward 0.512 | …"
    result.line("quickstart")    "quickstart: held-out success base 0% → warm start 38% → RL …"

Not covered: computing them (honing.trainer.loop), the held-out accounting (honing.trainer.gains),
the per-update record of metrics.jsonl (`honing.trainer.run_dir.UpdateRecord`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from honing.observe.metrics import Signal
from honing.trainer.gains import Gains, account
from honing.trainer.heldout import Forgetting, percent
from honing.trainer.learner import LearnerStats, MatchReport
from honing.trainer.precision import RunPrecision
from honing.trainer.run_dir import BEFORE, EvalPoint, UpdateRecord, numeric_fields


@dataclass(frozen=True)
class StepReport:
    """What one update did, for progress and metrics."""

    step: int
    phase: str
    sources: dict[str, int]  # groups per source
    episodes: int
    success_rate: float | None  # over the episodes the infrastructure did not fail; None: none
    reward_mean: float | None  # ... the same episodes
    infra_errors: int  # episodes the infrastructure failed: left out of both
    rollout_s: float
    update_s: float
    sync_s: float
    stats: LearnerStats

    def record(
        self, signal: Signal, staleness: dict[str, int], scalars: dict[str, float]
    ) -> UpdateRecord:
        """Its line of metrics.jsonl (and `update` event): with the update's learning signal,
        staleness counts (`{"<lag>": count}`) and scalars (throughput, unaided answers)."""
        prefix = "train/unaided_answers/domain/"
        return UpdateRecord(
            step=self.step,
            phase=self.phase,
            episodes=self.episodes,
            success_rate=self.success_rate,
            reward_mean=self.reward_mean,
            infra_errors=self.infra_errors,
            rollout_s=self.rollout_s,
            update_s=self.update_s,
            sync_s=self.sync_s,
            learner=numeric_fields(self.stats),
            signal=numeric_fields(signal),
            sources=self.sources,
            staleness={int(lag): n for lag, n in staleness.items()},
            tokens_per_s=scalars.get("throughput/tokens_per_s", 0.0),
            episodes_per_s=scalars.get("throughput/episodes_per_s", 0.0),
            unaided_answers={
                k.removeprefix(prefix): v for k, v in scalars.items() if k.startswith(prefix)
            },
            time=time.time(),
        )

    def line(self, total: int, eta_s: float) -> str:
        """The update's log line: success, reward, learner figures, timings and the ETA."""
        s = self.stats
        reward = "n/a" if self.reward_mean is None else f"{self.reward_mean:.3f}"
        return (
            f"step {self.step}/{total} [{self.phase}] success {percent(self.success_rate)} "
            f"(infra failures {self.infra_errors}) reward {reward} | loss {s.loss:.4f} "
            f"entropy {s.entropy:.3f} grad {s.grad_norm:.3f} groups kept "
            f"{s.groups - s.dropped_groups}/{s.groups} | rollout {self.rollout_s:.0f}s update "
            f"{self.update_s:.0f}s sync {self.sync_s:.2f}s | ETA {eta_s / 60:.1f} min"
        )


@dataclass
class TrainResult:
    """The run's outcome: held-out success before and after, per set and pooled."""

    run_dir: Path
    steps: int
    before: dict[str, EvalPoint]
    after: dict[str, EvalPoint]
    forgetting: list[Forgetting]
    elapsed_s: float
    evals: list[EvalPoint] = field(default_factory=list)
    precision: RunPrecision | None = None
    match: MatchReport | None = None  # the start-up check: engine vs learner logprobs

    @staticmethod
    def of(
        run_dir: Path,
        steps: int,
        evals: list[EvalPoint],
        forgetting: list[Forgetting],
        elapsed_s: float,
        precision: RunPrecision | None,
        match: MatchReport | None,
    ) -> TrainResult:
        """The result of a run with these evaluations: "before" is the evaluation before
        training, "after" the last one (the latest step-0 one when no update was evaluated)."""
        last = max((p.step for p in evals), default=0)
        after = {p.set: p for p in evals if p.step == last}
        return TrainResult(
            run_dir=run_dir,
            steps=steps,
            before={p.set: p for p in evals if p.phase == BEFORE},
            after=after,
            forgetting=list(forgetting),
            elapsed_s=elapsed_s,
            evals=list(evals),
            precision=precision,
            match=match,
        )

    @staticmethod
    def pooled(points: dict[str, EvalPoint]) -> float | None:
        total = sum(p.total for p in points.values())
        return sum(p.passed for p in points.values()) / total if total else None

    @property
    def gains(self) -> Gains:
        """Base -> warm start -> RL, pooled over the held-out sets, with the RL gain's interval."""
        return account(self.evals)

    def line(self, name: str) -> str:
        """`NAME: held-out success base X% → warm start W% → RL Y% (RL +Z pts, 95% CI a..b;
        n=N; infra failures F) in M min` (honing.trainer.gains)."""
        return self.gains.line(name, self.elapsed_s / 60)


def result_json(result: TrainResult, name: str) -> dict[str, Any]:
    """RUN/result.json: the last line, its figures, before/after per set, forgetting, the
    precision and the start-up check."""

    def point(p: EvalPoint) -> dict[str, Any]:
        return p.model_dump(mode="json", exclude={"outcomes"})

    return {
        "steps": result.steps,
        "elapsed_s": result.elapsed_s,
        "line": result.line(name),
        "gains": result.gains.summary(),
        "heldout_before": TrainResult.pooled(result.before),
        "heldout_after": TrainResult.pooled(result.after),
        "before": {k: point(v) for k, v in result.before.items()},
        "after": {k: point(v) for k, v in result.after.items()},
        "forgetting": [f.model_dump(mode="json") for f in result.forgetting],
        "precision": None if result.precision is None else result.precision.model_dump(),
        "logprob_check": None if result.match is None else asdict(result.match),
    }
