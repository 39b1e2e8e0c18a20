"""Pool directories left by killed processes are swept by the next pool started beside them, and
a live pool's directory never is, whatever pid namespace either pool runs in."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from honing.config import SandboxConfig
from honing.sandbox import ExecRequest, SandboxPool
from honing.sandbox.pool import LEGACY_ROOT_MAX_AGE_S, OWNER_LOCK, sweep_stale_roots

# A pool in its own process: it runs one job and prints its root and the job's output; with
# "hold" it then forks a child that never execs (as a fork-started worker would), prints that
# child's pid and waits to be killed.
POOL_PROCESS = textwrap.dedent("""
    import asyncio, os, sys, time
    from pathlib import Path
    from honing.config import SandboxConfig
    from honing.sandbox import ExecRequest, SandboxPool

    async def main(parent: str, isolation: str, mode: str) -> None:
        config = SandboxConfig(pool_size=1, timeout_s=10.0, root=Path(parent), isolation=isolation)
        async with SandboxPool(config) as pool:
            result = await pool.run(ExecRequest(code="print('inner')"))
            print(pool.root, result.stdout.strip(), flush=True)
            if mode == "hold":
                child = os.fork()
                if child == 0:
                    time.sleep(600)
                    os._exit(0)
                print(child, flush=True)
                await asyncio.sleep(600)

    asyncio.run(main(*sys.argv[1:]))
""")


def _unshare_works() -> bool:
    try:
        probe = ["unshare", "--pid", "--fork", "--mount-proc", "true"]
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_unshare = pytest.mark.skipif(
    not _unshare_works(), reason="`unshare --pid` needs root (or user namespaces) and util-linux"
)


def _pool_process(
    parent: Path, isolation: str, mode: str, new_pid_namespace: bool
) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", POOL_PROCESS, str(parent), isolation, mode]
    if new_pid_namespace:
        argv = ["unshare", "--pid", "--fork", "--mount-proc", *argv]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip


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


def _root(parent: Path, name: str, lock: bool = False) -> Path:
    """A directory shaped like a pool's: cells, a compiled zygote, a workspace file; with `lock`
    the owner's lock file of this honing's pools (held by nobody)."""
    root = parent / name
    (root / "cells" / "c0").mkdir(parents=True)
    (root / "zygote.pyc").write_bytes(b"x")
    (root / "workspaces" / "w").mkdir(parents=True)
    (root / "workspaces" / "w" / "sol.py").write_text("print(1)")
    if lock:
        (root / OWNER_LOCK).touch()
    return root


@contextlib.contextmanager
def _held(root: Path) -> Iterator[None]:
    """The root's lock held by an open file description of this process, as a live pool's."""
    fd = os.open(root / OWNER_LOCK, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _intact(root: Path) -> bool:
    return (root / "workspaces" / "w" / "sol.py").read_text() == "print(1)"


def test_a_held_lock_keeps_a_root_whatever_pid_its_name_carries(
    tmp_path: Path, dead_pid: int
) -> None:
    # the pid in the name is of no process here: a pool of another pid namespace looks like this
    live = _root(tmp_path, f"pool-{dead_pid}-ab12cd_3", lock=True)
    _age(live, 2 * LEGACY_ROOT_MAX_AGE_S)
    with _held(live):
        assert sweep_stale_roots(tmp_path, "pool-") == 0
    assert _intact(live)


def test_an_unheld_lock_marks_a_dead_pool_even_if_its_pid_is_in_use(
    tmp_path: Path, live_pid: int
) -> None:
    # the pid in the name is in use (pid reuse, or a pool of another namespace that died)
    dead = _root(tmp_path, f"pool-{live_pid}-ab12cd_3", lock=True)
    assert sweep_stale_roots(tmp_path, "pool-") == 1
    assert not dead.exists()


def test_sweep_without_a_lock_file_needs_age_and_never_trusts_a_pid_alone(
    tmp_path: Path, dead_pid: int, live_pid: int
) -> None:
    """Roots of older honing (no lock file) go once a day old, and then only if the pid in
    their name is of no process here; other names and other prefixes are never touched."""
    old_dead = _root(tmp_path, f"honing-sandbox-{dead_pid}-ab12cd_3")
    _age(old_dead, 2 * 24 * 3600)
    fresh_dead = _root(tmp_path, f"honing-sandbox-{dead_pid}-cd34ef_5")  # maybe another pid ns
    old_live = _root(tmp_path, f"honing-sandbox-{live_pid}-ab12cd_3")
    _age(old_live, 2 * 24 * 3600)
    live_self = _root(tmp_path, f"honing-sandbox-{os.getpid()}-zz99zz99")
    old_legacy = _root(tmp_path, "honing-sandbox-k2j4h6g8")
    _age(old_legacy, 2 * 24 * 3600)
    fresh_legacy = _root(tmp_path, "honing-sandbox-q1w2e3r4")
    other = _root(tmp_path, f"other-{dead_pid}-ab12cd_3", lock=True)
    not_a_pid = _root(tmp_path, "honing-sandbox-12a-ab12cd_3")
    _age(not_a_pid, 2 * 24 * 3600)

    assert sweep_stale_roots(tmp_path, "honing-sandbox-") == 2

    assert not old_dead.exists() and not old_legacy.exists()
    for kept in (fresh_dead, old_live, live_self, fresh_legacy, other, not_a_pid):
        assert _intact(kept), kept
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
    target = _root(tmp_path, "precious", lock=True)
    _age(target, 2 * LEGACY_ROOT_MAX_AGE_S)
    link = tmp_path / f"pool-{dead_pid}-ab12cd_3"
    link.symlink_to(target)
    assert sweep_stale_roots(tmp_path, "pool-") == 0
    assert link.is_symlink() and _intact(target)


def test_sweep_never_follows_a_symlinked_lock_file(tmp_path: Path, dead_pid: int) -> None:
    root = _root(tmp_path, f"pool-{dead_pid}-ab12cd_3")
    (root / OWNER_LOCK).symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").touch()
    assert sweep_stale_roots(tmp_path, "pool-") == 0 and _intact(root)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another uid needs root")
def test_sweep_leaves_another_users_dead_root_alone(tmp_path: Path, dead_pid: int) -> None:
    theirs = _root(tmp_path, f"pool-{dead_pid}-ab12cd_3", lock=True)
    os.chown(theirs, 65534, 65534)
    assert sweep_stale_roots(tmp_path, "pool-") == 0 and theirs.exists()


async def test_starting_a_pool_sweeps_a_dead_pool_root_beside_its_own(
    make_config: Callable[..., SandboxConfig], tmp_path: Path, dead_pid: int
) -> None:
    planted = _root(tmp_path, f"pool-{dead_pid}-abc", lock=True)
    with pytest.warns(UserWarning, match="isolation is 'none'"):
        pool = SandboxPool(make_config(isolation="none", pool_size=1, root=tmp_path))
        await pool.start()
    try:
        assert not planted.exists()
        assert pool.root.parent == tmp_path
        assert pool.root.name.startswith(f"pool-{os.getpid()}-")
        assert (pool.root / OWNER_LOCK).is_file()
        assert (await pool.run(ExecRequest(code="print('ok')"))).stdout == "ok\n"
    finally:
        await pool.close()
    assert list(tmp_path.iterdir()) == []


def _lock_holders(root: Path) -> set[int]:
    """The pids (of this pid namespace) of the processes with `root`'s lock file open."""
    lock = os.stat(root / OWNER_LOCK)
    holders = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            for fd in fd_dir.iterdir():
                st = os.stat(fd)  # through the link: the file, in whatever mount namespace
                if (st.st_dev, st.st_ino) == (lock.st_dev, lock.st_ino):
                    holders.add(int(fd_dir.parent.name))
    return holders


@needs_unshare
async def test_a_pool_in_another_pid_namespace_leaves_a_live_pool_alone(
    make_config: Callable[..., SandboxConfig], tmp_path: Path
) -> None:
    async with SandboxPool(make_config(pool_size=1, root=tmp_path)) as pool:
        assert (await pool.run(ExecRequest(code="print('before')"))).stdout == "before\n"
        assert _lock_holders(pool.root) == {os.getpid()}  # not its cells: no fd leaks into them

        # There this process's pid is of no process: the old pid rule swept this pool's root.
        other = _pool_process(tmp_path, pool.config.isolation, "once", new_pid_namespace=True)
        out, err = other.communicate(timeout=120)
        assert other.returncode == 0, err
        other_root, inner = out.split()
        assert inner == "inner" and Path(other_root).parent == tmp_path
        assert not Path(other_root).exists()  # it removed its own root when it closed

        assert (pool.root / OWNER_LOCK).is_file()
        result = await pool.run(ExecRequest(code="print('after')"))
        assert result.stdout == "after\n", result
        ws = pool.workspace()
        ws.write("kept.txt", "yes")
        assert ws.read("kept.txt") == b"yes"


def _wait_until_dead(pid: int, timeout_s: float = 30.0) -> None:
    """Until every thread of `pid` has exited (gone, or a zombie leader with no thread left).

    The leader of a killed process can be a zombie while its other threads are still exiting,
    and the last of them closes the files (the pool's lock among them): the leader's state
    alone says too early that the lock is free."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            threads = os.listdir(f"/proc/{pid}/task")
        except (OSError, IndexError):
            return
        if state in ("Z", "X") and threads == [str(pid)]:
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} still running {timeout_s} s after SIGKILL")


@pytest.mark.parametrize("new_pid_namespace", [False, True], ids=["same-pidns", "other-pidns"])
def test_a_killed_pools_root_is_swept_even_while_its_forked_child_lives(
    tmp_path: Path, new_pid_namespace: bool
) -> None:
    """SIGKILL leaves the root behind; the kernel drops the lock with the pool's process, and
    a child it forked without exec does not keep it. A pool of another pid namespace names its
    root with a pid (1) that exists here too: the old pid rule kept that root forever."""
    if new_pid_namespace and not _unshare_works():
        pytest.skip("`unshare --pid` needs root (or user namespaces) and util-linux")
    proc = _pool_process(tmp_path, "none", "hold", new_pid_namespace)
    forked = 0
    try:
        assert proc.stdout is not None
        root = Path(proc.stdout.readline().split()[0])
        forked = int(proc.stdout.readline())
        assert root.is_dir() and (root / OWNER_LOCK).is_file()
        assert sweep_stale_roots(tmp_path, "pool-") == 0  # alive: kept
        if new_pid_namespace:
            (pool_pid,) = map(
                int, Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            )
            os.killpg(proc.pid, signal.SIGKILL)  # unshare and the namespace's pid 1: all of it
            _wait_until_dead(pool_pid)  # unshare is reaped first; its child may still be exiting
        else:
            os.kill(proc.pid, signal.SIGKILL)  # the pool's process only: its forked child lives
            proc.wait(timeout=30)
            assert Path(f"/proc/{forked}").exists()
        assert sweep_stale_roots(tmp_path, "pool-") == 1
        assert not root.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if forked and not new_pid_namespace:
            with contextlib.suppress(ProcessLookupError):
                os.kill(forked, signal.SIGKILL)
