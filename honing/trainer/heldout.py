"""Held-out evaluation during `honing train`: every held-out set played now, recorded, and the
sets that fell below their best after a phase reported as forgetting.

    heldout = HeldOut(config, run, pool, sinks=sinks, progress=progress, on_eval=on_eval)
    points = await heldout.evaluate(engine, "before", state)      # -> list[EvalPoint]
    heldout.check_forgetting("main", points, state)                # -> list[Forgetting]

The sets are the run's held-out sources with every task that training or the warm start asks
left out (`honing.trainer.sources.heldout_sets`); each is played with the three tiers of
`honing eval`, its point appended to the run's evals.jsonl, the event log and the sinks (with
the judge's criteria met, `met:*`, where a domain reports them: graded progress), its episodes
with every turn's text kept as a trajectory store (`RunDir.episodes`: which tasks an update won
or lost, and what the model wrote, against the warm start's evaluation). A run
with a `team:` plays them as that team (what it trains), the tiers counting the executor's steps
that stand; each role's episodes are logged, and the team's figures (`eval/<set>/team/*`).
The validation sets (`validation:`) are played the same way by a `HeldOut(..., validation=True)`:
their points go to `state.validation`, validation.jsonl, `validation` events and the sinks'
`validation/<set>/*`; settings and `checkpoint.keep_best` choose by them, never by the held-out
sets. Not covered: when to evaluate (the loop decides), the accounting of gains
(`trainer.gains`).
"""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

from honing.config import StrictModel
from honing.eval.metrics import Episode
from honing.eval.model import EnginePlayer, TeamPlayer
from honing.eval.runner import evaluate
from honing.observe.events import emit
from honing.observe.metrics import episode_fields, eval_scalars, team_scalars
from honing.observe.progress import RunProgress
from honing.observe.sinks import MetricSink, log_to
from honing.records import Trajectory
from honing.rollout.engines.base import Engine
from honing.sandbox import SandboxPool
from honing.store import TrajectoryWriter
from honing.tasks.synthetic import UNSEEN_TAG
from honing.trainer.gains import tag_scores
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import EVALS_FILE, VALIDATION_FILE, EvalPoint, RunDir
from honing.trainer.sources import heldout_sets, validation_sets

log = logging.getLogger(__name__)


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


class History(Protocol):
    """What evaluation reads and extends of the loop's state."""

    step: int
    evals: list[EvalPoint]
    validation: list[EvalPoint]
    forgetting: list[Forgetting]


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _criteria_text(point: EvalPoint) -> str:
    """`; criteria met 17% (lowest: surface 1%, volume 7%, iou 8%)`, or "" without criteria."""
    share = point.criteria_share
    if share is None:
        return ""
    rates = sorted((met / judged, name) for name, (met, judged) in point.criteria.items())
    lowest = ", ".join(f"{name} {percent(rate)}" for rate, name in rates[:3])
    return f"; criteria met {percent(share)} (lowest: {lowest})"


INFRA_WARN_SHARE = 0.1  # of an evaluation's episodes: more, and its figure is not the policy's


def infra_warning(label: str, total: int, reasons: Counter[str]) -> str | None:
    """The warning for an evaluation where more than INFRA_WARN_SHARE of `total` episodes
    failed for infrastructure (reasons: how often each ended one), else None."""
    failed = sum(reasons.values())
    if not total or failed <= INFRA_WARN_SHARE * total:
        return None
    reason, count = reasons.most_common(1)[0]
    return (
        f"{label}: {failed} of {total} episodes failed for infrastructure (most often, "
        f"{count} of them: {reason}); its success counts the {total - failed} judged episodes "
        "only, so it is not the policy's figure. The log has each failure: fix the cause and "
        "evaluate again"
    )


class _EvalProgress:
    """Logs an evaluation's progress at each quarter (and shows it live, when shown)."""

    def __init__(self, name: str, total: int, live: RunProgress | None = None) -> None:
        self.name, self.total, self.live = name, total, live
        self.done = self.passed = self.infra = 0
        self.outcomes: dict[str, bool] = {}  # TASK#SAMPLE -> solved, judged episodes only
        self.infra_reasons: Counter[str] = Counter()  # what ended the infrastructure failures

    def __call__(self, episode: Episode) -> None:
        self.done += 1
        self.passed += int(episode.success)
        self.infra += int(episode.infra_failed)
        if not episode.infra_failed:
            self.outcomes[f"{episode.task_id}#{episode.sample}"] = episode.success
        else:
            self.infra_reasons[episode.infra_cause] += 1
        if self.live is not None:
            self.live.activity(f"eval {self.name} {self.done}/{self.total}")
        if self.done % max(1, self.total // 4) == 0 and self.done < self.total:
            log.info("eval %s: %d/%d episodes, %d passed, infra failures %d", self.name,
                     self.done, self.total, self.passed, self.infra)  # fmt: skip


class HeldOut:
    """The run's held-out sets and their evaluation (see the module docstring)."""

    def __init__(
        self,
        config: TrainConfig,
        run: RunDir,
        pool: SandboxPool,
        *,
        sinks: Sequence[MetricSink] = (),
        progress: RunProgress | None = None,
        on_eval: Callable[[EvalPoint], None] | None = None,
        validation: bool = False,
    ) -> None:
        self.config, self.run, self.pool = config, run, pool
        self.sinks, self.progress, self.on_eval = sinks, progress, on_eval
        self.validation = validation
        # unseen: nothing trained on asks their tasks (nor, for validation, a held-out set)
        self.sets = validation_sets(config) if validation else heldout_sets(config)
        self.kind = "validation" if validation else "eval"  # the event, the sinks' prefix

    def __bool__(self) -> bool:
        return bool(self.sets)

    async def evaluate(self, engine: Engine, phase: str, state: History) -> list[EvalPoint]:
        """Every held-out set, now (after `state.step` updates); recorded in `state.evals`, the
        run's evals.jsonl, the event log and the sinks (validation sets: `state.validation`,
        validation.jsonl)."""
        cfg = self.config
        agent = cfg.agent_config(cfg.eval.temperature, cfg.seed)
        step = state.step
        points = []
        for name, taskset in self.sets.items():
            total = len(taskset.tasks) * cfg.eval.k
            log.info("%s %s (%s): %d episodes", self.kind, name, phase, total)

            played: list[Trajectory] = []

            def logged(
                trajectory: Trajectory, set_name: str = name, played: list[Trajectory] = played
            ) -> None:
                for t in [trajectory, *trajectory.partners]:  # a team's: every role's
                    fields = episode_fields(t, split=self.kind, set=set_name, staleness=None)
                    emit("episode", step, **fields)
                    played.append(t)

            progress = _EvalProgress(
                f"validation {name}" if self.validation else name, total, self.progress
            )
            player: EnginePlayer | TeamPlayer
            if cfg.team is None:
                player = EnginePlayer(engine, agent, name=f"step {step}", on_trajectory=logged)
            else:
                player = TeamPlayer(engine, agent, cfg.team, name=f"step {step} · team",
                                    on_trajectory=logged)  # fmt: skip
            report = await evaluate(
                taskset,
                player,
                self.pool,
                k=cfg.eval.k,
                config=cfg.env_config,
                concurrency=cfg.engine.slots,  # the engine decodes them together
                on_episode=progress,
            )
            e2e = report.end_to_end
            point = EvalPoint(
                step=step,
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
                risk_rate=e2e.risk_rate,
                risky=e2e.risky,
                outcomes=progress.outcomes,
                by_tag=tag_scores(progress.outcomes, {t.id: t.tags for t in taskset.tasks}),
                criteria=e2e.criteria,
            )
            unseen = point.by_tag.get(UNSEEN_TAG)
            warning = infra_warning(f"{self.kind} {name} ({phase})", total, progress.infra_reasons)
            if warning is not None:
                log.warning("%s", warning)
            log.info(
                "%s %s (%s): success %s (%d/%d; infra failures %d)%s%s, well-formed actions "
                "%s, risky episodes %s (%d), %.1f steps per episode, in %.0f s",
                self.kind,
                name,
                phase,
                percent(e2e.success_rate),
                e2e.passed,
                e2e.total,
                e2e.infra_failed,
                f"; worded as training never is {percent(unseen[0] / unseen[1])} "
                f"({unseen[0]}/{unseen[1]})"
                if unseen and unseen[1]
                else "",
                _criteria_text(point),
                percent(point.well_formed),
                percent(point.risk_rate),
                point.risky,
                point.mean_steps or 0.0,
                report.elapsed_s,
            )
            await self._keep(played, point)
            points.append(point)
            (state.validation if self.validation else state.evals).append(point)
            self.run.append_eval(point, VALIDATION_FILE if self.validation else EVALS_FILE)
            emit(self.kind, step, **point.model_dump(mode="json", exclude={"step", "outcomes"}))
            scalars = eval_scalars(name, point.success, point.well_formed, point.risk_rate,
                                   prefix=self.kind)  # fmt: skip
            if point.criteria_share is not None:
                scalars[f"{self.kind}/{name}/criteria_met"] = point.criteria_share
            if isinstance(player, TeamPlayer):
                team = team_scalars(player.trajectories, prefix=f"{self.kind}/{name}/team")
                log.info("%s %s (%s): team %s", self.kind, name, phase,
                         ", ".join(f"{k.rsplit('/team/', 1)[1]} {v:.3g}"
                                   for k, v in team.items()) or "not judged")  # fmt: skip
                scalars.update(team)
            log_to(self.sinks, step, scalars)
            if self.on_eval is not None and not self.validation:
                self.on_eval(point)
        return points

    async def _keep(self, played: Sequence[Trajectory], point: EvalPoint) -> None:
        """The evaluation's episodes, every turn's text included, as a store of their own
        (`RunDir.episodes`), written before its point: a point on record has its episodes."""
        path = self.run.episodes(self.kind, point.step, point.phase, point.set)
        if path.exists():  # left by an evaluation that stopped before its point was written
            shutil.rmtree(path)
        async with TrajectoryWriter(path, flush_s=None) as writer:
            for trajectory in played:
                await writer.add(trajectory)

    def check_forgetting(
        self, phase: str, points: Sequence[EvalPoint], state: History
    ) -> list[Forgetting]:
        """Sets now more than the threshold below their best earlier measurement; recorded in
        `state.forgetting` and warned."""
        found = []
        for point in points:
            earlier = [
                p
                for p in state.evals
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
        state.forgetting.extend(found)
        return found
