"""The run's event log: one JSON object per line in `RUN_DIR/events.jsonl`, written by every layer.

    with EventLog(run_dir / "events.jsonl") as log, use(log):
        emit("phase", step=0, name="math")            # anywhere below, without wiring
    events = read_events(run_dir / "events.jsonl")    # [Event(t, kind, step, data), ...]
    truncate_events(path, step=4)                     # a resume from the step-4 checkpoint

A line is `{"t": <unix time>, "kind": "<kind>", "step": <int or null>, ...fields}`; the kinds and
their fields are in `KINDS` and docs/observability.md, with how writing survives a killed
process and what `use` and `emit` do. Not covered: what the events mean for a run (the trainer
loop emits them; `honing.report` reads them), metric sinks (`honing.observe.sinks`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from honing.errors import EventLogError

log = logging.getLogger(__name__)

# The kinds of events and what each carries (besides t, kind and step).
KINDS: dict[str, str] = {
    "run_start": "name, model, resumed, config, precision",
    "logprob_check": "tokens, max_abs_diff, mean_abs_diff, threshold, passed, engine, learner, "
    "mixed",
    "phase": "name",
    "episode": "split, set, task_id, domain, tags, sample, success, reward, components, risk, "
    "risks, ending, failure, detail, retries, generation_s, env_s, queue_s, total_s, turns, "
    "model_tokens, gen_s, step_s, tool_s, policy_version, staleness",
    "update": "phase, episodes, success_rate, reward_mean, infra_errors, rollout_s, update_s, "
    "sync_s, tokens_per_s, episodes_per_s, staleness, learner, signal, unaided_answers, risk",
    "retry": "task_id, attempt, stage, cause",
    "sync": "seconds, mode",
    "eval": "phase, set, success, passed, total, infra_failed, seconds, well_formed, mean_steps, "
    "recovery, risk_rate, risky",
    "validation": "as eval, of a validation set",
    "best": "validation, previous (checkpoint.keep_best: a new best checkpoint)",
    "sandbox_start": "memory, pids_cgroup, seccomp, isolation, missing, description",
    "sandbox": "cells, busy_fraction, queued, runs",
    "checkpoint": "path, seconds",
    "warning": "message",
    "alert": "name, state, severity, value, threshold, message",
    "run_end": "steps, elapsed_s, heldout_before, heldout_after, gains, line, exported_step",
}
RESERVED = frozenset({"t", "kind", "step"})


@dataclass(frozen=True)
class Event:
    """One line of the log."""

    t: float  # unix time
    kind: str
    step: int | None  # updates done when it happened (None: not tied to a step)
    data: dict[str, Any] = field(default_factory=dict)  # the kind's fields


Listener = Callable[[Event], None]


class EventLog:
    """Appends events to a JSONL file; thread-safe, flushed per line. A context manager.
    `listen(fn)`: `fn(event)` hears each event once it is written (the Prometheus exporter and
    the in-process alerts of honing.observe.prometheus / .alerts)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        """Call `listener(event)` after each event is written, in the emitting thread and
        outside the log's lock (a listener may emit). A listener that raises is logged with
        its traceback and the run goes on: monitoring never stops training."""
        self._listeners.append(listener)

    def emit(self, kind: str, step: int | None = None, **fields: Any) -> None:
        """Write one event now. `fields` must be JSON-serialisable (NaN/inf become null)."""
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r} (known: {', '.join(KINDS)})")
        clash = RESERVED & fields.keys()
        if clash:
            raise ValueError(f"event fields may not be named {sorted(clash)}")
        record = {"t": time.time(), "kind": kind, "step": step, **fields}
        line = json.dumps(_finite(record), allow_nan=False, default=_default) + "\n"
        with self._lock:
            if self._file is None:
                raise ValueError(f"{self.path}: the event log is closed")
            self._file.write(line)
            self._file.flush()
        if self._listeners:
            event = Event(t=record["t"], kind=kind, step=step, data=fields)
            for listener in list(self._listeners):
                try:
                    listener(event)
                except Exception:
                    log.exception("the event listener %r failed on the %s event", listener, kind)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @property
    def closed(self) -> bool:
        return self._file is None

    def __enter__(self) -> EventLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: they are written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "value") and isinstance(value.value, str):  # enums
        return value.value
    raise TypeError(f"an event field of type {type(value).__name__} is not JSON: {value!r}")


# -- the current log ---------------------------------------------------------------------------

_current: contextvars.ContextVar[EventLog | None] = contextvars.ContextVar(
    "honing_event_log", default=None
)


@contextlib.contextmanager
def use(log: EventLog | None) -> Iterator[EventLog | None]:
    """Make `log` the current event log inside the `with` block (None: none)."""
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)


def current() -> EventLog | None:
    """The current event log, if any."""
    return _current.get()


def emit(kind: str, step: int | None = None, **fields: Any) -> None:
    """Write an event to the current log; a no-op when there is none (or it is closed)."""
    log = _current.get()
    if log is not None and not log.closed:
        log.emit(kind, step, **fields)


# -- reading -----------------------------------------------------------------------------------


def read_events(path: Path) -> list[Event]:
    """Every event of the log at `path`, in order. A truncated last line (a killed writer) is
    skipped; a corrupt line before it raises EventLogError naming FILE:LINE."""
    return [event for _, event in _parse(Path(path))]


def _parse(path: Path) -> list[tuple[str, Event]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    complete = lines[-1] == ""  # every finished line ends with "\n"
    if complete:
        lines.pop()
    events: list[tuple[str, Event]] = []
    for number, line in enumerate(lines, start=1):
        last = number == len(lines)
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            events.append((line, _event(record)))
        except (ValueError, KeyError, TypeError) as exc:
            if last and not complete:
                break  # the writer was killed mid-line
            raise EventLogError(
                f"{path}:{number}: corrupt event line ({exc}); the log is append-only, so this "
                "line was edited or written by something else: fix or delete it"
            ) from exc
    return events


def _event(record: dict[str, Any]) -> Event:
    step = record.pop("step")
    if step is not None and not isinstance(step, int):
        raise ValueError(f"step {step!r} is not an integer")
    t, kind = float(record.pop("t")), record.pop("kind")
    if not isinstance(kind, str):
        raise ValueError(f"kind {kind!r} is not a string")
    return Event(t=t, kind=kind, step=step, data=record)


def truncate_events(path: Path, step: int | None) -> int:
    """Keep the events with `step` at most `step` (and those with no step); a torn last line
    goes too. `step=None` empties the log (a run started over). Returns the events dropped."""
    path = Path(path)
    if not path.exists():
        return 0
    events = _parse(path)
    kept = [line for line, e in events if step is not None and (e.step is None or e.step <= step)]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
    tmp.replace(path)
    return len(events) - len(kept)
