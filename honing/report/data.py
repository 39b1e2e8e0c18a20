"""Reading a run directory into the records the report shows: `load_run(run_dir) -> RunData`.

Sources, best first: `events.jsonl` (the run's event log, see honing.observe), then `metrics.jsonl`,
`evals.jsonl`, `result.json`, `config.yaml`, `warm_start/done.json` and the trajectory store, all
read through their owner, `honing.trainer.run_dir` (and its records: `UpdateRecord` per update,
`EvalPoint` per held-out evaluation). Risk (honing.risk) comes from the same places: the update
records' `risk`, the episodes' events, `risk:` in the config. What was not recorded goes into
`RunData.notes` with the reason; only a directory that is not a run, or a damaged log, raises
`ConfigError`. A team's roles (honing.rollout.team) are each an episode of their own, with its
`role` (the episode events' `role`, else the store's).

Not covered: how any of it is drawn or worded (honing.report.page and .charts).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from honing.errors import ConfigError, StoreError
from honing.observe.events import read_events
from honing.risk import RiskEvent
from honing.store import Trajectory, read_trajectories
from honing.trainer.run_dir import (
    CONFIG_FILE,
    DONE_FILE,
    EVALS_FILE,
    EVENTS_FILE,
    METRICS_FILE,
    RESULT_FILE,
    RUN_FILES,
    STORE_DIR,
    WARM_DIR,
    EvalPoint,
    UpdateRecord,
    as_float,
    as_int,
    read_json,
    read_jsonl,
    read_yaml,
)

# -- records ---------------------------------------------------------------------------------------


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
    risk: float = 0.0  # the episode's risk cost (0 also in a run from before risk was recorded)
    risks: tuple[RiskEvent, ...] = ()  # the risk events of all its steps
    role: str = ""  # the team role that played it (honing.rollout.team); "" for a single agent

    @property
    def risky(self) -> bool:
        """It took at least one risky action (what the risk rate counts)."""
        return self.risk > 0

    @property
    def infra_failed(self) -> bool:
        """The infrastructure failed it (retries spent): left out of success rates."""
        return not self.success and self.ending == "infra_error"

    @property
    def outcome(self) -> str:
        """ "success", else why it failed: the failure reason, the ending, or "unsolved" (the
        environment judged a finished episode incorrect; the event log's word for it too)."""
        if self.success:
            return "success"
        if self.failure:
            return self.failure
        return "unsolved" if self.ending == "done" else self.ending


@dataclass(frozen=True)
class RiskPlan:
    """How the run priced risk: its config's `risk:` (honing.trainer.config.RiskSettings)."""

    mode: str  # off | penalty | constrained
    weight: float | None  # penalty: the fixed price; constrained: the multiplier's start
    budget: float | None  # constrained: the mean cost per episode to stay under


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
    precision: str = "not recorded"  # the dtypes it sampled and learned in
    logprob_check: str = "not recorded"  # the start-up check: engine vs learner logprobs
    sandbox: str = "not recorded"  # how the sandbox's limits held (its sandbox_start event)
    gains: dict[str, Any] | None = None  # result.json's base -> warm start -> RL accounting
    exported: dict[str, Any] | None = None  # result.json's: the update chosen on validation
    risk: RiskPlan | None = None  # the config's risk: (None: not in it)


@dataclass(frozen=True)
class AlertPoint:
    """An `alert` event: a rule of honing.observe.alerts began firing or cleared at `step`."""

    step: int
    name: str
    state: str  # firing | resolved
    severity: str
    value: float | None
    message: str


@dataclass
class RunData:
    """Everything the page shows, read from a run directory."""

    run_dir: Path
    info: RunInfo
    updates: list[UpdateRecord]
    episodes: list[EpisodePoint]
    evals: list[EvalPoint]
    trajectories: list[tuple[int, Trajectory]]  # (update step, trajectory) for the samples
    sources: list[str] = field(default_factory=list)  # the files read
    notes: list[str] = field(default_factory=list)  # what was not recorded, and why
    signal_warnings: list[str] = field(default_factory=list)  # "little learning signal" ones
    risk_recorded: bool = False  # the run detected risk (a run from before honing did not)
    alerts: list[AlertPoint] = field(default_factory=list)  # its in-process alerts, in order


# -- reading ---------------------------------------------------------------------------------------


def load_run(run_dir: Path) -> RunData:
    """Read every record of `run_dir` the report uses; `ConfigError` if it is not a run."""
    if not run_dir.is_dir():
        raise ConfigError(
            f"{run_dir}: no such directory; pass the run directory `honing train` wrote "
            "(its out=..., e.g. runs/quickstart-YYYYMMDD-HHMMSS)"
        )
    present = [name for name in RUN_FILES if (run_dir / name).is_file()]
    if not present and not (run_dir / STORE_DIR).is_dir():
        raise ConfigError(
            f"{run_dir} is not a run directory: none of {', '.join(RUN_FILES)} or trajectories/ "
            "is in it; pass the directory `honing train` wrote (its out=..., e.g. "
            "runs/quickstart-YYYYMMDD-HHMMSS)"
        )
    notes: list[str] = []
    events = _read_events(run_dir / EVENTS_FILE)
    metrics = read_jsonl(run_dir / METRICS_FILE)
    evals_raw = read_jsonl(run_dir / EVALS_FILE)
    result = read_json(run_dir / RESULT_FILE)
    config = read_yaml(run_dir / CONFIG_FILE)
    warm = read_json(run_dir / WARM_DIR / DONE_FILE)

    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_kind[str(event.get("kind"))].append(event)
    if by_kind["update"]:
        updates = [UpdateRecord.from_json(e) for e in by_kind["update"]]
    else:
        updates = [UpdateRecord.from_json(m) for m in metrics]
        if not events:
            notes.append(
                "No events.jsonl (a run from before honing recorded events): per-update numbers "
                "come from metrics.jsonl, per-episode ones from the trajectory store."
            )
    evals = [_eval(e) for e in (by_kind["eval"] or evals_raw)]

    trajectories: list[tuple[int, Trajectory]] = []
    store_episodes: list[EpisodePoint] = []
    if (run_dir / STORE_DIR).is_dir():
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
    elapsed = as_float(end.get("elapsed_s")) if end else None
    if elapsed is None and result is not None:
        elapsed = as_float(result.get("elapsed_s"))
    start = by_kind["run_start"][-1] if by_kind["run_start"] else None
    cfg = config or (start.get("config") if start and isinstance(start.get("config"), dict) else {})
    cfg = cfg if isinstance(cfg, dict) else {}
    info = RunInfo(
        name=str((start or {}).get("name") or cfg.get("name") or run_dir.name),
        model=str((start or {}).get("model") or cfg.get("model") or "not recorded"),
        planned_steps=_planned_steps(cfg),
        groups_per_step=as_int(cfg.get("groups_per_step")),
        n=as_int(cfg.get("n")),
        heldout_sets=tuple(cfg.get("heldout") or {}),
        finished=result is not None or end is not None,
        elapsed_s=elapsed,
        warm_start_s=as_float(warm.get("seconds")) if warm else None,
        precision=_precision(start, cfg),
        logprob_check=_logprob_check(by_kind["logprob_check"]),
        sandbox=_sandbox(by_kind["sandbox_start"]),
        gains=_gains(result, end),
        exported=_exported(result),
        risk=_risk_plan(cfg),
    )
    done = f"{WARM_DIR}/{DONE_FILE}"
    sources = [name for name in (*RUN_FILES, done) if (run_dir / name).is_file()]
    if trajectories:
        sources.append(f"trajectories/ ({len(trajectories)} trajectories)")
    warned = [str(w.get("message", "")) for w in by_kind["warning"]]
    signal_warnings = [m for m in warned if m.startswith("little learning signal")]
    # An older store reads as risk 0, so the updates and episode events say whether it was
    # recorded; a stored risk event says so too.
    risk_recorded = (
        any(u.risk for u in updates)
        or any("risk" in e for e in event_episodes)
        or any(t.risks for _, t in trajectories)
    )
    return RunData(
        run_dir,
        info,
        updates,
        episodes,
        evals,
        trajectories,
        sources,
        notes,
        signal_warnings,
        risk_recorded,
        [_alert(a) for a in by_kind["alert"]],
    )


def _alert(event: dict[str, Any]) -> AlertPoint:
    return AlertPoint(
        step=as_int(event.get("step")) or 0,
        name=str(event.get("name", "")),
        state=str(event.get("state", "")),
        severity=str(event.get("severity", "")),
        value=as_float(event.get("value")),
        message=str(event.get("message", "")),
    )


def _risk_plan(cfg: dict[str, Any]) -> RiskPlan | None:
    risk = cfg.get("risk")
    if not isinstance(risk, dict) or not isinstance(risk.get("mode"), str):
        return None
    return RiskPlan(str(risk["mode"]), as_float(risk.get("weight")), as_float(risk.get("budget")))


def _risk_events(episode: dict[str, Any]) -> tuple[RiskEvent, ...]:
    """An episode event's `risks`; one that is not a risk event is a damaged log."""
    raw = episode.get("risks") or []
    try:
        return tuple(RiskEvent.from_json_dict(r) for r in raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"{EVENTS_FILE}: the episode event of task {episode.get('task_id')!r} has a risk "
            f"event that is not {{name, severity (low|medium|high), source, detail}}: {raw!r} "
            f"({exc})"
        ) from None


def _sandbox(starts: list[dict[str, Any]]) -> str:
    """The sandbox's enforcement in words, from the run's sandbox_start events: the latest one,
    and the earlier ones too where a resumed part ran under other limits."""
    said = [str(e["description"]) for e in starts if e.get("description")]
    if not said:
        return "not recorded"
    earlier = [s for s in dict.fromkeys(said) if s != said[-1]]
    if not earlier:
        return said[-1]
    return f"{said[-1]} (earlier parts of the run: {'; then '.join(earlier)})"


def _precision(start: dict[str, Any] | None, cfg: dict[str, Any]) -> str:
    """The run's dtypes in words, from its run_start event or else its config."""
    recorded = (start or {}).get("precision")
    if isinstance(recorded, dict):
        engine, learner = recorded.get("engine"), recorded.get("learner")
    else:
        engine_cfg, learner_cfg = cfg.get("engine") or {}, cfg.get("learner") or {}
        engine = "server" if engine_cfg.get("url") else engine_cfg.get("dtype", "auto")
        learner = learner_cfg.get("dtype", "float32")
    if not isinstance(engine, str) or not isinstance(learner, str) or "auto" in (engine, learner):
        return "not recorded"
    if engine == "server":
        return f"learner {learner}; the server samples in its own dtype"
    if engine == learner:
        return f"{learner} (sampling and learning)"
    return f"mixed: engine {engine}, learner {learner}"


def _exported(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """checkpoint.keep_best: the update the run reports and exports (result.json's)."""
    exported = (result or {}).get("exported")
    return exported if isinstance(exported, dict) else None


def _gains(result: dict[str, Any] | None, end: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's base -> warm start -> RL accounting (result.json, else the run_end event)."""
    for source in (result, end):
        gains = (source or {}).get("gains")
        if isinstance(gains, dict):
            return gains
    return None


def _logprob_check(checks: Sequence[dict[str, Any]]) -> str:
    """The last start-up check in words."""
    if not checks:
        return "not recorded"
    last = checks[-1]
    diff, tokens = as_float(last.get("max_abs_diff")), as_int(last.get("tokens"))
    if diff is None or tokens is None:
        return "not recorded"
    verdict = "passed" if last.get("passed") else "over the threshold"
    return f"max |diff| {diff:.1e} over {tokens} tokens ({verdict})"


def _read_events(path: Path) -> list[dict[str, Any]]:
    """The event log as records (the kind's fields with t, kind and step)."""
    if not path.is_file():
        return []
    return [{**e.data, "t": e.t, "kind": e.kind, "step": e.step} for e in read_events(path)]


def _planned_steps(cfg: dict[str, Any]) -> int | None:
    steps = as_int(cfg.get("steps"))
    phases = cfg.get("phases") or []
    if phases and isinstance(phases, list):
        return sum(as_int(p.get("steps")) or 0 for p in phases if isinstance(p, dict))
    return steps


def _eval(record: dict[str, Any]) -> EvalPoint:
    return EvalPoint(
        step=int(record.get("step") or 0),
        phase=str(record.get("phase") or ""),
        set=str(record.get("set") or "?"),
        success=as_float(record.get("success")),
        passed=int(record.get("passed") or 0),
        total=int(record.get("total") or 0),
        infra_failed=int(record.get("infra_failed") or 0),
        seconds=as_float(record.get("seconds")) or 0.0,
        well_formed=as_float(record.get("well_formed")),
        criteria=_criteria(record.get("criteria")),
    )  # the fields the report shows; a run of an older honing may lack the rest


def _criteria(value: Any) -> dict[str, tuple[int, int]]:
    """evals.jsonl's `criteria` (name -> [met, judged]); a malformed entry is left out."""
    out: dict[str, tuple[int, int]] = {}
    if isinstance(value, dict):
        for name, pair in value.items():
            if isinstance(pair, list | tuple) and len(pair) == 2:
                met, judged = as_int(pair[0]), as_int(pair[1])
                if met is not None and judged is not None:
                    out[str(name)] = (met, judged)
    return out


def _with_steps(
    trajectories: list[Trajectory], updates: Sequence[UpdateRecord]
) -> list[tuple[int, Trajectory]]:
    """Each stored trajectory with the update that trained on it: the trainer writes each
    update's episodes, in order, as one shard; the updates' episode counts say where each
    update's rows start (when they add up to the store; else the step is unknown, 0)."""
    counts = [u.episodes for u in updates]
    if sum(counts) != len(trajectories):
        return [(0, t) for t in trajectories]
    steps = [u.step for u, c in zip(updates, counts, strict=True) for _ in range(c)]
    return list(zip(steps, trajectories, strict=True))


def _versions_before(updates: Sequence[UpdateRecord]) -> dict[int, int]:
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
        risk=t.risk,
        risks=tuple(t.risks),
        role=t.role,
    )


def _episodes_from_events(
    events: Sequence[dict[str, Any]], updates: Sequence[UpdateRecord]
) -> list[EpisodePoint]:
    """Episode events, each with the update that trained on it: a training episode's step is
    that update, counted from 1 (without a step: the first update logged after it)."""
    times = [(u.time, u.step) for u in updates if u.time is not None]
    out = []
    for e in events:
        t, done = as_float(e.get("t")), as_int(e.get("step"))
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
                reward=as_float(e.get("reward")) or 0.0,
                components={
                    str(k): float(v)
                    for k, v in (e.get("components") or {}).items()
                    if as_float(v) is not None
                },
                ending=str(e.get("ending") or "done"),
                failure=str(e["failure"]) if e.get("failure") else None,
                generation_s=as_float(e.get("generation_s")) or 0.0,
                env_s=as_float(e.get("env_s")) or 0.0,
                queue_s=as_float(e.get("queue_s")) or 0.0,
                total_s=as_float(e.get("total_s")) or 0.0,
                policy_version=int(e.get("policy_version", -1)),
                staleness=int(stale) if isinstance(stale, int) else None,
                risk=as_float(e.get("risk")) or 0.0,
                risks=_risk_events(e),
                role=str(e.get("role") or ""),
            )
        )
    return out
