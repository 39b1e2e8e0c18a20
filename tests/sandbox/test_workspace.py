"""Persistent workspaces: runs that share files, snapshots and restores, hostile entries.

A job controls everything in its workspace, symlinks and FIFOs included; the host must never read
or write through them, and must never block on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from honing.errors import WorkspaceBusy
from honing.sandbox import ExecRequest, ExecStatus, SandboxPool, Workspace
from honing.sandbox.cgroups import _own_v1_path


def code(src: str) -> str:
    return textwrap.dedent(src).lstrip("\n")


def tree(ws: Workspace) -> dict[str, bytes | str]:
    """The workspace as the host sees it, read without `Workspace.read` and without following
    links: {relpath: bytes of a regular file | 'link -> target' | 'dir'}."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(ws.path):
        rel_dir = os.path.relpath(dirpath, ws.path)
        for name in [*dirnames, *filenames]:
            full = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else os.path.join(rel_dir, name)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = f"link -> {os.readlink(full)}"
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            elif stat.S_ISREG(st.st_mode):
                out[rel] = Path(full).read_bytes()
            else:
                out[rel] = "special"
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return out


async def test_files_persist_across_runs(pool: SandboxPool) -> None:
    ws = pool.workspace()
    ws.write("counter.txt", "0")
    bump = "n = int(open('counter.txt').read()); open('counter.txt', 'w').write(str(n + 1))"
    for _ in range(3):
        result = await pool.run(ExecRequest(code=bump, workspace=ws.id))
        assert result.status is ExecStatus.OK, result
    assert tree(ws) == {"counter.txt": b"3"}
    other = await pool.run(ExecRequest(code="import os; print(os.listdir('.'))"))
    assert other.stdout == "[]\n"  # a run without the workspace does not see it


async def test_workspace_read_and_files(pool: SandboxPool) -> None:
    ws = pool.workspace()
    ws.write("a.txt", "alpha")
    ws.write("sub/b.bin", b"\x00\x01")
    assert ws.read("a.txt") == b"alpha"
    assert ws.files() == {"a.txt": b"alpha", "sub/b.bin": b"\x00\x01"}
    with pytest.raises(FileNotFoundError):
        ws.read("missing.txt")


async def test_snapshot_restore_round_trip(pool: SandboxPool) -> None:
    ws = pool.workspace()
    ws.write("keep.txt", "original keep")
    ws.write("sub/delete-me.txt", "original sub")
    ws.write("sub/deeper/x.bin", b"\x00\xff")
    original = tree(ws)
    snap = ws.snapshot()
    program = code(
        """
        import os, shutil
        open("keep.txt", "w").write("modified")
        os.remove("sub/delete-me.txt")
        shutil.rmtree("sub/deeper")
        open("new.txt", "w").write("new file")
        os.chmod("sub", 0o000)  # even an unreadable directory must be restorable
        """
    )
    result = await pool.run(ExecRequest(code=program, workspace=ws.id))
    assert result.status is ExecStatus.OK, result
    os.chmod(ws.path / "sub", 0o755)
    assert tree(ws) == {"keep.txt": b"modified", "new.txt": b"new file", "sub": "dir"}
    os.chmod(ws.path / "sub", 0o000)
    ws.restore(snap)
    assert tree(ws) == original
    check = await pool.run(
        ExecRequest(
            code="import os; print(open('keep.txt').read(), sorted(os.listdir('sub')))",
            workspace=ws.id,
        )
    )
    assert check.stdout == "original keep ['deeper', 'delete-me.txt']\n", check
    ws.restore(snap)  # a snapshot can be restored more than once
    assert tree(ws) == original


async def test_several_snapshots(pool: SandboxPool) -> None:
    ws = pool.workspace()
    ws.write("v.txt", "1")
    first = ws.snapshot()
    await pool.run(ExecRequest(code="open('v.txt', 'w').write('2')", workspace=ws.id))
    second = ws.snapshot()
    await pool.run(ExecRequest(code="import os; os.remove('v.txt')", workspace=ws.id))
    assert tree(ws) == {}
    ws.restore(first)
    assert tree(ws) == {"v.txt": b"1"}
    ws.restore(second)
    assert tree(ws) == {"v.txt": b"2"}
    with pytest.raises(KeyError, match="no snapshot"):
        ws.restore("not-a-snapshot")
    assert tree(ws) == {"v.txt": b"2"}  # a failed restore leaves the workspace alone


async def test_workspace_symlinks_never_reach_host_files(
    pool: SandboxPool, tmp_path: Path, token: str
) -> None:
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    secret = host_dir / "secret.txt"
    secret.write_text(f"host secret {token}\n")
    before = secret.read_bytes()
    ws = pool.workspace()
    plant = code(
        """
        import os, sys
        secret, host_dir = sys.argv[1], sys.argv[2]
        os.symlink(secret, "link.txt")          # absolute: a host path
        os.symlink(host_dir, "linkdir")
        os.symlink("../../../..", "up")         # relative: climbs out of the host workspace
        os.makedirs("sub")
        os.symlink(secret, "sub/deep.txt")
        print("planted")
        """
    )
    result = await pool.run(
        ExecRequest(code=plant, argv=[str(secret), str(host_dir)], workspace=ws.id)
    )
    assert result.status is ExecStatus.OK and result.stdout == "planted\n", result
    assert os.path.islink(ws.path / "link.txt")

    # The host's own workspace API does not follow them, for reading or writing.
    with contextlib.suppress(OSError, ValueError, MemoryError):
        assert token.encode() not in ws.read("link.txt")
    with contextlib.suppress(OSError, ValueError, MemoryError):
        assert all(token.encode() not in v for v in ws.files().values())
    for target in ("link.txt", "sub/deep.txt", "linkdir/written.txt", "up/written.txt"):
        with contextlib.suppress(OSError, ValueError):
            ws.write(target, "PWNED")
    assert secret.read_bytes() == before
    assert sorted(p.name for p in host_dir.iterdir()) == ["secret.txt"]
    assert not list(tmp_path.rglob("written.txt"))
    # A write to the link's own path replaces the link, inside the workspace.
    assert not os.path.islink(ws.path / "link.txt")
    assert ws.read("link.txt") == b"PWNED"

    # Nor do runs: files given with the request, output files collected after it.
    relink = "import os, sys; os.symlink(sys.argv[1], 'link.txt')"
    for files in ({"link.txt": "PWNED"}, {"linkdir/x.txt": "PWNED"}, {"up/x.txt": "PWNED"}):
        (ws.path / "link.txt").unlink()
        replant = await pool.run(ExecRequest(code=relink, argv=[str(secret)], workspace=ws.id))
        assert replant.status is ExecStatus.OK, replant
        try:  # refused (ValueError), or honoured inside the workspace only
            result = await pool.run(ExecRequest(code="print('run')", files=files, workspace=ws.id))
        except ValueError:
            continue
        written = ws.path / next(iter(files))
        assert written.is_file() and not written.is_symlink(), (files, result)
    assert secret.read_bytes() == before
    assert sorted(p.name for p in host_dir.iterdir()) == ["secret.txt"]
    (ws.path / "link.txt").unlink()
    replant = await pool.run(ExecRequest(code=relink, argv=[str(secret)], workspace=ws.id))
    assert replant.status is ExecStatus.OK, replant
    result = await pool.run(
        ExecRequest(
            code="print(open('link.txt').read())",
            output_files=["*", "linkdir/*", "up/*", "sub/*"],
            workspace=ws.id,
        )
    )
    assert result.status is ExecStatus.ERROR  # inside, the link points at nothing
    assert token not in result.stdout + result.stderr
    assert all(token.encode() not in v for v in result.files.values())
    assert "link.txt" not in result.files  # a link is never read as an output file
    assert result.files.get("sub/deep.txt") == b"PWNED"  # the host's write replaced that link

    # Snapshots keep links as links, and restoring writes nothing through them.
    snap = ws.snapshot()
    ws.restore(snap)
    assert os.path.islink(ws.path / "link.txt") and os.path.islink(ws.path / "linkdir")
    assert secret.read_bytes() == before
    assert sorted(p.name for p in host_dir.iterdir()) == ["secret.txt"]
    # And the planted links are gone from the cell after the run: a fresh run sees nothing.
    fresh = await pool.run_many([ExecRequest(code="import os; print(os.listdir('.'))")] * 2)
    assert [r.stdout for r in fresh] == ["[]\n", "[]\n"]


async def test_output_files_do_not_follow_symlinks(
    pool: SandboxPool, tmp_path: Path, token: str
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(f"host secret {token}\n")
    program = code(
        """
        import os, sys
        os.symlink(sys.argv[1], "leak.txt")
        os.symlink(os.path.dirname(sys.argv[1]), "leakdir")
        os.symlink("/etc", "etc")
        open("real.txt", "w").write("real")
        """
    )
    result = await pool.run(
        ExecRequest(code=program, argv=[str(secret)], output_files=["*", "leakdir/*", "etc/*"])
    )
    assert result.status is ExecStatus.OK, result
    assert result.files == {"real.txt": b"real"}


# A FIFO among the output files: opening it for reading blocks until a writer comes, and every
# process of the job is dead by then. These run in a child process so a hang cannot take the
# test session down with it.
FIFO_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from honing.sandbox import ExecRequest, SandboxConfig, SandboxPool

    async def main(mode, root):
        cfg = SandboxConfig(pool_size=1, root=root)
        async with SandboxPool(cfg) as pool:
            make = "import os; os.mkfifo('out.txt'); open('real.txt', 'w').write('r')"
            if mode == "output_files":
                r = await pool.run(ExecRequest(code=make, output_files=["*.txt"]))
                print(json.dumps({"status": r.status.value, "files": sorted(r.files)}))
            else:
                ws = pool.workspace()
                make = "import os; os.mkfifo('out.txt')"
                r = await pool.run(ExecRequest(code=make, workspace=ws.id))
                try:
                    files = sorted(ws.files())
                except Exception as exc:
                    files = type(exc).__name__
                print(json.dumps({"status": r.status.value, "files": files}))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def _cleanup_cgroups_of(pid: int) -> None:
    """Best effort: remove the cgroups a killed child's pool left behind, once its cells (which
    die with their parent) have left them."""
    deadline = time.monotonic() + 10
    for controller in ("memory", "pids"):
        base = _own_v1_path(controller)
        if base is None:
            continue
        for group in base.glob(f"honing-{pid}-*"):
            for cell in [c for c in group.iterdir() if c.is_dir()]:
                while (cell / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
                    time.sleep(0.05)
                with contextlib.suppress(OSError):
                    cell.rmdir()
            with contextlib.suppress(OSError):
                group.rmdir()


def _run_fifo_script(mode: str, tmp_path: Path) -> dict[str, object]:
    proc = subprocess.Popen(
        [sys.executable, "-c", FIFO_SCRIPT, mode, str(tmp_path / "pools")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        out = None
        proc.kill()
        proc.communicate()
        _cleanup_cgroups_of(proc.pid)
    if out is None:
        pytest.fail(f"the host hung on a FIFO the job left in its workspace ({mode})")
    assert proc.returncode == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def test_fifo_in_output_files_does_not_hang_the_host(make_config, tmp_path: Path) -> None:
    make_config()  # skips without bubblewrap
    seen = _run_fifo_script("output_files", tmp_path)
    assert seen == {"status": "ok", "files": ["real.txt"]}


def test_fifo_in_a_persistent_workspace_does_not_hang_the_host(make_config, tmp_path: Path) -> None:
    make_config()
    seen = _run_fifo_script("workspace", tmp_path)
    assert seen == {"status": "ok", "files": []}  # a FIFO is not a regular file


def test_workspace_paths_must_stay_inside(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "root", "w1")
    for bad in ("/etc/passwd", "../escape.txt", "a/../../escape.txt", ""):
        with pytest.raises(ValueError):
            ws.write(bad, "x")
    assert not (tmp_path / "root" / "workspaces" / "escape.txt").exists()
    assert not (tmp_path / "root" / "escape.txt").exists()
    ws.write("ok/inside.txt", "fine")
    assert (ws.path / "ok" / "inside.txt").read_text() == "fine"


async def test_workspace_is_untouchable_while_a_run_uses_it(pool: SandboxPool) -> None:
    ws = pool.workspace()
    ws.write("keep.txt", "kept")
    running = asyncio.ensure_future(
        pool.run(ExecRequest(code="import time; time.sleep(0.5)", workspace=ws.id))
    )
    while not ws.lock.locked():
        await asyncio.sleep(0.01)
    for touch in (ws.snapshot, ws.files, lambda: ws.read("keep.txt"), lambda: ws.write("x", "")):
        with pytest.raises(WorkspaceBusy):
            touch()
    assert (await running).status is ExecStatus.OK
    assert ws.read("keep.txt") == b"kept"  # back after the run
