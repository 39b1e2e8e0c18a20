"""`honing report RUN_DIR`: one self-contained HTML page that explains a training run at a glance.

    path = build_report(Path("runs/quickstart-20261129-212514"))   # -> RUN_DIR/report.html

The page opens with a headline in plain words (held-out success before -> after, what the warm
start and the updates each contributed, how long it took), then one section per question a
newcomer asks: did reward and success go up (per domain, per tag, per reward component)? what
did the held-out evaluations say? why did episodes fail? where did the time go (generation, env,
update, sync)? how stale were the trajectories? what did the learner see (loss, entropy, KL,
grad norm, clip fractions)? which tasks are slow or keep failing? what does an episode look
like (a success, a failure, the latest one, with tool calls and observations)?

Sources, best first: `events.jsonl` (the run's event log, see honing.observe), then the files every
run has had since the closed loop: `metrics.jsonl` (one line per update), `evals.jsonl`,
`result.json`, `config.yaml`, `warm_start/done.json` and the trajectory store (per-episode
timings, failures, policy versions and the conversations). A piece that was not recorded is shown
as "not recorded" with the reason; it never stops the page. A directory that holds none of these
files raises `ConfigError` saying what was expected.

Self-contained: inline CSS, charts as inline SVG drawn here (no JavaScript, no fonts or scripts
from a network). Everything taken from the run (model output above all) is HTML-escaped.

Not covered: live updating (the page is a snapshot; run the command again), comparing runs.
"""

from __future__ import annotations

import contextlib
import html
import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from honing.errors import ConfigError, StoreError
from honing.observe.events import read_events
from honing.store import Trajectory, read_trajectories

REPORT_FILE = "report.html"
RUN_FILES = ("config.yaml", "events.jsonl", "metrics.jsonl", "evals.jsonl", "result.json")
BEFORE, WARM_START = "before", "warm start"  # the phase names of the step-0 evaluations
INFRA_ENDINGS = ("infra_error", "sandbox_error", "verifier_crash")
LEARNER_STATS = (
    ("loss", "loss"),
    ("entropy", "entropy (nats/token)"),
    ("kl", "KL to the reference"),
    ("approx_kl", "KL proximal → current"),
    ("grad_norm", "grad norm (before clipping)"),
    ("clip_frac_low", "clipped share, low side"),
    ("clip_frac_high", "clipped share, high side"),
    ("advantage_abs_mean", "mean |advantage|"),
)


# -- records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpdatePoint:
    """One update (training step), from `events.jsonl` or `metrics.jsonl`."""

    step: int  # 1-based: updates done after it
    phase: str
    episodes: int
    success_rate: float
    reward_mean: float
    infra_errors: int
    rollout_s: float
    update_s: float
    sync_s: float
    learner: dict[str, float]  # the numeric LearnerStats fields
    staleness: dict[int, int]  # lag -> trajectories; empty when the log did not record it
    time: float | None  # unix time it was logged


@dataclass(frozen=True)
class EpisodePoint:
    """One training episode, from an `episode` event or the trajectory store."""

    step: int  # the update that trained on it (0: unknown)
    task_id: str
    domain: str
    tags: tuple[str, ...]
    sample: int
    success: bool
    reward: float
    components: dict[str, float]
    ending: str
    failure: str | None
    generation_s: float
    env_s: float
    queue_s: float
    total_s: float
    policy_version: int
    staleness: int | None

    @property
    def outcome(self) -> str:
        """ "success", else why it failed: the failure reason, the ending, or "judged wrong"
        (the environment judged a finished episode incorrect)."""
        if self.success:
            return "success"
        if self.failure:
            return self.failure
        return "judged wrong" if self.ending == "done" else self.ending


@dataclass(frozen=True)
class EvalRow:
    """One held-out set evaluated at one point (an `EvalPoint` of honing.trainer.loop)."""

    step: int
    phase: str
    set: str
    success: float | None
    passed: int
    total: int
    infra_failed: int
    seconds: float
    well_formed: float | None

    @property
    def label(self) -> str:
        return self.phase if self.step == 0 else f"update {self.step}"


@dataclass(frozen=True)
class RunInfo:
    name: str
    model: str
    planned_steps: int | None
    groups_per_step: int | None
    n: int | None
    heldout_sets: tuple[str, ...]
    finished: bool  # result.json (or a run_end event) exists
    elapsed_s: float | None
    warm_start_s: float | None  # the warm start's SFT seconds (warm_start/done.json)


@dataclass
class RunData:
    """Everything the page shows, read from a run directory."""

    run_dir: Path
    info: RunInfo
    updates: list[UpdatePoint]
    episodes: list[EpisodePoint]
    evals: list[EvalRow]
    trajectories: list[tuple[int, Trajectory]]  # (update step, trajectory) for the samples
    sources: list[str] = field(default_factory=list)  # the files read
    notes: list[str] = field(default_factory=list)  # what was not recorded, and why


# -- reading -----------------------------------------------------------------------------------


def load_run(run_dir: Path) -> RunData:
    """Read every record of `run_dir` the report uses; `ConfigError` if it is not a run."""
    if not run_dir.is_dir():
        raise ConfigError(
            f"{run_dir}: no such directory; pass the run directory `honing train` wrote "
            "(its out=..., e.g. runs/quickstart-YYYYMMDD-HHMMSS)"
        )
    present = [name for name in RUN_FILES if (run_dir / name).is_file()]
    if not present and not (run_dir / "trajectories").is_dir():
        raise ConfigError(
            f"{run_dir} is not a run directory: none of {', '.join(RUN_FILES)} or trajectories/ "
            "is in it; pass the directory `honing train` wrote (its out=..., e.g. "
            "runs/quickstart-YYYYMMDD-HHMMSS)"
        )
    notes: list[str] = []
    events = _read_events(run_dir / "events.jsonl")
    metrics = _read_jsonl(run_dir / "metrics.jsonl")
    evals_raw = _read_jsonl(run_dir / "evals.jsonl")
    result = _read_json(run_dir / "result.json")
    config = _read_yaml(run_dir / "config.yaml")
    warm = _read_json(run_dir / "warm_start" / "done.json")

    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_kind[str(event.get("kind"))].append(event)
    if by_kind["update"]:
        updates = [_update(e) for e in by_kind["update"]]
    else:
        updates = [_update(m) for m in metrics]
        if not events:
            notes.append(
                "No events.jsonl (a run from before honing recorded events): per-update numbers "
                "come from metrics.jsonl, per-episode ones from the trajectory store."
            )
    evals = [_eval(e) for e in (by_kind["eval"] or evals_raw)]

    trajectories: list[tuple[int, Trajectory]] = []
    store_episodes: list[EpisodePoint] = []
    if (run_dir / "trajectories").is_dir():
        try:
            trajectories = _with_steps(read_trajectories(run_dir), updates)
            versions = _versions_before(updates)
            store_episodes = [
                _episode_from_trajectory(s, t, versions.get(s)) for s, t in trajectories
            ]
        except StoreError as exc:
            notes.append(f"The trajectory store could not be read: {exc}")
    else:
        notes.append("No trajectory store (trajectories/): no per-episode details or samples.")
    event_episodes = [e for e in by_kind["episode"] if e.get("split", "train") == "train"]
    episodes = _episodes_from_events(event_episodes, updates) if event_episodes else store_episodes

    end = by_kind["run_end"][-1] if by_kind["run_end"] else None
    elapsed = _float(end.get("elapsed_s")) if end else None
    if elapsed is None and result is not None:
        elapsed = _float(result.get("elapsed_s"))
    start = by_kind["run_start"][-1] if by_kind["run_start"] else None
    cfg = config or (start.get("config") if start and isinstance(start.get("config"), dict) else {})
    cfg = cfg if isinstance(cfg, dict) else {}
    info = RunInfo(
        name=str((start or {}).get("name") or cfg.get("name") or run_dir.name),
        model=str((start or {}).get("model") or cfg.get("model") or "not recorded"),
        planned_steps=_planned_steps(cfg),
        groups_per_step=_int_or_none(cfg.get("groups_per_step")),
        n=_int_or_none(cfg.get("n")),
        heldout_sets=tuple(cfg.get("heldout") or {}),
        finished=result is not None or end is not None,
        elapsed_s=elapsed,
        warm_start_s=_float(warm.get("seconds")) if warm else None,
    )
    sources = [name for name in (*RUN_FILES, "warm_start/done.json") if (run_dir / name).is_file()]
    if trajectories:
        sources.append(f"trajectories/ ({len(trajectories)} trajectories)")
    return RunData(run_dir, info, updates, episodes, evals, trajectories, sources, notes)


def _read_events(path: Path) -> list[dict[str, Any]]:
    """The event log as records (the kind's fields with t, kind and step)."""
    if not path.is_file():
        return []
    return [{**e.data, "t": e.t, "kind": e.kind, "step": e.step} for e in read_events(path)]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The objects of a JSONL log; a torn last line (a killed writer) is skipped, a bad line
    before it is an error naming file:line."""
    if not path.is_file():
        return []
    lines = path.read_text(errors="replace").splitlines()
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                break
            raise ConfigError(
                f"{path}:{number}: not a JSON line ({exc.msg}); the log is damaged: fix or "
                "delete that line and run `honing report` again"
            ) from exc
        if not isinstance(record, dict):
            raise ConfigError(f"{path}:{number}: expected a JSON object, got {line[:60]!r}")
        out.append(record)
    return out


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); delete it or fix it") from exc
    return value if isinstance(value, dict) else None


def _read_yaml(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        value = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    return value if isinstance(value, dict) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _planned_steps(cfg: dict[str, Any]) -> int | None:
    steps = _int_or_none(cfg.get("steps"))
    phases = cfg.get("phases") or []
    if phases and isinstance(phases, list):
        return sum(_int_or_none(p.get("steps")) or 0 for p in phases if isinstance(p, dict))
    return steps


def _update(record: dict[str, Any]) -> UpdatePoint:
    learner = record.get("learner") or {}
    stale = record.get("staleness") or {}
    return UpdatePoint(
        step=int(record.get("step") or 0),
        phase=str(record.get("phase") or ""),
        episodes=int(record.get("episodes") or 0),
        success_rate=_float(record.get("success_rate")) or 0.0,
        reward_mean=_float(record.get("reward_mean")) or 0.0,
        infra_errors=int(record.get("infra_errors") or 0),
        rollout_s=_float(record.get("rollout_s")) or 0.0,
        update_s=_float(record.get("update_s")) or 0.0,
        sync_s=_float(record.get("sync_s")) or 0.0,
        learner={k: float(v) for k, v in learner.items() if _float(v) is not None},
        staleness={int(k): int(v) for k, v in stale.items()} if isinstance(stale, dict) else {},
        time=_float(record.get("time", record.get("t"))),
    )


def _eval(record: dict[str, Any]) -> EvalRow:
    return EvalRow(
        step=int(record.get("step") or 0),
        phase=str(record.get("phase") or ""),
        set=str(record.get("set") or "?"),
        success=_float(record.get("success")),
        passed=int(record.get("passed") or 0),
        total=int(record.get("total") or 0),
        infra_failed=int(record.get("infra_failed") or 0),
        seconds=_float(record.get("seconds")) or 0.0,
        well_formed=_float(record.get("well_formed")),
    )


def _with_steps(
    trajectories: list[Trajectory], updates: Sequence[UpdatePoint]
) -> list[tuple[int, Trajectory]]:
    """Each stored trajectory with the update that trained on it: the trainer writes each
    update's episodes, in order, as one shard; the updates' episode counts say where each
    update's rows start (when they add up to the store; else the step is unknown, 0)."""
    counts = [u.episodes for u in updates]
    if sum(counts) != len(trajectories):
        return [(0, t) for t in trajectories]
    steps = [u.step for u, c in zip(updates, counts, strict=True) for _ in range(c)]
    return list(zip(steps, trajectories, strict=True))


def _versions_before(updates: Sequence[UpdatePoint]) -> dict[int, int]:
    """The learner's version when each update began: the version the one before it left (an
    update that took no optimiser step keeps it); the first begins at 0."""
    out, version = {}, 0
    for u in updates:
        out[u.step] = version
        version = int(u.learner.get("version", version + 1))
    return out


def _episode_from_trajectory(step: int, t: Trajectory, learner: int | None) -> EpisodePoint:
    known = learner is not None and t.policy_version >= 0
    staleness = learner - t.policy_version if learner is not None and known else None
    return EpisodePoint(
        step=step,
        task_id=t.task_id,
        domain=t.domain,
        tags=tuple(t.tags),
        sample=t.sample,
        success=t.success,
        reward=t.reward,
        components=dict(t.components),
        ending=t.ending.value,
        failure=t.failure,
        generation_s=t.generation_s,
        env_s=t.env_s,
        queue_s=t.queue_s,
        total_s=t.total_s,
        policy_version=t.policy_version,
        staleness=staleness,
    )


def _episodes_from_events(
    events: Sequence[dict[str, Any]], updates: Sequence[UpdatePoint]
) -> list[EpisodePoint]:
    """Episode events, each with the update that trained on it: a training episode's step is
    that update, counted from 1 (without a step: the first update logged after it)."""
    times = [(u.time, u.step) for u in updates if u.time is not None]
    out = []
    for e in events:
        t, done = _float(e.get("t")), _int_or_none(e.get("step"))
        if done is not None:
            step = done
        else:
            step = next((s for ut, s in times if t is not None and ut >= t), 0)
        stale = e.get("staleness")
        out.append(
            EpisodePoint(
                step=step,
                task_id=str(e.get("task_id") or "?"),
                domain=str(e.get("domain") or "?"),
                tags=tuple(str(x) for x in e.get("tags") or ()),
                sample=int(e.get("sample") or 0),
                success=bool(e.get("success")),
                reward=_float(e.get("reward")) or 0.0,
                components={
                    str(k): float(v)
                    for k, v in (e.get("components") or {}).items()
                    if _float(v) is not None
                },
                ending=str(e.get("ending") or "done"),
                failure=str(e["failure"]) if e.get("failure") else None,
                generation_s=_float(e.get("generation_s")) or 0.0,
                env_s=_float(e.get("env_s")) or 0.0,
                queue_s=_float(e.get("queue_s")) or 0.0,
                total_s=_float(e.get("total_s")) or 0.0,
                policy_version=int(e.get("policy_version", -1)),
                staleness=int(stale) if isinstance(stale, int) else None,
            )
        )
    return out


# -- numbers and words ------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "not recorded" if value is None else f"{100 * value:.0f}%"


def _pts(delta: float) -> str:
    return f"{100 * delta:+.0f} pts"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 0.01:
        return f"{value:.2g}"
    return f"{value:.3g}"


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def _pooled(rows: Sequence[EvalRow]) -> float | None:
    total = sum(r.total for r in rows)
    return sum(r.passed for r in rows) / total if total else None


def _eval_points(evals: Sequence[EvalRow]) -> list[tuple[str, list[EvalRow]]]:
    """The evaluation points in run order (before, warm start, update N...), each with its sets."""
    points: dict[tuple[int, int, str], list[EvalRow]] = {}
    order = {BEFORE: 0, WARM_START: 1}
    for row in evals:
        key = (row.step, order.get(row.phase, 2) if row.step == 0 else 2, row.label)
        points.setdefault(key, []).append(row)
    return [(key[2], rows) for key, rows in sorted(points.items())]


def headline(data: RunData) -> str:
    """The run in one sentence: held-out before -> after, and who gave what."""
    info, n = data.info, len(data.updates)
    updates = f"{n} update{'s' if n != 1 else ''}"
    took = f" in {_duration(info.elapsed_s)}" if info.elapsed_s is not None else ""
    points = _eval_points(data.evals)
    before = next((_pooled(r) for label, r in points if label == BEFORE), None)
    warm = next((_pooled(r) for label, r in points if label == WARM_START), None)
    last_label, last_rows = points[-1] if points else ("", [])
    after = _pooled(last_rows) if last_label not in (BEFORE, WARM_START) else None
    unfinished = "" if info.finished else " (unfinished: no result.json yet)"
    if before is None and after is None and warm is None:
        if not data.updates:
            return f"No update finished and no held-out set was evaluated{unfinished}."
        first, last = data.updates[0], data.updates[-1]
        return (
            f"Training success {_pct(first.success_rate)} → {_pct(last.success_rate)} (first → "
            f"last update) over {updates}{took}; no held-out set was evaluated{unfinished}."
        )
    start = before if before is not None else warm
    end = after if after is not None else (warm if warm is not None else before)
    assert start is not None and end is not None
    text = f"Held-out success {_pct(start)} → {_pct(end)} over {updates}{took}"
    if warm is not None and before is not None:
        rl = f", RL {_pts(after - warm)}" if after is not None else ", no evaluation after RL yet"
        text += f"; the warm start gave {_pts(warm - before)}{rl}"
    elif end is not start:
        text += f" ({_pts(end - start)})"
    return text + unfinished + "."


# -- SVG charts --------------------------------------------------------------------------------

PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1",
    "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#bab0ac",
)  # fmt: skip
SUCCESS_COLOR = "#59a14f"
W, H = 520, 230  # viewBox of a full-size chart
PAD_L, PAD_R, PAD_T, PAD_B = 52, 14, 12, 34


@dataclass(frozen=True)
class Series:
    name: str
    points: list[tuple[float, float | None]]  # (x, y); None: a gap
    color: str


@dataclass(frozen=True)
class Chart:
    """An SVG chart and what the page says about it."""

    key: str  # id on the page
    title: str
    caption: str  # one line: what to look at
    svg: str
    legend: list[tuple[str, str]]  # (label, colour)
    marks: int  # data marks drawn (points or bars), checked by the tests

    def html(self, small: bool = False, wide: bool = False) -> str:
        legend = "".join(
            f'<span class="key"><i style="background:{c}"></i>{_e(label)}</span>'
            for label, c in self.legend
        )
        return (
            f'<figure class="chart{" small" if small else ""}{" wide" if wide else ""}" '
            f'id="{self.key}" '
            f'data-marks="{self.marks}"><div class="ctitle">{_e(self.title)}</div>'
            f'{self.svg}<div class="legend">{legend}</div>'
            f"<figcaption>{_e(self.caption)}</figcaption></figure>"
        )


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _y_ticks(values: Iterable[float], percent: bool, most: int = 5) -> list[float]:
    """Round tick values covering `values` and 0 (0-100% for shares)."""
    if percent:
        return [0.0, 0.25, 0.5, 0.75, 1.0]
    items = [v for v in values if math.isfinite(v)]
    lo, hi = min([0.0, *items]), max([0.0, *items])
    if hi - lo < 1e-12:
        hi = lo + 1.0
    raw = (hi - lo) / (most - 1)
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    start, end = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(i * step, 12) for i in range(start, end + 1)]


def _tick(value: float, percent: bool) -> str:
    return f"{100 * value:.0f}%" if percent else _num(value)


@dataclass(frozen=True)
class _Frame:
    """A plot area: the SVG size and the scales from data to pixels."""

    width: int
    height: int
    y_ticks: list[float]
    sx: Callable[[float], float]
    pad_l: int = PAD_L

    @property
    def y_lo(self) -> float:
        return self.y_ticks[0]

    def sy(self, y: float) -> float:
        lo, hi = self.y_ticks[0], self.y_ticks[-1]
        return PAD_T + (1 - (y - lo) / (hi - lo)) * (self.height - PAD_T - PAD_B)

    def axes(self, percent: bool, x_ticks: Sequence[tuple[float, str]], x_label: str) -> list[str]:
        w, h = self.width, self.height
        parts = [
            f'<svg class="plot" viewBox="0 0 {w} {h}" role="img" '
            f'preserveAspectRatio="xMidYMid meet" xmlns="http://www.w3.org/2000/svg">'
        ]
        for v in self.y_ticks:
            y = self.sy(v)
            parts.append(
                f'<line class="grid{" zero" if v == 0 else ""}" x1="{self.pad_l}" '
                f'x2="{w - PAD_R}" y1="{y:.1f}" y2="{y:.1f}"/><text class="ytick" '
                f'x="{self.pad_l - 6}" y="{y + 4:.1f}">{_tick(v, percent)}</text>'
            )
        for x, label in x_ticks:
            parts.append(
                f'<text class="xtick" x="{self.sx(x):.1f}" y="{h - 18}">{_e(label)}</text>'
            )
        parts.append(
            f'<text class="xlabel" x="{(self.pad_l + w - PAD_R) / 2:.1f}" y="{h - 3}">'
            f"{_e(x_label)}</text>"
        )
        return parts


def _thin(labels: Sequence[tuple[float, str]], most: int) -> list[tuple[float, str]]:
    if len(labels) <= most:
        return list(labels)
    every = math.ceil(len(labels) / most)
    return [t for i, t in enumerate(labels) if i % every == 0 or i == len(labels) - 1]


def line_chart(
    key: str,
    title: str,
    caption: str,
    series: Sequence[Series],
    *,
    x_label: str = "update",
    percent: bool = False,
    x_names: Sequence[str] | None = None,
    small: bool = False,
) -> Chart:
    """Lines with a dot per data point; `x_names` makes x ordinal (0..n-1, labelled)."""
    width, height, pad_l = (300, 180, 54) if small else (W, H, PAD_L)
    xs = [x for s in series for x, _ in s.points]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    inset = 34 if x_names is not None else 12  # room for the first and last x labels

    def sx(x: float) -> float:
        return pad_l + inset + (x - x_lo) / (x_hi - x_lo) * (width - pad_l - PAD_R - 2 * inset)

    ys = [y for s in series for _, y in s.points if y is not None]
    frame = _Frame(width, height, _y_ticks(ys, percent), sx, pad_l)
    if x_names is not None:
        ticks = [(float(i), name) for i, name in enumerate(x_names)]
    else:
        ticks = [(x, f"{x:g}") for x in sorted(set(xs))]
    parts = frame.axes(percent, _thin(ticks, 6 if small else 12), x_label)
    marks = 0
    for s in series:
        segment: list[str] = []
        paths: list[list[str]] = [segment]
        for x, y in s.points:
            if y is None:
                segment = []
                paths.append(segment)
                continue
            segment.append(f"{sx(x):.1f},{frame.sy(y):.1f}")
        for path in paths:
            if len(path) > 1:
                parts.append(
                    f'<polyline class="line" points="{" ".join(path)}" stroke="{s.color}"/>'
                )
        for x, y in s.points:
            if y is None:
                continue
            name = x_names[int(x)] if x_names is not None else f"{x_label} {x:g}"
            parts.append(
                f'<circle class="mark" cx="{sx(x):.1f}" cy="{frame.sy(y):.1f}" r="3.2" '
                f'fill="{s.color}"><title>{_e(s.name)}, {_e(name)}: '
                f"{_tick(y, percent) if percent else _num(y)}</title></circle>"
            )
            marks += 1
    parts.append("</svg>")
    legend = [(s.name, s.color) for s in series] if len(series) > 1 else []
    return Chart(key, title, caption, "".join(parts), legend, marks)


def bar_chart(
    key: str,
    title: str,
    caption: str,
    bars: Sequence[tuple[str, dict[str, float]]],
    categories: Sequence[tuple[str, str]],
    *,
    x_label: str = "update",
    unit: str = "",
) -> Chart:
    """Stacked bars, one per (label, {category: value}); `categories` is (name, colour), bottom
    first. One data mark per bar."""
    width, height = W, H
    totals = [sum(v.get(c, 0.0) for c, _ in categories) for _, v in bars]
    n = max(len(bars), 1)
    slot = (width - PAD_L - PAD_R) / n
    bar_w = min(48.0, slot * 0.7)

    def sx(i: float) -> float:
        return PAD_L + slot * (i + 0.5)

    frame = _Frame(width, height, _y_ticks(totals, False), sx)
    sy = frame.sy
    ticks = [(float(i), label) for i, (label, _) in enumerate(bars)]
    parts = frame.axes(False, _thin(ticks, 16), x_label)
    for i, (label, values) in enumerate(bars):
        parts.append(f'<g class="mark" data-label="{_e(label)}">')
        base = 0.0
        for name, color in categories:
            value = values.get(name, 0.0)
            if value <= 0:
                continue
            top = base + value
            parts.append(
                f'<rect x="{sx(i) - bar_w / 2:.1f}" y="{sy(top):.1f}" width="{bar_w:.1f}" '
                f'height="{max(sy(base) - sy(top), 0.5):.1f}" fill="{color}">'
                f"<title>{_e(x_label)} {_e(label)}: {_e(name)} {_num(value)}{unit}</title></rect>"
            )
            base = top
        parts.append("</g>")
    parts.append("</svg>")
    legend = list(categories) if len(categories) > 1 else []
    return Chart(key, title, caption, "".join(parts), legend, len(bars))


def share_bar(key: str, title: str, caption: str, parts: Sequence[tuple[str, float, str]]) -> Chart:
    """One horizontal bar split into named shares (the run's time), labelled in the legend."""
    total = sum(v for _, v, _ in parts) or 1.0
    width, height, x = 1000, 40, 0.0
    svg = [
        f'<svg class="plot" viewBox="0 0 {width} {height}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg">'
    ]
    legend = []
    for name, value, color in parts:
        w = value / total * width
        svg.append(
            f'<rect class="mark" x="{x:.1f}" y="4" width="{max(w, 0.5):.1f}" height="32" '
            f'fill="{color}"><title>{_e(name)}: {_duration(value)}</title></rect>'
        )
        if w > 60:
            svg.append(
                f'<text class="inbar" x="{x + w / 2:.1f}" y="24">{100 * value / total:.0f}%</text>'
            )
        x += w
        legend.append((f"{name} {_duration(value)} ({100 * value / total:.0f}%)", color))
    svg.append("</svg>")
    return Chart(key, title, caption, "".join(svg), legend, len(parts))


# -- sections ----------------------------------------------------------------------------------


def _missing(what: str, why: str) -> str:
    return f'<p class="missing"><b>{_e(what)}: not recorded.</b> {_e(why)}</p>'


def _section(key: str, title: str, body: str) -> str:
    return f'<section id="{key}"><h2>{_e(title)}</h2>{body}</section>'


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    head = "".join(f'<th class="{"num" if i in numeric else ""}">{_e(h)}</th>'
                   for i, h in enumerate(header))  # fmt: skip
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"num" if i in numeric else ""}">{c}</td>' for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def summary_section(data: RunData) -> str:
    info, updates = data.info, data.updates
    planned = f" of {info.planned_steps}" if info.planned_steps is not None else ""
    shape = (
        f"{info.groups_per_step} tasks × {info.n} samples"
        if info.groups_per_step and info.n
        else "not recorded"
    )
    cards = [
        ("model", info.model),
        ("run", info.name),
        ("updates", f"{len(updates)}{planned}" + ("" if info.finished else " (unfinished)")),
        ("elapsed", _duration(info.elapsed_s)),
        ("episodes trained on", str(sum(u.episodes for u in updates))),
        ("per update", shape),
        ("warm start", _duration(info.warm_start_s) if info.warm_start_s else "none"),
    ]
    grid = "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div></div>'
        for k, v in cards
    )
    points = _eval_points(data.evals)
    sets = sorted({r.set for r in data.evals})
    if not sets:
        table = _missing(
            "Held-out success", "no held-out set was evaluated (no heldout: in the config)"
        )
    else:
        labels = [label for label, _ in points]
        header = ["held-out set", *labels, "change"]
        rows = []
        for name in sets:
            cells, values = [], []
            for _, rows_at in points:
                row = next((r for r in rows_at if r.set == name), None)
                if row is None:
                    cells.append("—")
                    continue
                values.append(row.success)
                cells.append(f"{_pct(row.success)} <small>({row.passed}/{row.total})</small>")
            first, last = values[0] if values else None, values[-1] if values else None
            change = _pts(last - first) if first is not None and last is not None else "—"
            rows.append([_e(name), *cells, change])
        table = _table(header, rows, set(range(1, len(header))))
    return _section("summary", "Summary", f'<div class="cards">{grid}</div>{table}')


def _per_update(
    episodes: Sequence[EpisodePoint],
    key: Callable[[EpisodePoint], Iterable[str]],
    value: Callable[[EpisodePoint], float],
    steps: Sequence[int],
    names: Sequence[str],
) -> list[Series]:
    sums: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in episodes:
        for name in key(e):
            sums[(name, e.step)].append(value(e))
    return [
        Series(
            name,
            [(float(s), _mean(sums[(name, s)]) if sums.get((name, s)) else None) for s in steps],
            PALETTE[i % len(PALETTE)],
        )
        for i, name in enumerate(names)
    ]


def _colors(n: int) -> list[str]:
    return [PALETTE[i % len(PALETTE)] for i in range(n)]


def _mean_at(episodes: Sequence[EpisodePoint], step: int, component: str) -> float | None:
    values = [e.components.get(component, 0.0) for e in episodes if e.step == step]
    return _mean(values) if values else None


def progress_section(data: RunData) -> str:
    updates, episodes = data.updates, [e for e in data.episodes if e.step > 0]
    if not updates:
        return _section(
            "progress",
            "Reward and success during training",
            _missing("Training progress", "no update finished (metrics.jsonl has no line)"),
        )
    steps = [u.step for u in updates]
    success = line_chart(
        "chart-success",
        "Training success per update",
        "Share of each update's episodes that succeeded: it should trend up; flat at 0% or "
        "100% gives the learner no signal.",
        [Series("success", [(u.step, u.success_rate) for u in updates], SUCCESS_COLOR)],
        percent=True,
    )
    reward = line_chart(
        "chart-reward",
        "Mean reward per update",
        "The weighted sum of the reward components, averaged over the update's episodes.",
        [Series("mean reward", [(u.step, u.reward_mean) for u in updates], PALETTE[0])],
    )
    charts = [success.html(), reward.html()]
    notes = []
    domains = sorted({e.domain for e in episodes})
    if len(domains) > 1:
        charts.append(
            line_chart(
                "chart-domain",
                "Success per domain",
                "One line per domain: a domain that stays low (or drops when another is added) "
                "needs attention.",
                _per_update(episodes, lambda e: [e.domain], lambda e: e.success, steps, domains),
                percent=True,
            ).html()
        )
    elif domains:
        notes.append(f"One domain ({_e(domains[0])}): its success is the curve above.")
    tag_counts = Counter(t for e in episodes for t in set(e.tags))
    tags = [t for t, c in tag_counts.most_common() if c < len(episodes)][:6]
    if tags:
        charts.append(
            line_chart(
                "chart-tag",
                "Success per task tag",
                "Success of the episodes carrying each tag (the 6 most common tags that not "
                "every task has): which kinds of task the policy handles.",
                _per_update(
                    episodes,
                    lambda e: [t for t in tags if t in e.tags],
                    lambda e: e.success,
                    steps,
                    tags,
                ),
                percent=True,
            ).html()
        )
    components = sorted({c for e in episodes for c in e.components})
    if components:
        charts.append(
            line_chart(
                "chart-components",
                "Reward components per update",
                "The mean of each named reward component (outcome = solved; the others are "
                "process rewards such as well-formed tool calls).",
                [
                    Series(c, [(float(s), _mean_at(episodes, s, c)) for s in steps], color)
                    for c, color in zip(components, _colors(len(components)), strict=True)
                ],
            ).html()
        )
    body = _pairs(charts)
    if not episodes:
        body += _missing("Per-domain, per-tag and per-component curves", "no per-episode records")
    body += "".join(f'<p class="note">{n}</p>' for n in notes)
    return _section("progress", "Reward and success during training", body)


def _pairs(charts: Sequence[str]) -> str:
    """Charts two per row."""
    return "".join(
        '<div class="pair">' + "".join(f"<div>{c}</div>" for c in charts[i : i + 2]) + "</div>"
        for i in range(0, len(charts), 2)
    )


def evals_section(data: RunData) -> str:
    points = _eval_points(data.evals)
    if not points:
        return _section(
            "evals",
            "Held-out evaluations",
            _missing("Held-out evaluations", "no evals.jsonl (no held-out set in the config)"),
        )
    labels = [label for label, _ in points]
    sets = sorted({r.set for r in data.evals})
    series = []
    for name, color in zip(sets, _colors(len(sets)), strict=True):
        values: list[tuple[float, float | None]] = []
        for i, (_, at) in enumerate(points):
            row = next((r for r in at if r.set == name), None)
            values.append((float(i), row.success if row else None))
        series.append(Series(name, values, color))
    chart = line_chart(
        "chart-evals",
        "Held-out success at each evaluation",
        "Success on tasks never trained on, before training, after the warm start and during "
        "RL: the number that says whether the run worked.",
        series,
        x_label="",
        x_names=labels,
        percent=True,
    )
    infra = any(r.infra_failed for r in data.evals)
    table_rows = [
        [
            _e(r.label),
            _e(r.set),
            f"{_pct(r.success)} <small>({r.passed}/{r.total})</small>",
            _pct(r.well_formed),
            _duration(r.seconds),
        ]
        + ([str(r.infra_failed)] if infra else [])
        for _, rows_at in points
        for r in rows_at
    ]
    table = _table(
        ["when", "set", "success", "well-formed", "took"] + (["infra failures"] if infra else []),
        table_rows,
        {2, 3, 4, 5},
    ) + (
        '<p class="note">Well-formed: the share of model turns that were a valid action (a tool '
        "call the environment could parse).</p>"
    )
    return _section("evals", "Held-out evaluations", _pairs([chart.html(), table]))


def failures_section(data: RunData) -> str:
    episodes = [e for e in data.episodes if e.step > 0]
    if not episodes:
        return _section(
            "failures",
            "Why episodes failed",
            _missing("Failure reasons", "no per-episode records (no store, no events.jsonl)"),
        )
    counts = Counter(e.outcome for e in episodes)
    reasons = [r for r, _ in counts.most_common() if r != "success"]
    categories = [("success", SUCCESS_COLOR)] + [
        (r, "#7f7f7f" if r in INFRA_ENDINGS else c)
        for r, c in zip(reasons, [p for p in PALETTE if p != SUCCESS_COLOR] * 3, strict=False)
    ]
    steps = sorted({e.step for e in episodes})
    bars = []
    for step in steps:
        at = Counter(e.outcome for e in episodes if e.step == step)
        bars.append((str(step), {k: float(v) for k, v in at.items()}))
    chart = bar_chart(
        "chart-failures",
        "Episode outcomes per update",
        "Each bar is one update's episodes: green succeeded, the other colours say why an "
        "episode failed (the environment's failure reason; grey: infrastructure). The green "
        "share should grow.",
        bars,
        categories,
    )
    total = len(episodes)
    rows = [
        [_e(r), str(c), f"{100 * c / total:.0f}%", _e(_REASON_WORDS.get(r, ""))]
        for r, c in counts.most_common()
    ]
    table = _table(["outcome", "episodes", "share", "meaning"], rows, {1, 2})
    return _section("failures", "Why episodes failed", _pairs([chart.html(), table]))


_REASON_WORDS = {
    "success": "the outcome reward reached 1",
    "judged wrong": "the episode ended normally but the answer or program was wrong",
    "malformed_action": "unparsable tool call or bad arguments",
    "unknown_tool": "called a tool the environment does not have",
    "tool_error": "the tool ran and reported an error",
    "sandbox_timeout": "the model's program ran past its time limit",
    "memory_limit": "the model's program ran out of memory",
    "step_timeout": "one step took longer than env.step_timeout_s",
    "step_limit": "used all its turns (agent.max_turns) without finishing",
    "episode_timeout": "the episode took longer than env.episode_timeout_s",
    "sandbox_error": "infrastructure: the sandbox failed",
    "verifier_crash": "infrastructure: honing's verifier failed",
    "infra_error": "infrastructure: retries exhausted",
    "stopped": "the model stopped without acting",
    "context_limit": "the context or token budget ran out",
    "stale": "dropped: too many policy versions behind",
    "timeout": "a deadline passed",
}


STAGE_COLORS = {
    "generation": "#4e79a7",
    "environment": "#f28e2b",
    "rollout": "#76b7b2",
    "update (training)": "#e15759",
    "weight sync": "#b07aa1",
    "warm start (SFT)": "#9c755f",
    "held-out evaluation": "#edc948",
    "other (loading, checkpoints)": "#bab0ac",
}


def time_section(data: RunData) -> str:
    updates = data.updates
    if not updates:
        return _section(
            "time", "Where the time went", _missing("Timings", "no update finished yet")
        )
    by_step: dict[int, list[EpisodePoint]] = defaultdict(list)
    for e in data.episodes:
        by_step[e.step].append(e)
    bars = []
    totals: dict[str, float] = defaultdict(float)
    for u in updates:
        eps = by_step.get(u.step, [])
        gen, env = sum(e.generation_s for e in eps), sum(e.env_s for e in eps)
        # Episodes overlap: the update's rollout wall time is split by their time shares.
        share = gen / (gen + env) if gen + env > 0 else None
        parts = (
            {"generation": u.rollout_s * share, "environment": u.rollout_s * (1 - share)}
            if share is not None
            else {"rollout": u.rollout_s}
        )
        parts |= {"update (training)": u.update_s, "weight sync": u.sync_s}
        for name, seconds in parts.items():
            totals[name] += seconds
        bars.append((str(u.step), parts))
    categories = [(n, c) for n, c in STAGE_COLORS.items() if totals.get(n)]
    per_update = bar_chart(
        "chart-time",
        "Seconds per update, by stage",
        "Rollout (generation + environment, split by the episodes' own timings), then the "
        "learner update and the weight sync: the tallest block is what to speed up.",
        bars,
        categories,
        unit=" s",
    )
    evals = sum(r.seconds for r in data.evals)
    spent = dict(totals)
    spent["warm start (SFT)"] = data.info.warm_start_s or 0.0
    spent["held-out evaluation"] = evals
    known = sum(spent.values())
    if data.info.elapsed_s and data.info.elapsed_s > known:
        spent["other (loading, checkpoints)"] = data.info.elapsed_s - known
    shares = [(n, spent[n], c) for n, c in STAGE_COLORS.items() if spent.get(n)]
    whole = share_bar(
        "chart-time-total",
        f"The whole run ({_duration(data.info.elapsed_s or known)})",
        "Where the run's wall-clock time went, all updates and evaluations together.",
        shares,
    )
    eps = data.episodes
    stages: list[tuple[str, Callable[[EpisodePoint], float]]] = [
        ("generation (model)", lambda e: e.generation_s),
        ("environment (tools, sandbox, scoring)", lambda e: e.env_s),
        ("waiting for a slot", lambda e: e.queue_s),
        ("whole episode", lambda e: e.total_s),
    ]
    per_episode = (
        "<h3>Per episode</h3>"
        + _table(
            ["", "mean", "slowest"],
            [
                [_e(n), _duration(_mean(map(f, eps))), _duration(max(map(f, eps)))]
                for n, f in stages
            ],
            {1, 2},
        )
        + '<p class="note">Episodes run concurrently, so their times add up to more than the '
        "update's rollout time.</p>"
        if eps
        else _missing("Per-episode timings", "no per-episode records")
    )
    body = whole.html(wide=True) + _pairs([per_update.html(), per_episode])
    return _section("time", "Where the time went", body)


def staleness_section(data: RunData) -> str:
    hist: Counter[int] = Counter()
    for u in data.updates:
        hist.update(u.staleness)
    source = "the update events"
    if not hist:
        hist.update(e.staleness for e in data.episodes if e.staleness is not None)
        source = "the store (learner version at the update − the trajectory's policy version)"
    if not hist:
        return _section(
            "staleness",
            "Staleness",
            _missing("Staleness", "no policy versions recorded (no store, no events.jsonl)"),
        )
    lags = list(range(min(hist), max(hist) + 1))
    chart = bar_chart(
        "chart-staleness",
        "How many versions behind the trajectories were",
        f"Trajectories per lag, from {source}: 0 means generated by the weights being "
        "trained (on-policy); larger lags are corrected by importance weights.",
        [(str(lag), {"trajectories": float(hist.get(lag, 0))}) for lag in lags],
        [("trajectories", PALETTE[0])],
        x_label="versions behind",
    )
    total = sum(hist.values())
    mean = sum(lag * c for lag, c in hist.items()) / total
    words = (
        f'<p class="note">{hist.get(0, 0)} of {total} trajectories '
        f"({100 * hist.get(0, 0) / total:.0f}%) were generated by the very weights they trained "
        f"(on-policy); mean lag {mean:.2f} versions, at most {max(hist)}.</p>"
    )
    return _section("staleness", "Staleness", _pairs([chart.html(), words]))


def learner_section(data: RunData) -> str:
    updates = data.updates
    stats = [(k, label) for k, label in LEARNER_STATS if any(k in u.learner for u in updates)]
    if not stats:
        return _section(
            "learner", "Learner", _missing("Learner statistics", "no update finished yet")
        )
    charts = [
        line_chart(
            f"chart-learner-{k}",
            label,
            "",
            [Series(k, [(u.step, u.learner.get(k)) for u in updates], PALETTE[0])],
            small=True,
        ).html(small=True)
        for k, label in stats
    ]
    kept = [u.learner.get("groups", 0) - u.learner.get("dropped_groups", 0) for u in updates]
    caption = (
        "Loss and entropy should move smoothly; a growing KL or grad norm, or clipped shares "
        "far above 0, mean the policy is changing fast. Groups with equal rewards teach "
        f"nothing and are dropped: {int(sum(kept))} of "
        f"{int(sum(u.learner.get('groups', 0) for u in updates))} groups were kept."
    )
    return _section(
        "learner",
        "Learner",
        f'<p class="note">{_e(caption)}</p><div class="multiples">{"".join(charts)}</div>',
    )


def tasks_section(data: RunData) -> str:
    episodes = data.episodes
    if not episodes:
        return _section("tasks", "Tasks", _missing("Per-task tables", "no per-episode records"))
    by_task: dict[str, list[EpisodePoint]] = defaultdict(list)
    for e in episodes:
        by_task[e.task_id].append(e)
    slow = sorted(by_task.items(), key=lambda kv: -_mean(e.total_s for e in kv[1]))[:8]
    slow_rows = [
        [
            f"<code>{_e(task)}</code>",
            _e(eps[0].domain),
            str(len(eps)),
            _duration(_mean(e.total_s for e in eps)),
            _duration(_mean(e.generation_s for e in eps)),
            _duration(_mean(e.env_s for e in eps)),
            _pct(_mean(e.success for e in eps)),
        ]
        for task, eps in slow
    ]
    failing = sorted(
        ((t, eps) for t, eps in by_task.items() if any(not e.success for e in eps)),
        key=lambda kv: (-sum(not e.success for e in kv[1]), kv[0]),
    )[:8]
    fail_rows = []
    for task, eps in failing:
        reason, count = Counter(e.outcome for e in eps if not e.success).most_common(1)[0]
        fail_rows.append(
            [
                f"<code>{_e(task)}</code>",
                _e(eps[0].domain),
                f"{sum(not e.success for e in eps)} of {len(eps)}",
                _pct(_mean(e.success for e in eps)),
                f"{_e(reason)} ({count})",
            ]
        )
    body = (
        "<h3>Slowest tasks</h3>"
        '<p class="note">Mean wall time of an episode, and how it splits between the model '
        "(generation) and the environment (tools, sandbox, scoring).</p>"
        + _table(
            ["task", "domain", "episodes", "mean time", "generation", "environment", "success"],
            slow_rows,
            {2, 3, 4, 5, 6},
        )
        + "<h3>Most often failing tasks</h3>"
        + (
            _table(["task", "domain", "failed", "success", "most common reason"], fail_rows, {2, 3})
            if fail_rows
            else '<p class="note">No training episode failed.</p>'
        )
    )
    return _section("tasks", "Tasks", body)


def _pick_samples(data: RunData) -> list[tuple[str, int, Trajectory]]:
    """The newest success, the newest failure (one with a failure reason if any) and the newest
    episode, each shown once."""
    newest = list(reversed(data.trajectories))
    picks = [
        ("a success", next((x for x in newest if x[1].success), None)),
        (
            "a failure",
            next((x for x in newest if not x[1].success and x[1].failure), None)
            or next((x for x in newest if not x[1].success), None),
        ),
    ]
    found = [(why, *x) for why, x in picks if x is not None]
    if newest:
        latest = newest[0]
        for i, (why, step, t) in enumerate(found):
            if t is latest[1]:
                found[i] = (f"{why} (also the latest episode)", step, t)
                break
        else:
            found.append(("the latest episode", *latest))
    return found


def _clip(text: str, most: int = 6000) -> str:
    return text if len(text) <= most else f"{text[:most]}\n… ({len(text) - most} more characters)"


def _text_html(text: str, lines: int = 6) -> str:
    """Escaped text; past its first `lines` lines, the rest folds away (a click shows it)."""
    rows = text.splitlines()
    if len(rows) <= lines + 2:
        return f'<pre class="text">{_e(_clip(text))}</pre>'
    head, rest = "\n".join(rows[:lines]), "\n".join(rows[lines:])
    return (
        f'<pre class="text">{_e(head)}</pre><details class="more"><summary>'
        f'{len(rows) - lines} more lines</summary><pre class="text">{_e(_clip(rest))}</pre>'
        "</details>"
    )


def _tool_call_html(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    name = str(function.get("name") or call.get("name") or "?")
    arguments = function.get("arguments", call.get("arguments", ""))
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    pretty = arguments if isinstance(arguments, str) else json.dumps(arguments, indent=2)
    return (
        f'<div class="toolcall"><span class="tag">tool call</span> <b>{_e(name)}</b>'
        f"<pre>{_e(pretty)}</pre></div>"
    )


def _turn_html(turn: Any) -> str:
    role = turn.role
    if role == "assistant":
        meta = f"model · {_duration(turn.generation_s)}"
        if turn.finish_reason and turn.finish_reason != "stop":
            meta += f" · finish: {_e(turn.finish_reason)}"
        calls = "".join(_tool_call_html(c) for c in turn.tool_calls)
        return (
            f'<div class="turn assistant"><div class="who">{meta}</div>'
            f"{_text_html(turn.text)}{calls}</div>"
        )
    if role == "tool":
        bits = [f"reward {_num(turn.reward)}"]
        bits += [f"{_e(k)} {_num(v)}" for k, v in sorted(turn.components.items())]
        if turn.failure:
            bits.append(f'<span class="bad">failure: {_e(turn.failure)}</span>')
        tools = ", ".join(f"{_e(k)} {_duration(v)}" for k, v in turn.tool_s.items())
        detail = f'<div class="detail">{_e(turn.detail)}</div>' if turn.detail else ""
        return (
            f'<div class="turn tool"><div class="who">observation · step '
            f"{_duration(turn.step_s)}{' · ' + tools if tools else ''}</div>"
            f"{_text_html(turn.text)}{detail}"
            f'<div class="step">{" · ".join(bits)}</div></div>'
        )
    return (
        f'<div class="turn prompt"><div class="who">{_e(role)} (prompt)</div>'
        f"{_text_html(turn.text)}</div>"
    )


def trajectory_html(why: str, step: int, t: Trajectory) -> str:
    verdict = '<span class="ok">success</span>' if t.success else '<span class="bad">failed</span>'
    ending = t.ending.value + (f" ({t.failure})" if t.failure else "")
    tags = ", ".join(t.tags) or "none"
    retries = "".join(f"<li>{_e(r.stage)}: {_e(r.cause)}</li>" for r in t.retries)
    return (
        f'<details class="traj" open><summary>{_e(why)}: <code>{_e(t.task_id)}</code> '
        f"sample {t.sample} · {verdict} · reward {_num(t.reward)} · "
        f"{'update ' + str(step) if step else 'update not recorded'}</summary>"
        f'<div class="meta">domain {_e(t.domain)} · tags {_e(tags)} · {t.steps} steps · '
        f"{t.model_tokens} model tokens · {_duration(t.total_s)} · policy version "
        f"{t.policy_version}</div>"
        + "".join(_turn_html(turn) for turn in t.turns)
        + f'<div class="ending">ended: {_e(ending)}{" — " + _e(t.detail) if t.detail else ""}'
        f" · components "
        f"{_e(', '.join(f'{k} {_num(v)}' for k, v in sorted(t.components.items())) or 'none')}"
        f"</div>" + (f'<ul class="retries">{retries}</ul>' if retries else "") + "</details>"
    )


def samples_section(data: RunData) -> str:
    samples = _pick_samples(data)
    if not samples:
        return _section(
            "samples",
            "Sample episodes",
            _missing("Sample episodes", "no trajectory store (trajectories/) in the run"),
        )
    intro = (
        '<p class="note">Whole conversations as the model saw them: the prompt, each model '
        "turn (its text and the tool calls parsed from it), and each observation with the "
        "step's reward.</p>"
    )
    return _section(
        "samples", "Sample episodes", intro + "".join(trajectory_html(*s) for s in samples)
    )


# -- the page ----------------------------------------------------------------------------------

CSS = """
:root { --fg:#1d2330; --muted:#5d6675; --line:#e3e6ec; --bg:#f6f7f9; --card:#fff; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans",
       sans-serif; color:var(--fg); background:var(--bg); }
header { background:#1d2330; color:#fff; padding:20px 32px 16px; }
header h1 { margin:0 0 6px; font-size:15px; font-weight:600; color:#aab3c2; }
header .headline { font-size:22px; font-weight:600; margin:0 0 8px; }
header .sub { color:#aab3c2; font-size:13px; }
nav { position:sticky; top:0; z-index:2; background:#fff; border-bottom:1px solid var(--line);
      padding:8px 32px; font-size:13px; }
nav a { color:#3b5b8c; margin-right:14px; text-decoration:none; }
main { max-width:1100px; margin:0 auto; padding:8px 32px 40px; }
section { background:var(--card); border:1px solid var(--line); border-radius:8px;
          padding:16px 20px; margin:18px 0; }
h2 { font-size:18px; margin:0 0 12px; }
h3 { font-size:15px; margin:18px 0 6px; }
.cards { display:grid; grid-template-columns:repeat(auto-fill, minmax(150px, 1fr)); gap:10px;
         margin-bottom:14px; }
.card { border:1px solid var(--line); border-radius:6px; padding:8px 10px; }
.card .k { color:var(--muted); font-size:12px; }
.card .v { font-size:15px; font-weight:600; overflow-wrap:anywhere; }
table { border-collapse:collapse; width:100%; margin:8px 0; font-size:13px; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line);
         vertical-align:top; }
th { color:var(--muted); font-weight:600; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
small { color:var(--muted); }
code { font-size:12px; background:#f0f2f5; padding:1px 4px; border-radius:3px; }
figure.chart { margin:10px 0 18px; }
figure.chart.small { margin:0; border:1px solid var(--line); border-radius:6px; padding:6px; }
.ctitle { font-weight:600; margin-bottom:4px; }
figure.small .ctitle { font-size:12px; font-weight:500; color:var(--muted); }
svg.plot { width:100%; height:auto; display:block; }
figure.chart:not(.small):not(.wide) svg.plot { max-width:620px; }
.pair { display:grid; grid-template-columns:repeat(auto-fit, minmax(420px, 1fr)); gap:8px 24px; }
figure.small svg text { font-size:14px; }
details.more summary { font-size:12px; color:#3b5b8c; cursor:pointer; }
svg .grid { stroke:#e9ecf1; stroke-width:1; }
svg text { font-size:11px; fill:#5d6675; font-family:inherit; }
svg .ytick { text-anchor:end; }
svg .xtick, svg .xlabel, svg .inbar { text-anchor:middle; }
svg .inbar { fill:#fff; font-weight:600; }
svg .line { fill:none; stroke-width:2; }
figcaption { color:var(--muted); font-size:13px; margin-top:4px; }
.legend { display:flex; flex-wrap:wrap; gap:4px 14px; font-size:12px; margin-top:4px; }
.legend .key i { display:inline-block; width:10px; height:10px; border-radius:2px;
                 margin-right:5px; vertical-align:-1px; }
.multiples { display:grid; grid-template-columns:repeat(auto-fill, minmax(240px, 1fr));
             gap:10px; }
.note { color:var(--muted); }
.missing { background:#fff8e6; border:1px solid #f1dfb0; border-radius:6px; padding:8px 10px; }
.notes { background:#fff8e6; border:1px solid #f1dfb0; border-radius:8px; padding:8px 16px;
         margin:18px 0 0; }
details.traj { border:1px solid var(--line); border-radius:6px; margin:12px 0;
               padding:0 12px 10px; }
details.traj summary { cursor:pointer; padding:10px 0; font-weight:600; }
.meta { color:var(--muted); font-size:12px; margin-bottom:8px; }
.turn { border-left:3px solid #c9ced8; padding:4px 10px; margin:8px 0; }
.turn.assistant { border-color:#4e79a7; background:#f3f7fc; }
.turn.tool { border-color:#9c755f; background:#fbf8f5; }
.turn .who { font-size:12px; color:var(--muted); }
pre { white-space:pre-wrap; overflow-wrap:anywhere; margin:4px 0;
      font:12px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }
.toolcall { background:#fff; border:1px solid #cfdcec; border-radius:5px; padding:4px 8px;
            margin:6px 0; }
.toolcall .tag, .step { font-size:12px; color:var(--muted); }
.detail { font-size:12px; color:#8a4b00; }
.ending { font-size:13px; margin-top:8px; }
.ok { color:#2f7d32; } .bad { color:#c0392b; }
footer { color:var(--muted); font-size:12px; text-align:center; padding:0 0 24px; }
"""

SECTIONS = (
    ("summary", "Summary"),
    ("progress", "Reward & success"),
    ("evals", "Held-out"),
    ("failures", "Failures"),
    ("time", "Time"),
    ("staleness", "Staleness"),
    ("learner", "Learner"),
    ("tasks", "Tasks"),
    ("samples", "Episodes"),
)


def render(data: RunData) -> str:
    """The whole page for `data`."""
    info = data.info
    sub = (
        f"run {_e(info.name)} · model {_e(info.model)} · {_e(data.run_dir)} · report written "
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime())}"
    )
    notes = (
        '<div class="notes">' + "".join(f"<p>{_e(n)}</p>" for n in data.notes) + "</div>"
        if data.notes
        else ""
    )
    body = "".join(
        section(data)
        for section in (
            summary_section,
            progress_section,
            evals_section,
            failures_section,
            time_section,
            staleness_section,
            learner_section,
            tasks_section,
            samples_section,
        )
    )
    nav = "".join(f'<a href="#{k}">{_e(label)}</a>' for k, label in SECTIONS)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>honing report: {_e(info.name)}</title><style>{CSS}</style></head><body>"
        f'<header><h1>honing run report</h1><p class="headline">{_e(headline(data))}</p>'
        f'<div class="sub">{sub}</div></header><nav>{nav}</nav><main>{notes}{body}</main>'
        f"<footer>Read from {_e(', '.join(data.sources) or 'nothing')} in "
        f"{_e(data.run_dir)}.</footer></body></html>\n"
    )


def build_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the HTML report of `run_dir` to `out` (default RUN_DIR/report.html); the path.
    `ConfigError` when `run_dir` is not a run directory or one of its logs is damaged."""
    run_dir = Path(run_dir)
    data = load_run(run_dir)
    path = Path(out) if out is not None else run_dir / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render(data), encoding="utf-8")
    tmp.replace(path)
    return path
