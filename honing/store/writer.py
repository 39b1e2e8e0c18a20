"""Writing trajectories to a run's store: buffered, in Parquet shards, each one atomic.

    async with TrajectoryWriter(run_dir, shard_rows=1024, flush_s=60) as writer:
        async for group in scheduler.results():
            await writer.add_group(group)
    writer.offset                       # rows durably written (the trainer resumes from it)

Covered: converting each trajectory at `add` (a value that cannot be stored fails there), its
turns' images as files beside the shards, backpressure and timed flushes, shards written in a
worker thread and renamed into place, resume into a directory that holds shards, and one writer
per run directory (an advisory `flock`); docs/rollout.md, "The store in detail". Not covered
here: reading (`honing.store.query`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fcntl
import functools
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from honing.errors import StoreError
from honing.records import Group, Trajectory
from honing.store.files import (
    IMAGES,
    MANIFEST,
    SHARDS,
    Manifest,
    Shard,
    manifest_of,
    place_images,
    read_manifest,
    scan_shards,
    shard_name,
    sync_dir,
    write_atomically,
    write_images,
)
from honing.store.schema import rows_to_table, to_row

_LOCK = ".lock"


class WriterState(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


class TrajectoryWriter:
    """Appends trajectories to `run_dir` as Parquet shards of up to `shard_rows` rows."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        shard_rows: int = 1024,
        flush_s: float | None = 60.0,
        compression: str = "zstd",
    ) -> None:
        if shard_rows < 1:
            raise ValueError(f"shard_rows must be >= 1, got {shard_rows}")
        if flush_s is not None and flush_s <= 0:
            raise ValueError(f"flush_s must be > 0 (or None: no timed flush), got {flush_s}")
        self.run_dir = Path(run_dir)
        self.shard_rows = shard_rows
        self.flush_s = flush_s
        self.compression = compression
        self.state = WriterState.NEW
        self._buffer: list[pa.Table] = []  # one row each
        self._buffered_since: float | None = None  # loop time of the oldest buffered row
        self._shards: list[Shard] = []
        self._offset = 0
        self._next_index = 0
        self._created_at: float | None = None
        self._flushing = asyncio.Lock()
        self._io = threading.Lock()  # one shard + manifest write at a time, even if abandoned
        self._writes: set[asyncio.Future[None]] = set()
        self._timer: asyncio.Task[None] | None = None
        self._background_error: BaseException | None = None
        self._lock_file: IO[str] | None = None

    @property
    def offset(self) -> int:
        """Rows durably written to complete shards, including those there before opening."""
        return self._offset

    @property
    def pending(self) -> int:
        """Rows added but not yet in a complete shard."""
        return len(self._buffer)

    @property
    def shards(self) -> list[Shard]:
        return list(self._shards)

    # -- lifecycle ---------------------------------------------------------------------------
    async def __aenter__(self) -> TrajectoryWriter:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Create or resume the store; take the directory's writer lock."""
        if self.state is not WriterState.NEW:
            raise StoreError(f"{self.run_dir}: this TrajectoryWriter was already opened")
        await asyncio.to_thread(self._open)
        self.state = WriterState.OPEN
        if self.flush_s is not None:
            self._timer = asyncio.create_task(self._flush_when_due(self.flush_s))

    async def close(self) -> None:
        """Write what is buffered, wait for writes in flight, release the lock. Idempotent.
        A write that failed in the background (a timed flush, a cancelled flush) is raised
        here, after everything that could still be written was."""
        if self.state is not WriterState.OPEN:
            self.state = WriterState.CLOSED
            return
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        try:
            if self._writes:  # abandoned by a cancelled flush; a failed one refills the buffer
                await asyncio.gather(*self._writes, return_exceptions=True)
            await self._flush()
        finally:
            self.state = WriterState.CLOSED
            if self._lock_file is not None:
                self._lock_file.close()  # releases the flock
                self._lock_file = None
        self._raise_background_error()

    # -- adding ------------------------------------------------------------------------------
    async def add(self, trajectory: Trajectory) -> None:
        """Buffer one trajectory; write a shard when the buffer is full. The images its turns
        hold (`Turn.image_data`) are written as files first, and each such turn's `images` set to
        their paths (relative to the run directory), in the record itself. A team episode's
        other roles (`partners`, not yet split by `honing.records.by_role`) are rows too."""
        self._check_open()
        for partner in trajectory.partners:
            await self.add(partner)
        images = place_images(trajectory)
        row = rows_to_table([to_row(trajectory)])  # fails here, naming it, if it cannot be stored
        if images:  # on disk before any shard that names them
            await asyncio.to_thread(write_images, self.run_dir, images)
        if not self._buffer:
            self._buffered_since = asyncio.get_running_loop().time()
        self._buffer.append(row)
        if len(self._buffer) >= self.shard_rows:
            await self.flush()

    async def add_group(self, group: Group) -> None:
        for trajectory in group.trajectories:
            await self.add(trajectory)

    async def flush(self) -> int:
        """Write the buffered rows as shards of up to `shard_rows`; return how many rows."""
        self._check_open()
        return await self._flush()

    # -- internals ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        self._raise_background_error()
        if self.state is not WriterState.OPEN:
            raise StoreError(
                f"{self.run_dir}: the TrajectoryWriter is {self.state.value}; use it inside "
                "`async with TrajectoryWriter(...)` (or call open() first)"
            )

    def _raise_background_error(self) -> None:
        if self._background_error is not None:
            error, self._background_error = self._background_error, None
            raise StoreError(
                f"{self.run_dir}: a write in the background failed: {error}"
            ) from error

    async def _flush(self) -> int:
        written = 0
        async with self._flushing:
            while self._buffer:
                batch = self._buffer[: self.shard_rows]
                del self._buffer[: self.shard_rows]
                self._buffered_since = asyncio.get_running_loop().time() if self._buffer else None
                index = self._next_index
                self._next_index += 1
                # The thread finishes the shard even if this task is cancelled meanwhile, so a
                # batch is either in a shard or back in the buffer, never both.
                write = asyncio.ensure_future(asyncio.to_thread(self._write, index, batch))
                self._writes.add(write)
                write.add_done_callback(self._writes.discard)
                try:
                    await asyncio.shield(write)
                except _ManifestNotWritten:
                    written += len(batch)  # the shard is in place; only the manifest lags
                    raise
                except StoreError:
                    self._buffer[:0] = batch
                    self._next_index = index  # nothing was renamed into place
                    raise
                except asyncio.CancelledError:
                    write.add_done_callback(functools.partial(self._abandoned, batch))
                    raise
                written += len(batch)
        return written

    def _abandoned(self, batch: list[pa.Table], write: asyncio.Future[None]) -> None:
        """A write whose flush was cancelled has finished: keep its failure for later."""
        error = None if write.cancelled() else write.exception()
        if error is None:
            return
        if not isinstance(error, _ManifestNotWritten):
            self._buffer[:0] = batch  # the shard's number stays unused: a gap, not a clash
        self._background_error = error

    async def _flush_when_due(self, flush_s: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(flush_s / 2, 1.0))
            since = self._buffered_since
            if since is None or loop.time() - since < flush_s:
                continue
            try:
                await self._flush()
            except StoreError as exc:  # raised again at the next add/flush/close
                self._background_error = exc
                return

    def _open(self) -> None:
        directory = self.run_dir / SHARDS
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{directory}: cannot create the store directory ({exc})") from exc
        lock = open(directory / _LOCK, "a+")  # noqa: SIM115 (held until close)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise StoreError(
                f"{self.run_dir}: another TrajectoryWriter is writing to this store; "
                "close it first or write to another directory"
            ) from None
        self._lock_file = lock
        try:
            self._recover()
        except BaseException:
            lock.close()
            self._lock_file = None
            raise

    def _recover(self) -> None:
        """Resume after whatever happened to the previous writer (we hold the lock)."""
        for pattern in (f"{SHARDS}/.*.tmp", ".*.tmp", f"{SHARDS}/{IMAGES}/*/.*.tmp"):
            for path in self.run_dir.glob(pattern):
                path.unlink(missing_ok=True)  # a write that never completed
        manifest = read_manifest(self.run_dir)
        self._shards = scan_shards(self.run_dir)
        on_disk = {s.path.name for s in self._shards}
        lost = (
            [e.file for e in manifest.shards if Path(e.file).name not in on_disk]
            if manifest
            else []
        )
        if lost:
            raise StoreError(
                f"{self.run_dir / lost[0]}: listed in {self.run_dir / MANIFEST} but missing; "
                "restore it before appending, or write to a new directory"
            )
        self._offset = sum(s.rows for s in self._shards)
        self._next_index = self._shards[-1].index + 1 if self._shards else 0
        self._created_at = manifest.created_at if manifest else None
        if manifest is None or _listed(manifest) != [(s.path.name, s.rows) for s in self._shards]:
            self._write_manifest()

    def _write(self, index: int, batch: list[pa.Table]) -> None:
        """In a worker thread: one shard, then the manifest."""
        with self._io:
            table = pa.concat_tables(batch).combine_chunks()
            directory = self.run_dir / SHARDS
            path = directory / shard_name(index)
            tmp = directory / f".{path.name}.{os.getpid()}.tmp"
            try:
                pq.write_table(table, tmp, compression=self.compression)
                with open(tmp, "rb") as f:
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                sync_dir(directory)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise StoreError(f"{path}: cannot write the shard ({exc})") from exc
            self._shards.append(Shard(index, path, table.num_rows, path.stat().st_size))
            self._offset += table.num_rows
            try:
                self._write_manifest()
            except StoreError as exc:
                raise _ManifestNotWritten(str(exc)) from exc

    def _write_manifest(self) -> None:
        manifest = manifest_of(self._shards, self.run_dir, self._created_at)
        self._created_at = manifest.created_at
        path = self.run_dir / MANIFEST
        try:
            write_atomically(path, manifest.model_dump_json(indent=2).encode())
        except OSError as exc:
            raise StoreError(f"{path}: cannot write the store manifest ({exc})") from exc


class _ManifestNotWritten(StoreError):
    """The shard is complete but the manifest could not be rewritten (readers go by shards)."""


def _listed(manifest: Manifest) -> list[tuple[str, int]]:
    return [(Path(e.file).name, e.rows) for e in manifest.shards]
