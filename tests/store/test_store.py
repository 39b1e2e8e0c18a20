"""The trajectory store on real Parquet files and DuckDB: round trips, shards, resume, queries,
and what a missing, empty, corrupted or half-written store does."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from honing.errors import StoreError
from honing.store import (
    TRAJECTORY,
    Group,
    QueryResult,
    Trajectory,
    TrajectoryWriter,
    complete_shards,
    describe,
    format_text,
    format_views,
    query,
    read_trajectories,
    rich_table,
)
from honing.store.files import read_manifest

MakeTrajectory = Callable[..., Trajectory]


async def write(run: Path, trajectories: list[Trajectory], shard_rows: int = 1024) -> int:
    async with TrajectoryWriter(run, shard_rows=shard_rows, flush_s=None) as writer:
        for t in trajectories:
            await writer.add(t)
    return writer.offset


# -- round trip --------------------------------------------------------------------------------
async def test_round_trip_gives_back_equal_records(
    tmp_path: Path, tricky: list[Trajectory], make: MakeTrajectory
) -> None:
    trajectories = tricky + [make(i) for i in range(3)]
    assert await write(tmp_path, trajectories, shard_rows=3) == 7

    assert read_trajectories(tmp_path) == trajectories
    shards = complete_shards(tmp_path)
    assert [s.path.name for s in shards] == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    assert [s.rows for s in shards] == [3, 3, 1]
    manifest = read_manifest(tmp_path)
    assert manifest is not None
    assert manifest.rows == 7
    assert [(e.file, e.rows) for e in manifest.shards] == [
        ("trajectories/part-00000.parquet", 3),
        ("trajectories/part-00001.parquet", 3),
        ("trajectories/part-00002.parquet", 1),
    ]


async def test_shards_have_the_explicit_schema(tmp_path: Path, tricky: list[Trajectory]) -> None:
    # The empty trajectory alone would infer null-typed lists; the schema must not depend on data.
    await write(tmp_path, tricky[:1])
    schema = pq.read_schema(complete_shards(tmp_path)[0].path)
    assert schema.equals(TRAJECTORY)
    assert schema.metadata[b"honing.store.schema_version"] == b"1"


async def test_read_from_an_offset_spans_shards(tmp_path: Path, make: MakeTrajectory) -> None:
    trajectories = [make(i) for i in range(7)]
    await write(tmp_path, trajectories, shard_rows=2)
    assert read_trajectories(tmp_path, offset=3) == trajectories[3:]
    assert read_trajectories(tmp_path, offset=4, limit=2) == trajectories[4:6]
    assert read_trajectories(tmp_path, offset=7) == []


async def test_groups_are_written_in_order(tmp_path: Path, make: MakeTrajectory) -> None:
    groups = [
        Group("t0", "g0", [make(0, task_id="t0", sample=s) for s in range(3)]),
        Group("t1", "g1", [make(1, task_id="t1", sample=s) for s in range(3)]),
    ]
    async with TrajectoryWriter(tmp_path, shard_rows=4) as writer:
        for g in groups:
            await writer.add_group(g)
        assert (writer.offset, writer.pending) == (4, 2)  # one full shard written on add
    assert writer.offset == 6
    got = read_trajectories(tmp_path)
    assert [(t.task_id, t.sample) for t in got] == [(f"t{i}", s) for i in (0, 1) for s in range(3)]


# -- team roles --------------------------------------------------------------------------------
async def test_role_round_trips_and_is_queryable(tmp_path: Path, make: MakeTrajectory) -> None:
    trajectories = [
        make(0, role="executor", group_id="g-0:executor"),
        make(1, role="validator", group_id="g-0:validator", id="traj-0:validator"),
        make(2),  # a single agent
    ]
    await write(tmp_path, trajectories, shard_rows=2)
    got = read_trajectories(tmp_path)
    assert got == trajectories
    assert [t.role for t in got] == ["executor", "validator", ""]
    result = query(tmp_path, "SELECT id, role FROM trajectories WHERE role <> '' ORDER BY id")
    assert result.rows == [("traj-0", "executor"), ("traj-0:validator", "validator")]


async def test_a_shard_written_without_the_role_column_reads_as_role_empty(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    """A shard of a honing from before teams: no `role` column; its rows are single agents'."""
    old = [make(0), make(1, success=True, reward=1.0)]
    await write(tmp_path, old)
    [shard] = complete_shards(tmp_path)
    table = pq.read_table(shard.path)
    pq.write_table(table.drop_columns(["role"]), shard.path)
    assert "role" not in pq.read_schema(shard.path).names
    got = read_trajectories(tmp_path)
    assert [t.role for t in got] == ["", ""]
    assert got == old  # everything else as written
    # a store that mixes it with a newer shard reads both
    async with TrajectoryWriter(tmp_path, flush_s=None) as writer:
        await writer.add(make(2, role="analyst"))
    assert [t.role for t in read_trajectories(tmp_path)] == ["", "", "analyst"]


async def test_the_writer_stores_a_leads_partners_as_rows_of_their_own(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    """A team episode not yet split by role (`honing.records.by_role`): the executor's trajectory
    carries the others in `partners`, which are never a column; each is a row."""
    lead = make(0, role="executor", success=True, reward=1.0)
    analyst = make(1, role="analyst", id="traj-0:analyst", steps=0)
    validator = make(2, role="validator", id="traj-0:validator", steps=0, reward=1.5,
                     components={"outcome": 1.0, "verdict_correct": 1.0})  # fmt: skip
    lead.partners = [analyst, validator]
    assert await write(tmp_path, [lead, make(3)]) == 4  # three roles, then a single agent
    got = read_trajectories(tmp_path)
    by_id = {t.id: t for t in got}
    assert sorted(by_id) == ["traj-0", "traj-0:analyst", "traj-0:validator", "traj-3"]
    assert by_id["traj-0:analyst"] == analyst and by_id["traj-0:validator"] == validator
    assert by_id["traj-0"] == lead and by_id["traj-0"].partners == []  # not stored in its row
    assert [t.role for t in got].count("executor") == 1
    assert "partners" not in pq.read_schema(complete_shards(tmp_path)[0].path).names


# -- writer lifecycle --------------------------------------------------------------------------
async def test_resume_continues_numbering_and_offset(tmp_path: Path, make: MakeTrajectory) -> None:
    first = [make(i) for i in range(3)]
    second = [make(i) for i in range(3, 5)]
    await write(tmp_path, first, shard_rows=2)
    async with TrajectoryWriter(tmp_path, shard_rows=2) as writer:
        assert writer.offset == 3
        for t in second:
            await writer.add(t)
    assert writer.offset == 5
    assert [s.path.name for s in writer.shards] == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    assert read_trajectories(tmp_path) == first + second


async def test_a_second_writer_on_the_same_store_is_refused(tmp_path: Path) -> None:
    async with TrajectoryWriter(tmp_path):
        with pytest.raises(StoreError, match="another TrajectoryWriter"):
            async with TrajectoryWriter(tmp_path):
                pass
    async with TrajectoryWriter(tmp_path):  # free again once the first closed
        pass


async def test_timed_flush_writes_a_partial_shard(tmp_path: Path, make: MakeTrajectory) -> None:
    async with TrajectoryWriter(tmp_path, shard_rows=100, flush_s=0.05) as writer:
        await writer.add(make(0))
        for _ in range(200):  # the timer must write it without flush() or close()
            if writer.offset:
                break
            await asyncio.sleep(0.02)
        assert writer.offset == 1
        assert writer.pending == 0
        assert read_trajectories(tmp_path) == [make(0)]


async def test_flush_cancelled_mid_write_neither_loses_nor_duplicates(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    async with TrajectoryWriter(tmp_path, shard_rows=100, flush_s=None) as writer:
        for i in range(5):
            await writer.add(make(i))
        flushing = asyncio.create_task(writer.flush())
        await asyncio.sleep(0)  # the write has started in its thread
        flushing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await flushing
    assert read_trajectories(tmp_path) == [make(i) for i in range(5)]


async def test_cancelled_flush_whose_write_fails_is_retried_and_reported(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    blocker = tmp_path / "trajectories" / "part-00000.parquet"
    blocker.mkdir(parents=True)
    with pytest.raises(StoreError, match=r"in the background failed.*part-00000\.parquet"):
        async with TrajectoryWriter(tmp_path, shard_rows=100, flush_s=None) as writer:
            for i in range(3):
                await writer.add(make(i))
            flushing = asyncio.create_task(writer.flush())
            await asyncio.sleep(0)
            flushing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await flushing
    # close() waited for the abandoned write, took its rows back and wrote them under the next
    # number before reporting the failure.
    assert [s.path.name for s in complete_shards(tmp_path)] == ["part-00001.parquet"]
    assert read_trajectories(tmp_path) == [make(i) for i in range(3)]


async def test_unstorable_trajectory_fails_at_add_naming_it(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    bad = make(0, id="bad-one")
    bad.turns[1].tool_calls = [{"arguments": {1, 2}}]  # a set is not JSON
    async with TrajectoryWriter(tmp_path) as writer:
        with pytest.raises(StoreError, match=r"'bad-one'.*cannot be stored"):
            await writer.add(bad)
        await writer.add(make(1))
    assert [t.id for t in read_trajectories(tmp_path)] == ["traj-1"]


async def test_value_past_its_column_type_fails_at_add(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    bad = make(0, id="huge-token")
    bad.token_ids[0] = 2**40  # token ids are int32
    async with TrajectoryWriter(tmp_path) as writer:
        with pytest.raises(StoreError, match="'huge-token'"):
            await writer.add(bad)
        assert writer.pending == 0


async def test_records_changed_after_add_are_stored_as_added(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    t = make(0)
    async with TrajectoryWriter(tmp_path) as writer:
        await writer.add(t)
        t.token_ids.append(999)
        t.reward = 42.0
    assert read_trajectories(tmp_path) == [make(0)]


async def test_failed_shard_write_keeps_its_rows_and_names_the_file(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    blocker = tmp_path / "trajectories" / "part-00000.parquet"
    blocker.mkdir(parents=True)  # the rename into place fails
    async with TrajectoryWriter(tmp_path, shard_rows=2, flush_s=None) as writer:
        await writer.add(make(0))
        with pytest.raises(StoreError, match=r"part-00000\.parquet: cannot write the shard"):
            await writer.add(make(1))
        assert (writer.pending, writer.offset) == (2, 0)
        assert not list(blocker.parent.glob(".*.tmp"))
        blocker.rmdir()
        assert await writer.flush() == 2
    assert read_trajectories(tmp_path) == [make(0), make(1)]


async def test_use_outside_its_lifecycle_is_an_error(tmp_path: Path, make: MakeTrajectory) -> None:
    writer = TrajectoryWriter(tmp_path)
    with pytest.raises(StoreError, match="async with"):
        await writer.add(make(0))
    async with writer:
        pass
    with pytest.raises(StoreError, match="closed"):
        await writer.add(make(0))


async def test_exiting_on_an_exception_still_writes_the_buffer(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    with pytest.raises(RuntimeError):
        async with TrajectoryWriter(tmp_path) as writer:
            await writer.add(make(0))
            raise RuntimeError("the rollout failed")
    assert read_trajectories(tmp_path) == [make(0)]


# -- killed mid-write --------------------------------------------------------------------------
async def test_stray_tmp_and_lagging_manifest_are_recovered(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    await write(tmp_path, [make(0), make(1)], shard_rows=1)
    lagging = (tmp_path / "store.json").read_text()
    await write(tmp_path, [make(2)])
    # As if killed after renaming shard 2 but before the manifest, and while writing shard 3.
    (tmp_path / "store.json").write_text(lagging)
    stray = tmp_path / "trajectories" / ".part-00003.parquet.999.tmp"
    stray.write_bytes(b"PAR1 half a shard")

    assert read_trajectories(tmp_path) == [make(0), make(1), make(2)]
    assert query(tmp_path, "SELECT count(*) FROM trajectories").rows == [(3,)]

    async with TrajectoryWriter(tmp_path) as writer:
        assert writer.offset == 3
        assert not stray.exists()
        manifest = read_manifest(tmp_path)
        assert manifest is not None
        assert manifest.rows == 3  # rebuilt from the shards on open
        await writer.add(make(3))
    assert [s.path.name for s in writer.shards][-1] == "part-00003.parquet"
    assert read_trajectories(tmp_path) == [make(i) for i in range(4)]


def test_killed_writer_process_leaves_a_readable_store(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from conftest import make_trajectory
        from honing.store import TrajectoryWriter

        async def main():
            async with TrajectoryWriter({str(tmp_path)!r}, shard_rows=1) as writer:
                i = 0
                while True:
                    await writer.add(make_trajectory(i, steps=40))
                    i += 1

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        shards = tmp_path / "trajectories"
        for _ in range(600):
            if len(list(shards.glob("part-*.parquet"))) >= 3:
                break
            assert proc.poll() is None, "the writer process died on its own"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()

    got = read_trajectories(tmp_path)
    assert len(got) >= 3
    assert [t.id for t in got] == [f"traj-{i}" for i in range(len(got))]
    resumed = asyncio.run(_offset_after_reopen(tmp_path))
    assert resumed == len(got)
    manifest = read_manifest(tmp_path)
    assert manifest is not None and manifest.rows == len(got)
    assert not list(shards.glob(".*.tmp"))


async def _offset_after_reopen(run: Path) -> int:
    async with TrajectoryWriter(run) as writer:
        return writer.offset


# -- bad stores --------------------------------------------------------------------------------
def test_missing_store_says_what_was_expected(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-run"
    with pytest.raises(StoreError, match=r"no such run directory.*part-00000\.parquet"):
        read_trajectories(missing)
    with pytest.raises(StoreError, match="no such run directory"):
        query(missing, "SELECT 1")


async def test_store_without_shards_says_so(tmp_path: Path) -> None:
    await write(tmp_path, [])
    assert (tmp_path / "store.json").exists()
    with pytest.raises(StoreError, match=r"no trajectory shards.*part-00000\.parquet"):
        read_trajectories(tmp_path)
    with pytest.raises(StoreError, match="no trajectory shards"):
        describe(tmp_path)


@pytest.mark.parametrize("damage", ["footer", "pages"])
async def test_corrupted_shard_is_named(tmp_path: Path, make: MakeTrajectory, damage: str) -> None:
    await write(tmp_path, [make(i) for i in range(4)], shard_rows=2)
    shard = tmp_path / "trajectories" / "part-00001.parquet"
    data = shard.read_bytes()
    if damage == "footer":  # a truncated file
        shard.write_bytes(data[: len(data) // 2])
    else:  # the footer intact, the first column chunks (id, task_id, …) overwritten
        shard.write_bytes(data[:4] + b"\xff" * 2000 + data[2004:])
    with pytest.raises(StoreError, match=r"part-00001\.parquet: corrupted"):
        read_trajectories(tmp_path)
    with pytest.raises(StoreError, match=r"part-00001\.parquet: corrupted"):
        query(tmp_path, "SELECT list(id), list(task_id) FROM trajectories")


async def test_lost_shard_listed_in_the_manifest_is_named(
    tmp_path: Path, make: MakeTrajectory
) -> None:
    await write(tmp_path, [make(i) for i in range(4)], shard_rows=2)
    (tmp_path / "trajectories" / "part-00000.parquet").unlink()
    with pytest.raises(StoreError, match=r"part-00000\.parquet.*missing"):
        read_trajectories(tmp_path)
    with pytest.raises(StoreError, match=r"part-00000\.parquet.*missing"):
        await write(tmp_path, [make(9)])


def test_manifest_from_a_newer_honing_is_refused(tmp_path: Path) -> None:
    (tmp_path / "trajectories").mkdir()
    manifest = {"schema_version": 99, "created_at": 0, "updated_at": 0, "rows": 0, "shards": []}
    (tmp_path / "store.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match=r"schema version 99.*upgrade honing"):
        read_trajectories(tmp_path)


# -- queries -----------------------------------------------------------------------------------
async def test_trajectories_view_has_derived_columns(
    tmp_path: Path, tricky: list[Trajectory], make: MakeTrajectory
) -> None:
    await write(tmp_path, [*tricky, make(0, steps=3)], shard_rows=2)
    result = query(
        tmp_path,
        "SELECT id, steps, n_turns, n_tokens, model_tokens, min_version, max_version, n_retries, "
        "components['outcome'] FROM trajectories ORDER BY id",
    )
    assert result.columns[:3] == ["id", "steps", "n_turns"]
    rows = {r[0]: r[1:] for r in result.rows}
    # make(): a 3-token prompt, then per step 2 model tokens (versions 5, 6) and 1 observation.
    assert rows["traj-0"] == (3, 1 + 2 * 3, 3 + 3 * 3, 2 * 3, 5, 6, 0, 0.0)
    assert rows["traj-7"] == (120, 1 + 2 * 120, 3 + 3 * 120, 2 * 120, 5, 6, 2, 1.0)
    assert rows["chat-1"][:6] == (1, 4, 0, 0, 3, 4)  # the chat trajectory: versions from its turns
    assert rows["ü-1"][4:6] == (None, None)  # no model tokens, no versioned turn


async def test_turns_view_one_row_per_turn(tmp_path: Path, make: MakeTrajectory) -> None:
    await write(tmp_path, [make(0, steps=2), make(1, steps=1)], shard_rows=1)
    result = query(
        tmp_path,
        "SELECT trajectory_id, task_id, turn_index, role, version, tool_names, "
        "components['well_formed'], tool_s['run'], "
        "json_extract_string(tool_calls, '$[0].function.name') "
        "FROM turns ORDER BY trajectory_id, turn_index",
    )
    assert [r[:4] for r in result.rows] == [
        ("traj-0", "task-0", 0, "user"),
        ("traj-0", "task-0", 1, "assistant"),
        ("traj-0", "task-0", 2, "tool"),
        ("traj-0", "task-0", 3, "assistant"),
        ("traj-0", "task-0", 4, "tool"),
        ("traj-1", "task-1", 0, "user"),
        ("traj-1", "task-1", 1, "assistant"),
        ("traj-1", "task-1", 2, "tool"),
    ]
    assert result.rows[1][4:] == (5, ["run"], None, None, "run")
    assert result.rows[2][4:] == (-1, [], 1.0, 0.08, None)


async def test_aggregate_query(tmp_path: Path, make: MakeTrajectory) -> None:
    trajectories = [
        make(0, domain="code", reward=1.0),
        make(1, domain="code", reward=0.0),
        make(2, domain="sql", reward=0.5),
    ]
    await write(tmp_path, trajectories, shard_rows=2)
    result = query(
        tmp_path,
        "SELECT domain, count(*) AS n, avg(reward) AS mean FROM trajectories "
        "GROUP BY domain ORDER BY domain",
    )
    assert result == QueryResult(
        ["domain", "n", "mean"],
        ["VARCHAR", "BIGINT", "DOUBLE"],
        [("code", 2, 0.5), ("sql", 1, 0.5)],
    )


async def test_bad_sql_names_views_and_columns(tmp_path: Path, make: MakeTrajectory) -> None:
    await write(tmp_path, [make(0)])
    with pytest.raises(StoreError) as info:
        query(tmp_path, "SELECT rewardz FROM trajectories")
    message = str(info.value)
    assert "rewardz" in message
    assert "trajectories(id VARCHAR, task_id VARCHAR" in message
    assert "turns(trajectory_id VARCHAR" in message
    assert "turn_index BIGINT" in message
    with pytest.raises(StoreError, match="Parser Error"):
        query(tmp_path, "SELEKT 1")


async def test_describe_lists_views_and_columns(tmp_path: Path, make: MakeTrajectory) -> None:
    await write(tmp_path, [make(0)])
    views = {v.name: {c.name: c.type for c in v.columns} for v in describe(tmp_path)}
    assert set(views) == {"trajectories", "turns"}
    assert list(views["trajectories"]) == TRAJECTORY.names
    assert views["trajectories"]["components"] == "MAP(VARCHAR, DOUBLE)"
    assert views["turns"]["turn_index"] == "BIGINT"
    assert {"trajectory_id", "task_id", "role", "tool_calls", "tool_s"} <= set(views["turns"])
    text = format_views(describe(tmp_path)).splitlines()
    assert text[0] == "trajectories"
    assert text[1].split() == ["id", "VARCHAR"]
    assert "turns" in text


def test_format_text_and_rich_table() -> None:
    result = QueryResult(
        ["id", "reward", "token_ids", "components", "failure"],
        ["VARCHAR", "DOUBLE", "INTEGER[]", "MAP(VARCHAR, DOUBLE)", "VARCHAR"],
        [
            ("a", 0.123456789, list(range(20)), {"outcome": 1.0}, None),
            ("b\nc", 2.0, [], {}, "x" * 100),
            ("d", 0.0, [1], {}, "[bold]not markup[/]"),
        ],
    )
    text = format_text(result, max_rows=2, width=30)
    lines = text.splitlines()
    assert lines[0].split() == ["id", "reward", "token_ids", "components", "failure"]
    assert "0.123457" in lines[2]
    assert "… 20 items]" in lines[2] or "…" in lines[2]
    assert "{outcome: 1}" in lines[2]
    assert "NULL" in lines[2]
    assert "b⏎c" in lines[3]
    assert "x" * 29 + "…" in lines[3]
    assert lines[-1] == "3 rows (1 not shown)"

    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(rich_table(result))
    out = console.export_text()
    assert "[bold]not markup[/]" in out
    assert "3 rows" in out
