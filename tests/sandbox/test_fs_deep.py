"""Workspaces a job nested deeper than Python's recursion limit, and than a path can name: the
host removes them whole, reads what it can and refuses to copy what it cannot, and never raises
RecursionError (`honing.sandbox.fs` walks without recursion, removal with one descriptor at a
time). shutil.rmtree recursed: such a tree stayed in /tmp, and later pools failed to start."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from honing.sandbox import ExecRequest, ExecStatus, SandboxPool, fs

DEPTH = 3000  # past the recursion limit (1,000) and past PATH_MAX (4,096 bytes at "d/" a level)


def nest(root: Path, depth: int = DEPTH) -> None:
    """`depth` directories `d` below `root`, a file, a link and an unreadable directory along
    the way, made with descriptors (no path is ever that long)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(depth):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        if level % 1000 == 0:
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=inner))
            os.symlink("/etc/passwd", "link", dir_fd=inner)
        os.close(fd)
        fd = inner
    os.chmod(f"/proc/self/fd/{fd}", 0)  # the deepest one, unreadable
    os.close(fd)


def test_a_tree_past_the_recursion_limit_is_wiped_read_and_refused_a_copy(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    nest(root)
    (root / "top.txt").write_text("top")
    found = fs.read_files(root, ["*"], max_bytes=100)
    assert found["top.txt"] == b"top" and found["d/f"] == b""
    assert all(not name.endswith("link") for name in found)  # links are never read
    with pytest.raises(OSError) as refused:
        fs.copy_tree(root, tmp_path / "copy")
    assert refused.value.errno == errno.ENAMETOOLONG
    fs.wipe(root)
    assert os.listdir(root) == []
    fs.wipe(tmp_path / "copy")  # the part that was copied goes the same way
    assert os.listdir(tmp_path / "copy") == []


@pytest.mark.asyncio
async def test_a_job_that_nests_its_workspace_leaves_nothing_behind(pool: SandboxPool) -> None:
    ws = pool.workspace()
    program = (
        "import os\nos.mkdir('x')\nfor _ in range(2000):\n    os.mkdir('t')\n"
        "    os.rename('x', 't/d')\n    os.rename('t', 'x')\n"
    )  # 2,000 levels in O(1) steps each: a rename
    made = await pool.run(ExecRequest(code=program, workspace=ws.id, timeout_s=20.0))
    assert made.status is ExecStatus.OK, made
    where = ws.path
    assert (where / "x" / "d" / "d").is_dir()
    after = await pool.run(ExecRequest(code="print(1)", workspace=ws.id))
    assert after.status is ExecStatus.OK and after.stdout == "1\n"
    pool.drop_workspace(ws.id)
    assert not where.exists()
    again = await pool.run(ExecRequest(code="print(2)"))
    assert again.stdout == "2\n"
