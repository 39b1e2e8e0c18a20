"""Training checkpoints: atomic on disk, validated on load, for a bit-exact resume.

    save_checkpoint(run_dir, step, learner, loop_state, keep=2) -> Path   # checkpoints/step-N/
    latest_checkpoint(run_dir) -> Path | None
    load_checkpoint(path, learner) -> LoadedCheckpoint (step, loop state; learner and RNGs restored)

A checkpoint holds the learner (`Learner.save`), the global RNG states, the caller's loop state
and a manifest; it is written into a temporary directory, fsynced, renamed into place, and only
then named by LATEST. A corrupt one raises CheckpointError naming the file (docs/training.md).

Not covered: what the loop state means (the closed loop defines and validates it; see
`LoadedCheckpoint.state`); random generators other than the global ones (a `torch.Generator`
or a sampling seed the caller owns must go into the loop state), and those of other processes
(Ray workers; a sharded learner's other ranks: rank 0's generators drive the rollouts); several
runs writing one run directory; a copy at a URL (honing.trainer.remote commits it there). A
sharded learner (honing.trainer.distributed) writes `learner/` from every rank, into a run
directory every rank sees; `load_checkpoint` reads either kind of `learner/` into either kind
of learner.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import secrets
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import torch
from pydantic import BaseModel, ValidationError
from torch import Tensor

import honing
from honing.errors import CheckpointError
from honing.store.files import fsync_tree, pid_alive, sync_dir
from honing.trainer.learner import Learner

log = logging.getLogger(__name__)

FORMAT = 1
"""The checkpoint layout's version; `load_checkpoint` refuses any other."""

_STEP = re.compile(r"step-(\d{8,})")
_LEFTOVER = re.compile(r"\.(tmp|trash)-(.+)-(\d+)-[0-9a-f]{8}")
_M = TypeVar("_M", bound=BaseModel)
_T = TypeVar("_T")


# ---- random generators ---------------------------------------------------------------------


@dataclass(frozen=True)
class RngState:
    """The global random generators of this process: python `random`, numpy's legacy global
    generator (None when numpy is not installed), torch's CPU generator and each CUDA device's."""

    python: tuple[Any, ...]
    numpy: dict[str, Any] | None
    torch_cpu: Tensor
    torch_cuda: list[Tensor]

    @classmethod
    def capture(cls) -> RngState:
        np = _numpy()
        return cls(
            python=random.getstate(),
            numpy=np.random.get_state(legacy=False) if np is not None else None,
            torch_cpu=torch.get_rng_state(),
            torch_cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        )

    def restore(self) -> None:
        """Set every generator back to this state. A numpy or CUDA state that cannot be restored
        here (numpy missing, another number of GPUs) is a logged warning, not an error: the
        resume is then not bit-exact for whatever draws from those generators."""
        random.setstate(self.python)
        np = _numpy()
        if self.numpy is not None:
            if np is None:
                log.warning("checkpoint: numpy is not installed; its random state is not restored")
            else:
                np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda:
            devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if devices == len(self.torch_cuda):
                torch.cuda.set_rng_state_all(self.torch_cuda)
            else:
                log.warning(
                    "checkpoint: saved with %d CUDA devices, %d here; CUDA random states are not "
                    "restored",
                    len(self.torch_cuda),
                    devices,
                )

    def save(self, path: Path) -> None:
        numpy = None
        if self.numpy is not None:
            inner = self.numpy["state"]
            numpy = {
                **self.numpy,
                "state": {**inner, "key": torch.from_numpy(inner["key"].astype("int64"))},
            }
        payload = {
            "python": self.python,
            "numpy": numpy,
            "torch_cpu": self.torch_cpu,
            "torch_cuda": self.torch_cuda,
        }
        torch.save(payload, path)

    @classmethod
    def load(cls, path: Path) -> RngState:
        payload = _read(path, lambda: torch.load(path, map_location="cpu", weights_only=True))
        try:
            numpy = payload["numpy"]
            if numpy is not None:
                np = _numpy()
                key = numpy["state"]["key"]
                if np is not None:
                    key = np.asarray(key.numpy(), dtype=np.uint32)
                numpy = {**numpy, "state": {**numpy["state"], "key": key}}
            return cls(
                python=_as_tuples(payload["python"]),
                numpy=numpy,
                torch_cpu=payload["torch_cpu"],
                torch_cuda=list(payload["torch_cuda"]),
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{path} is corrupt ({type(e).__name__}: {e}){_FALL_BACK}") from e


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def _as_tuples(value: Any) -> Any:
    """random.setstate wants the nested tuples it gave out (torch.load may return lists)."""
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuples(v) for v in value)
    return value


# ---- save -----------------------------------------------------------------------------------


def save_checkpoint(
    run_dir: Path,
    step: int,
    learner: Learner,
    loop_state: BaseModel | Mapping[str, Any],
    *,
    keep: int | None = 2,
    roles: Mapping[str, Learner] | None = None,
    protect: int | None = None,
) -> Path:
    """Write `run_dir/checkpoints/step-{step:08d}/` atomically, point LATEST at it, and delete
    older checkpoints beyond the newest `keep` (None keeps all; the new one is always kept; so
    is the one of step `protect`, the best on validation with checkpoint.keep_best).
    `loop_state`: the closed loop's own state, a pydantic model or a JSON-able mapping; it comes
    back as `LoadedCheckpoint.loop_state`. `roles`: a team's other learners (per-role adapters),
    each saved as `learner-ROLE/`. Checkpoints of steps after `step` (left by a run that was
    resumed from an earlier checkpoint) are deleted: they belong to an abandoned history.
    A sharded learner's `save` has every rank write its shards into `learner/` and returns
    after all have (a barrier), before the rename. Returns the checkpoint's directory."""
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    if keep is not None and keep < 1:
        raise ValueError(f"keep must be >= 1 (or None to keep every checkpoint), got {keep}")
    rng = RngState.capture()
    state = _state_json(loop_state)
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    tmp = _scratch(root, "tmp", final.name)
    tmp.mkdir()
    try:
        learner.save(tmp / "learner")
        for role, other in (roles or {}).items():
            other.save(tmp / f"learner-{role}")
        rng.save(tmp / "rng.pt")
        (tmp / "state.json").write_text(state)
        files = {
            p.relative_to(tmp).as_posix(): p.stat().st_size
            for p in sorted(tmp.rglob("*"))
            if p.is_file()
        }
        meta = {
            "format": FORMAT,
            "honing_version": honing.__version__,
            "step": step,
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
            "learner": learner.config.model_dump(mode="json"),
            "files": files,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        fsync_tree(tmp)
        if final.exists():  # the same step again (resumed before LATEST reached it): replace
            _discard(final)
        os.rename(tmp, final)
        sync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _write_latest(root, final.name)
    _prune(root, step, keep, protect)
    log.info("checkpoint: step %d saved to %s", step, final)
    return final


def _state_json(loop_state: BaseModel | Mapping[str, Any]) -> str:
    value = loop_state.model_dump(mode="json") if isinstance(loop_state, BaseModel) else loop_state
    try:
        return json.dumps(value, indent=2, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"checkpoint loop_state is not JSON-serialisable ({e}): pass a pydantic model or a "
            "mapping of JSON values (str, int, float, bool, None, lists, dicts)"
        ) from e


def _scratch(root: Path, kind: str, name: str) -> Path:
    """A unique name for a directory that is not a checkpoint (yet, or any more); the pid lets
    `latest_checkpoint` tell a dead writer's leftovers from a live writer's work."""
    return root / f".{kind}-{name}-{os.getpid()}-{secrets.token_hex(4)}"


def _discard(path: Path) -> None:
    """Remove a directory without ever leaving a half-deleted checkpoint under its name."""
    trash = _scratch(path.parent, "trash", path.name)
    os.rename(path, trash)
    shutil.rmtree(trash)


def _write_latest(root: Path, name: str) -> None:
    tmp = _scratch(root, "tmp", "LATEST")
    with open(tmp, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / "LATEST")
    sync_dir(root)


def _prune(root: Path, step: int, keep: int | None, protect: int | None = None) -> None:
    older = []
    for s, path in _checkpoints(root):
        if s > step:
            log.warning(
                "checkpoint: deleting %s, a later step than the checkpoint just saved (%d): it "
                "belongs to the history this run was resumed away from",
                path,
                step,
            )
            _discard(path)
        elif s < step and s != protect:
            older.append(path)
    if keep is not None:
        for path in older[: max(0, len(older) - (keep - 1))]:
            _discard(path)


# ---- find and load --------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedCheckpoint:
    """What `load_checkpoint` read; the learner and the random generators are already restored."""

    path: Path
    step: int
    loop_state: dict[str, Any]
    honing_version: str
    saved_at: str  # ISO 8601, UTC

    def state(self, model: type[_M]) -> _M:
        """The loop state validated as `model`; a mismatch is a CheckpointError naming the file."""
        try:
            return model.model_validate(self.loop_state)
        except ValidationError as e:
            raise CheckpointError(
                f"{self.path / 'state.json'} does not match {model.__name__} (saved by honing "
                f"{self.honing_version}): {e}"
            ) from e


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint LATEST names; if it names none that is complete, the highest-step complete
    one; None when the run has no checkpoint. Removes what interrupted saves left behind."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return None
    _remove_leftovers(root)
    pointer = root / "LATEST"
    if pointer.is_file():
        name = pointer.read_text().strip()
        if _STEP.fullmatch(name) and _complete(root / name):
            return root / name
        log.warning(
            "checkpoint: %s names %r, which is not a complete checkpoint; using the newest "
            "complete one instead",
            pointer,
            name,
        )
    found = _checkpoints(root)
    return found[-1][1] if found else None


def load_checkpoint(
    path: Path, learner: Learner, roles: Mapping[str, Learner] | None = None
) -> LoadedCheckpoint:
    """Load the checkpoint directory `path` into `learner` (built from the run's model and
    LearnerConfig) and restore the random generators. Every file is read and checked (sizes,
    format, config, tensor names and shapes) before the learner or a generator changes; a
    missing, truncated or corrupt file, or another learner config, is a CheckpointError.
    `roles`: a team's other learners, loaded from `learner-ROLE/` (missing: a CheckpointError)."""
    meta_path = path / "meta.json"
    if not meta_path.is_file() and (path / "checkpoints").is_dir():
        raise CheckpointError(
            f"{path} is a run directory, not a checkpoint: pass latest_checkpoint({path})"
        )
    meta = _read_json(meta_path)
    if meta.get("format") != FORMAT:
        raise CheckpointError(
            f"{meta_path}: checkpoint format {meta.get('format')!r}; this honing "
            f"({honing.__version__}) reads format {FORMAT}"
        )
    try:
        step = int(meta["step"])
        files = dict(meta["files"])
        version, saved_at = str(meta["honing_version"]), str(meta["time"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{meta_path} is corrupt (missing {e}){_FALL_BACK}") from e
    for name, size in files.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{file} is missing{_FALL_BACK}")
        if file.stat().st_size != size:
            raise CheckpointError(
                f"{file} is {file.stat().st_size} bytes, {size} were written (truncated or "
                f"overwritten){_FALL_BACK}"
            )
    loop_state = _read_json(path / "state.json")
    rng = RngState.load(path / "rng.pt")
    for role in roles or {}:
        if not (path / f"learner-{role}").is_dir():
            raise CheckpointError(
                f"{path} holds no learner for role {role!r} (learner-{role}/): it was saved by a "
                "run without per-role adapters; resume with the team config it was saved with"
            )
    _load_learner(learner, path / "learner")
    for role, other in (roles or {}).items():
        other.load(path / f"learner-{role}")
    rng.restore()
    if version != honing.__version__:
        log.warning(
            "checkpoint: %s was saved by honing %s, this is %s", path, version, honing.__version__
        )
    log.info("checkpoint: resumed from %s (step %d)", path, step)
    return LoadedCheckpoint(path, step, loop_state, version, saved_at)


def _load_learner(learner: Learner, directory: Path) -> None:
    """A sharded `learner/` (every rank of a sharded run wrote it) into a one-process Learner, or
    the learner's own `load` (a DistributedLearner reads both kinds, collectively)."""
    from honing.trainer.distributed import DistributedLearner, is_sharded, load_sharded

    if is_sharded(directory) and not isinstance(learner, DistributedLearner):
        load_sharded(learner, directory)
    else:
        learner.load(directory)


_FALL_BACK = (
    ": delete the checkpoint's directory to fall back to the previous checkpoint, or resume "
    "from another one"
)


def _checkpoints(root: Path) -> list[tuple[int, Path]]:
    """The complete checkpoints under `root`, oldest step first."""
    found = []
    for entry in root.iterdir():
        match = _STEP.fullmatch(entry.name)
        if match and _complete(entry):
            found.append((int(match.group(1)), entry))
    return sorted(found)


def _complete(path: Path) -> bool:
    # a step directory only ever appears by a rename after meta.json was written and fsynced
    return (path / "meta.json").is_file()


def _remove_leftovers(root: Path) -> None:
    for entry in root.iterdir():
        match = _LEFTOVER.fullmatch(entry.name)
        if match is None or pid_alive(int(match.group(3))):
            continue
        log.info("checkpoint: removing %s, left by an interrupted save", entry)
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: {path.parent} is not a complete checkpoint")
    value = _read(path, lambda: json.loads(path.read_text()))
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} is corrupt: not a JSON object{_FALL_BACK}")
    return value


def _read(path: Path, read: Callable[[], _T]) -> _T:
    try:
        return read()
    except Exception as e:  # json, torch and pickle each raise their own types
        raise CheckpointError(
            f"{path} is unreadable or corrupt ({type(e).__name__}: {e}){_FALL_BACK}"
        ) from e
