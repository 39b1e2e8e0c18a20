"""The closed loop of `honing train`: rollouts -> rewards -> store -> update -> weight sync, with
held-out evaluation, phases, forgetting checks and exact resume.

    result = asyncio.run(train(config))                   # a fresh run into config.out
    result = asyncio.run(train(config, resume=True))      # continue from its latest checkpoint

One update draws `groups_per_step` tasks (`TaskMixer`), plays `n` episodes of each through the
scheduler, stores the groups, trains on them and syncs the weights; generation and training
alternate (on-policy). Held-out sets are evaluated before training, every `eval.every` updates,
at each phase's end and at the end. The run directory is `honing.trainer.run_dir`'s; the
events go to its event log (`honing.observe`). docs/training.md describes the loop, the run
directory and resume (bit-exact with `deterministic: true`).

Not covered: overlapping generation and training, multi-process learners.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from honing.config import StrictModel
from honing.envs import registry
from honing.eval.metrics import Episode
from honing.eval.model import evaluate_engine
from honing.observe.events import EventLog, emit, truncate_events, use
from honing.observe.metrics import (
    Signal,
    Timings,
    episode_fields,
    eval_scalars,
    learning_signal,
    outcomes,
    signal_warning,
    staleness,
    staleness_counts,
    update_metrics,
)
from honing.observe.progress import RunProgress
from honing.observe.sinks import MetricSink, close_sinks, log_to, make_sinks
from honing.records import Trajectory
from honing.rollout.agent import AgentConfig, Gate, run_episode
from honing.rollout.engines.base import Engine
from honing.rollout.scheduler import Scheduler, SchedulerConfig
from honing.sandbox import PoolUsage, SandboxPool
from honing.store import TrajectoryWriter
from honing.tasks.load import AnyTask, TaskSet
from honing.tasks.synthetic import UNSEEN_TAG
from honing.trainer.checkpoint import load_checkpoint, save_checkpoint
from honing.trainer.gains import Gains, account, tag_scores
from honing.trainer.learner import Learner, LearnerStats, MatchReport, check_logprob_match
from honing.trainer.precision import MATCH_THRESHOLD, SERVER, RunPrecision, decide
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import (
    BEFORE,
    EVENTS_FILE,
    RESULT_FILE,
    WARM_START,
    WEIGHTS_DIR,
    EvalPoint,
    RunDir,
    UpdateRecord,
    numeric_fields,
)
from honing.trainer.sources import heldout_sets, load_source
from honing.trainer.sync import sync_weights

log = logging.getLogger(__name__)

# -- records -----------------------------------------------------------------------------------


class Forgetting(StrictModel):
    """A held-out set that fell below its best after a phase."""

    set: str
    phase: str  # the phase after which it was measured
    best: float
    best_step: int
    now: float
    step: int
    best_infra: int = 0  # infra failures left out of `best`
    now_infra: int = 0  # ... and of `now`

    def fell(self) -> str:
        """`B% (step S; infra failures I) to N% (infra failures J)`."""
        return (
            f"{100 * self.best:.0f}% (step {self.best_step}; infra failures {self.best_infra}) "
            f"to {100 * self.now:.0f}% (infra failures {self.now_infra})"
        )


class LoopState(BaseModel):
    """What a checkpoint needs beyond the learner to continue exactly (mutable: the loop's own)."""

    model_config = ConfigDict(extra="forbid")

    step: int = 0  # updates done
    cursors: dict[str, tuple[int, int]] = Field(default_factory=dict)  # source -> (epoch, pos)
    store_rows: int = 0
    evals: list[EvalPoint] = Field(default_factory=list)
    forgetting: list[Forgetting] = Field(default_factory=list)
    elapsed_s: float = 0.0  # wall time of the run before this process


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


# -- tasks -------------------------------------------------------------------------------------


class TaskMixer:
    """Draws the tasks of each update: a source per slot by weight, then that source's next task
    in a seeded permutation (a new one each epoch). A pure function of (seed, step, cursors)."""

    def __init__(self, sources: dict[str, TaskSet], weights: dict[str, float], seed: int) -> None:
        self.sources = sources
        self.weights = weights
        self.seed = seed

    def _order(self, name: str, epoch: int) -> list[int]:
        order = list(range(len(self.sources[name].tasks)))
        random.Random(f"{self.seed}:{name}:{epoch}").shuffle(order)
        return order

    def draw(
        self, step: int, names: Sequence[str], count: int, cursors: dict[str, tuple[int, int]]
    ) -> list[tuple[str, AnyTask]]:
        """`count` (source, task) pairs for update `step`; advances `cursors` in place."""
        rng = random.Random(f"{self.seed}:step:{step}")
        chosen = rng.choices(list(names), weights=[self.weights[n] for n in names], k=count)
        out = []
        for name in chosen:
            epoch, pos = cursors.get(name, (0, 0))
            order = self._order(name, epoch)
            out.append((name, self.sources[name].tasks[order[pos]]))
            pos += 1
            if pos == len(order):
                epoch, pos = epoch + 1, 0
            cursors[name] = (epoch, pos)
        return out


# -- the loop ----------------------------------------------------------------------------------


class _EvalProgress:
    """Logs an evaluation's progress at each quarter (and shows it live, when shown)."""

    def __init__(self, name: str, total: int, live: RunProgress | None = None) -> None:
        self.name, self.total, self.live = name, total, live
        self.done = self.passed = self.infra = 0
        self.outcomes: dict[str, bool] = {}  # TASK#SAMPLE -> solved, judged episodes only

    def __call__(self, episode: Episode) -> None:
        self.done += 1
        self.passed += int(episode.success)
        self.infra += int(episode.infra_failed)
        if not episode.infra_failed:
            self.outcomes[f"{episode.task_id}#{episode.sample}"] = episode.success
        if self.live is not None:
            self.live.activity(f"eval {self.name} {self.done}/{self.total}")
        if self.done % max(1, self.total // 4) == 0 and self.done < self.total:
            log.info("eval %s: %d/%d episodes, %d passed, infra failures %d", self.name,
                     self.done, self.total, self.passed, self.infra)  # fmt: skip


class Trainer:
    """One run of the closed loop; `train()` is the entry point."""

    def __init__(
        self,
        config: TrainConfig,
        engine: Engine,
        pool: SandboxPool,
        state: LoopState,
        *,
        on_step: Callable[[StepReport], None] | None = None,
        on_eval: Callable[[EvalPoint], None] | None = None,
        sinks: Sequence[MetricSink] = (),
        progress: RunProgress | None = None,
        precision: RunPrecision | None = None,
    ) -> None:
        self.config = config
        self.precision = precision or decide(config)
        self.match: MatchReport | None = None
        self.engine = engine
        self.learner: Learner | None = None  # set by `train` once the starting model is known
        self.pool = pool
        self.state = state
        self.rundir = RunDir(config.out)
        self.run_dir = config.out
        self.on_step = on_step
        self.on_eval = on_eval
        self.sinks = sinks
        self.progress = progress
        self.env_config = config.env_config
        self.train_sets = {n: load_source(n, s) for n, s in config.train.items()}
        self.heldout = heldout_sets(config)  # unseen: nothing trained on asks their tasks
        self.mixer = TaskMixer(
            self.train_sets, {n: s.weight for n, s in config.train.items()}, config.seed
        )
        self.started = time.monotonic()
        self.first_step = state.step
        self.loop_started = self.started
        self.checked_match = False
        self.signals: list[Signal] = []  # each update's learning signal, for the warning

    # -- agent settings --

    def agent_config(self, temperature: float, seed: int | None) -> AgentConfig:
        return self.config.agent_config(temperature, seed)

    # -- evaluation --

    async def evaluate(self, phase: str) -> list[EvalPoint]:
        """Every held-out set, now; recorded in the state and `evals.jsonl`."""
        points = []
        agent = self.agent_config(self.config.eval.temperature, self.config.seed)
        step = self.state.step
        for name, taskset in self.heldout.items():
            total = len(taskset.tasks) * self.config.eval.k
            log.info("eval %s (%s): %d episodes", name, phase, total)

            def logged(trajectory: Trajectory, set_name: str = name) -> None:
                fields = episode_fields(trajectory, split="eval", set=set_name, staleness=None)
                emit("episode", step, **fields)

            progress = _EvalProgress(name, total, self.progress)
            report = await evaluate_engine(
                taskset,
                self.engine,
                self.pool,
                name=f"step {self.state.step}",
                k=self.config.eval.k,
                config=self.env_config,
                agent=agent,
                concurrency=self.config.engine.slots,  # the engine decodes them together
                on_episode=progress,
                on_trajectory=logged,
            )
            e2e = report.end_to_end
            point = EvalPoint(
                step=self.state.step,
                phase=phase,
                set=name,
                success=e2e.success_rate,
                passed=e2e.passed,
                total=e2e.total,
                infra_failed=e2e.infra_failed,
                seconds=report.elapsed_s,
                well_formed=report.single_step.well_formed_rate,
                mean_steps=report.trajectory.mean_steps,
                recovery=report.trajectory.recovery_rate,
                outcomes=progress.outcomes,
                by_tag=tag_scores(progress.outcomes, {t.id: t.tags for t in taskset.tasks}),
            )
            unseen = point.by_tag.get(UNSEEN_TAG)
            log.info(
                "eval %s (%s): success %s (%d/%d; infra failures %d)%s, well-formed actions %s, "
                "%.1f steps per episode, in %.0f s",
                name,
                phase,
                _percent(e2e.success_rate),
                e2e.passed,
                e2e.total,
                e2e.infra_failed,
                f"; worded as training never is {_percent(unseen[0] / unseen[1])} "
                f"({unseen[0]}/{unseen[1]})"
                if unseen and unseen[1]
                else "",
                _percent(point.well_formed),
                point.mean_steps or 0.0,
                report.elapsed_s,
            )
            points.append(point)
            self.state.evals.append(point)
            self.rundir.append_eval(point)
            emit("eval", step, **point.model_dump(mode="json", exclude={"step", "outcomes"}))
            log_to(self.sinks, step, eval_scalars(name, point.success, point.well_formed))
            if self.on_eval is not None:
                self.on_eval(point)
        return points

    def check_forgetting(self, phase: str, points: Sequence[EvalPoint]) -> list[Forgetting]:
        """Sets now more than the threshold below their best earlier measurement."""
        found = []
        for point in points:
            earlier = [
                p
                for p in self.state.evals
                if p.set == point.set and p.step < point.step and p.success is not None
            ]
            if not earlier or point.success is None:
                continue
            best = max(earlier, key=lambda p: (p.success or 0.0, -p.step))
            assert best.success is not None
            if best.success - point.success > self.config.eval.forgetting_threshold:
                event = Forgetting(
                    set=point.set,
                    phase=phase,
                    best=best.success,
                    best_step=best.step,
                    now=point.success,
                    step=point.step,
                    best_infra=best.infra_failed,
                    now_infra=point.infra_failed,
                )
                found.append(event)
                message = (
                    f"forgetting: held-out {point.set} fell from {event.fell()} after phase "
                    f"{phase!r}"
                )
                log.warning("%s", message)
                emit("warning", point.step, message=message)
        self.state.forgetting.extend(found)
        return found

    # -- one update --

    async def step(self, sched: Scheduler, writer: TrajectoryWriter) -> StepReport:
        cfg = self.config
        step = self.state.step
        _, phase = cfg.phase_at(step)
        drawn = self.mixer.draw(step, phase.train, cfg.groups_per_step, self.state.cursors)
        usage = self.pool.usage()
        self._activity("rollout")
        started = time.perf_counter()
        groups = await sched.run_all([task for _, task in drawn])
        rollout_s = time.perf_counter() - started
        assert self.learner is not None
        version = self.learner.version  # the policy the learner is at when it trains on them
        lags: list[int | None] = []
        for group, (source, _) in zip(groups, drawn, strict=True):
            group.trajectories.sort(key=lambda t: t.sample)
            for trajectory in group.trajectories:
                trajectory.dataset = self.train_sets[source].name
                lag = staleness(trajectory, version)
                lags.append(lag)
                fields = episode_fields(trajectory, split="train", set=source, staleness=lag)
                emit("episode", step + 1, **fields)
        for group in groups:
            await writer.add_group(group)
        await writer.flush()
        self.state.store_rows = writer.offset
        trajectories = [t for g in groups for t in g.trajectories]
        if not self.checked_match:
            self.checked_match = True
            self._check_match(trajectories)
        signal = learning_signal(groups)
        self.signals.append(signal)
        self._activity("update")
        stats = self.learner.update(groups)
        self._activity("sync")
        sync = await sync_weights(self.learner, self.engine, staging=self.run_dir / WEIGHTS_DIR)
        self.state.step += 1
        emit("sync", self.state.step, seconds=sync.seconds, mode=sync.mode)
        sources: dict[str, int] = {}
        for name, _ in drawn:
            sources[name] = sources.get(name, 0) + 1
        judged = outcomes(trajectories)
        report = StepReport(
            step=self.state.step,
            phase=phase.name,
            sources=sources,
            episodes=len(trajectories),
            success_rate=judged.success,
            reward_mean=judged.reward,
            infra_errors=judged.infra_failures,
            rollout_s=rollout_s,
            update_s=stats.seconds,
            sync_s=sync.seconds,
            stats=stats,
        )
        used = self.pool.usage().since(usage)
        metrics = update_metrics(
            trajectories,
            learner_version=version,
            learner={k: getattr(stats, k) for k in stats.__dataclass_fields__},
            timings=Timings(rollout_s=rollout_s, update_s=stats.seconds, sync_s=sync.seconds),
            busy_fraction=used.busy_fraction,
        )
        metrics.scalars.update(signal.scalars())
        record = UpdateRecord(
            step=report.step,
            phase=report.phase,
            episodes=report.episodes,
            success_rate=report.success_rate,
            reward_mean=report.reward_mean,
            infra_errors=report.infra_errors,
            rollout_s=report.rollout_s,
            update_s=report.update_s,
            sync_s=report.sync_s,
            learner=numeric_fields(stats),
            signal=numeric_fields(signal),
            sources=report.sources,
            staleness={int(lag): n for lag, n in staleness_counts(lags).items()},
            tokens_per_s=metrics.scalars.get("throughput/tokens_per_s", 0.0),
            episodes_per_s=metrics.scalars.get("throughput/episodes_per_s", 0.0),
            unaided_answers={
                name.rsplit("/", 1)[-1]: value
                for name, value in metrics.scalars.items()
                if name.startswith("train/unaided_answers/domain/")
            },
            time=time.time(),
        )
        self.rundir.append_update(record)
        self._observe(record, metrics.scalars, metrics.histograms, used)
        warnings = [signal_warning(self.signals, stats.entropy if stats.stepped else None)]
        if trajectories and judged.infra_failures == len(trajectories):
            warnings.append(
                f"the infrastructure failed all {len(trajectories)} episodes of update "
                f"{report.step}: no success or reward to report, nothing to learn from"
            )
        for warning in filter(None, warnings):
            log.warning("%s", warning)
            emit("warning", report.step, message=warning)
        return report

    def _observe(
        self,
        record: UpdateRecord,
        scalars: dict[str, float],
        histograms: dict[str, list[float]],
        used: PoolUsage,
    ) -> None:
        """One update's events (update: its record; sandbox), its metrics to the sinks, the live
        line."""
        fields = record.to_json()
        del fields["step"], fields["time"]  # an event has its own
        emit("update", record.step, **fields)
        emit(
            "sandbox",
            record.step,
            cells=used.cells,
            busy_fraction=used.busy_fraction,
            queued=used.queued,
            runs=used.runs,
        )
        log_to(self.sinks, record.step, scalars, histograms)
        if self.progress is not None:
            self.progress.step(
                record.step,
                success=record.success_rate,
                infra=record.infra_errors,
                reward=record.reward_mean,
                tokens_per_s=record.tokens_per_s or 0.0,
                episodes_per_s=record.episodes_per_s or 0.0,
            )

    def _activity(self, text: str) -> None:
        if self.progress is not None:
            self.progress.activity(text)

    def _check_match(self, trajectories: Sequence[Trajectory]) -> None:
        """Score the first batch's tokens with the learner and compare with the engine's: a gap
        means different numerics, temperature, tokens or weights. Expected only in a mixed
        setup the config stated; anything else is a warning naming the likely cause."""
        scored = [
            t for t in trajectories if any(t.loss_mask) and len(t.logprobs) == len(t.token_ids)
        ]
        if not scored:
            return
        assert self.learner is not None
        report = self.match = check_logprob_match(self.learner, scored[:8])
        passed = report.max_abs_diff <= MATCH_THRESHOLD
        log.info("start-up check: engine vs learner %s (%s)", report, self.precision.describe())
        emit(
            "logprob_check",
            self.state.step + 1,
            tokens=report.tokens,
            max_abs_diff=report.max_abs_diff,
            mean_abs_diff=report.mean_abs_diff,
            threshold=MATCH_THRESHOLD,
            passed=passed,
            engine=self.precision.engine,
            learner=self.precision.learner,
            mixed=self.precision.mixed,
        )
        if passed:
            return
        what = f"engine and learner disagree on logprobs (max |diff| {report.max_abs_diff:.2e})"
        if self.precision.mixed:
            log.info(
                "%s, as expected of the mixed precision the config states (%s); the importance "
                "weights correct it",
                what,
                self.precision.describe(),
            )
            return
        if self.precision.engine == SERVER:
            cause = (
                "the server likely samples in another dtype than the learner's "
                f"{self.precision.learner} (honing serve --dtype {self.precision.learner}; "
                f"vLLM --dtype {self.precision.learner}), or with another temperature"
            )
        else:
            cause = (
                f"check the engine's dtype (this run's is {self.precision.engine}), the agent's "
                "and the learner's temperature, and the engine's model"
            )
        message = f"{what}: the importance weights will correct it, but {cause}"
        log.warning("%s", message)
        emit("warning", self.state.step + 1, message=message)

    # -- the run --

    async def run(self) -> TrainResult:
        """The updates from `state.step` to the end, then the result."""
        cfg = self.config
        self.loop_started = time.monotonic()  # for the ETA: updates (and evals) only
        episode_seed = cfg.seed

        async def run_one(task: AnyTask, sample: int, gate: Gate) -> Trajectory:
            environment = registry.make_env(task.domain, self.pool, self.env_config)
            agent = self.agent_config(cfg.agent.temperature, episode_seed + self.state.step)
            return await run_episode(
                task, environment, self.engine, agent, gate=gate, sample=sample
            )

        sched_config = SchedulerConfig(
            n=cfg.n,
            engine_slots=cfg.engine.slots,
            max_in_flight=max(cfg.n * cfg.groups_per_step, 1),
        )
        total = cfg.total_steps
        async with (
            TrajectoryWriter(self.run_dir, flush_s=None) as writer,
            Scheduler(run_one, sched_config, version=lambda: self.engine.version) as sched,
        ):
            while self.state.step < total:
                index, phase = cfg.phase_at(self.state.step)
                if self.state.step == sum(p.steps for p in cfg.schedule[:index]):
                    emit("phase", self.state.step + 1, name=phase.name)  # its first update
                if self.progress is not None:
                    self.progress.phase(phase.name)
                report = await self.step(sched, writer)
                self._progress(report, total)
                if self.on_step is not None:
                    self.on_step(report)
                done = self.state.step
                phase_end = done == sum(p.steps for p in cfg.schedule[: index + 1])
                if self.heldout and (done % cfg.eval.every == 0 or phase_end or done == total):
                    points = await self.evaluate(phase.name)
                    if phase_end:
                        self.check_forgetting(phase.name, points)
                if done % cfg.checkpoint.every == 0 or done == total:
                    self._activity("checkpoint")
                    self.checkpoint()
        last = max((p.step for p in self.state.evals), default=0)
        after = {p.set: p for p in self.state.evals if p.step == last}
        if last == 0:  # no update ran an evaluation: the latest step-0 one is the "after"
            after = {p.set: p for p in self.state.evals}
        result = TrainResult(
            run_dir=self.run_dir,
            steps=self.state.step,
            before={p.set: p for p in self.state.evals if p.phase == BEFORE},
            after=after,
            forgetting=list(self.state.forgetting),
            elapsed_s=self.elapsed(),
            evals=list(self.state.evals),
            precision=self.precision,
            match=self.match,
        )
        record = result_json(result, cfg.name)
        (self.run_dir / RESULT_FILE).write_text(json.dumps(record, indent=2))
        emit(
            "run_end",
            result.steps,
            steps=result.steps,
            elapsed_s=result.elapsed_s,
            heldout_before=TrainResult.pooled(result.before),
            heldout_after=TrainResult.pooled(result.after),
            gains=record["gains"],
            line=record["line"],
        )
        return result

    def elapsed(self) -> float:
        return self.state.elapsed_s + time.monotonic() - self.started

    def checkpoint(self) -> None:
        assert self.learner is not None
        started = time.perf_counter()
        state = self.state.model_copy(update={"elapsed_s": self.elapsed()})
        path = save_checkpoint(
            self.run_dir,
            self.state.step,
            self.learner,
            state.model_dump(mode="json"),
            keep=self.config.checkpoint.keep,
        )
        seconds = time.perf_counter() - started
        emit("checkpoint", self.state.step, path=str(path), seconds=seconds)

    def _progress(self, r: StepReport, total: int) -> None:
        per_step = (time.monotonic() - self.loop_started) / max(1, r.step - self.first_step)
        eta = per_step * (total - r.step)
        s = r.stats
        log.info(
            "step %d/%d [%s] success %s (infra failures %d) reward %s | loss %.4f entropy %.3f "
            "grad %.3f groups kept %d/%d | rollout %.0fs update %.0fs sync %.2fs | ETA %.1f min",
            r.step,
            total,
            r.phase,
            _percent(r.success_rate),
            r.infra_errors,
            "n/a" if r.reward_mean is None else f"{r.reward_mean:.3f}",
            s.loss,
            s.entropy,
            s.grad_norm,
            s.groups - s.dropped_groups,
            s.groups,
            r.rollout_s,
            r.update_s,
            r.sync_s,
            eta / 60,
        )


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def result_json(result: TrainResult, name: str) -> dict[str, Any]:
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


# -- entry point -------------------------------------------------------------------------------


async def train(
    config: TrainConfig,
    *,
    resume: bool = False,
    engine: Engine | None = None,
    on_step: Callable[[StepReport], None] | None = None,
    on_eval: Callable[[EvalPoint], None] | None = None,
    progress: RunProgress | None = None,
) -> TrainResult:
    """Run (or, with `resume`, continue) the closed loop described by `config`. `engine`: an
    engine built by the caller (tests: a scripted engine); default: an hf engine on the policy.
    `progress`: a live display to drive (`RunProgress(console, quiet=...)`); stopped at the end.

    Order: held-out evaluation of the starting model ("before"), the warm start if configured
    (then evaluated again, "warm start"), then the updates. A resumed run with a checkpoint
    skips straight to its next update.

    Precision is decided first (honing.trainer.precision): the run directory's config.yaml
    records the concrete dtypes, so a resumed run computes as the first part did."""
    started = time.monotonic()
    precision = decide(config)
    config = precision.apply(config)
    log.info("precision: %s", precision.describe())
    run = RunDir.prepare(config, resume)
    run_dir = run.path
    if config.deterministic:
        torch.use_deterministic_algorithms(True)
    checkpoint = run.latest_checkpoint() if resume else None
    if checkpoint is None:
        if resume:
            log.info("resuming %s: no checkpoint yet, starting from the beginning", run_dir)
        _rewind(run, LoopState())
    # The event log and the sinks start where the run continues: its checkpoint, or nothing.
    resumed_at = _checkpoint_step(checkpoint) if checkpoint is not None else 0
    truncate_events(run_dir / EVENTS_FILE, resumed_at if checkpoint is not None else None)
    params = config.model_dump(mode="json")
    sinks = make_sinks(
        config.observe,
        run_dir,
        run_name=config.name,
        params=params,
        resume_step=resumed_at if checkpoint is not None else (-1 if resume else None),
    )
    with contextlib.ExitStack() as stack:
        stack.callback(close_sinks, sinks)
        if progress is not None:
            stack.callback(progress.stop)
        events = stack.enter_context(EventLog(run_dir / EVENTS_FILE))
        stack.enter_context(use(events))
        emit(
            "run_start",
            resumed_at,
            name=config.name,
            model=config.model,
            resumed=resume,
            config=params,
            precision=precision.model_dump(),
        )
        if progress is not None:
            progress.start(config.total_steps, resumed_at, name=config.name)
        return await _train(
            config,
            run_dir,
            checkpoint,
            engine,
            started,
            on_step,
            on_eval,
            sinks,
            progress,
            precision,
        )


async def _train(
    config: TrainConfig,
    run_dir: Path,
    checkpoint: Path | None,
    engine: Engine | None,
    started: float,
    on_step: Callable[[StepReport], None] | None,
    on_eval: Callable[[EvalPoint], None] | None,
    sinks: Sequence[MetricSink],
    progress: RunProgress | None,
    precision: RunPrecision,
) -> TrainResult:
    own_engine = engine is None
    engine = engine or _engine(config, config.model)
    try:
        async with SandboxPool(config.sandbox) as pool:
            # how the sandbox's limits hold (a fallback also warned at the pool's start)
            log.info("sandbox: %s", pool.enforcement.describe())
            at = _checkpoint_step(checkpoint) if checkpoint is not None else 0
            emit("sandbox_start", at, **pool.enforcement.to_json_dict())
            trainer = Trainer(
                config,
                engine,
                pool,
                LoopState(),
                on_step=on_step,
                on_eval=on_eval,
                sinks=sinks,
                progress=progress,
                precision=precision,
            )
            trainer.started = started
            if _remote(engine):  # a server: make it serve the starting model
                await _serve_model(engine, config.model)
            if checkpoint is None and config.eval.before and trainer.heldout:
                await trainer.evaluate(BEFORE)
            model_path = config.model
            if config.warm_start is not None:
                from honing.trainer.warm import warm_start

                model_path = str(await warm_start(config, run_dir))
                if _remote(engine):
                    await _serve_model(engine, model_path)
                elif own_engine:
                    await engine.close()
                    engine = trainer.engine = _engine(config, model_path)
                if checkpoint is None and config.eval.after_warm_start and trainer.heldout:
                    await trainer.evaluate(WARM_START)
            torch.manual_seed(config.seed)  # the adapter's initialisation
            random.seed(config.seed)
            learner = trainer.learner = Learner(model_path, config.learner_config)
            if checkpoint is not None:
                loaded = load_checkpoint(checkpoint, learner)
                trainer.state = loaded.state(LoopState)
                trainer.first_step = trainer.state.step
                _rewind(RunDir(run_dir), trainer.state)
                log.info(
                    "resuming %s at step %d (%s)", run_dir, trainer.state.step, checkpoint.name
                )
                # the engine starts from the checkpoint's weights
                await sync_weights(learner, engine, staging=run_dir / WEIGHTS_DIR)
            return await trainer.run()
    finally:
        if own_engine:
            with contextlib.suppress(Exception):
                await engine.close()


def _engine(config: TrainConfig, model: str) -> Engine:
    if config.engine.url is not None:
        from transformers import AutoTokenizer

        from honing.rollout.engines.openai import OpenAIConfig, OpenAIEngine
        from honing.rollout.models import resolve_model

        tokenizer = AutoTokenizer.from_pretrained(resolve_model(model))
        server = OpenAIConfig(base_url=config.engine.url, lora_adapters=config.engine.lora_adapters)
        return OpenAIEngine(server, tokenizer=tokenizer)  # token mode: token-faithful rollouts
    from honing.rollout.engines.hf import HFEngine

    return HFEngine(
        model,
        dtype=config.engine.dtype,
        max_batch=1 if config.deterministic else config.engine.slots,
        prefix_cache=config.engine.prefix_cache and not config.deterministic,
        seed=config.seed,
    )


def _remote(engine: Engine) -> bool:
    """Whether the engine loads weights from files only (a server), not from a state dict."""
    return not getattr(engine, "accepts_state_dict", True)


async def _serve_model(engine: Engine, model: str) -> None:
    """Load a model directory into a server engine (version 0), so that it serves what the
    learner starts from whatever it served before."""
    from honing.rollout.engines.base import WeightUpdate
    from honing.rollout.models import resolve_model

    path = resolve_model(model).resolve()
    log.info("engine: loading %s into the server", path)
    await engine.update_weights(WeightUpdate(version=0, path=str(path)))


def _checkpoint_step(checkpoint: Path) -> int:
    """The step of a checkpoint directory (`step-00000012` -> 12)."""
    return int(checkpoint.name.removeprefix("step-"))


def _rewind(run: RunDir, state: LoopState) -> None:
    """Cut the store and the logs back to the checkpoint (or to nothing)."""
    dropped = run.rewind(state.step, state.store_rows, state.evals)
    if dropped:
        log.info("store: %d shard(s) written after the checkpoint removed", dropped)
