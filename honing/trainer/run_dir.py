"""The run directory's one owner: where each file of a run lives, the records written there with
their one serialiser, and what is done to the directory as a whole. Importing it loads no torch.

    run = RunDir.prepare(config, resume)   # a fresh run writes config.yaml; a resume checks it
    run = RunDir.existing(path)            # a finished or running run, for export/report/serve
    run.config(); run.updates(); run.evals(); run.warm_model(); run.latest_checkpoint()
    run.append_update(record); run.append_eval(point); run.rewind(step, store_rows, evals)
    run.push()                             # to config.remote's URL, when set (trainer.remote)

Layout: config.yaml (the resolved TrainConfig), metrics.jsonl (an UpdateRecord per update),
evals.jsonl (an EvalPoint per held-out evaluation), validation.jsonl (the same, of the
validation sets), events.jsonl (honing.observe.events),
result.json (the final summary), trajectories/ (honing.store), episodes/ (each evaluation's
episodes, a store each), checkpoints/
(honing.trainer.checkpoint), tensorboard/ (the metric sinks), weights/ (staged for a server
engine), warm_start/ (done.json and the model), report.html (`honing report`).

Not covered: how the records are computed (honing.trainer.loop, .gains), a checkpoint's inside.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import Field

from honing.config import StrictModel, validate_model
from honing.errors import ConfigError
from honing.eval.metrics import criteria_share

if TYPE_CHECKING:
    from honing.tasks.load import TaskSet
    from honing.trainer.remote import RunMirror
    from honing.trainer.run_config import TrainConfig

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
EVALS_FILE = "evals.jsonl"
VALIDATION_FILE = "validation.jsonl"  # the validation sets' points (run_config `validation`)
EVENTS_FILE = "events.jsonl"
RESULT_FILE = "result.json"
STORE_DIR = "trajectories"
EPISODES_DIR = "episodes"  # episodes/<eval|validation>/<step>-<phase>-<set>/: a store each
WEIGHTS_DIR = "weights"  # staged weights a server engine loads (engine.url)
WARM_DIR = "warm_start"
DONE_FILE = "done.json"  # in WARM_DIR: the warm start finished
REPORT_FILE = "report.html"
RUN_FILES = (CONFIG_FILE, EVENTS_FILE, METRICS_FILE, EVALS_FILE, VALIDATION_FILE, RESULT_FILE)

BEFORE = "before"  # EvalPoint.phase of the evaluation before training
WARM_START = "warm start"  # ... and of the one after the warm start


# -- records -----------------------------------------------------------------------------------


class EvalPoint(StrictModel):
    """One held-out set evaluated at one point of the run (a line of evals.jsonl)."""

    step: int  # updates done when it was measured
    phase: str
    set: str
    success: float | None  # end to end; None when no episode could be judged
    passed: int
    total: int
    infra_failed: int
    seconds: float
    well_formed: float | None = None  # single step: share of well-formed actions
    mean_steps: float | None = None  # trajectory: steps per episode
    recovery: float | None = None  # trajectory: share of episodes with an error that succeeded
    risk_rate: float | None = None  # share of the judged episodes that took a risky action
    risky: int = 0  # those episodes
    outcomes: dict[str, bool] = Field(
        default_factory=dict,
        description="'TASK#SAMPLE' -> solved, for the judged episodes (pairs two evaluations).",
    )
    by_tag: dict[str, tuple[int, int]] = Field(
        default_factory=dict,
        description="Task tag -> (passed, judged) over the episodes of the tasks with that tag.",
    )
    criteria: dict[str, tuple[int, int]] = Field(
        default_factory=dict,
        description="The judge's criterion (a `met:<name>` component: structure's iou, dims, "
        "...) -> (met, judged) over the judged episodes, one never compared counting as not "
        "met: graded progress where success is rare. {} for a domain without criteria.",
    )

    @property
    def criteria_share(self) -> float | None:
        """The mean over criteria of the share of judged episodes that met it (None without
        criteria)."""
        return criteria_share(self.criteria)

    @property
    def label(self) -> str:
        """The phase for a step-0 evaluation ("before", "warm start"), else "update N"."""
        return self.phase if self.step == 0 else f"update {self.step}"


@dataclass(frozen=True)
class UpdateRecord:
    """One update (training step): a line of metrics.jsonl and the `update` event's fields."""

    step: int  # 1-based: updates done after it
    phase: str
    episodes: int
    success_rate: float | None  # infra failures left out; None when nothing could be judged
    reward_mean: float | None  # the same episodes
    infra_errors: int  # episodes the infrastructure failed: left out of both
    rollout_s: float
    update_s: float
    sync_s: float
    learner: dict[str, float]  # the LearnerStats fields that are numbers (or flags, as bools)
    signal: dict[str, float] = field(default_factory=dict)  # honing.observe.metrics.Signal
    sources: dict[str, int] = field(default_factory=dict)  # groups per task source
    staleness: dict[int, int] = field(default_factory=dict)  # lag -> trajectories
    tokens_per_s: float | None = None
    episodes_per_s: float | None = None
    unaided_answers: dict[str, float] = field(default_factory=dict)  # domain -> share
    # rate and cost (honing.observe.metrics.RiskSummary), weight (the price this update trained
    # with) and multiplier (constrained mode: its value after the update)
    risk: dict[str, float] = field(default_factory=dict)
    # a team's figures (honing.observe.metrics.team_scalars without the `team/` prefix): validator
    # precision, recall, verdict_accuracy, rounds, accepted, reviews, reward/<role>
    team: dict[str, float] = field(default_factory=dict)
    # curriculum.enabled: the share of the update's drawn tasks in each band (learnable,
    # too_easy, too_hard, unseen; honing.trainer.curriculum) before its groups counted
    curriculum: dict[str, float] = field(default_factory=dict)
    time: float | None = None  # unix time it was logged

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "phase": self.phase,
            "sources": self.sources,
            "episodes": self.episodes,
            "success_rate": self.success_rate,
            "reward_mean": self.reward_mean,
            "infra_errors": self.infra_errors,
            "rollout_s": self.rollout_s,
            "update_s": self.update_s,
            "sync_s": self.sync_s,
            "tokens_per_s": self.tokens_per_s,
            "episodes_per_s": self.episodes_per_s,
            "staleness": self.staleness,
            "learner": self.learner,
            "signal": self.signal,
            "unaided_answers": self.unaided_answers,
            "risk": self.risk,
            "team": self.team,
            "curriculum": self.curriculum,
            "time": self.time,
        }

    @staticmethod
    def from_json(record: Mapping[str, Any]) -> UpdateRecord:
        """A metrics.jsonl line or an `update` event (its time is `t`); what a run of an older
        honing did not record is left at its default."""
        return UpdateRecord(
            step=as_int(record.get("step")) or 0,
            phase=str(record.get("phase") or ""),
            episodes=as_int(record.get("episodes")) or 0,
            success_rate=as_float(record.get("success_rate")),
            reward_mean=as_float(record.get("reward_mean")),
            infra_errors=as_int(record.get("infra_errors")) or 0,
            rollout_s=as_float(record.get("rollout_s")) or 0.0,
            update_s=as_float(record.get("update_s")) or 0.0,
            sync_s=as_float(record.get("sync_s")) or 0.0,
            learner=_numbers(record.get("learner"), flags=True),
            signal=_numbers(record.get("signal")),
            sources={str(k): int(v) for k, v in _numbers(record.get("sources")).items()},
            staleness={int(k): int(v) for k, v in _numbers(record.get("staleness")).items()},
            tokens_per_s=as_float(record.get("tokens_per_s")),
            episodes_per_s=as_float(record.get("episodes_per_s")),
            unaided_answers=_numbers(record.get("unaided_answers")),
            risk=_numbers(record.get("risk")),
            team=_numbers(record.get("team")),
            curriculum=_numbers(record.get("curriculum")),
            time=as_float(record.get("time", record.get("t"))),
        )


def numeric_fields(record: Any) -> dict[str, float]:
    """A dataclass's number and bool fields, e.g. `LearnerStats` for an `UpdateRecord`."""
    return _numbers({k: getattr(record, k) for k in record.__dataclass_fields__}, flags=True)


def as_float(value: Any) -> float | None:
    """A JSON number as a float; None for anything else (a bool is not a number)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def as_int(value: Any) -> int | None:
    """A JSON integer; None for anything else (a bool is not a number)."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _numbers(value: Any, flags: bool = False) -> dict[str, float]:
    """The entries of a mapping that are numbers, as floats (with `flags`, bools kept too)."""
    if not isinstance(value, Mapping):
        return {}
    return {
        str(k): v if isinstance(v, bool) else float(v)
        for k, v in value.items()
        if as_float(v) is not None or (flags and isinstance(v, bool))
    }


# -- reading and writing -----------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
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
                "delete that line"
            ) from exc
        if not isinstance(record, dict):
            raise ConfigError(f"{path}:{number}: expected a JSON object, got {line[:60]!r}")
        out.append(record)
    return out


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file; None when it is missing (or not an object)."""
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); delete it or fix it") from exc
    return value if isinstance(value, dict) else None


def read_yaml(path: Path) -> dict[str, Any] | None:
    """A YAML mapping file, unvalidated; None when it is missing (or not a mapping)."""
    if not path.is_file():
        return None
    try:
        value = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    return value if isinstance(value, dict) else None


def append_json(path: Path, record: Mapping[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def truncate_log(path: Path, step: int) -> None:
    """Keep the lines of a JSONL log whose `step` is at most `step` (a resume regenerates the
    rest); a torn last line from a killed process is dropped too."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("step", 0) <= step:
            kept.append(line)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{line}\n" for line in kept))
    tmp.replace(path)


# -- the directory -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunDir:
    """A run directory (see the module docstring for its layout)."""

    path: Path
    remote: RunMirror | None = field(default=None, compare=False, repr=False)  # config.remote

    @staticmethod
    def prepare(config: TrainConfig, resume: bool) -> RunDir:
        """`config.out` made ready: a fresh run writes its config.yaml there (refused when a run
        is already there, or at `config.remote`'s URL); a resumed one must have one. With a
        `remote`, a resume into a directory that holds no run pulls it from the URL first."""
        mirror = None
        if config.remote is not None:
            from honing.trainer.remote import RunMirror

            mirror = RunMirror.open(config.remote)
        run = RunDir(config.out, mirror)
        saved = run.path / CONFIG_FILE
        if resume:
            if mirror is not None:
                mirror.resume_into(run.path)
            if not saved.is_file():
                raise ConfigError(
                    f"{run.path}: nothing to resume (no {CONFIG_FILE}); start a run with "
                    f"`honing train CONFIG out={run.path}`"
                )
            return run
        if saved.exists():
            raise ConfigError(
                f"{run.path} already holds a run: continue it with `honing train --resume "
                f"{run.path}`, or choose another out=DIR"
            )
        if mirror is not None and mirror.holds_run():
            raise ConfigError(
                f"{mirror.url} already holds a run: continue it with `honing train --resume "
                f"{mirror.url} out={run.path}`, or choose another remote.url"
            )
        run.path.mkdir(parents=True, exist_ok=True)
        tmp = saved.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
        tmp.replace(saved)
        return run

    @staticmethod
    def existing(path: Path) -> RunDir:
        """A directory `honing train` wrote (it has config.yaml); ConfigError otherwise."""
        if not (path / CONFIG_FILE).is_file():
            raise ConfigError(
                f"{path} is not a run directory (no {CONFIG_FILE}): give the directory `honing "
                "train` wrote (its out=...)"
            )
        return RunDir(path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def config(self) -> TrainConfig:
        """The config the run was started with (precision decided, as it ran)."""
        from honing.trainer.run_config import load_saved

        return load_saved(self.path / CONFIG_FILE)

    def updates(self) -> list[UpdateRecord]:
        return [UpdateRecord.from_json(r) for r in read_jsonl(self.path / METRICS_FILE)]

    def evals(self, file: str = EVALS_FILE) -> list[EvalPoint]:
        """evals.jsonl's points (`file`: validation.jsonl's), each validated (an error names the
        file and line)."""
        path = self.path / file
        return [
            validate_model(EvalPoint, record, source=f"{path}:{number}")
            for number, record in enumerate(read_jsonl(path), 1)
        ]

    def append_update(self, record: UpdateRecord) -> None:
        append_json(self.path / METRICS_FILE, record.to_json())

    def append_eval(self, point: EvalPoint, file: str = EVALS_FILE) -> None:
        append_json(self.path / file, point.model_dump(mode="json"))

    def rewind(
        self,
        step: int,
        store_rows: int,
        evals: list[EvalPoint],
        validation: list[EvalPoint] | None = None,
    ) -> int:
        """Cut the store and the logs back to a checkpoint at `step` (or to nothing): the store
        to its first `store_rows` rows, metrics.jsonl to `step`, evals.jsonl to `evals` and
        validation.jsonl to `validation`, episodes/ to those evaluations' stores. Returns the
        number of store shards removed.
        (events.jsonl: honing.observe.events.)"""
        from honing.store import rewind

        dropped = rewind(self.path, store_rows) if (self.path / STORE_DIR).is_dir() else 0
        truncate_log(self.path / METRICS_FILE, step)
        for file, kind, points in (
            (EVALS_FILE, "eval", evals),
            (VALIDATION_FILE, "validation", validation or []),
        ):
            kept = {(p.step, p.phase, p.set) for p in points}
            path = self.path / file
            if path.exists():
                lines = [line for line in path.read_text().splitlines() if _eval_key(line) in kept]
                path.write_text("".join(f"{line}\n" for line in lines))
            stores = self.path / EPISODES_DIR / kind
            names = {self.episodes(kind, *key).name for key in kept}
            for directory in sorted(stores.iterdir()) if stores.is_dir() else []:
                if directory.name not in names:  # an evaluation after the checkpoint
                    shutil.rmtree(directory)
        self.push()  # the URL rewound too: nothing of the abandoned history stays there
        return dropped

    def episodes(self, kind: str, step: int, phase: str, set_name: str) -> Path:
        """The trajectory store of one evaluation's episodes (`kind`: eval or validation), e.g.
        episodes/eval/00000007-main-sql: query it with `honing store query`."""
        name = "-".join((f"{step:08d}", _slug(phase), _slug(set_name)))
        return self.path / EPISODES_DIR / kind / name

    def push(self, *, store_only: bool = False) -> None:
        """Upload what changed to the run's remote URL (`config.remote`; nothing without one):
        new checkpoints committed last (honing.trainer.remote). `store_only`: the trajectory
        store's new shards only (after an update)."""
        if self.remote is not None:
            self.remote.push(self.path, store_only=store_only)

    def warm_model(self) -> Path | None:
        """The warm start's model directory (warm_start/model) once it finished (its done.json),
        else None."""
        warm = self.path / WARM_DIR
        return warm / "model" if (warm / DONE_FILE).is_file() else None

    def latest_checkpoint(self) -> Path | None:
        """The checkpoint a resume or an export starts from (honing.trainer.checkpoint)."""
        from honing.trainer.checkpoint import latest_checkpoint

        return latest_checkpoint(self.path)

    def heldout_sets(self, limit: int | None = None) -> dict[str, TaskSet]:
        """The run's held-out sets as training evaluated them (its training and warm-start
        tasks left out; the first `limit` of each when given)."""
        from honing.trainer.sources import heldout_sets

        return heldout_sets(self.config(), limit)


def _slug(text: str) -> str:
    """A phase's or a set's name as a file name: `warm start` -> `warm-start`."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-") or "-"


def _eval_key(line: str) -> tuple[int, str, str] | None:
    try:
        record = json.loads(line)
        return int(record["step"]), str(record["phase"]), str(record["set"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
