"""The Parquet schema of a trajectory shard, and the exact conversion to and from `Trajectory`.

One row per trajectory: a column per `Trajectory` field, then derived columns that make queries
short (counts, the policy versions among the model's tokens, retries). The schema is explicit,
never inferred, so every shard of every run has the same columns and types; `SCHEMA_VERSION` goes
up when a column changes meaning or type (docs/rollout.md, "The store in detail"). Not covered
here: files, manifests and atomicity (`honing.store.files`, `honing.store.writer`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from honing.errors import StoreError
from honing.records import Ending, Retry, Trajectory, Turn
from honing.risk import RiskEvent, Severity

SCHEMA_VERSION = 1

_FLOAT_MAP = pa.map_(pa.string(), pa.float64())

RISK = pa.struct(
    [
        ("name", pa.string()),
        ("severity", pa.string()),
        ("source", pa.string()),
        ("detail", pa.string()),
    ]
)

TURN = pa.struct(
    [
        ("role", pa.string()),
        ("text", pa.string()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("version", pa.int64()),
        ("tool_calls", pa.string()),  # JSON list, OpenAI shape
        ("tool_names", pa.list_(pa.string())),  # derived from tool_calls
        ("finish_reason", pa.string()),
        ("generation_s", pa.float64()),
        ("reward", pa.float64()),
        ("components", _FLOAT_MAP),
        ("failure", pa.string()),
        ("detail", pa.string()),
        ("step_s", pa.float64()),
        ("tool_s", _FLOAT_MAP),
        ("images", pa.list_(pa.string())),  # PNG files, relative to the store's directory
        ("risk", pa.float64()),  # the step's risk cost
        ("risks", pa.list_(RISK)),
    ]
)

RETRY = pa.struct(
    [
        ("attempt", pa.int64()),
        ("stage", pa.string()),
        ("cause", pa.string()),
        ("at_s", pa.float64()),
    ]
)

TRAJECTORY = pa.schema(
    [
        # identity
        ("id", pa.string()),
        ("task_id", pa.string()),
        ("domain", pa.string()),
        ("sample", pa.int64()),
        ("group_id", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("dataset", pa.string()),
        ("dataset_version", pa.string()),
        ("role", pa.string()),  # the team role ("" for a single agent)
        # outcome
        ("reward", pa.float64()),
        ("components", _FLOAT_MAP),
        ("success", pa.bool_()),
        ("risk", pa.float64()),
        ("ending", pa.string()),
        ("failure", pa.string()),
        ("detail", pa.string()),
        # sizes and versions
        ("prompt_len", pa.int64()),
        ("policy_version", pa.int64()),
        ("temperature", pa.float64()),
        ("steps", pa.int64()),  # derived
        ("n_turns", pa.int64()),  # derived
        ("n_tokens", pa.int64()),  # derived
        ("model_tokens", pa.int64()),  # derived
        ("min_version", pa.int64()),  # derived
        ("max_version", pa.int64()),  # derived
        ("n_retries", pa.int64()),  # derived
        ("n_risks", pa.int64()),  # derived: risk events of all steps
        # timings
        ("generation_s", pa.float64()),
        ("env_s", pa.float64()),
        ("queue_s", pa.float64()),
        ("total_s", pa.float64()),
        ("started_at", pa.float64()),
        # the long lists last
        ("retries", pa.list_(RETRY)),
        ("turns", pa.list_(TURN)),
        ("token_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float64())),
        ("versions", pa.list_(pa.int32())),
    ],
    metadata={"honing.store.schema_version": str(SCHEMA_VERSION)},
)

DERIVED = frozenset(
    {"steps", "n_turns", "n_tokens", "model_tokens", "min_version", "max_version", "n_retries",
     "n_risks"}
)  # fmt: skip
# Columns added after the first shards were written: a shard without them reads as their default.
ADDED: dict[str, Any] = {"risk": 0.0, "temperature": None, "role": ""}


def to_row(t: Trajectory) -> dict[str, Any]:
    """The row of one trajectory. A value that cannot be stored (a tool call that is not JSON,
    an ending that is not an `Ending`) raises `StoreError` naming the trajectory."""
    try:
        return _row(t)
    except (TypeError, ValueError) as exc:
        raise StoreError(
            f"trajectory {t.id!r} (task {t.task_id!r}) cannot be stored: {exc}"
        ) from exc


def rows_to_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """The shard table of rows from `to_row`, in order."""
    try:
        return pa.Table.from_pylist(list(rows), schema=TRAJECTORY)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        ids = ", ".join(repr(r["id"]) for r in rows[:5])
        raise StoreError(f"trajectories {ids}… cannot be stored: {exc}") from exc


def to_table(trajectories: Sequence[Trajectory]) -> pa.Table:
    """The shard table of `trajectories`, in order."""
    return rows_to_table([to_row(t) for t in trajectories])


def from_table(table: pa.Table) -> Iterator[Trajectory]:
    """The trajectories of a shard table (derived columns are ignored)."""
    columns = [name for name in TRAJECTORY.names if name not in DERIVED]
    missing = [name for name in columns if name not in table.column_names and name not in ADDED]
    if missing:
        raise StoreError(f"missing columns {missing}; this is not a trajectory shard")
    present = [name for name in columns if name in table.column_names]
    for row in table.select(present).to_pylist():
        yield _trajectory({**ADDED, **row})


def _row(t: Trajectory) -> dict[str, Any]:
    model_versions = [v for v, m in zip(t.versions, t.loss_mask, strict=False) if m and v >= 0]
    if not t.token_ids:
        model_versions = [u.version for u in t.turns if u.role == "assistant" and u.version >= 0]
    return {
        "id": t.id,
        "task_id": t.task_id,
        "domain": t.domain,
        "sample": t.sample,
        "group_id": t.group_id,
        "tags": t.tags,
        "dataset": t.dataset,
        "dataset_version": t.dataset_version,
        "role": t.role,
        "reward": t.reward,
        "components": t.components,
        "success": t.success,
        "risk": t.risk,
        "ending": Ending(t.ending).value,
        "failure": t.failure,
        "detail": t.detail,
        "prompt_len": t.prompt_len,
        "policy_version": t.policy_version,
        "temperature": t.temperature,
        "steps": t.steps,
        "n_turns": len(t.turns),
        "n_tokens": len(t.token_ids),
        "model_tokens": t.model_tokens,
        "min_version": min(model_versions, default=None),
        "max_version": max(model_versions, default=None),
        "n_retries": len(t.retries),
        "n_risks": sum(len(u.risks) for u in t.turns),
        "generation_s": t.generation_s,
        "env_s": t.env_s,
        "queue_s": t.queue_s,
        "total_s": t.total_s,
        "started_at": t.started_at,
        "retries": [
            {"attempt": r.attempt, "stage": r.stage, "cause": r.cause, "at_s": r.at_s}
            for r in t.retries
        ],
        "turns": [_turn_row(u) for u in t.turns],
        "token_ids": t.token_ids,
        "loss_mask": t.loss_mask,
        "logprobs": t.logprobs,
        "versions": t.versions,
    }


def _turn_row(u: Turn) -> dict[str, Any]:
    return {
        "role": u.role,
        "text": u.text,
        "start": u.start,
        "end": u.end,
        "version": u.version,
        "tool_calls": json.dumps(u.tool_calls, ensure_ascii=False),
        "tool_names": [_tool_name(call) for call in u.tool_calls],
        "finish_reason": u.finish_reason,
        "generation_s": u.generation_s,
        "reward": u.reward,
        "components": u.components,
        "failure": u.failure,
        "detail": u.detail,
        "step_s": u.step_s,
        "tool_s": u.tool_s,
        "images": u.images,
        "risk": u.risk,
        "risks": [e.to_json_dict() for e in u.risks],
    }


def _tool_name(call: Any) -> str:
    """`function.name` of an OpenAI-shaped call (or a flat `name`); "" when it has none."""
    if not isinstance(call, dict):
        return ""
    function = call.get("function")
    name = function.get("name") if isinstance(function, dict) else call.get("name")
    return name if isinstance(name, str) else ""


def _trajectory(row: dict[str, Any]) -> Trajectory:
    return Trajectory(
        task_id=row["task_id"],
        domain=row["domain"],
        sample=row["sample"],
        group_id=row["group_id"],
        id=row["id"],
        tags=row["tags"],
        dataset=row["dataset"],
        dataset_version=row["dataset_version"],
        turns=[_turn(u) for u in row["turns"]],
        token_ids=row["token_ids"],
        loss_mask=row["loss_mask"],
        logprobs=row["logprobs"],
        versions=row["versions"],
        prompt_len=row["prompt_len"],
        reward=row["reward"],
        components=dict(row["components"]),
        success=row["success"],
        risk=row["risk"],
        ending=Ending(row["ending"]),
        failure=row["failure"],
        detail=row["detail"],
        retries=[Retry(**r) for r in row["retries"]],
        generation_s=row["generation_s"],
        env_s=row["env_s"],
        queue_s=row["queue_s"],
        total_s=row["total_s"],
        started_at=row["started_at"],
        policy_version=row["policy_version"],
        temperature=row["temperature"],
        role=row["role"] or "",
    )


def _turn(row: dict[str, Any]) -> Turn:
    return Turn(
        role=row["role"],
        text=row["text"],
        start=row["start"],
        end=row["end"],
        version=row["version"],
        tool_calls=json.loads(row["tool_calls"]),
        finish_reason=row["finish_reason"],
        generation_s=row["generation_s"],
        reward=row["reward"],
        components=dict(row["components"]),
        failure=row["failure"],
        detail=row["detail"],
        step_s=row["step_s"],
        tool_s=dict(row["tool_s"]),
        images=list(row.get("images") or []),  # absent from shards written before images
        risk=row.get("risk") or 0.0,  # absent from shards written before risk
        risks=[RiskEvent(r["name"], Severity(r["severity"]), r["source"], r["detail"] or "")
               for r in row.get("risks") or []],
    )  # fmt: skip
