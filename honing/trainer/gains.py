"""Where a run's held-out success came from: base -> warm start -> RL, with n and uncertainty.

    EvalPoint                          one held-out set evaluated at one point (evals.jsonl)
    gains = account(evals)             -> Gains (pooled over the held-out sets)
    best_by_validation(points)         -> (step, success): the checkpoint keep_best keeps
    gains.line("quickstart", minutes)  the last line of `honing train`

The RL gain is the last evaluation after an update minus the warm start's (the base model's when
there was no warm start), with a paired 95% interval; infrastructure failures are left out of
every rate and counted (docs/training.md). `tag_scores` splits an evaluation by task tag (e.g.
`phrasing-unseen`: the held-out tasks worded as training never words them).

Not covered: per-set breakdowns (result.json and the report keep each set's points), evaluations
between the warm start and the last one (the report draws them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import Field

from honing.config import StrictModel
from honing.eval.metrics import criteria_share
from honing.eval.stats import difference_interval, difference_interval_counts
from honing.trainer.run_dir import BEFORE, WARM_START, EvalPoint


def tag_scores(
    outcomes: Mapping[str, bool], tags: Mapping[str, Sequence[str]]
) -> dict[str, tuple[int, int]]:
    """(passed, judged) per task tag: `outcomes` keyed 'TASK#SAMPLE', `tags` task id -> tags.

    >>> tag_scores({"a#0": True, "a#1": False, "b#0": True}, {"a": ["x"], "b": ["x", "y"]})
    {'x': (2, 3), 'y': (1, 1)}
    """
    scores: dict[str, tuple[int, int]] = {}
    for key, solved in outcomes.items():
        for tag in tags.get(key.rpartition("#")[0], ()):
            passed, judged = scores.get(tag, (0, 0))
            scores[tag] = (passed + solved, judged + 1)
    return dict(sorted(scores.items()))


class Stage(StrictModel):
    """One evaluation point, pooled over the held-out sets."""

    step: int
    passed: int
    total: int = Field(description="Judged episodes (infrastructure failures left out).")
    infra_failed: int
    outcomes: dict[str, bool] = Field(
        default_factory=dict, description="'SET/TASK#SAMPLE' -> solved, for the judged episodes."
    )
    criteria: dict[str, tuple[int, int]] = Field(
        default_factory=dict,
        description="The judge's criterion -> (met, judged), summed over the sets (EvalPoint).",
    )

    @property
    def success(self) -> float | None:
        return self.passed / self.total if self.total else None

    @property
    def criteria_share(self) -> float | None:
        return criteria_share(self.criteria)


class Gains(StrictModel):
    """Base, warm start and RL success, and the RL gain with its interval."""

    base: Stage | None
    warm: Stage | None
    rl: Stage | None
    rl_gain: float | None = Field(description="RL success minus the warm start's (or base's).")
    ci_low: float | None
    ci_high: float | None
    n: int = Field(description="Episodes the gain is measured on (pairs when paired).")
    paired: bool
    infra_failures: int = Field(description="Held-out episodes the infrastructure failed.")

    def summary(self) -> dict[str, object]:
        """The figures as JSON (result.json, the run_end event): rates, gain, interval, counts."""

        def stage(s: Stage | None) -> dict[str, object] | None:
            if s is None:
                return None
            return {"step": s.step, "success": s.success, "passed": s.passed, "total": s.total,
                    "infra_failed": s.infra_failed,
                    **({"criteria_met": s.criteria_share} if s.criteria else {})}  # fmt: skip

        return {
            "base": stage(self.base),
            "warm_start": stage(self.warm),
            "rl": stage(self.rl),
            "rl_gain": self.rl_gain,
            "ci95": None if self.ci_low is None else [self.ci_low, self.ci_high],
            "n": self.n,
            "paired": self.paired,
            "infra_failures": self.infra_failures,
        }

    def figures(self, trained: str = "RL") -> str | None:
        """`base X% → warm start W% → RL Y% (RL +Z pts, 95% CI a..b; n=N; infra failures F)`,
        or None when no held-out set was evaluated; `trained` names the last stage (a
        distillation run's is "distilled"). Where the judge gives criteria (structure's
        `met:*`), `; criteria met warm start A% → RL B%` closes the parenthesis: graded
        progress where success is rare."""
        stages = [("base", self.base), ("warm start", self.warm), (trained, self.rl)]
        shown = " → ".join(f"{label} {_pct(s.success)}" for label, s in stages if s is not None)
        if not shown:
            return None
        if self.rl_gain is None or self.ci_low is None or self.ci_high is None:
            missing = f"after {trained}" if self.rl is None else f"before {trained} to compare with"
            return f"{shown} (no evaluation {missing}; infra failures {self.infra_failures})"
        graded = [(label, s) for label, s in stages if s is not None and s.criteria]
        criteria = " → ".join(f"{label} {_pct(s.criteria_share)}" for label, s in graded)
        return (
            f"{shown} ({trained} {_pts(self.rl_gain)}, 95% CI {_pts(self.ci_low, unit=False)}.."
            f"{_pts(self.ci_high, unit=False)}; n={self.n}; infra failures "
            f"{self.infra_failures}{f'; criteria met {criteria}' if criteria else ''})"
        )

    def line(self, name: str, minutes: float, trained: str = "RL") -> str:
        """`NAME: held-out success FIGURES in M min` (see `figures`)."""
        figures = self.figures(trained)
        took = f"in {minutes:.1f} min"
        if figures is None:
            return f"{name}: no held-out success measured {took}"
        return f"{name}: held-out success {figures} {took}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _pts(value: float, unit: bool = True) -> str:
    return f"{100 * value:+.0f}" + (" pts" if unit else "")


def pooled(points: Sequence[EvalPoint]) -> Stage:
    """Several held-out sets evaluated at one point, as one stage."""
    outcomes = {f"{p.set}/{key}": ok for p in points for key, ok in p.outcomes.items()}
    criteria: dict[str, tuple[int, int]] = {}
    for p in points:
        for name, (met, judged) in p.criteria.items():
            was = criteria.get(name, (0, 0))
            criteria[name] = (was[0] + met, was[1] + judged)
    return Stage(
        step=points[0].step,
        passed=sum(p.passed for p in points),
        total=sum(p.total for p in points),
        infra_failed=sum(p.infra_failed for p in points),
        outcomes=outcomes,
        criteria=criteria,
    )


def best_by_validation(points: Sequence[EvalPoint]) -> tuple[int, float] | None:
    """The update (step > 0) whose validation points do best, pooled over the sets (passed /
    judged), and that success; the earliest on a tie; None before any judged one.

    >>> def p(step, passed, total=4):
    ...     return EvalPoint(step=step, phase="p", set="s", success=None, passed=passed,
    ...                      total=total, infra_failed=0, seconds=0)
    >>> best_by_validation([p(0, 4), p(2, 3), p(4, 3), p(6, 1)])
    (2, 0.75)
    """
    steps = sorted({p.step for p in points if p.step > 0})
    best: tuple[int, float] | None = None
    for step in steps:
        stage = pooled([p for p in points if p.step == step])
        if stage.success is not None and (best is None or stage.success > best[1]):
            best = (step, stage.success)
    return best


def account(evals: Sequence[EvalPoint], rl_step: int | None = None) -> Gains:
    """The run's gains from its evaluation points (the latest of each stage; the RL stage at
    `rl_step` when given: the checkpoint chosen on validation)."""

    def stage(chosen: list[EvalPoint]) -> Stage | None:
        return pooled(chosen) if chosen else None

    def latest(points: list[EvalPoint]) -> list[EvalPoint]:
        if not points:
            return []
        last = max(p.step for p in points)
        return [p for p in points if p.step == last]

    base = stage(latest([p for p in evals if p.step == 0 and p.phase == BEFORE]))
    warm = stage(latest([p for p in evals if p.step == 0 and p.phase == WARM_START]))
    rl = stage(
        latest([p for p in evals if p.step > 0])
        if rl_step is None
        else [p for p in evals if p.step == rl_step]
    )
    start = warm if warm is not None else base
    infra = sum(s.infra_failed for s in (base, warm, rl) if s is not None)
    if rl is None or start is None or rl.success is None or start.success is None:
        return Gains(base=base, warm=warm, rl=rl, rl_gain=None, ci_low=None, ci_high=None,
                     n=rl.total if rl else 0, paired=False, infra_failures=infra)  # fmt: skip
    shared = sorted(start.outcomes.keys() & rl.outcomes.keys())
    paired = len(shared) == start.total == rl.total and bool(shared)
    if paired:
        interval = difference_interval(
            [start.outcomes[k] for k in shared], [rl.outcomes[k] for k in shared]
        )
    else:
        interval = difference_interval_counts(start.passed, start.total, rl.passed, rl.total)
    return Gains(
        base=base,
        warm=warm,
        rl=rl,
        rl_gain=rl.success - start.success,
        ci_low=interval.low,
        ci_high=interval.high,
        n=len(shared) if paired else rl.total,
        paired=paired,
        infra_failures=infra,
    )
