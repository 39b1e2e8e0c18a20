"""The layout of a run's trajectory store on disk, its manifest, and finding its complete shards.

    RUN/store.json                        the manifest: schema version, shards with row counts
    RUN/trajectories/part-00000.parquet   the shards, numbered in the order they were written
    RUN/trajectories/.part-00001.parquet.<pid>.tmp   a shard being written (never read)
    RUN/trajectories/images/ID/T-K-HASH.png  image K of trajectory ID's turn T (`Turn.images`)

The shards are the truth and the manifest a summary of them; a killed writer leaves complete
shards only, and `rewind(run_dir, rows)` cuts the store back to a shard boundary (docs/rollout.md,
"The store in detail"). Not covered here: the rows themselves (`honing.store.schema`) and
writing them (`honing.store.writer`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, ValidationError

from honing.errors import StoreError
from honing.records import Trajectory
from honing.store.schema import SCHEMA_VERSION

MANIFEST = "store.json"
SHARDS = "trajectories"
IMAGES = "images"  # under SHARDS: one folder per trajectory
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_SHARD_NAME = re.compile(r"part-(\d{5,})\.parquet")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ShardEntry(_Record):
    file: str  # relative to the run directory
    rows: int
    bytes: int


class Manifest(_Record):
    """`RUN/store.json`."""

    schema_version: int
    created_at: float  # unix time
    updated_at: float
    rows: int
    shards: list[ShardEntry]


@dataclass(frozen=True)
class Shard:
    """A complete shard on disk."""

    index: int
    path: Path
    rows: int
    bytes: int


def shard_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def expected_layout(run_dir: Path) -> str:
    return (
        f"expected {run_dir / SHARDS / 'part-00000.parquet'} (and more numbered shards) and "
        f"{run_dir / MANIFEST}, as written by `honing rollout --out {run_dir}` or TrajectoryWriter"
    )


def scan_shards(run_dir: Path) -> list[Shard]:
    """The complete shards under `run_dir`, in order; [] when there are none yet. Each shard's
    footer is read (row count); a shard whose footer cannot be read raises `StoreError`."""
    directory = run_dir / SHARDS
    if not directory.is_dir():
        return []
    found = []
    for entry in os.scandir(directory):
        match = _SHARD_NAME.fullmatch(entry.name)
        if match is None or not entry.is_file():
            continue
        path = Path(entry.path)
        try:
            rows = pq.read_metadata(path).num_rows
        except (OSError, ValueError) as exc:
            raise StoreError(
                f"{path}: corrupted trajectory shard ({exc}); move it out of {directory} to read "
                "the rest of the store"
            ) from exc
        found.append(Shard(int(match.group(1)), path, rows, entry.stat().st_size))
    return sorted(found, key=lambda s: s.index)


def read_manifest(run_dir: Path) -> Manifest | None:
    """`RUN/store.json`, or None when there is none. Unreadable, or written by a newer honing:
    `StoreError` naming the file."""
    path = run_dir / MANIFEST
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the store manifest ({exc})") from exc
    try:
        manifest = Manifest.model_validate_json(text)
    except ValidationError as exc:
        raise StoreError(
            f"{path}: not a valid store manifest ({exc.error_count()} errors: "
            f"{exc.errors()[0]['msg']}); delete it and the next writer rebuilds it from the shards"
        ) from exc
    if manifest.schema_version > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: written with store schema version {manifest.schema_version}, but this "
            f"honing reads up to version {SCHEMA_VERSION}; upgrade honing to read it"
        )
    return manifest


def complete_shards(run_dir: Path | str) -> list[Shard]:
    """The shards a reader should read: all complete ones, checked against the manifest.
    `StoreError` when the directory is missing, holds no shards, or lost a listed shard."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise StoreError(f"{run_dir}: no such run directory; {expected_layout(run_dir)}")
    manifest = read_manifest(run_dir)
    shards = scan_shards(run_dir)
    on_disk = {s.path.name for s in shards}
    for entry in manifest.shards if manifest else []:
        if Path(entry.file).name not in on_disk:
            raise StoreError(
                f"{run_dir / entry.file}: listed in {run_dir / MANIFEST} with {entry.rows} rows "
                "but missing; restore it, or delete the manifest to read what is left"
            )
    if not shards:
        raise StoreError(f"{run_dir}: no trajectory shards; {expected_layout(run_dir)}")
    return shards


def manifest_of(shards: list[Shard], run_dir: Path, created_at: float | None) -> Manifest:
    now = time.time()
    return Manifest(
        schema_version=SCHEMA_VERSION,
        created_at=now if created_at is None else created_at,
        updated_at=now,
        rows=sum(s.rows for s in shards),
        shards=[
            ShardEntry(file=str(s.path.relative_to(run_dir)), rows=s.rows, bytes=s.bytes)
            for s in shards
        ],
    )


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a synced temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    sync_dir(path.parent)


def sync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(directory: Path) -> None:
    """Make every file below `directory`, and the directories' entries, durable."""
    for dirpath, _dirnames, filenames in os.walk(directory):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        sync_dir(Path(dirpath))


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (on this machine): to tell a crashed writer's leftovers
    from a live writer's work in progress."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rewind(run_dir: Path, rows: int) -> int:
    """Cut the store back to its first `rows` rows by deleting the shards written after them and
    their trajectories' images (a resumed run regenerates them); the number of shards deleted.
    `rows` must fall on a shard boundary (the trainer flushes one shard per step); otherwise
    `StoreError`. Call it with no writer open."""
    shards = scan_shards(run_dir)
    kept, total = 0, 0
    while kept < len(shards) and total + shards[kept].rows <= rows:
        total += shards[kept].rows
        kept += 1
    if total != rows:
        raise StoreError(
            f"{run_dir}: cannot rewind the store to {rows} rows: the shards hold {total} rows up "
            f"to that point and the next one would pass it (a shard boundary is needed); was this "
            "store written by a trainer?"
        )
    if kept == len(shards):
        return 0
    manifest = read_manifest(run_dir)
    images = run_dir / SHARDS / IMAGES
    dropped: set[str] = set()
    if images.is_dir():  # the folders of the trajectories dropped (and of no kept one)
        dropped = {image_folder(i) for i in _trajectory_ids(shards[kept:])}
        dropped -= {image_folder(i) for i in _trajectory_ids(shards[:kept])}
    for shard in shards[kept:]:
        shard.path.unlink()
    sync_dir(run_dir / SHARDS)
    for folder in sorted(dropped):
        shutil.rmtree(images / folder, ignore_errors=True)
    created = manifest.created_at if manifest else None
    payload = manifest_of(shards[:kept], run_dir, created).model_dump_json(indent=2)
    write_atomically(run_dir / MANIFEST, payload.encode())
    return len(shards) - kept


# -- images ------------------------------------------------------------------------------------
def image_folder(trajectory_id: str) -> str:
    """The folder of a trajectory's images: its id when that is a plain file name, else a hash
    of it (an empty id, a slash, a leading dot)."""
    if _SAFE_NAME.fullmatch(trajectory_id):
        return trajectory_id
    return "h-" + hashlib.sha256(trajectory_id.encode()).hexdigest()[:16]


def place_images(trajectory: Trajectory) -> list[tuple[str, bytes]]:
    """Name the files of the images the trajectory's turns hold (`Turn.image_data`), set each
    such turn's `images` to them (paths relative to the run directory), and return the
    (path, bytes) to write. A name ends with a hash of the content: the same image under the
    same name is the same file."""
    folder = f"{SHARDS}/{IMAGES}/{image_folder(trajectory.id)}"
    files = []
    for index, turn in enumerate(trajectory.turns):
        if not turn.image_data:
            continue
        names = []
        for k, data in enumerate(turn.image_data):
            digest = hashlib.sha256(data).hexdigest()[:12]
            names.append(f"{folder}/{index}-{k}-{digest}.png")
            files.append((names[-1], data))
        turn.images = names
    return files


def write_images(run_dir: Path, files: list[tuple[str, bytes]]) -> None:
    """Write `files` (from `place_images`) atomically; one already there is kept as it is."""
    folders = set()
    for name, data in files:
        path = run_dir / name
        if path.is_file():
            continue
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise StoreError(f"{path}: cannot write the image ({exc})") from exc
        folders.add(path.parent)
    for folder in folders:
        sync_dir(folder)
    if folders:
        sync_dir(run_dir / SHARDS / IMAGES)


def read_image(run_dir: Path | str, name: str) -> bytes:
    """The PNG a turn's `images` names, read from `run_dir`; `StoreError` when the name points
    outside the store's images, the file is missing, or it is not a PNG."""
    root = (Path(run_dir) / SHARDS / IMAGES).resolve()
    path = (Path(run_dir) / name).resolve()
    if not path.is_relative_to(root):
        raise StoreError(f"{name}: not an image of the store {run_dir}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the image ({exc})") from exc
    if not data.startswith(PNG_MAGIC):
        raise StoreError(f"{path}: not a PNG image")
    return data


def _trajectory_ids(shards: list[Shard]) -> set[str]:
    """The ids in `shards` (a shard that cannot be read adds none)."""
    ids: set[str] = set()
    for shard in shards:
        with contextlib.suppress(OSError, pa.ArrowException):
            ids.update(
                str(i) for i in pq.read_table(shard.path, columns=["id"]).column("id").to_pylist()
            )
    return ids
