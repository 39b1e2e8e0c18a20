"""The event log: the line format, reading back (torn last line, corrupt middle line), truncation
for a resume, the contextvar-current log, listeners, and concurrent writers."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from pathlib import Path

import pytest

from honing.errors import EventLogError
from honing.observe.events import (
    Event,
    EventLog,
    current,
    emit,
    read_events,
    truncate_events,
    use,
)


def test_each_event_is_one_json_line_in_the_spec_format(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        log.emit("phase", step=0, name="math")
        log.emit("warning", message="inf reward", value=math.inf)
        log.emit("sync", step=3, seconds=0.5, mode="in_process")
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    first = json.loads(lines[0])
    assert list(first)[:3] == ["t", "kind", "step"]
    assert first["kind"] == "phase" and first["step"] == 0 and first["name"] == "math"
    assert json.loads(lines[1])["step"] is None and json.loads(lines[1])["value"] is None
    events = read_events(path)
    assert [(e.kind, e.step) for e in events] == [("phase", 0), ("warning", None), ("sync", 3)]
    assert events[2].data == {"seconds": 0.5, "mode": "in_process"}
    assert events[0].t <= events[2].t


def test_unknown_kinds_and_reserved_fields_are_refused(tmp_path: Path) -> None:
    with EventLog(tmp_path / "e.jsonl") as log:
        with pytest.raises(ValueError, match="unknown event kind 'phaze'"):
            log.emit("phaze", name="x")
        with pytest.raises(ValueError, match="may not be named"):
            fields: dict[str, object] = {"t": 1.0}
            log.emit("phase", None, **fields)
    with pytest.raises(ValueError, match="closed"):
        log.emit("phase", name="x")


def test_listeners_hear_each_written_event_may_emit_and_may_not_stop_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[tuple[str, int | None, dict[str, object]]] = []

    def echo(event: Event) -> None:
        heard.append((event.kind, event.step, event.data))
        if event.kind == "update":  # a listener may emit (the alerts do)
            emit("alert", event.step, name="X", state="firing")

    def broken(event: Event) -> None:
        raise RuntimeError("a monitoring bug")

    path = tmp_path / "events.jsonl"
    with EventLog(path) as log, use(log):
        log.listen(broken)
        log.listen(echo)
        emit("update", 2, episodes=4)
    assert heard == [("update", 2, {"episodes": 4}), ("alert", 2, {"name": "X", "state": "firing"})]
    assert [e.kind for e in read_events(path)] == ["update", "alert"]
    assert "a monitoring bug" in caplog.text and "failed on the update event" in caplog.text


def test_a_torn_last_line_is_skipped_and_a_corrupt_middle_line_names_file_and_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        log.emit("phase", step=0, name="a")
        log.emit("phase", step=1, name="b")
    with path.open("a") as f:
        f.write('{"t": 1.0, "kind": "upda')  # killed mid-write
    assert [e.data["name"] for e in read_events(path)] == ["a", "b"]

    lines = path.read_text().splitlines()
    lines[1] = lines[1][:-5]  # a corrupt line with more after it
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(EventLogError, match=rf"{path}:2: corrupt event line"):
        read_events(path)


def test_truncate_keeps_events_up_to_the_checkpoint_and_those_without_a_step(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        for step in range(5):
            log.emit("update", step=step, episodes=step)
        log.emit("warning", message="no step")
    with path.open("a") as f:
        f.write('{"t": 1.0, "ki')
    before = path.read_text().splitlines()
    assert truncate_events(path, 2) == 2  # steps 3 and 4 (the torn line is not an event)
    events = read_events(path)
    assert [e.step for e in events] == [0, 1, 2, None]
    assert path.read_text().splitlines() == [before[0], before[1], before[2], before[5]]
    assert truncate_events(path, None) == 4  # a run started over
    assert path.read_text() == ""
    assert truncate_events(tmp_path / "missing.jsonl", 3) == 0


async def test_emit_goes_to_the_current_log_including_tasks_started_inside(
    tmp_path: Path,
) -> None:
    emit("phase", step=0, name="nowhere")  # no current log: nothing happens
    path = tmp_path / "events.jsonl"

    async def layer_below(i: int) -> None:
        await asyncio.sleep(0)
        emit("sync", step=i, seconds=0.1 * i, mode="test")

    with EventLog(path) as log, use(log):
        assert current() is log
        await asyncio.gather(*(layer_below(i) for i in range(4)))
    assert current() is None
    emit("phase", step=0, name="after")  # the log is no longer current
    assert sorted(e.step or 0 for e in read_events(path)) == [0, 1, 2, 3]


def test_concurrent_threads_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    big = "x" * 5000  # longer than one buffered write

    def writer(n: int, log: EventLog) -> None:
        for i in range(50):
            log.emit("warning", step=i, message=f"{n}:{big}")

    with EventLog(path) as log:
        threads = [threading.Thread(target=writer, args=(n, log)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = read_events(path)
    assert len(events) == 200
    assert sorted({e.data["message"].split(":")[0] for e in events}) == ["0", "1", "2", "3"]
