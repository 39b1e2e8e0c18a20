"""Alert rules, defined once for both places they run: in process, where a firing or clearing
rule is an `alert` event, and in Prometheus (deploy/prometheus/alerts.yml, generated from RULES).

    log.listen(AlertMonitor(run_dir).on_event)       # `honing train`: on by default
    state, change = evaluate(rule, history, state)   # pure: one rule over the recent Samples
    python -m honing.observe.alerts > deploy/prometheus/alerts.yml   # after editing RULES

A rule watches one value of the recent updates: in process over the last updates' `Sample`s (built
from the run's events), in Prometheus over the exported metrics (`promql`). It fires when the
value is past its threshold for `for_updates` updates in a row (Prometheus: for `for_`), once per
firing, and clears (state `resolved`) at the first update where it no longer is; a value that
cannot be measured (no judged episode, no history) does not hold. Windows count updates in
process and wall time in Prometheus (the file's ranges assume a few minutes per update).
Not covered: notification and routing (Alertmanager's), rules across runs, thresholds per run.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from honing.observe.events import Event, emit
from honing.observe.prometheus import disk_space, staleness_max, zero_variance_share

log = logging.getLogger(__name__)

WINDOW = 10  # updates: the in-process "recent" (Prometheus: 30m-1h)
SHORT = 5  # updates: the window of the error and retry rates (Prometheus: 15m)
STALENESS_BOUND = 2  # policy versions; honing train is on-policy (0), so more is a fault


@dataclass(frozen=True)
class Sample:
    """What the rules watch of one update, from its events (None: not measured)."""

    step: int
    episodes: int = 0  # training episodes played (the `update` event's)
    retries: int = 0  # their retried attempts
    sandbox_errors: int = 0  # their attempts a sandbox failure ended
    sandbox_runs: int = 0  # sandbox jobs run during the update
    reward_mean: float | None = None  # over the judged episodes
    zero_variance_share: float | None = None  # groups with equal rewards
    staleness_max: int | None = None
    tokens_per_s: float | None = None
    disk_free_fraction: float | None = None  # of the run directory's file system


History = Sequence[Sample]  # the recent updates, oldest first


@dataclass(frozen=True)
class Rule:
    """One alert: `value(history)` in process, `promql` in Prometheus, the same threshold."""

    name: str
    severity: Literal["warning", "critical"]
    value: Callable[[History], float | None]
    promql: str
    op: Literal[">", "<"]
    threshold: float
    for_updates: int  # in process: updates in a row the condition must hold
    for_: str  # Prometheus' `for:`
    summary: str  # what it means and what to look at

    @property
    def expr(self) -> str:
        return f"{self.promql} {self.op} {self.threshold:g}"

    def holds(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        return value > self.threshold if self.op == ">" else value < self.threshold


def _reward_drop(history: History) -> float | None:
    """The best mean reward of the last WINDOW updates minus the latest one."""
    now = history[-1].reward_mean
    recent = [s.reward_mean for s in history[-WINDOW:] if s.reward_mean is not None]
    return None if now is None else max(recent) - now


def _latest(field: str) -> Callable[[History], float | None]:
    def value(history: History) -> float | None:
        got = getattr(history[-1], field)
        return None if got is None else float(got)

    value.__name__ = f"latest_{field}"
    return value


def _rate(part: str, whole: str) -> Callable[[History], float | None]:
    """sum(part) / sum(whole) over the last SHORT updates (inf: parts of nothing; None: 0/0)."""

    def value(history: History) -> float | None:
        recent = history[-SHORT:]
        num = float(sum(getattr(s, part) for s in recent))
        den = float(sum(getattr(s, whole) for s in recent))
        if den == 0:
            return math.inf if num else None
        return num / den

    value.__name__ = f"{part}_per_{whole}"
    return value


def _throughput_ratio(history: History) -> float | None:
    """The latest tokens/s over their mean in the last WINDOW updates (the latest included)."""
    now = history[-1].tokens_per_s
    recent = [s.tokens_per_s for s in history[-WINDOW:] if s.tokens_per_s is not None]
    mean = sum(recent) / len(recent) if recent else 0.0
    return None if now is None or mean <= 0 else now / mean


RULES: tuple[Rule, ...] = (
    Rule("RewardCollapse", "critical", _reward_drop,
         "max_over_time(honing_reward_mean[30m]) - honing_reward_mean", ">", 0.3, 2, "5m",
         "The mean training reward fell more than 0.3 below its best of the recent updates: the "
         "policy is collapsing (check the KL and entropy; lower the learning rate)."),
    Rule("NoLearningSignal", "warning", _latest("zero_variance_share"),
         "honing_zero_variance_share", ">", 0.9, 5, "15m",
         "More than 90% of the groups had equal rewards: GRPO learns nothing from them (tasks too "
         "hard or too easy, or the sampling temperature too low)."),
    Rule("SandboxErrorRate", "critical", _rate("sandbox_errors", "sandbox_runs"),
         'sum(increase(honing_sandbox_errors_total{split="train"}[15m])) / '
         "sum(increase(honing_sandbox_runs_total[15m]))", ">", 0.05, 1, "5m",
         "More than 5% of the sandbox jobs failed in the sandbox itself (infrastructure, not the "
         "model): check the host's memory, cgroups and bubblewrap (docs/sandbox.md)."),
    Rule("RetryStorm", "warning", _rate("retries", "episodes"),
         'sum(increase(honing_retries_total{split="train"}[15m])) / '
         'sum(increase(honing_episodes_total{split="train"}[15m]))', ">", 0.5, 2, "10m",
         "More than one retry per two training episodes: an engine, sandbox or environment keeps "
         "failing (the episodes' `retries` say at which stage)."),
    Rule("StalenessOverBound", "warning", _latest("staleness_max"),
         "honing_staleness_max", ">", STALENESS_BOUND, 3, "10m",
         f"Episodes were trained on more than {STALENESS_BOUND} policy versions after they were "
         "generated: the weight sync is not reaching the engines."),
    Rule("ThroughputDrop", "warning", _throughput_ratio,
         "honing_tokens_per_second / avg_over_time(honing_tokens_per_second[1h])", "<", 0.5, 3,
         "15m",
         "Generation throughput (tokens/s) fell below half of its recent mean: a slower engine, "
         "a saturated sandbox (honing_sandbox_busy_fraction) or retries."),
    Rule("DiskAlmostFull", "critical", _latest("disk_free_fraction"),
         "honing_disk_free_bytes / honing_disk_size_bytes", "<", 0.05, 1, "5m",
         "Less than 5% of the run directory's disk is free: checkpoints and the trajectory store "
         "will fail to write (checkpoint.keep, or move out=)."),
)  # fmt: skip


# -- evaluation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleState:
    held: int = 0  # updates in a row the condition held
    firing: bool = False


@dataclass(frozen=True)
class Change:
    """A rule began firing or cleared at `step`, with the value it watched then."""

    rule: Rule
    state: Literal["firing", "resolved"]
    value: float | None
    step: int

    def message(self) -> str:
        r = self.rule
        shown = "n/a" if self.value is None else f"{self.value:.4g}"
        if self.state == "resolved":
            return f"{r.name} resolved at step {self.step}: value {shown}"
        return (
            f"{r.name} ({r.severity}) at step {self.step}: value {shown} {r.op} {r.threshold:g} "
            f"for {r.for_updates} update(s). {r.summary}"
        )


def evaluate(rule: Rule, history: History, state: RuleState) -> tuple[RuleState, Change | None]:
    """`rule` after the latest update of `history`: its new state, and the change to report
    (firing once it has held `for_updates` updates in a row; resolved when it stops holding)."""
    value = rule.value(history)
    step = history[-1].step
    if rule.holds(value):
        held = state.held + 1
        if not state.firing and held >= rule.for_updates:
            return RuleState(held, True), Change(rule, "firing", value, step)
        return RuleState(held, state.firing), None
    if state.firing:
        return RuleState(), Change(rule, "resolved", value, step)
    return RuleState(), None


class AlertMonitor:
    """Evaluates `rules` after each update from the run's events (an EventLog listener: the
    `episode` and `sandbox` events of an update come before its `update` event) and emits an
    `alert` event for each change, logged too."""

    def __init__(self, run_dir: Path | None, rules: Sequence[Rule] = RULES) -> None:
        self.run_dir = run_dir  # its disk's free space is watched (None: not watched)
        self.rules = tuple(rules)
        self.states = {rule.name: RuleState() for rule in self.rules}
        self.history: list[Sample] = []
        self._pending = Sample(step=0)  # the counts of the update in progress

    def on_event(self, event: Event) -> None:
        d = event.data
        if event.kind == "episode" and d.get("split") == "train":
            self._pending = replace(
                self._pending,
                retries=self._pending.retries + len(d.get("retries") or []),
                sandbox_errors=self._pending.sandbox_errors + int(d.get("sandbox_errors") or 0),
            )
        elif event.kind == "sandbox":
            runs = self._pending.sandbox_runs + int(d.get("runs") or 0)
            self._pending = replace(self._pending, sandbox_runs=runs)
        elif event.kind == "update" and event.step is not None:
            sample = self.sample(event.step, d)
            self._pending = Sample(step=0)
            for change in self.observe(sample):
                self.report(change)

    def sample(self, step: int, update: dict[str, Any]) -> Sample:
        """The update's Sample: its `update` event's fields, the counts gathered since the last
        one and the disk's free space now."""
        free = None
        if self.run_dir is not None:
            available, total = disk_space(self.run_dir)
            free = available / total if total > 0 else None  # NaN fails the comparison too
        zero = zero_variance_share(update.get("signal") or {})
        return replace(
            self._pending,
            step=step,
            episodes=int(update.get("episodes") or 0),
            reward_mean=update.get("reward_mean"),
            zero_variance_share=None if math.isnan(zero) else zero,
            staleness_max=staleness_max(update.get("staleness") or {}),
            tokens_per_s=update.get("tokens_per_s"),
            disk_free_fraction=free,
        )

    def observe(self, sample: Sample) -> list[Change]:
        """Add one update's sample and evaluate every rule on the recent history."""
        self.history.append(sample)
        del self.history[:-WINDOW]
        changes = []
        for rule in self.rules:
            self.states[rule.name], change = evaluate(rule, self.history, self.states[rule.name])
            if change is not None:
                changes.append(change)
        return changes

    @staticmethod
    def report(change: Change) -> None:
        rule = change.rule
        if change.state == "firing":
            log.warning("alert: %s", change.message())
        else:
            log.info("alert: %s", change.message())
        emit("alert", change.step, name=rule.name, state=change.state, severity=rule.severity,
             value=change.value, threshold=rule.threshold, message=change.message())  # fmt: skip


# -- the Prometheus rules file -------------------------------------------------------------------

HEADER = (
    "# Generated from honing.observe.alerts.RULES (python -m honing.observe.alerts > this file);\n"
    "# tests/observe/test_alerts.py fails when the two differ. Load it with rule_files: in\n"
    "# prometheus.yml (deploy/prometheus/prometheus.yml).\n"
)


def rules_yaml(rules: Sequence[Rule] = RULES) -> str:
    """The Prometheus rules file of `rules` (deploy/prometheus/alerts.yml)."""
    entries = [
        {
            "alert": r.name,
            "expr": r.expr,
            "for": r.for_,
            "labels": {"severity": r.severity},
            "annotations": {
                "summary": r.summary,
                "description": f"value {{{{ $value }}}} {r.op} {r.threshold:g} "
                f"(in process: {r.for_updates} update(s) in a row)",
            },
        }
        for r in rules
    ]
    body = yaml.safe_dump({"groups": [{"name": "honing", "rules": entries}]}, sort_keys=False,
                          width=4096, allow_unicode=True)  # fmt: skip
    return HEADER + body


if __name__ == "__main__":
    sys.stdout.write(rules_yaml())
