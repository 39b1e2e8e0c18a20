"""Observation images in the store: written as PNG files beside the shards, named from the turns,
read back as paths, queried through the `turns` view; shards written before images still read;
a rewind takes the images of the trajectories it drops; an image outside the store is refused."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from honing.errors import StoreError
from honing.records import Trajectory, Turn
from honing.store import TrajectoryWriter, query, read_image, read_trajectories, rewind
from honing.store.files import SHARDS, image_folder, shard_name
from honing.store.schema import TRAJECTORY, TURN, to_row


def png(rgb: tuple[int, int, int]) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    rows = b"".join(b"\x00" + bytes(rgb) * 2 for _ in range(2))
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))  # fmt: skip


RED, GREEN = png((255, 0, 0)), png((0, 255, 0))


def drawing(tid: str, *images: bytes) -> Trajectory:
    """A chat-engine episode whose one observation drew `images`."""
    return Trajectory(task_id=f"task-{tid}", domain="structure", id=tid, turns=[
        Turn(role="user", text="Goal: a cube"),
        Turn(role="assistant", text="render", version=0),
        Turn(role="tool", text="a cube", image_data=list(images)),
    ])  # fmt: skip


async def write(run: Path, *trajectories: Trajectory, flush_each: bool = False) -> None:
    async with TrajectoryWriter(run, flush_s=None) as writer:
        for t in trajectories:
            await writer.add(t)
            if flush_each:
                await writer.flush()


async def test_images_become_files_beside_the_shards_and_the_turn_names_them(
    tmp_path: Path,
) -> None:
    original = drawing("abc123", RED, GREEN)
    await write(tmp_path, original)
    names = original.turns[2].images  # the writer named the files in the record itself
    folder = f"{SHARDS}/images/abc123"
    assert [n.rsplit("-", 1)[0] for n in names] == [f"{folder}/2-0", f"{folder}/2-1"]
    assert [read_image(tmp_path, n) for n in names] == [RED, GREEN]
    assert (tmp_path / names[0]).read_bytes() == RED
    assert not list(tmp_path.rglob(".*.tmp"))  # written atomically: no temporary file left
    [back] = read_trajectories(tmp_path)
    assert back == original and back.turns[2].images == names and back.turns[2].image_data == []
    assert back.turns[0].images == [] and back.turns[1].images == []
    result = query(tmp_path, "SELECT turn_index, images FROM turns WHERE len(images) > 0")
    assert result.rows == [(2, names)]


async def test_the_same_image_under_the_same_name_is_one_file_and_odd_ids_get_a_folder(
    tmp_path: Path,
) -> None:
    again = drawing("again", RED)
    await write(tmp_path, again, drawing("", GREEN), drawing("../up", RED), drawing("", GREEN))
    await write(tmp_path, again)  # stored twice: the same file, not a second one
    files = sorted(p.relative_to(tmp_path / SHARDS / "images") for p in tmp_path.rglob("*.png"))
    assert len(files) == 3
    assert {p.parts[0] for p in files} == {"again", image_folder(""), image_folder("../up")}
    assert image_folder("../up").startswith("h-") and image_folder("") != image_folder("../up")
    stored = read_trajectories(tmp_path)
    assert [read_image(tmp_path, t.turns[2].images[0]) for t in stored] == [
        RED, GREEN, RED, GREEN, RED
    ]  # fmt: skip


async def test_a_shard_from_before_images_still_reads_beside_new_ones(tmp_path: Path) -> None:
    old_turn = pa.struct([f for f in TURN if f.name != "images"])
    old_schema = TRAJECTORY.set(
        TRAJECTORY.get_field_index("turns"), pa.field("turns", pa.list_(old_turn))
    )
    row = to_row(drawing("old"))
    row["turns"] = [{k: v for k, v in u.items() if k != "images"} for u in row["turns"]]
    (tmp_path / SHARDS).mkdir()
    pq.write_table(pa.Table.from_pylist([row], schema=old_schema),
                   tmp_path / SHARDS / shard_name(0))  # fmt: skip
    await write(tmp_path, drawing("new", RED))  # resumes: the next shard has the images
    old, new = read_trajectories(tmp_path)
    assert old.turns[2].images == [] and len(new.turns[2].images) == 1
    result = query(tmp_path, "SELECT trajectory_id, images FROM turns WHERE turn_index = 2 "
                   "ORDER BY trajectory_id")  # fmt: skip
    assert result.rows == [("new", new.turns[2].images), ("old", None)]


async def test_rewind_takes_the_images_of_the_trajectories_it_drops(tmp_path: Path) -> None:
    await write(tmp_path, drawing("kept", RED), drawing("dropped", GREEN), flush_each=True)
    images = tmp_path / SHARDS / "images"
    assert sorted(p.name for p in images.iterdir()) == ["dropped", "kept"]
    assert rewind(tmp_path, 1) == 1
    assert [p.name for p in images.iterdir()] == ["kept"]
    [kept] = read_trajectories(tmp_path)
    assert read_image(tmp_path, kept.turns[2].images[0]) == RED


async def test_a_stray_temporary_image_is_removed_by_the_next_writer(tmp_path: Path) -> None:
    await write(tmp_path, drawing("a", RED))
    stray = tmp_path / SHARDS / "images" / "a" / ".2-1-x.png.999.tmp"
    stray.write_bytes(b"half")
    await write(tmp_path)
    assert not stray.exists()


async def test_read_image_refuses_what_is_not_a_png_of_the_store(tmp_path: Path) -> None:
    t = drawing("a", RED)
    await write(tmp_path, t)
    with pytest.raises(StoreError, match="not an image of the store"):
        read_image(tmp_path, "store.json")
    with pytest.raises(StoreError, match="not an image of the store"):
        read_image(tmp_path, f"{SHARDS}/images/../../store.json")
    with pytest.raises(StoreError, match="cannot read the image"):
        read_image(tmp_path, f"{SHARDS}/images/a/missing.png")
    fake = tmp_path / SHARDS / "images" / "a" / "fake.png"
    fake.write_text("<svg/>")
    with pytest.raises(StoreError, match="not a PNG"):
        read_image(tmp_path, f"{SHARDS}/images/a/fake.png")


async def test_an_image_that_cannot_be_written_fails_the_add_naming_the_file(
    tmp_path: Path,
) -> None:
    (tmp_path / SHARDS / "images").mkdir(parents=True)
    (tmp_path / SHARDS / "images" / "blocked").write_text("a file where the folder goes")
    async with TrajectoryWriter(tmp_path, flush_s=None) as writer:
        with pytest.raises(StoreError, match=r"images/blocked/2-0-\w+\.png: cannot write"):
            await writer.add(drawing("blocked", RED))
        assert writer.pending == 0  # not buffered: no shard names a missing file
