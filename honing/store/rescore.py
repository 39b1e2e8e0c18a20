"""Re-scores of a run's trajectories, kept beside the originals: records, files and a summary.

    path = write_rescores(run_dir, rows, meta)   # RUN/rescores/STAMP/ (parquet rows + rescore.json)
    rows = read_rescores(path)                   # -> list[Rescore]; rescore_dirs(run_dir)
    RescoreSummary.of(rows).line()               # 'rescore: N trajectories; C verdicts changed …'

A `Rescore` row holds a trajectory's old scores, its new ones and the verifier's version, with a
status: `same`, `changed`, `diverged`, `infra_error` or `skipped` (docs/rollout.md, "Re-scoring
without regeneration"). A directory is written atomically; the trajectories are never touched.
Not covered here: the replay (`honing.rollout.replay`) and a run's tasks and settings
(`honing.trainer.rescore`).
"""

from __future__ import annotations

import enum
import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from honing.errors import StoreError
from honing.store.files import fsync_tree, sync_dir

RESCORES = "rescores"
ROWS_FILE = "rescores.parquet"
META_FILE = "rescore.json"


class RescoreStatus(enum.StrEnum):
    SAME = "same"
    CHANGED = "changed"
    DIVERGED = "diverged"
    INFRA_ERROR = "infra_error"
    SKIPPED = "skipped"


@dataclass(slots=True)
class Rescore:
    """One trajectory, scored then (`old_*`) and now (`new_*`, None without new scores)."""

    id: str
    task_id: str
    domain: str
    status: RescoreStatus
    verifier_version: str
    sample: int = 0
    group_id: str = ""
    turn: int | None = None  # model turn (1-based; 0: the reset) a divergence or failure is at
    detail: str = ""
    last_action: str = ""  # the last action replayed, on one line (what the verdict is on)
    old_reward: float = 0.0
    old_components: dict[str, float] = field(default_factory=dict)
    old_success: bool = False
    old_ending: str = ""
    old_step_rewards: list[float] = field(default_factory=list)
    new_reward: float | None = None
    new_components: dict[str, float] | None = None
    new_success: bool | None = None
    new_ending: str | None = None  # None: the replay did not reach an end (diverged)
    new_step_rewards: list[float] = field(default_factory=list)
    new_step_components: list[dict[str, float]] = field(default_factory=list)

    @property
    def flip(self) -> str:
        """`true→false` / `false→true` for a changed verdict, else ''."""
        if self.status is not RescoreStatus.CHANGED:
            return ""
        return f"{str(self.old_success).lower()}→{str(self.new_success).lower()}"


_FLOAT_MAP = pa.map_(pa.string(), pa.float64())

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("task_id", pa.string()),
        ("domain", pa.string()),
        ("sample", pa.int64()),
        ("group_id", pa.string()),
        ("status", pa.string()),
        ("turn", pa.int64()),
        ("detail", pa.string()),
        ("last_action", pa.string()),
        ("verifier_version", pa.string()),
        ("old_reward", pa.float64()),
        ("old_components", _FLOAT_MAP),
        ("old_success", pa.bool_()),
        ("old_ending", pa.string()),
        ("old_step_rewards", pa.list_(pa.float64())),
        ("new_reward", pa.float64()),
        ("new_components", _FLOAT_MAP),
        ("new_success", pa.bool_()),
        ("new_ending", pa.string()),
        ("new_step_rewards", pa.list_(pa.float64())),
        ("new_step_components", pa.list_(_FLOAT_MAP)),
    ]
)


@dataclass(frozen=True)
class RescoreMeta:
    """`rescore.json`: what was re-scored, against what, and the counts."""

    run: str
    tasks: str  # where the tasks came from (the run's sources, or --tasks)
    verifiers: dict[str, str]  # domain -> verifier_version
    settings: dict[str, Any]  # the environment config and agent settings the replay used
    counts: dict[str, int] = field(default_factory=dict)  # status -> trajectories
    created_at: float = 0.0
    honing_version: str = ""


def write_rescores(run_dir: Path, rows: list[Rescore], meta: RescoreMeta) -> Path:
    """Write `rows` and `meta` as `RUN/rescores/STAMP/`, atomically (a temporary directory,
    synced, then renamed); the new directory. The run's trajectories are not touched."""
    parent = run_dir / RESCORES
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(meta.created_at or time.time()))
    tmp = parent / f".{stamp}.{os.getpid()}.tmp"
    try:
        parent.mkdir(exist_ok=True)
        tmp.mkdir()
        table = pa.Table.from_pylist([_row(r) for r in rows], schema=SCHEMA)
        pq.write_table(table, tmp / ROWS_FILE, compression="zstd")
        counts = dict(Counter(r.status.value for r in rows))
        payload = {**asdict(meta), "counts": counts, "trajectories": len(rows)}
        (tmp / META_FILE).write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
        fsync_tree(tmp)
        final, n = parent / stamp, 1
        while final.exists():  # two re-scores within a second
            final, n = parent / f"{stamp}-{n}", n + 1
        tmp.rename(final)
        sync_dir(parent)
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"{parent}: cannot write the re-scores ({exc})") from exc
    return final


def read_rescores(path: Path) -> list[Rescore]:
    """The rows of one re-score directory (`write_rescores`' result)."""
    file = path / ROWS_FILE
    try:
        table = pq.read_table(file)
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"{file}: cannot read the re-scores ({exc})") from exc
    return [_rescore(row) for row in table.to_pylist()]


def rescore_dirs(run_dir: Path) -> list[Path]:
    """The complete re-score directories of a run, oldest first."""
    parent = run_dir / RESCORES
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.is_dir() and not p.name.startswith("."))


def _row(r: Rescore) -> dict[str, Any]:
    row = asdict(r)
    row["status"] = r.status.value
    return row


def _rescore(row: dict[str, Any]) -> Rescore:
    """A row back as a record: Arrow gives maps as (key, value) pairs, the status as text."""

    def floats(value: Any) -> dict[str, float]:
        return dict(value) if value is not None else {}

    new = row["new_components"]
    return Rescore(
        **row
        | {
            "status": RescoreStatus(row["status"]),
            "old_components": floats(row["old_components"]),
            "new_components": None if new is None else floats(new),
            "new_step_components": [floats(c) for c in row["new_step_components"]],
        }
    )


# -- the summary -------------------------------------------------------------------------------
@dataclass
class DomainCounts:
    trajectories: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    true_to_false: int = 0
    false_to_true: int = 0
    reward_changed: int = 0  # same verdict, another reward (a process reward, a weight)


@dataclass
class RescoreSummary:
    """Counts per status, overall and per domain, and the rows whose verdict changed."""

    overall: DomainCounts
    domains: dict[str, DomainCounts]
    changed: list[Rescore]
    diverged: list[Rescore]
    infra: list[Rescore]

    @classmethod
    def of(cls, rows: list[Rescore]) -> RescoreSummary:
        overall, domains = DomainCounts(), dict[str, DomainCounts]()
        for r in rows:
            for counts in (overall, domains.setdefault(r.domain, DomainCounts())):
                counts.trajectories += 1
                counts.statuses[r.status.value] += 1
                counts.true_to_false += r.flip == "true→false"
                counts.false_to_true += r.flip == "false→true"
                counts.reward_changed += (
                    r.status is RescoreStatus.SAME
                    and r.new_reward is not None
                    and abs(r.new_reward - r.old_reward) > 1e-9
                )
        return cls(
            overall,
            dict(sorted(domains.items())),
            [r for r in rows if r.status is RescoreStatus.CHANGED],
            [r for r in rows if r.status is RescoreStatus.DIVERGED],
            [r for r in rows if r.status is RescoreStatus.INFRA_ERROR],
        )

    def line(self) -> str:
        """`rescore: N trajectories; C verdicts changed (X true→false, Y false→true); D diverged;
        I infra errors` (and the skipped ones, when there are any)."""
        o = self.overall
        changed = o.statuses[RescoreStatus.CHANGED]
        skipped = o.statuses[RescoreStatus.SKIPPED]
        return (
            f"rescore: {o.trajectories} trajectories; {changed} verdicts changed "
            f"({o.true_to_false} true→false, {o.false_to_true} false→true); "
            f"{o.statuses[RescoreStatus.DIVERGED]} diverged; "
            f"{o.statuses[RescoreStatus.INFRA_ERROR]} infra errors"
            + (f"; {skipped} skipped (no stored verdict)" if skipped else "")
        )
