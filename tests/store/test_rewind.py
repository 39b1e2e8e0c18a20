"""Rewinding a store to a shard boundary, as a resumed trainer does."""

from __future__ import annotations

from pathlib import Path

import pytest

from honing.errors import StoreError
from honing.records import Trajectory
from honing.store import TrajectoryWriter, read_trajectories, rewind
from honing.store.files import read_manifest


def traj(i: int) -> Trajectory:
    return Trajectory(
        task_id=f"t{i}", domain="math", token_ids=[1, 2], loss_mask=[0, 1], reward=float(i)
    )


async def write_steps(run: Path, steps: list[int]) -> None:
    async with TrajectoryWriter(run, flush_s=None) as writer:
        i = 0
        for count in steps:
            for _ in range(count):
                await writer.add(traj(i))
                i += 1
            await writer.flush()


async def test_rewind_deletes_later_shards_and_the_writer_appends_after(tmp_path: Path) -> None:
    await write_steps(tmp_path, [2, 3, 1])
    assert rewind(tmp_path, 5) == 1
    assert [t.task_id for t in read_trajectories(tmp_path)] == [f"t{i}" for i in range(5)]
    manifest = read_manifest(tmp_path)
    assert manifest is not None and manifest.rows == 5 and len(manifest.shards) == 2
    async with TrajectoryWriter(tmp_path, flush_s=None) as writer:
        assert writer.offset == 5
        await writer.add(traj(99))
    assert [t.task_id for t in read_trajectories(tmp_path)][-1] == "t99"


async def test_rewind_to_the_end_is_a_no_op_and_inside_a_shard_is_refused(tmp_path: Path) -> None:
    await write_steps(tmp_path, [2, 3])
    assert rewind(tmp_path, 5) == 0
    with pytest.raises(StoreError, match="shard boundary"):
        rewind(tmp_path, 3)
    assert len(read_trajectories(tmp_path)) == 5
