"""Host-side file handling for cell workspaces, written so a hostile job cannot steer it.

A job controls everything in its workspace, symlinks included. The host therefore never follows a
symlink it finds there: input files are written only below the workspace's real path and opened
with O_NOFOLLOW, output files are read only when they are regular files (opened non-blocking, so a
FIFO cannot hang the host), and moving, copying or deleting entries acts on the entries
themselves, never on what a link points to; snapshots copy regular files, directories and links
and leave out FIFOs, sockets and device nodes.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import stat
from pathlib import Path


def wipe(directory: Path) -> None:
    """Remove everything inside `directory`, even entries the job made unreadable."""
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            _rmtree(Path(entry.path))
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def _rmtree(path: Path) -> None:
    def fix_and_retry(func, p, _exc):  # type: ignore[no-untyped-def]
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            if not os.path.islink(p) and os.path.isdir(p):
                os.chmod(p, 0o700)
        func(p)

    shutil.rmtree(path, onerror=fix_and_retry)


def check_relpath(relpath: str) -> None:
    """Refuse paths that cannot name a file inside a workspace: empty, absolute or with `..`."""
    if not relpath or os.path.isabs(relpath) or ".." in Path(relpath).parts:
        raise ValueError(
            f"workspace file path {relpath!r} must be relative to the workspace, without '..'"
        )


def safe_target(root: Path, relpath: str) -> Path:
    """The path of `relpath` below `root`; refuses absolute paths, `..` and symlinked parents."""
    check_relpath(relpath)
    target = root / relpath
    parent = Path(os.path.realpath(target.parent))
    real_root = Path(os.path.realpath(root))
    if parent != real_root and real_root not in parent.parents:
        raise ValueError(f"workspace path escapes the workspace: {relpath!r}")
    return target


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for relpath, content in files.items():
        target = safe_target(root, relpath)
        target.parent.mkdir(parents=True, exist_ok=True)
        safe_target(root, relpath)  # re-check: mkdir may have walked a link planted meanwhile
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISDIR(os.lstat(target).st_mode):
                os.unlink(target)  # whatever the job left there (a link, a FIFO…) is replaced
        data = content.encode() if isinstance(content, str) else content
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def _open_regular(path: str | Path) -> int | None:
    """An fd of the regular file at `path`, or None (a link, FIFO, socket, device, missing)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _read_capped(fd: int, max_bytes: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        return f.read(min(max_bytes, os.fstat(fd).st_size))


def read_file(root: Path, relpath: str) -> bytes:
    """A regular file below `root`, never reached through a symlink."""
    fd = _open_regular(safe_target(root, relpath))
    if fd is None:
        raise FileNotFoundError(f"no regular file {relpath!r} in the workspace")
    return _read_capped(fd, os.fstat(fd).st_size)


def read_files(root: Path, patterns: list[str], max_bytes: int) -> dict[str, bytes]:
    """Regular files below `root` matching any glob in `patterns` (relative paths), size-capped."""
    if not patterns:
        return {}
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        for name in filenames:
            rel = name if rel_dir == "." else os.path.join(rel_dir, name)
            if any(fnmatch.fnmatch(rel, p) for p in patterns):
                fd = _open_regular(os.path.join(dirpath, name))
                if fd is not None:
                    found[rel] = _read_capped(fd, max_bytes)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return found


def copy_tree(src: Path, dst: Path) -> None:
    """Copy regular files, directories and symlinks (as links); skip FIFOs, sockets, devices."""

    def special(directory: str, names: list[str]) -> set[str]:
        skip = set()
        for name in names:
            mode = os.lstat(os.path.join(directory, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                skip.add(name)
        return skip

    shutil.copytree(src, dst, symlinks=True, ignore=special, dirs_exist_ok=True)


def move_entries(src: Path, dst: Path) -> None:
    """Move every top-level entry of `src` into the (empty) `dst`: O(1) renames, no copying."""
    for entry in os.scandir(src):
        os.rename(entry.path, dst / entry.name)
