"""A run directory's copy at an fsspec URL (s3://, gs://, file://, memory://): uploads, commits,
and the pull a resume on another machine starts from.

    mirror = RunMirror.open(RemoteSettings(url="s3://bucket/runs/x"))
    mirror.pull(run_dir)        # a resume into an empty directory: the run as of its last commit
    mirror.push(run_dir)        # what changed goes up; new checkpoints are committed last
    mirror.latest()             # the newest committed checkpoint (RemoteCheckpoint), or None
    publish_dir(local, url)     # an export: its files, then its commit record

The run works in its local directory (`out`) and the URL mirrors it. Object stores have no atomic
rename, so a directory (a checkpoint, an export) is committed by uploading its files first and a
commit record (`_COMMIT.json`, each file's size) last; a reader trusts only a directory whose
record exists and whose files all exist with those sizes. Other files go up whole (a PUT is
atomic; on file:// through a temporary name and a rename).

Not covered: several writers to one URL (one trainer process owns a run); uploads in the
background (the loop waits for them); credentials (fsspec's: the environment, config files, or
`storage_options`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re
import secrets
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from honing.config import StrictModel
from honing.errors import ConfigError, RemoteError
from honing.trainer.run_dir import CONFIG_FILE, STORE_DIR, WARM_DIR, WEIGHTS_DIR

log = logging.getLogger(__name__)

FORMAT = 1
COMMIT_FILE = "_COMMIT.json"  # inside a committed directory, written after everything it lists
CHECKPOINTS = "checkpoints"  # honing.trainer.checkpoint's folder of a run directory
RUN_CONFIG = CONFIG_FILE
_STEP = re.compile(r"step-(\d{8,})")
_NOT_MIRRORED = (WEIGHTS_DIR,)  # staged for a server engine: rebuilt from the checkpoint
_STORE = f"{STORE_DIR}/"  # honing.store's shards and images
# a file there never changes under its name: one the URL holds with the same size is the same
_IMMUTABLE = (_STORE, f"{WARM_DIR}/")
_S3_HINT = "pip install 'honing[s3]' (s3fs)"


class RemoteSettings(StrictModel):
    """`remote:` of a run config: mirror the run directory to a URL (docs/scaling.md, "Object
    storage"). A plain string is read as the url."""

    url: str = Field(
        description="An fsspec URL (s3://bucket/runs/x, gs://..., file:///...); the run "
        "directory `out` stays the working copy."
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Passed to the fsspec filesystem, e.g. {client_kwargs: {endpoint_url: "
        "http://127.0.0.1:9000}} for an S3-compatible server. Saved in config.yaml: keep "
        "credentials in the environment.",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if "://" not in value:
            raise ValueError(
                f"{value!r} is not a URL: give one with its protocol (s3://bucket/path, "
                "file:///abs/path)"
            )
        return value.rstrip("/")


class CommitRecord(StrictModel):
    """`_COMMIT.json`: the files of a committed directory, uploaded before it."""

    format: int = FORMAT
    files: dict[str, int]  # path relative to the directory -> bytes
    time: str  # ISO 8601, UTC
    digest: str = ""  # a checkpoint's: sha256 of its meta.json (a step saved again differs)


@dataclass(frozen=True)
class RemoteCheckpoint:
    """A committed checkpoint at the URL."""

    step: int
    name: str  # step-NNNNNNNN
    url: str  # its directory
    record: CommitRecord


def is_url(text: str | Path) -> bool:
    """Whether `text` names a location by URL (`s3://...`) rather than a local path."""
    return isinstance(text, str) and "://" in text


# -- a location ------------------------------------------------------------------------------


class Location:
    """A folder at an fsspec URL, with the few operations a mirror needs; paths are relative."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        import fsspec

        self.url = url.rstrip("/")
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url, **(storage_options or {}))
        except ImportError as exc:
            hint = _S3_HINT if self.url.startswith(("s3://", "s3a://")) else str(exc)
            raise ConfigError(f"{self.url}: cannot open this URL ({exc}): {hint}") from exc
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{self.url}: cannot open this URL ({exc})") from exc
        self.root = self.root.rstrip("/")
        self.local = "file" in _protocols(self.fs)

    def url_of(self, rel: str) -> str:
        return _join(self.url, rel) if rel else self.url

    def _path(self, rel: str) -> str:
        return _join(self.root, rel) if rel else self.root

    def files(self, rel: str = "") -> dict[str, int]:
        """Every file below `rel` -> its size, each named relative to this location (not to
        `rel`); {} when there is none."""
        base = self._path(rel)
        try:
            self.fs.invalidate_cache()
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return {}
        except Exception as exc:  # each backend raises its own types
            raise RemoteError(f"{self.url_of(rel)}: cannot list ({_why(exc)})") from exc
        out = {}
        for path, info in found.items():
            name = path.rstrip("/")
            if info.get("type") == "file" and name.startswith(self.root + "/"):
                out[name[len(self.root) + 1 :]] = int(info["size"])
        return out

    def read_bytes(self, rel: str) -> bytes | None:
        """The file's content; None when it does not exist."""
        try:
            return bytes(self.fs.cat_file(self._path(rel)))
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise RemoteError(f"{self.url_of(rel)}: cannot read ({_why(exc)})") from exc

    def write_bytes(self, rel: str, data: bytes) -> None:
        try:
            if self.local:
                tmp = _tmp_name(self._path(rel))
                self.fs.makedirs(posixpath.dirname(tmp), exist_ok=True)
                self.fs.pipe_file(tmp, data)
                self.fs.mv(tmp, self._path(rel))
            else:
                self.fs.pipe_file(self._path(rel), data)
        except Exception as exc:
            raise RemoteError(f"{self.url_of(rel)}: cannot write ({_why(exc)})") from exc

    def upload(self, local: Path, rel: str) -> None:
        target = self._path(rel)
        try:
            if self.local:
                tmp = _tmp_name(target)
                self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
                self.fs.put_file(str(local), tmp)
                self.fs.mv(tmp, target)
            else:
                self.fs.put_file(str(local), target)
        except Exception as exc:
            raise RemoteError(
                f"{local} -> {self.url_of(rel)}: upload failed ({_why(exc)})"
            ) from exc

    def download(self, rel: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.fs.get_file(self._path(rel), str(local))
        except Exception as exc:
            raise RemoteError(f"{self.url_of(rel)}: download failed ({_why(exc)})") from exc

    def remove(self, rels: list[str]) -> None:
        if not rels:
            return
        try:
            self.fs.rm([self._path(r) for r in rels])
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise RemoteError(f"{self.url}: cannot delete {rels[:3]} ({_why(exc)})") from exc


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _tmp_name(path: str) -> str:
    head, name = posixpath.split(path)
    return f"{head}/.{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# -- committed directories -------------------------------------------------------------------


def commit_dir(
    location: Location, local: Path, rel: str, *, digest: str = "", skip: tuple[str, ...] = ()
) -> CommitRecord:
    """Upload the files of `local` to `rel`, then its commit record: readers see the directory
    only once every file is there. `skip`: file names (relative) not uploaded."""
    files = {
        p.relative_to(local).as_posix(): p.stat().st_size
        for p in sorted(local.rglob("*"))
        if p.is_file() and p.relative_to(local).as_posix() not in skip
    }
    for name in files:
        location.upload(local / name, _join(rel, name))
    record = CommitRecord(
        files=files, time=datetime.now(UTC).isoformat(timespec="seconds"), digest=digest
    )
    location.write_bytes(_join(rel, COMMIT_FILE), record.model_dump_json(indent=2).encode())
    return record


def read_commit(
    location: Location, rel: str, listing: dict[str, int] | None = None
) -> CommitRecord | None:
    """The commit record of directory `rel`, checked against the files there (`listing`: sizes
    relative to `location`, listed now when not given). None when it has no record (an upload
    was interrupted, or it is being written); RemoteError, naming the URL, when a file it lists
    is missing or has another size, or the record is unreadable."""
    data = location.read_bytes(_join(rel, COMMIT_FILE))
    if data is None:
        return None
    url = location.url_of(_join(rel, COMMIT_FILE))
    try:
        record = CommitRecord.model_validate_json(data)
    except ValidationError as exc:
        raise RemoteError(f"{url}: not a commit record ({exc.errors()[0]['msg']})") from exc
    if record.format != FORMAT:
        raise RemoteError(f"{url}: commit format {record.format}; this honing reads {FORMAT}")
    if listing is None:
        listing = location.files(rel)
    for name, size in record.files.items():
        found = listing.get(_join(rel, name))
        if found != size:
            what = "is missing" if found is None else f"is {found} bytes"
            raise RemoteError(
                f"{location.url_of(_join(rel, name))} {what}, but {url} lists {size}: "
                f"{location.url_of(rel)} is not a complete commit (delete it to fall back to an "
                "earlier one)"
            )
    return record


def publish_dir(local: Path, url: str, storage_options: dict[str, Any] | None = None) -> str:
    """Upload directory `local` to `url` as one commit (an export); refused when something is
    already there (a publish never overwrites). Returns the URL."""
    location = Location(url, storage_options)
    if location.files():
        raise RemoteError(
            f"{url} is not empty: a publish never overwrites; give a new URL or delete this one"
        )
    commit_dir(location, local, "")
    log.info("remote: %s published to %s", local, url)
    return location.url


def read_published(url: str, storage_options: dict[str, Any] | None = None) -> CommitRecord:
    """The commit record of a directory `publish_dir` wrote, checked; RemoteError otherwise."""
    location = Location(url, storage_options)
    record = read_commit(location, "")
    if record is None:
        raise RemoteError(f"{url}: no {COMMIT_FILE}: not published, or the upload was interrupted")
    return record


# -- a run's mirror --------------------------------------------------------------------------


@dataclass
class RunMirror:
    """The URL copy of one run directory, as this process last saw and wrote it."""

    location: Location
    committed: dict[str, RemoteCheckpoint] = field(default_factory=dict)  # name -> checkpoint
    files: dict[str, int] = field(default_factory=dict)  # outside checkpoints/: rel -> size
    sent: dict[str, tuple[int, int]] = field(default_factory=dict)  # rel -> (size, mtime_ns)
    stale: set[str] = field(default_factory=set)  # checkpoint folders without a valid commit

    @staticmethod
    def open(settings: RemoteSettings) -> RunMirror:
        """The mirror at `settings.url`, its files and committed checkpoints listed."""
        mirror = RunMirror(Location(settings.url, settings.storage_options))
        mirror.refresh()
        return mirror

    @property
    def url(self) -> str:
        return self.location.url

    def refresh(self) -> None:
        """List the URL again: its files and its committed checkpoints (checked)."""
        listing = self.location.files()
        self.files = {k: v for k, v in listing.items() if not k.startswith(f"{CHECKPOINTS}/")}
        self.committed, self.stale = {}, set()
        names = {k.split("/")[1] for k in listing if k.startswith(f"{CHECKPOINTS}/")}
        for name in sorted(names):
            match = _STEP.fullmatch(name)
            if match is None:
                continue
            rel = f"{CHECKPOINTS}/{name}"
            try:
                record = read_commit(self.location, rel, listing)
            except RemoteError as exc:
                log.warning("remote: %s; it is not a committed checkpoint", exc)
                record = None
            if record is None:
                self.stale.add(name)
            else:
                url = self.location.url_of(rel)
                self.committed[name] = RemoteCheckpoint(int(match.group(1)), name, url, record)

    def holds_run(self) -> bool:
        return RUN_CONFIG in self.files

    def latest(self) -> RemoteCheckpoint | None:
        """The committed checkpoint of the highest step, or None."""
        return max(self.committed.values(), key=lambda c: c.step, default=None)

    # -- down --------------------------------------------------------------------------------
    def resume_into(self, run_dir: Path) -> None:
        """Before a resume: pull the run when `run_dir` holds none; refuse a `run_dir` whose
        newest checkpoint is older than the URL's (a stale copy would overwrite the URL's)."""
        if not (run_dir / RUN_CONFIG).is_file():
            self.pull(run_dir)
            return
        latest, here = self.latest(), local_checkpoint_step(run_dir)
        if latest is not None and (here is None or latest.step > here):
            raise RemoteError(
                f"{self.url} holds checkpoint step {latest.step}, newer than {run_dir}'s "
                f"({'none' if here is None else f'step {here}'}): {run_dir} is an older copy of "
                f"the run. Resume into a new directory (out=NEW_DIR) to continue from the URL, "
                f"or delete {run_dir}"
            )

    def pull(self, run_dir: Path) -> RemoteCheckpoint | None:
        """Download the run into `run_dir` (which holds no run): every file but the checkpoints,
        then the latest committed checkpoint, renamed into place once complete. A resume then cuts
        the store and the logs back to that checkpoint as it does locally."""
        if not self.holds_run():
            raise RemoteError(
                f"{self.url}: no {RUN_CONFIG}: no run to resume there (start one with remote: "
                f"{{url: {self.url}}} in the run config)"
            )
        started, total = time.monotonic(), 0
        run_dir.mkdir(parents=True, exist_ok=True)
        latest = self.latest()
        if latest is not None:
            total += self._get_checkpoint(latest, run_dir / CHECKPOINTS)
        # config.yaml last: a pull killed before it leaves no run, and the next resume pulls again
        for rel, size in sorted(self.files.items(), key=lambda item: item[0] == RUN_CONFIG):
            if _mirrored(rel):
                total += self._get(rel, run_dir / rel, size)
                self._sent_now(run_dir, rel)
        log.info(
            "remote: pulled %s into %s (%.1f MB, checkpoint %s) in %.1f s",
            self.url,
            run_dir,
            total / 1e6,
            latest.name if latest else "none",
            time.monotonic() - started,
        )
        return latest

    def _get(self, rel: str, local: Path, size: int) -> int:
        tmp = local.with_name(f".{local.name}.{os.getpid()}.pull")
        self.location.download(rel, tmp)
        got = tmp.stat().st_size
        if got != size:
            tmp.unlink()
            raise RemoteError(
                f"{self.location.url_of(rel)}: downloaded {got} bytes, {size} were listed (it "
                "changed while being read: is another process writing to the URL?)"
            )
        os.replace(tmp, local)
        return size

    def _get_checkpoint(self, checkpoint: RemoteCheckpoint, root: Path) -> int:
        root.mkdir(parents=True, exist_ok=True)
        final = root / checkpoint.name
        # named as honing.trainer.checkpoint names its scratch: a killed pull's is removed there
        tmp = root / f".tmp-{checkpoint.name}-{os.getpid()}-{secrets.token_hex(4)}"
        total = 0
        try:
            for name, size in checkpoint.record.files.items():
                total += self._get(f"{CHECKPOINTS}/{checkpoint.name}/{name}", tmp / name, size)
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return total

    # -- up ----------------------------------------------------------------------------------
    def push(self, run_dir: Path, *, store_only: bool = False) -> int:
        """Make the URL hold what `run_dir` holds: changed files uploaded, files gone there
        deleted, then each new complete checkpoint committed (files, then its record) and those
        gone locally retracted (record first). `store_only`: only the trajectory store's new
        files (after an update). Returns the bytes uploaded."""
        started, sent = time.monotonic(), 0
        local = _local_files(run_dir)
        if store_only:
            local = {k: v for k, v in local.items() if k.startswith(_STORE)}
        for rel, path in sorted(local.items()):
            stat = path.stat()
            now = (stat.st_size, stat.st_mtime_ns)
            if self.sent.get(rel) == now:
                continue
            known = rel not in self.sent and rel.startswith(_IMMUTABLE)
            if known and self.files.get(rel) == stat.st_size:  # there from before this process
                self.sent[rel] = now
                continue
            self.location.upload(path, rel)
            self.files[rel], self.sent[rel] = stat.st_size, now
            sent += stat.st_size
        if not store_only:
            gone = sorted(r for r in self.files if r not in local and _mirrored(r))
            self.location.remove(gone)
            for rel in gone:
                self.files.pop(rel, None)
                self.sent.pop(rel, None)
            sent += self._push_checkpoints(run_dir / CHECKPOINTS)
        if sent:
            log.info("remote: pushed %.1f MB to %s in %.1f s", sent / 1e6, self.url,
                     time.monotonic() - started)  # fmt: skip
        return sent

    def _push_checkpoints(self, root: Path) -> int:
        local = _local_checkpoints(root)
        sent = 0
        for name, path in sorted(local.items()):
            digest = hashlib.sha256((path / "meta.json").read_bytes()).hexdigest()
            known = self.committed.get(name)
            if known is not None and known.record.digest == digest:
                continue
            if known is not None:  # the same step saved again (a resume): retract, then replace
                self._retract(name)
            record = commit_dir(self.location, path, f"{CHECKPOINTS}/{name}", digest=digest)
            url = self.location.url_of(f"{CHECKPOINTS}/{name}")
            step = int(name.removeprefix("step-"))
            self.committed[name] = RemoteCheckpoint(step, name, url, record)
            self.stale.discard(name)
            sent += sum(record.files.values())
            log.info("remote: checkpoint %s committed at %s", name, url)
        for name in sorted(set(self.committed) - set(local)):  # pruned or abandoned locally
            self._retract(name)
        for name in sorted(self.stale - set(local)):  # interrupted uploads of old runs
            self._remove_dir(name)
            self.stale.discard(name)
        return sent

    def _retract(self, name: str) -> None:
        """Uncommit a checkpoint (its record first: never a record over missing files), then
        delete its files."""
        self.location.remove([f"{CHECKPOINTS}/{name}/{COMMIT_FILE}"])
        self.committed.pop(name, None)
        self._remove_dir(name)

    def _remove_dir(self, name: str) -> None:
        rel = f"{CHECKPOINTS}/{name}"
        self.location.remove(list(self.location.files(rel)))

    def _sent_now(self, run_dir: Path, rel: str) -> None:
        stat = (run_dir / rel).stat()
        self.sent[rel] = (stat.st_size, stat.st_mtime_ns)


def _mirrored(rel: str) -> bool:
    """Whether a file (relative to the run directory) belongs in the mirror: not hidden (a
    scratch file, the store's lock), not a temporary, not staged weights, not a checkpoint."""
    parts = rel.split("/")
    return not (
        any(p.startswith(".") for p in parts)
        or rel.endswith(".tmp")
        or parts[0] in _NOT_MIRRORED
        or parts[0] == CHECKPOINTS
    )


def _local_files(run_dir: Path) -> dict[str, Path]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(run_dir):
        here = Path(dirpath)
        if here == run_dir:
            dirnames[:] = [d for d in dirnames if d not in (*_NOT_MIRRORED, CHECKPOINTS)]
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            rel = (here / name).relative_to(run_dir).as_posix()
            if _mirrored(rel):
                out[rel] = here / name
    return out


def _local_checkpoints(root: Path) -> dict[str, Path]:
    """The complete checkpoints of a run directory (a step folder with its meta.json: it only
    appears, renamed into place, once complete)."""
    if not root.is_dir():
        return {}
    return {
        p.name: p for p in root.iterdir() if _STEP.fullmatch(p.name) and (p / "meta.json").is_file()
    }


def local_checkpoint_step(run_dir: Path) -> int | None:
    """The highest step of the complete checkpoints in `run_dir`, or None."""
    steps = [int(n.removeprefix("step-")) for n in _local_checkpoints(run_dir / CHECKPOINTS)]
    return max(steps, default=None)
