"""Pool directories left by killed processes are swept by the next pool started beside them."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from honing.config import SandboxConfig
from honing.sandbox import ExecRequest, SandboxPool
from honing.sandbox.pool import LEGACY_ROOT_MAX_AGE_S, sweep_stale_roots


@pytest.fixture
def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    assert not Path(f"/proc/{child.pid}").exists()
    return child.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    child = subprocess.Popen(["sleep", "60"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


def _root(parent: Path, name: str) -> Path:
    """A directory shaped like a pool's: cells, a compiled zygote, a workspace file."""
    root = parent / name
    (root / "cells" / "c0").mkdir(parents=True)
    (root / "zygote.pyc").write_bytes(b"x")
    (root / "workspaces" / "w").mkdir(parents=True)
    (root / "workspaces" / "w" / "sol.py").write_text("print(1)")
    return root


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_sweep_removes_dead_and_old_legacy_roots_and_keeps_the_rest(
    tmp_path: Path, dead_pid: int, live_pid: int
) -> None:
    dead = _root(tmp_path, f"honing-sandbox-{dead_pid}-ab12cd_3")
    live_child = _root(tmp_path, f"honing-sandbox-{live_pid}-ab12cd_3")
    live_self = _root(tmp_path, f"honing-sandbox-{os.getpid()}-zz99zz99")
    old_legacy = _root(tmp_path, "honing-sandbox-k2j4h6g8")
    _age(old_legacy, 2 * 24 * 3600)
    fresh_legacy = _root(tmp_path, "honing-sandbox-q1w2e3r4")
    other = _root(tmp_path, f"other-{dead_pid}-ab12cd_3")
    not_a_pid = _root(tmp_path, "honing-sandbox-12a-ab12cd_3")
    _age(not_a_pid, 2 * 24 * 3600)

    assert sweep_stale_roots(tmp_path, "honing-sandbox-") == 2

    assert not dead.exists() and not old_legacy.exists()
    for kept in (live_child, live_self, fresh_legacy, other, not_a_pid):
        assert (kept / "workspaces" / "w" / "sol.py").read_text() == "print(1)", kept
    assert sweep_stale_roots(tmp_path, "honing-sandbox-") == 0  # nothing left to sweep


def test_sweep_keeps_a_legacy_root_until_it_is_a_day_old(tmp_path: Path) -> None:
    legacy = _root(tmp_path, "pool-a1b2c3d4")
    _age(legacy, LEGACY_ROOT_MAX_AGE_S - 60)
    assert sweep_stale_roots(tmp_path, "pool-") == 0 and legacy.exists()
    _age(legacy, LEGACY_ROOT_MAX_AGE_S + 60)
    assert sweep_stale_roots(tmp_path, "pool-") == 1 and not legacy.exists()


def test_sweep_never_follows_a_symlink_named_like_a_dead_root(
    tmp_path: Path, dead_pid: int
) -> None:
    target = _root(tmp_path, "precious")
    link = tmp_path / f"pool-{dead_pid}-ab12cd_3"
    link.symlink_to(target)
    assert sweep_stale_roots(tmp_path, "pool-") == 0
    assert link.is_symlink()
    assert (target / "workspaces" / "w" / "sol.py").read_text() == "print(1)"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another uid needs root")
def test_sweep_leaves_another_users_dead_root_alone(tmp_path: Path, dead_pid: int) -> None:
    theirs = _root(tmp_path, f"pool-{dead_pid}-ab12cd_3")
    os.chown(theirs, 65534, 65534)
    assert sweep_stale_roots(tmp_path, "pool-") == 0 and theirs.exists()


async def test_starting_a_pool_sweeps_a_dead_pool_root_beside_its_own(
    make_config: Callable[..., SandboxConfig], tmp_path: Path, dead_pid: int
) -> None:
    planted = tmp_path / f"pool-{dead_pid}-abc"
    (planted / "cells").mkdir(parents=True)
    (planted / "zygote.pyc").write_bytes(b"x")
    with pytest.warns(UserWarning, match="isolation is 'none'"):
        pool = SandboxPool(make_config(isolation="none", pool_size=1, root=tmp_path))
        await pool.start()
    try:
        assert not planted.exists()
        assert pool.root.parent == tmp_path
        assert pool.root.name.startswith(f"pool-{os.getpid()}-")
        assert (await pool.run(ExecRequest(code="print('ok')"))).stdout == "ok\n"
    finally:
        await pool.close()
    assert list(tmp_path.iterdir()) == []
