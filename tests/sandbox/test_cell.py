"""How the host reads a cell's replies: a JSON line, then the job's raw stdout and stderr. A
reply cut short, or with sizes that are not sizes, is a crashed cell, never a result."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from honing.errors import CellCrashed
from honing.sandbox.cell import Cell
from honing.sandbox.launch import Launcher


class FakeProcess:
    """What `Cell` uses of a cell's process: its stdout, and being killed."""

    def __init__(self, data: bytes) -> None:
        self.stdout = asyncio.StreamReader()
        self.stdout.feed_data(data)
        self.stdout.feed_eof()
        self.returncode: int | None = None

    def kill(self) -> None:
        self.returncode = -9

    async def wait(self) -> int:
        return -9


def cell_replying(tmp_path: Path, data: bytes) -> Cell:
    cell = Cell("cell-test", tmp_path, Launcher("none", 16), None)
    cell._proc = FakeProcess(data)  # type: ignore[assignment]
    return cell


def reply(header: dict[str, Any], streams: bytes = b"") -> bytes:
    return json.dumps(header).encode() + b"\n" + streams


async def test_the_streams_follow_the_line_raw(tmp_path: Path) -> None:
    out, err = "naïve\n".encode(), b"bad byte \xff\n"
    data = reply({"exit_code": 0, "stdout_bytes": len(out), "stderr_bytes": len(err)}, out + err)
    cell = cell_replying(tmp_path, data + reply({"exit_code": 3}))
    first = await cell._read_reply(5.0)
    assert first == {"exit_code": 0, "stdout": "naïve\n", "stderr": "bad byte \ufffd\n"}
    assert await cell._read_reply(5.0) == {"exit_code": 3, "stdout": "", "stderr": ""}


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (reply({"exit_code": 0, "stdout_bytes": 10, "stderr_bytes": 0}, b"short"), "exited"),
        (reply({"exit_code": 0, "stdout_bytes": -1, "stderr_bytes": 0}), "malformed"),
        (reply({"exit_code": 0, "stdout_bytes": "1", "stderr_bytes": 0}, b"x"), "malformed"),
        (reply([1, 2]), "malformed"),  # type: ignore[arg-type]
        (b"{not json\n", "malformed"),
        (b"", "exited"),
    ],
)
async def test_a_broken_reply_is_a_crashed_cell(tmp_path: Path, data: bytes, why: str) -> None:
    cell = cell_replying(tmp_path, data)
    with pytest.raises(CellCrashed, match=why):
        await cell._read_reply(5.0)
    assert cell._proc is not None and cell._proc.returncode is not None  # killed
