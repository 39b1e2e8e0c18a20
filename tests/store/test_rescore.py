"""Re-score rows on disk (`RUN/rescores/STAMP/`) and their summary: round trip, atomicity, the
counts and the last line."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from honing.errors import StoreError
from honing.store.rescore import (
    META_FILE,
    ROWS_FILE,
    SCHEMA,
    Rescore,
    RescoreMeta,
    RescoreStatus,
    RescoreSummary,
    read_rescores,
    rescore_dirs,
    write_rescores,
)


def row(i: int, status: RescoreStatus, old: bool, new: bool | None, domain: str = "math",
        reward: float | None = None) -> Rescore:  # fmt: skip
    return Rescore(
        id=f"t{i}", task_id=f"task/{i}", domain=domain, status=status, verifier_version="v",
        old_reward=float(old), old_components={"outcome": float(old)}, old_success=old,
        old_ending="done", old_step_rewards=[float(old)],
        new_reward=(float(new) if reward is None else reward) if new is not None else None,
        new_components=None if new is None else {"outcome": float(new), "ключ 🎯": -0.0},
        new_success=new, new_ending=None if new is None else "done",
        new_step_rewards=[] if new is None else [float(new)],
        new_step_components=[] if new is None else [{"outcome": float(new)}],
    )  # fmt: skip


ROWS = [
    row(0, RescoreStatus.SAME, True, True),
    row(1, RescoreStatus.SAME, False, False, reward=0.5),  # same verdict, another reward
    row(2, RescoreStatus.CHANGED, True, False),
    row(3, RescoreStatus.CHANGED, True, False, domain="code"),
    row(4, RescoreStatus.CHANGED, False, True),
    row(5, RescoreStatus.DIVERGED, False, True),
    row(6, RescoreStatus.INFRA_ERROR, True, None, domain="code"),
    row(7, RescoreStatus.SKIPPED, False, None),
]
META = RescoreMeta(run="r", tasks="t.jsonl", verifiers={"math": "v"}, settings={"env": {}},
                   created_at=1_700_000_000.0)  # fmt: skip


def test_rows_round_trip_beside_a_record_of_the_rescore(tmp_path: Path) -> None:
    path = write_rescores(tmp_path, ROWS, META)

    assert path == tmp_path / "rescores" / "20231114T221320Z"
    assert read_rescores(path) == ROWS
    assert pq.read_schema(path / ROWS_FILE).equals(SCHEMA, check_metadata=False)
    meta = json.loads((path / META_FILE).read_text())
    assert meta["counts"] == {"same": 2, "changed": 3, "diverged": 1, "infra_error": 1,
                              "skipped": 1}  # fmt: skip
    assert meta["trajectories"] == 8 and meta["verifiers"] == {"math": "v"}
    assert [p.name for p in (tmp_path / "rescores").iterdir()] == [path.name]  # no temporary

    again = write_rescores(tmp_path, ROWS[:1], META)  # the same second: beside it, not over it
    assert again.name == f"{path.name}-1" and rescore_dirs(tmp_path) == [path, again]
    assert read_rescores(path) == ROWS


def test_an_unwritable_run_is_named(tmp_path: Path) -> None:
    blocked = tmp_path / "run"
    blocked.mkdir()
    (blocked / "rescores").write_text("a file where the directory goes")
    with pytest.raises(StoreError, match=r"run/rescores: cannot write the re-scores"):
        write_rescores(blocked, ROWS, META)


def test_summary_counts_per_domain_and_the_last_line() -> None:
    summary = RescoreSummary.of(ROWS)

    o = summary.overall
    assert (o.trajectories, o.true_to_false, o.false_to_true, o.reward_changed) == (8, 2, 1, 1)
    assert dict(summary.domains["code"].statuses) == {"changed": 1, "infra_error": 1}
    assert summary.domains["code"].true_to_false == 1 and list(summary.domains) == ["code", "math"]
    assert [r.id for r in summary.changed] == ["t2", "t3", "t4"]
    assert [r.flip for r in summary.changed] == ["true→false", "true→false", "false→true"]
    assert summary.line() == (
        "rescore: 8 trajectories; 3 verdicts changed (2 true→false, 1 false→true); 1 diverged; "
        "1 infra errors; 1 skipped (no stored verdict)"
    )
    assert RescoreSummary.of(ROWS[:2]).line() == (
        "rescore: 2 trajectories; 0 verdicts changed (0 true→false, 0 false→true); 0 diverged; "
        "0 infra errors"
    )
