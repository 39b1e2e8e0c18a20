"""The one exception hierarchy of honing; * = infrastructure failure (retryable, never a reward).

HoningError                      base of every error honing raises on purpose
├── ConfigError                  a config value is wrong; the message names the key and the fix
├── SandboxError *               the sandbox failed; a failed program is an ExecResult instead
│   ├── SandboxUnavailable       isolation cannot be set up here (bubblewrap missing, …)
│   ├── CellCrashed              a cell died or stopped answering; the pool replaces it
│   ├── WorkspaceBusy            a workspace was touched while a run was using it
│   └── RuntimeBuildError        `honing sandbox runtime build` could not build a runtime
├── EngineError *                an inference engine failed (server down, bad reply, timeout)
├── WorkerLost *                 a remote worker (a Ray actor) died mid-call; retry elsewhere
├── DeadlineExceeded             a rollout deadline (setup, step, scoring, episode) passed
├── StoreError                   a trajectory store is missing, corrupted, or was asked bad SQL
├── CheckpointError              a checkpoint is missing, incomplete, corrupt, or does not fit
├── RemoteError                  a run's or an export's copy at a URL is unreachable or incomplete
├── ExportError                  a run cannot be exported as asked; the message says why
├── ServeError                   a model or adapter cannot be served as asked
└── EventLogError                a run's event log has a corrupt line (the message names it)
"""

from __future__ import annotations


class HoningError(Exception):
    """Base class of every error honing raises on purpose."""


class ConfigError(HoningError):
    """A configuration value is missing or invalid; the message names the key and the fix."""


class SandboxError(HoningError):
    """The sandbox machinery failed (as opposed to the program it executed)."""


class SandboxUnavailable(SandboxError):
    """Isolation cannot be set up on this machine; the message says how to fix it."""


class CellCrashed(SandboxError):
    """A sandbox cell died or stopped answering its protocol."""


class WorkspaceBusy(SandboxError):
    """A persistent workspace was read, written or restored while a run was using it."""


class RuntimeBuildError(SandboxError):
    """A named runtime could not be built."""


class EngineError(HoningError):
    """An inference engine failed: a server refused or timed out, or answered something unusable."""


class WorkerLost(HoningError):
    """A remote worker died while it held a call; the call may be retried on another worker."""


class DeadlineExceeded(HoningError):
    """A rollout deadline passed; `stage` names which one (setup, generate, step, scoring,
    episode)."""

    def __init__(self, stage: str, seconds: float) -> None:
        super().__init__(f"{stage} deadline of {seconds:g}s exceeded")
        self.stage = stage
        self.seconds = seconds

    def __reduce__(self) -> tuple[type[DeadlineExceeded], tuple[str, float]]:
        return type(self), (self.stage, self.seconds)  # so it crosses process boundaries (Ray)


class StoreError(HoningError):
    """A trajectory store is missing or corrupted (the message names the file), or a query
    against it failed (the message lists the views and their columns)."""


class CheckpointError(HoningError):
    """A training checkpoint is missing, incomplete or corrupt, or was saved with a learner config
    that differs from the one loading it; the message names the file or the differing keys and
    what to do."""


class EventLogError(HoningError):
    """A run's event log (`events.jsonl`) has a corrupt line before its last; the message names
    FILE:LINE."""


class RemoteError(HoningError):
    """A copy at an fsspec URL (a run's mirror, an export) cannot be read or written, or is not
    a complete commit; the message names the URL and what to do."""


class ExportError(HoningError):
    """A run cannot be exported as asked (`honing export`): not a run directory, no checkpoint
    yet, an output directory that is not empty, an option that does not apply; the message says
    what to do."""


class ServeError(HoningError):
    """A model or LoRA adapter cannot be served as asked (`honing serve`): an unreadable or
    unsupported adapter; the message names the file and the feature."""
