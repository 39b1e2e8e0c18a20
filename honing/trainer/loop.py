"""The closed loop of `honing train`: rollouts -> rewards -> store -> update -> weight sync, with
held-out evaluation, phases, forgetting checks and exact resume.

    result = asyncio.run(train(config))                   # a fresh run into config.out
    result = asyncio.run(train(config, resume=True))      # continue from its latest checkpoint

One update draws `groups_per_step` tasks (`TaskMixer`), plays `n` episodes of each through the
scheduler, stores the groups, trains on them and syncs the weights; generation and training
alternate (on-policy). With `refill.min_groups`, an update whose groups would leave the learner
fewer than that with a signal plays more tasks first (`_refill`). With
`async: {max_staleness: K}` (K > 0) the next K updates' episodes play while the learner trains,
across its weight sync (honing.trainer.overlap; exact resume is for K = 0 only: a resume replays
the batches that were in flight). Held-out sets are evaluated before training, every
`eval.every` updates, at each phase's end and at the end. The run directory is
`honing.trainer.run_dir`'s; the events go to its event log (`honing.observe`).
docs/training.md describes the loop, the run directory and resume (bit-exact with
`deterministic: true`).

Under torchrun (WORLD_SIZE > 1) rank 0 runs this loop and leads a sharded learner, the other
ranks follow (honing.trainer.ranks); with `backend: ray` the training episodes' engines and
sandboxes are Ray actors (docs/scaling.md). Not covered: overlap with per-role team learners.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from pydantic import BaseModel, ConfigDict, Field

from honing.envs import registry
from honing.envs.base import MALFORMING
from honing.observe.events import EventLog, emit, truncate_events, use
from honing.observe.metrics import (
    Signal,
    Timings,
    acting,
    episode_fields,
    learning_signal,
    outcomes,
    risk_summary,
    staleness,
    staleness_counts,
    update_metrics,
)
from honing.observe.progress import RunProgress
from honing.observe.sinks import MetricSink, close_sinks, make_sinks, monitoring
from honing.records import Group, Retry, Trajectory, by_role
from honing.rl.risk import explore_temperature, lagrange_step
from honing.rollout.agent import EnvLike, Gate, run_episode
from honing.rollout.engines.base import Engine
from honing.rollout.scheduler import MetricsHooks, Scheduler, SchedulerConfig
from honing.rollout.team import RoleEngines, run_team_episode
from honing.sandbox import SandboxPool
from honing.sandbox.pool import PoolUsage
from honing.store import TrajectoryWriter
from honing.tasks.load import AnyTask, TaskSet
from honing.trainer.batching import sample_groups
from honing.trainer.checkpoint import load_checkpoint, save_checkpoint
from honing.trainer.curriculum import Curriculum, TaskRecord
from honing.trainer.gains import best_by_validation, pooled
from honing.trainer.heldout import Forgetting, HeldOut, percent
from honing.trainer.learner import Learner, LearnerStats, MatchReport
from honing.trainer.overlap import Ahead, Batch
from honing.trainer.precision import RunPrecision, decide, startup_check
from honing.trainer.result import (
    ChosenCheckpoint,
    TrainResult,
    finish_run,
    publish_update,
    update_line,
    update_record,
    warn_update,
)
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import (
    BEFORE,
    EVENTS_FILE,
    WARM_START,
    WEIGHTS_DIR,
    EvalPoint,
    RunDir,
    UpdateRecord,
    numeric_fields,
)
from honing.trainer.sources import TaskMixer, load_source
from honing.trainer.sync import open_engine, serve_model, serves_from_files, sync_weights

if TYPE_CHECKING:
    from honing.rollout.ray import RayEnvWorkers

log = logging.getLogger(__name__)


class LoopState(BaseModel):
    """What a checkpoint needs beyond the learner to continue exactly (mutable: the loop's own)."""

    model_config = ConfigDict(extra="forbid")

    step: int = 0  # updates done
    cursors: dict[str, tuple[int, int]] = Field(default_factory=dict)  # source -> (epoch, pos)
    store_rows: int = 0
    evals: list[EvalPoint] = Field(default_factory=list)
    validation: list[EvalPoint] = Field(default_factory=list)  # the validation sets' points
    forgetting: list[Forgetting] = Field(default_factory=list)
    elapsed_s: float = 0.0  # wall time of the run before this process
    risk_multiplier: float | None = None  # risk mode constrained: the Lagrange multiplier
    # risk.explore: each task's recent training episodes, oldest first, as (solved, risky,
    # well-formed); checkpoints from before the third field hold pairs (read as well-formed).
    history: dict[str, list[tuple[bool, ...]]] = Field(default_factory=dict)
    # curriculum.enabled: each task's (or tag set's) success so far (key: Curriculum.key)
    curriculum: dict[str, TaskRecord] = Field(default_factory=dict)


# -- the recipe --------------------------------------------------------------------------------


async def train(
    config: TrainConfig,
    *,
    resume: bool = False,
    engine: Engine | None = None,
    on_step: Callable[[UpdateRecord], None] | None = None,
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
    from honing.trainer import ranks

    if ranks.launched() and not ranks.leading():  # torchrun: rank 0 runs this loop, others follow
        return await ranks.run_ranks(config, lambda: train(
            config, resume=resume, engine=engine, on_step=on_step, on_eval=on_eval,
            progress=progress))  # fmt: skip
    started = time.monotonic()
    precision = decide(config)
    config = precision.apply(config)
    log.info("precision: %s", precision.describe())
    run = RunDir.prepare(config, resume)
    if config.deterministic:
        torch.use_deterministic_algorithms(True)
    checkpoint = run.latest_checkpoint() if resume else None
    if checkpoint is None:
        if resume:
            log.info("resuming %s: no checkpoint yet, starting from the beginning", run.path)
        _rewind(run, LoopState())
    at = _checkpoint_step(checkpoint) if checkpoint is not None else 0  # where the run continues
    with contextlib.ExitStack() as stack:
        sinks = _open_logs(stack, config, run, resume, at if checkpoint else None, precision,
                           progress)  # fmt: skip
        own_engine = engine is None
        engine = engine or await open_engine(config, config.model)
        try:
            async with SandboxPool(config.sandbox) as pool, _remote_envs(config) as remote:
                # how the sandbox's limits hold (a fallback also warned at the pool's start)
                log.info("sandbox: %s", pool.enforcement.describe())
                emit("sandbox_start", at, **pool.enforcement.to_json_dict())
                heldout = HeldOut(config, run, pool, sinks=sinks, progress=progress,
                                  on_eval=on_eval)  # fmt: skip
                validation = HeldOut(config, run, pool, sinks=sinks, progress=progress,
                                     validation=True)  # fmt: skip
                train_sets = {n: load_source(n, s) for n, s in config.train.items()}
                state, fresh = LoopState(), checkpoint is None
                if serves_from_files(engine):  # a server: make it serve the starting model
                    await serve_model(engine, config.model)
                if fresh and config.eval.before:
                    await _evaluate(engine, BEFORE, state, heldout, validation)
                model_path = config.model
                if config.warm_start is not None:
                    model_path, engine = await _warm_start(config, run, engine, own_engine)
                    if fresh and config.eval.after_warm_start:
                        await _evaluate(engine, WARM_START, state, heldout, validation)
                torch.manual_seed(config.seed)  # the adapter's initialisation
                random.seed(config.seed)
                learner = ranks.make_learner(model_path, config.learner_config, config.seed)
                roles = _role_learners(config, model_path)
                if roles and own_engine:  # each role's adapter is served by an engine of its own
                    engine = await _role_engines(config, engine, model_path, roles)
                if checkpoint is not None:
                    state = load_checkpoint(checkpoint, learner, roles).state(LoopState)
                    _rewind(run, state)
                    log.info("resuming %s at step %d (%s)", run.path, state.step, checkpoint.name)
                    # the engines start from the checkpoint's weights
                    await sync_weights(learner, engine, staging=run / WEIGHTS_DIR)
                    for role, other in roles.items():
                        await sync_weights(other, _engine_of(engine, role),
                                           staging=run / WEIGHTS_DIR / role)  # fmt: skip
                trainer = Trainer(config, run, engine, pool, learner, state, heldout, train_sets,
                                  started=started, precision=precision, sinks=sinks,
                                  progress=progress, on_step=on_step, roles=roles,
                                  remote_envs=remote, validation=validation)  # fmt: skip
                return await trainer.run()
        finally:
            if own_engine:
                with contextlib.suppress(Exception):
                    await engine.close()


def _open_logs(
    stack: contextlib.ExitStack,
    config: TrainConfig,
    run: RunDir,
    resume: bool,
    checkpoint_step: int | None,
    precision: RunPrecision,
    progress: RunProgress | None,
) -> list[MetricSink]:
    """The event log, the metric sinks, the alerts and Prometheus exporter that listen to the
    log, and the live display, started where the run continues (its checkpoint's step, or
    nothing) and closed by `stack`; `run_start` emitted."""
    truncate_events(run / EVENTS_FILE, checkpoint_step)
    params = config.model_dump(mode="json")
    resume_step = checkpoint_step if checkpoint_step is not None else (-1 if resume else None)
    sinks = make_sinks(config.observe, run.path, run_name=config.name, params=params,
                       resume_step=resume_step)  # fmt: skip
    stack.callback(close_sinks, sinks)
    if progress is not None:
        stack.callback(progress.stop)
    events = stack.enter_context(EventLog(run / EVENTS_FILE))
    stack.enter_context(use(events))
    stack.enter_context(monitoring(config.observe, run.path, events))  # alerts, /metrics
    at = checkpoint_step or 0
    emit("run_start", at, name=config.name, model=config.model, resumed=resume, config=params,
         precision=precision.model_dump())  # fmt: skip
    if progress is not None:
        progress.start(config.total_steps, at, name=config.name)
    return list(sinks)


async def _warm_start(
    config: TrainConfig, run: RunDir, engine: Engine, own_engine: bool
) -> tuple[str, Engine]:
    """The warm start's phase: its model (trained now, or found in the run), and the engine
    that serves it from now on."""
    from honing.trainer.warm import warm_start

    model_path = str(await warm_start(config, run.path))
    if serves_from_files(engine):
        await serve_model(engine, model_path)
    elif own_engine:
        await engine.close()
        engine = await open_engine(config, model_path)
    return model_path, engine


# -- the updates -------------------------------------------------------------------------------


class Trainer:
    """The updates of one run, from `state.step` to the end: `await Trainer(...).run()`."""

    def __init__(
        self,
        config: TrainConfig,
        run: RunDir,
        engine: Engine,
        pool: SandboxPool,
        learner: Learner,
        state: LoopState,
        heldout: HeldOut,
        train_sets: dict[str, TaskSet],
        *,
        started: float,
        precision: RunPrecision,
        sinks: Sequence[MetricSink] = (),
        progress: RunProgress | None = None,
        on_step: Callable[[UpdateRecord], None] | None = None,
        roles: dict[str, Learner] | None = None,
        remote_envs: RayEnvWorkers | None = None,
        validation: HeldOut | None = None,
    ) -> None:
        self.config, self.rundir = config, run
        self.validation = validation  # the validation sets (evaluated with the held-out ones)
        # backend ray: the training episodes' sandboxes are actors (held-out plays in `pool`)
        self.remote_envs = remote_envs
        self.roles = roles or {}  # a team's other roles' learners (per-role adapters)
        self.engine, self.pool, self.learner, self.state = engine, pool, learner, state
        self.heldout, self.train_sets = heldout, train_sets
        self.mixer = TaskMixer(train_sets, {n: s.weight for n, s in config.train.items()},
                               config.seed)  # fmt: skip
        self.started, self.precision = started, precision
        self.sinks, self.progress, self.on_step = sinks, progress, on_step
        self.env_config = config.env_config
        self.first_step = state.step
        self.loop_started = started
        self.match: MatchReport | None = None  # the start-up check, on the first batch
        self.checked_match = False
        self.signals: list[Signal] = []  # each update's learning signal, for the warning
        self.ahead: Ahead | None = None  # async.max_staleness > 0: the batches in flight

    async def run(self) -> TrainResult:
        """The updates from `state.step` to the end, with their evaluations and checkpoints;
        then the result (RUN/result.json)."""
        cfg = self.config
        self.loop_started = time.monotonic()  # for the ETA: updates (and evals) only

        async def run_one(task: AnyTask, sample: int, gate: Gate) -> Trajectory:
            environment: EnvLike = (
                self.remote_envs.env()
                if self.remote_envs is not None
                else registry.make_env(task.domain, self.pool, self.env_config)
            )
            # the update the episode is played for (ahead of the learner's with overlap)
            step = self.state.step
            if self.ahead is not None:
                step = self.ahead.step_of(task, step)
            agent = cfg.agent_config(self.temperature(task), cfg.seed + step)
            if cfg.team is not None:
                return await run_team_episode(task, environment, self.engine, cfg.team, agent,
                                              gate=gate, sample=sample)  # fmt: skip
            return await run_episode(
                task, environment, self.engine, agent, gate=gate, sample=sample
            )

        sched_config = SchedulerConfig(
            n=cfg.n,
            engine_slots=cfg.engine.slots,
            max_in_flight=max(cfg.n * cfg.groups_per_step, 1),
        )
        if cfg.ahead:  # a safety net: the loop's K + 1 batches in flight already bound it
            sched_config = sched_config.model_copy(update={"max_staleness": cfg.ahead})
        total = cfg.total_steps
        async with (
            TrajectoryWriter(self.rundir.path, flush_s=None) as writer,
            Scheduler(
                run_one,
                sched_config,
                version=lambda: self.engine.version,
                hooks=_RetryEvents(self.state),
            ) as sched,
            contextlib.AsyncExitStack() as stack,
        ):
            if cfg.ahead:
                self.ahead = await stack.enter_async_context(Ahead(sched, cfg.ahead))
                self.ahead.next_step = self.state.step
            while self.state.step < total:
                index, phase = cfg.phase_at(self.state.step)
                if self.state.step == sum(p.steps for p in cfg.schedule[:index]):
                    emit("phase", self.state.step + 1, name=phase.name)  # its first update
                if self.progress is not None:
                    self.progress.phase(phase.name)
                report = await self.step(sched, writer)
                per_step = (time.monotonic() - self.loop_started) / (report.step - self.first_step)
                log.info("%s", update_line(report, total, per_step * (total - report.step)))
                if self.on_step is not None:
                    self.on_step(report)
                done = self.state.step
                phase_end = done == sum(p.steps for p in cfg.schedule[: index + 1])
                best = False
                if done % cfg.eval.every == 0 or phase_end or done == total:
                    points = await _evaluate(self.engine, phase.name, self.state, self.heldout,
                                             self.validation)  # fmt: skip
                    if phase_end:
                        self.heldout.check_forgetting(phase.name, points, self.state)
                    best = self._new_best()
                if done % cfg.checkpoint.every == 0 or done == total or best:
                    self._activity("checkpoint")
                    self.checkpoint()
        trained = "distilled" if cfg.learner.advantage == "distill" else "RL"
        chosen = self.chosen()
        result = TrainResult.of(self.rundir.path, self.state.step, self.state.evals,
                                self.state.forgetting, self.elapsed(), self.precision,
                                self.match, trained, chosen=chosen)  # fmt: skip
        finish_run(result, cfg.name)
        self.rundir.push()  # config.remote: the finished run at its URL
        return result

    async def step(self, sched: Scheduler, writer: TrajectoryWriter) -> UpdateRecord:
        """One update: the drawn tasks played and stored, trained on, the weights synced, and
        what happened recorded."""
        cfg, step = self.config, self.state.step
        _, phase = cfg.phase_at(step)
        if self.ahead is None:
            drawn = self.mixer.draw(step, phase.train, cfg.groups_per_step, self.state.cursors,
                                    self.curriculum())  # fmt: skip
        usage = await self._sandbox_counters()
        started = time.perf_counter()
        refills = 0
        if self.ahead is None:
            self._activity("rollout")
            played = await sched.run_all([task for _, task in drawn])
            drawn, played, refills = await self._refill(sched, drawn, played)
        else:
            drawn, played = await self._play_ahead(self.ahead)
        bands = self._bands(drawn)
        version = self.learner.version  # the policy the learner is at when it trains on them
        versions = {role: other.version for role, other in self.roles.items()}  # per-role ones
        groups, lags = await self._store(writer, played, drawn, version, versions)
        self._track(played, drawn)
        rollout_s = time.perf_counter() - started
        trajectories = [t for g in groups for t in g.trajectories]
        if not self.checked_match:
            self.checked_match = True
            own = [t for t in trajectories if t.role not in self.roles]  # the learner's policy
            self.match = startup_check(self.learner, own, self.precision, step + 1)
        weight = self.risk_weight()
        signal = dataclasses.replace(learning_signal(groups, weight), refills=refills)
        self.signals.append(signal)
        self._activity("update")
        if self.ahead is None:
            stats, role_stats = self._update(groups, weight)
        else:  # in a thread: the event loop keeps playing the next updates' episodes
            stats, role_stats = await asyncio.to_thread(self._update, groups, weight)
        risk = self._account_risk(trajectories, weight)
        self._activity("sync")
        sync = await sync_weights(self.learner, self.engine, staging=self.rundir / WEIGHTS_DIR)
        for role, other in self.roles.items():
            await sync_weights(other, _engine_of(self.engine, role),
                               staging=self.rundir / WEIGHTS_DIR / role)  # fmt: skip
        self.state.step += 1
        emit("sync", self.state.step, seconds=sync.seconds, mode=sync.mode)
        used = await self._sandbox_used(usage)
        timings = Timings(rollout_s=rollout_s, update_s=stats.seconds, sync_s=sync.seconds)
        metrics = update_metrics(trajectories, learner_version=version, timings=timings,
                                 learner={k: getattr(stats, k) for k in stats.__dataclass_fields__},
                                 busy_fraction=used.busy_fraction)  # fmt: skip
        metrics.scalars.update(signal.scalars())
        if cfg.refill.min_groups:
            metrics.scalars["signal/refills"] = float(refills)
        metrics.scalars.update({f"curriculum/{band}": share for band, share in bands.items()})
        for role, role_stat in role_stats.items():
            for name, value in numeric_fields(role_stat).items():
                metrics.scalars[f"learner/{role}/{name}"] = value
        metrics.scalars.update({f"risk/{k}": v for k, v in risk.items()
                                if k in ("weight", "multiplier")})  # fmt: skip
        sources = dict(Counter(name for name, _ in drawn))
        record = update_record(self.state.step, phase.name, sources, len(trajectories),
                               outcomes(trajectories), timings, stats, signal,
                               staleness_counts(lags), metrics.scalars, risk)  # fmt: skip
        self.rundir.append_update(record)
        publish_update(record, metrics, used, self.sinks, self.progress)
        warn_update(record, self.signals, stats)
        return record

    async def _refill(
        self, sched: Scheduler, drawn: list[tuple[str, AnyTask]], played: list[Group]
    ) -> tuple[list[tuple[str, AnyTask]], list[Group], int]:
        """The update's tasks and groups with more drawn and played, `groups_per_step` at a
        time, while fewer than `refill.min_groups` of the learner's groups would be kept (the
        learner's own `sample_groups`), at most `refill.max_rounds` times; and how many rounds
        were played."""
        cfg, step = self.config, self.state.step
        _, phase = cfg.phase_at(step)
        rounds = 0
        while cfg.refill.min_groups and rounds < cfg.refill.max_rounds:
            mine = self._own(by_role(played))
            have = len(sample_groups(mine, cfg.learner, self.risk_weight()).kept)
            if have >= cfg.refill.min_groups:
                break
            rounds += 1
            log.info("refill: %d of the update's %d groups have a signal, %d wanted: playing %d "
                     "more tasks (round %d of at most %d)", have, len(mine),
                     cfg.refill.min_groups, cfg.groups_per_step, rounds,
                     cfg.refill.max_rounds)  # fmt: skip
            more = self.mixer.draw(step, phase.train, cfg.groups_per_step, self.state.cursors,
                                   self.curriculum(), refill=rounds)  # fmt: skip
            drawn = [*drawn, *more]
            played = [*played, *await sched.run_all([task for _, task in more])]
        return drawn, played, rounds

    async def _sandbox_counters(self) -> PoolUsage | dict[str, PoolUsage]:
        """The training sandboxes' counters now: this process's pool's, or each sandbox
        actor's (backend ray)."""
        if self.remote_envs is None:
            return self.pool.usage()
        return await self.remote_envs.usage()

    async def _sandbox_used(self, earlier: PoolUsage | dict[str, PoolUsage]) -> PoolUsage:
        """The training sandboxes' use since `earlier` (`_sandbox_counters`)."""
        if isinstance(earlier, PoolUsage):
            return self.pool.usage().since(earlier)
        from honing.rollout.ray.env import usage_since

        assert self.remote_envs is not None
        return usage_since(await self.remote_envs.usage(), earlier)

    def _own(self, groups: list[Group]) -> list[Group]:
        """The groups the run's learner trains on: every role's without a learner of its own."""
        return [g for g in groups if _role_of(g) not in self.roles]

    def _update(
        self, groups: list[Group], weight: float
    ) -> tuple[LearnerStats, dict[str, LearnerStats]]:
        """The learner's update on its groups, and each role learner's on the role's."""
        mine = self._own(groups)
        stats = self.learner.update(mine, risk_weight=weight)
        role_stats = {role: other.update([g for g in groups if _role_of(g) == role],
                                         risk_weight=weight)
                      for role, other in self.roles.items()}  # fmt: skip
        return stats, role_stats

    async def _play_ahead(self, ahead: Ahead) -> tuple[list[tuple[str, AnyTask]], list[Group]]:
        """This update's drawn tasks and played groups, with the batches of the next
        `max_staleness` updates submitted first: they play while this one trains. Each is drawn
        on the weights of the moment, so its tokens are at most K versions old when trained on."""
        cfg = self.config
        last = min(self.state.step + ahead.max_staleness, cfg.total_steps - 1)
        while ahead.next_step <= last:
            step = ahead.next_step
            _, phase = cfg.phase_at(step)
            before = dict(self.state.cursors)
            drawn = self.mixer.draw(step, phase.train, cfg.groups_per_step, self.state.cursors,
                                    self.curriculum())  # fmt: skip
            await ahead.submit(Batch(step, drawn, before))
        self._activity("rollout")
        batch, played = await ahead.take(self.state.step)
        return batch.drawn, played

    async def _store(
        self,
        writer: TrajectoryWriter,
        played: list[Group],
        drawn: list[tuple[str, AnyTask]],
        version: int,
        versions: dict[str, int],
    ) -> tuple[list[Group], list[int | None]]:
        """The drawn tasks' played groups, logged and stored; each trajectory's staleness. A
        team's groups are split by role (`by_role`): each role's advantages are its own, and a
        role with a learner of its own (`versions`) is behind that learner, not the run's."""
        groups: list[Group] = []
        lags: list[int | None] = []
        for played_group, (source, _) in zip(played, drawn, strict=True):
            played_group.trajectories.sort(key=lambda t: t.sample)
            for group in by_role([played_group]):
                groups.append(group)
                for trajectory in group.trajectories:
                    trajectory.dataset = self.train_sets[source].name
                    lag = staleness(trajectory, versions.get(trajectory.role, version))
                    lags.append(lag)
                    fields = episode_fields(trajectory, split="train", set=source, staleness=lag)
                    emit("episode", self.state.step + 1, **fields)
        for group in groups:
            await writer.add_group(group)
        await writer.flush()
        self.state.store_rows = writer.offset
        self.rundir.push(store_only=True)  # config.remote: the shard just closed
        return groups, lags

    def curriculum(self) -> Curriculum | None:
        """The curriculum over the loop state's task records; None when it is off."""
        if not self.config.curriculum.enabled:
            return None
        return Curriculum(self.config.curriculum, self.state.curriculum)

    def _bands(self, drawn: list[tuple[str, AnyTask]]) -> dict[str, float]:
        """The drawn tasks' band occupancy before this update's groups count (with overlap,
        the records may be newer than those they were drawn on); empty when it is off."""
        curriculum = self.curriculum()
        if curriculum is None:
            return {}
        keys = [curriculum.key(name, task) for name, task in drawn]
        return {band: share for band, share in curriculum.occupancy(keys).items()}

    def _track(self, played: list[Group], drawn: list[tuple[str, AnyTask]]) -> None:
        """Each played group's judged outcomes into its task's curriculum record."""
        curriculum = self.curriculum()
        if curriculum is None:
            return
        for group, (name, task) in zip(played, drawn, strict=True):
            judged = [t for t in group.trajectories if not t.infrastructure_failed]
            key = curriculum.key(name, task)
            curriculum.update(key, sum(t.success for t in judged), len(judged))

    def risk_weight(self) -> float:
        """The price of one unit of risk cost in this update's rewards (`risk.mode`): 0 when off,
        the fixed weight for a penalty, the Lagrange multiplier when constrained."""
        risk = self.config.risk
        if risk.mode == "penalty":
            return risk.weight
        if risk.mode == "constrained":
            if self.state.risk_multiplier is None:
                self.state.risk_multiplier = risk.weight
            return self.state.risk_multiplier
        return 0.0

    def _account_risk(self, trajectories: list[Trajectory], weight: float) -> dict[str, float]:
        """The update's risk figures (rate, cost, the weight it trained with, and the multiplier
        after its dual step in constrained mode), and each task's history for exploration."""
        risk = self.config.risk
        summary = risk_summary(trajectories)
        out = {"weight": weight}
        if summary.rate is not None and summary.cost is not None:
            out.update(rate=summary.rate, cost=summary.cost)
        if risk.mode == "constrained":
            if summary.cost is not None:  # nothing judged (all infrastructure): no step
                self.state.risk_multiplier = lagrange_step(
                    weight, summary.cost, risk.budget, risk.multiplier_lr, risk.max_multiplier
                )
            out["multiplier"] = self.state.risk_multiplier or 0.0
        if risk.explore.enabled:
            for t in acting(trajectories):  # a team's episode once, as its executor played it
                if not t.infrastructure_failed:
                    past = self.state.history.setdefault(t.task_id, [])
                    past.append((t.success, t.risk > 0, _well_formed(t)))
                    del past[: -risk.explore.window]
        return out

    def temperature(self, task: AnyTask) -> float:
        """The sampling temperature of `task`'s training episodes: agent.temperature, or with
        risk.explore, hotter where the policy rarely solves it and cooler where it takes risks
        (honing.rl.risk.explore_temperature), from the task's recent episodes."""
        base = self.config.agent.temperature
        explore = self.config.risk.explore
        past = self.state.history.get(task.id)
        if not explore.enabled or not past:
            return base
        return explore_temperature(
            base,
            sum(e[0] for e in past) / len(past),
            sum(e[1] for e in past) / len(past),
            rarely=explore.rarely, boost=explore.boost, caution=explore.caution,
            low=explore.low, high=explore.high,
            well_formed_rate=sum(e[2] if len(e) > 2 else True for e in past) / len(past),
            min_well_formed=explore.min_well_formed,
        )  # fmt: skip

    def _new_best(self) -> bool:
        """checkpoint.keep_best: whether the update just evaluated is the best on validation so
        far (then it is checkpointed now, and kept); said in the log and the event log."""
        if not self.config.checkpoint.keep_best:
            return False
        best = best_by_validation(self.state.validation)
        if best is None or best[0] != self.state.step:
            return False
        earlier = best_by_validation([p for p in self.state.validation if p.step < best[0]])
        previous = "none" if earlier is None else f"update {earlier[0]}, {percent(earlier[1])}"
        log.info("best on validation so far: update %d, %s (before: %s): checkpointed and kept",
                 best[0], percent(best[1]), previous)  # fmt: skip
        emit("best", best[0], validation=best[1], previous=previous)
        return True

    def chosen(self) -> ChosenCheckpoint | None:
        """checkpoint.keep_best: the update the run exports (best on validation), and a warning
        when no update beat the warm start (or the base model) there; None when it is off."""
        if not self.config.checkpoint.keep_best:
            return None
        best = best_by_validation(self.state.validation)
        if best is None:
            log.warning("checkpoint.keep_best: no update was judged on validation; the latest "
                        "checkpoint stands")  # fmt: skip
            return None
        start = [p for p in self.state.validation if p.step == 0]
        start_phase = WARM_START if any(p.phase == WARM_START for p in start) else BEFORE
        start_stage = pooled([p for p in start if p.phase == start_phase]) if start else None
        chosen = ChosenCheckpoint(
            step=best[0],
            validation=best[1],
            last=self.state.step,
            start=None if start_stage is None else start_stage.success,
        )
        if chosen.start is not None and chosen.start >= chosen.validation:
            warm = start_phase == WARM_START
            start_name = "warm start" if warm else "base model"
            message = (
                f"no update beat the {start_name} on validation ({percent(chosen.start)}; the "
                f"best update, {chosen.step}, made {percent(chosen.validation)}): the "
                f"{start_name} is the better model there "
                f"({self.rundir.warm_model() if warm else self.config.model})"
            )
            log.warning("%s", message)
            emit("warning", self.state.step, message=message)
        return chosen

    def _activity(self, text: str) -> None:
        if self.progress is not None:
            self.progress.activity(text)

    def elapsed(self) -> float:
        return self.state.elapsed_s + time.monotonic() - self.started

    def checkpoint(self) -> None:
        started = time.perf_counter()
        update: dict[str, object] = {"elapsed_s": self.elapsed()}
        if self.ahead is not None:  # the batches in flight are drawn again by a resume
            update["cursors"] = self.ahead.replay_cursors(self.state.cursors)
        state = self.state.model_copy(update=update)
        keep = self.config.checkpoint.keep
        keep_best = self.config.checkpoint.keep_best
        best = best_by_validation(self.state.validation) if keep_best else None
        path = save_checkpoint(self.rundir.path, self.state.step, self.learner,
                               state.model_dump(mode="json"), keep=keep, roles=self.roles,
                               protect=None if best is None else best[0])  # fmt: skip
        seconds = time.perf_counter() - started
        emit("checkpoint", self.state.step, path=str(path), seconds=seconds)
        self.rundir.push()  # config.remote: the logs, then the checkpoint, committed last


# -- helpers -----------------------------------------------------------------------------------


async def _evaluate(
    engine: Engine, phase: str, state: LoopState, heldout: HeldOut, validation: HeldOut | None
) -> list[EvalPoint]:
    """The held-out sets now, then the validation sets; the held-out points."""
    points = await heldout.evaluate(engine, phase, state) if heldout else []
    if validation:
        await validation.evaluate(engine, phase, state)
    return points


def _role_learners(config: TrainConfig, model_path: str) -> dict[str, Learner]:
    """A learner (its own LoRA adapter on the same base) for each team role but the executor,
    when the team trains per-role adapters; none otherwise (the executor's is the run's)."""
    team = config.team
    if team is None or team.adapters != "per_role":
        return {}
    roles = {}
    for role in team.roles:
        if role.kind != "executor":
            torch.manual_seed(config.seed)  # every adapter starts as the executor's did
            roles[role.role] = Learner(model_path, config.learner_config)
    return roles


async def _role_engines(config: TrainConfig, engine: Engine, model_path: str,
                        roles: dict[str, Learner]) -> RoleEngines:  # fmt: skip
    """The run's engine for the executor and one more per role in `roles`, on `model_path`."""
    assert config.team is not None
    executor = config.team.role("executor")
    assert executor is not None
    engines = {executor.role: engine}
    for role in roles:
        engines[role] = await open_engine(config, model_path)
    return RoleEngines(engines, executor.role)


@contextlib.asynccontextmanager
async def _remote_envs(config: TrainConfig) -> AsyncIterator[RayEnvWorkers | None]:
    """backend ray: the sandbox actors the training episodes play in (started, then closed);
    None for backend local, where they play in this process's pool."""
    if config.backend != "ray":
        yield None
        return
    from honing.rollout.ray import RayEnvWorkers, connect

    await asyncio.to_thread(connect, config.ray)
    async with RayEnvWorkers(config.sandbox, config.ray.env, env=config.env_config) as envs:
        yield envs


class _RetryEvents(MetricsHooks):
    """Each retry of a training episode (an infrastructure failure: an engine or sandbox worker
    lost, a sandbox error, a stale attempt) as a `retry` event naming its task, stage and cause."""

    def __init__(self, state: LoopState) -> None:
        self.state = state

    def on_retry(self, task_id: str, retry: Retry) -> None:
        emit("retry", self.state.step + 1, task_id=task_id, attempt=retry.attempt,
             stage=retry.stage, cause=retry.cause)  # fmt: skip


def _engine_of(engine: Engine, role: str) -> Engine:
    """`role`'s engine: its own when the run has per-role engines, else the one engine."""
    return engine.for_role(role) if isinstance(engine, RoleEngines) else engine


def _well_formed(trajectory: Trajectory) -> bool:
    """No step of the episode failed as a malformed action or an unknown tool."""
    malformed = {reason.value for reason in MALFORMING}
    return not any(turn.failure in malformed for turn in trajectory.turns if turn.role == "tool")


def _role_of(group: Group) -> str:
    return group.trajectories[0].role if group.trajectories else ""


def _checkpoint_step(checkpoint: Path) -> int:
    """The step of a checkpoint directory (`step-00000012` -> 12)."""
    return int(checkpoint.name.removeprefix("step-"))


def _rewind(run: RunDir, state: LoopState) -> None:
    """Cut the store and the logs back to the checkpoint (or to nothing)."""
    dropped = run.rewind(state.step, state.store_rows, state.evals, state.validation)
    if dropped:
        log.info("store: %d shard(s) written after the checkpoint removed", dropped)
