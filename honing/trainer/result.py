"""What `honing train` reports: each update (its `UpdateRecord`, log line, events, metrics and
warnings) and the whole run (`TrainResult`, written as RUN/result.json by `finish_run`).

    update_line(record, total, eta_s)  "step 3/7 [main] success 50% (infra failures 0) reward …"
    result.line("quickstart")          "quickstart: held-out success base 0% → warm start 38% → …"

Not covered: computing them (honing.trainer.loop), the held-out accounting (honing.trainer.gains),
the layout of metrics.jsonl and result.json's place (honing.trainer.run_dir).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from honing.observe.events import emit
from honing.observe.metrics import Metrics, Outcomes, Signal, Timings, signal_warning
from honing.observe.progress import RunProgress
from honing.observe.sinks import MetricSink, log_to
from honing.sandbox import PoolUsage
from honing.trainer.gains import Gains, account
from honing.trainer.heldout import Forgetting, percent
from honing.trainer.learner import LearnerStats, MatchReport
from honing.trainer.precision import RunPrecision
from honing.trainer.run_dir import BEFORE, RESULT_FILE, EvalPoint, UpdateRecord, numeric_fields

log = logging.getLogger(__name__)

_UNAIDED = "train/unaided_answers/domain/"


def update_record(
    step: int,
    phase: str,
    sources: dict[str, int],
    episodes: int,
    judged: Outcomes,
    timings: Timings,
    stats: LearnerStats,
    signal: Signal,
    staleness: dict[str, int],
    scalars: dict[str, float],
    risk: dict[str, float],
) -> UpdateRecord:
    """One update's line of metrics.jsonl (and `update` event): its outcomes, timings, learner
    figures, learning signal, staleness counts (`{"<lag>": count}`), scalars (throughput,
    unaided answers, a team's `team/*`, the curriculum's `curriculum/*`) and risk (rate, cost,
    weight, multiplier)."""
    return UpdateRecord(
        step=step,
        phase=phase,
        episodes=episodes,
        success_rate=judged.success,
        reward_mean=judged.reward,
        infra_errors=judged.infra_failures,
        rollout_s=timings.rollout_s,
        update_s=timings.update_s,
        sync_s=timings.sync_s,
        learner=numeric_fields(stats),
        signal=numeric_fields(signal),
        sources=sources,
        staleness={int(lag): n for lag, n in staleness.items()},
        tokens_per_s=scalars.get("throughput/tokens_per_s", 0.0),
        episodes_per_s=scalars.get("throughput/episodes_per_s", 0.0),
        unaided_answers={
            k.removeprefix(_UNAIDED): v for k, v in scalars.items() if k.startswith(_UNAIDED)
        },
        risk=dict(risk),
        team={k.removeprefix("team/"): v for k, v in scalars.items() if k.startswith("team/")},
        curriculum={
            k.removeprefix("curriculum/"): v
            for k, v in scalars.items()
            if k.startswith("curriculum/")
        },
        time=time.time(),
    )


def update_line(record: UpdateRecord, total: int, eta_s: float) -> str:
    """The update's log line: success, reward, learner figures, timings and the ETA."""
    s = record.learner
    reward = "n/a" if record.reward_mean is None else f"{record.reward_mean:.3f}"
    kept = int(s.get("groups", 0) - s.get("dropped_groups", 0))
    process_only = int(s.get("process_only_groups", 0))
    kept_for = f" ({process_only} for process rewards)" if process_only else ""
    rate = record.risk.get("rate")
    risk = "" if rate is None else f" risk {percent(rate)}"
    if rate is not None and "multiplier" in record.risk:
        risk += f" (multiplier {record.risk['multiplier']:.2f})"
    return (
        f"step {record.step}/{total} [{record.phase}] success {percent(record.success_rate)} "
        f"(infra failures {record.infra_errors}) reward {reward}{risk} | loss "
        f"{s.get('loss', 0.0):.4f} "
        f"entropy {s.get('entropy', 0.0):.3f} grad {s.get('grad_norm', 0.0):.3f} groups kept "
        f"{kept}/{int(s.get('groups', 0))}{kept_for} | rollout {record.rollout_s:.0f}s update "
        f"{record.update_s:.0f}s sync {record.sync_s:.2f}s | ETA {eta_s / 60:.1f} min"
    )


def publish_update(
    record: UpdateRecord,
    metrics: Metrics,
    used: PoolUsage,
    sinks: Sequence[MetricSink],
    progress: RunProgress | None,
) -> None:
    """One update's events (`sandbox`; then `update`, its record, the last of the update's
    events: the in-process alerts evaluate on it), its metrics to the sinks, the live line."""
    fields = record.to_json()
    del fields["step"], fields["time"]  # an event has its own
    emit("sandbox", record.step, cells=used.cells, busy_fraction=used.busy_fraction,
         queued=used.queued, runs=used.runs)  # fmt: skip
    emit("update", record.step, **fields)
    log_to(sinks, record.step, metrics.scalars, metrics.histograms)
    if progress is not None:
        progress.step(
            record.step,
            success=record.success_rate,
            infra=record.infra_errors,
            reward=record.reward_mean,
            tokens_per_s=record.tokens_per_s or 0.0,
            episodes_per_s=record.episodes_per_s or 0.0,
        )


def warn_update(record: UpdateRecord, signals: Sequence[Signal], stats: LearnerStats) -> None:
    """Log and emit an update's warnings: a learning signal starved for several updates, and
    an update whose every episode the infrastructure failed."""
    entropy = stats.entropy if stats.stepped else None
    if entropy is None and signals:  # no step: what the episodes' own tokens say
        entropy = signals[-1].sampled_entropy
    warnings = [signal_warning(signals, entropy)]
    if record.episodes and record.infra_errors == record.episodes:
        warnings.append(
            f"the infrastructure failed all {record.episodes} episodes of update "
            f"{record.step}: no success or reward to report, nothing to learn from"
        )
    for warning in filter(None, warnings):
        log.warning("%s", warning)
        emit("warning", record.step, message=warning)


@dataclass(frozen=True)
class ChosenCheckpoint:
    """checkpoint.keep_best: the update the run exports, chosen on validation."""

    step: int  # the update (its checkpoint is kept)
    validation: float  # its validation success, pooled over the sets
    last: int  # the run's last update
    start: float | None = None  # the warm start's (or base model's) validation success

    def describe(self) -> str:
        """`exported: update 5 of 7, best on validation (64%)`."""
        return (
            f"exported: update {self.step} of {self.last}, best on validation "
            f"({percent(self.validation)})"
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
    trained: str = "RL"  # the last stage's name in the line ("distilled": advantage distill)
    chosen: ChosenCheckpoint | None = None  # keep_best: the update exported and reported

    @staticmethod
    def of(
        run_dir: Path,
        steps: int,
        evals: list[EvalPoint],
        forgetting: list[Forgetting],
        elapsed_s: float,
        precision: RunPrecision | None,
        match: MatchReport | None,
        trained: str = "RL",
        chosen: ChosenCheckpoint | None = None,
    ) -> TrainResult:
        """The result of a run with these evaluations: "before" is the evaluation before
        training, "after" the last one (the latest step-0 one when no update was evaluated), or
        the one of the `chosen` update (keep_best)."""
        last = max((p.step for p in evals), default=0) if chosen is None else chosen.step
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
            trained=trained,
            chosen=chosen,
        )

    @staticmethod
    def pooled(points: dict[str, EvalPoint]) -> float | None:
        total = sum(p.total for p in points.values())
        return sum(p.passed for p in points.values()) / total if total else None

    @property
    def gains(self) -> Gains:
        """Base -> warm start -> RL, pooled over the held-out sets, with the RL gain's interval."""
        return account(self.evals, None if self.chosen is None else self.chosen.step)

    def line(self, name: str) -> str:
        """`NAME: held-out success base X% → warm start W% → RL Y% (RL +Z pts, 95% CI a..b;
        n=N; infra failures F) in M min` (honing.trainer.gains), then `; exported: update K of
        N, best on validation (V%)` when the checkpoint was chosen on validation."""
        line = self.gains.line(name, self.elapsed_s / 60, self.trained)
        return line if self.chosen is None else f"{line}; {self.chosen.describe()}"


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
        "exported": None if result.chosen is None else asdict(result.chosen),
        "precision": None if result.precision is None else result.precision.model_dump(),
        "logprob_check": None if result.match is None else asdict(result.match),
    }


def finish_run(result: TrainResult, name: str) -> None:
    """Write RUN/result.json and emit `run_end`."""
    record = result_json(result, name)
    (result.run_dir / RESULT_FILE).write_text(json.dumps(record, indent=2))
    emit(
        "run_end",
        result.steps,
        steps=result.steps,
        elapsed_s=result.elapsed_s,
        heldout_before=TrainResult.pooled(result.before),
        heldout_after=TrainResult.pooled(result.after),
        gains=record["gains"],
        line=record["line"],
        exported_step=result.steps if result.chosen is None else result.chosen.step,
    )
