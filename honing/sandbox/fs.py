"""Host-side file handling for cell workspaces, written so a hostile job cannot steer it.

A job controls everything in its workspace, symlinks included. The host therefore never follows a
symlink it finds there: input files are written only below the workspace's real path and opened
with O_NOFOLLOW, output files are read only when they are regular files (opened non-blocking, so a
FIFO cannot hang the host), and moving, copying or deleting entries acts on the entries
themselves, never on what a link points to; snapshots copy regular files, directories and links
and leave out FIFOs, sockets and device nodes. Nothing recurses: a job may nest its directories
past Python's recursion limit and past what a path can name, and `wipe` still removes them all.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path


def wipe(directory: Path) -> None:
    """Remove everything inside `directory`, even entries the job made unreadable, however deep
    the job nested its directories: no recursion, and no path longer than one name (each
    directory is opened relative to its parent, one descriptor at a time)."""
    fd = os.open(directory, _DIR_FLAGS)
    try:
        _empty(fd)
    finally:
        os.close(fd)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(parent: int, name: str) -> int:
    """The directory `name` in `parent`, opened without following a link; made readable first
    when the job took that away."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=parent)  # a directory (lstat said so), never a link here
        return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _empty(top: int) -> None:
    """Remove every entry below the open directory `top`, depth first, holding one descriptor
    besides `top`: going down opens a child, going back up opens "..", which is no link."""
    names: list[str] = []  # the directories entered below `top`, outermost first
    fd = os.dup(top)
    try:
        while True:
            child = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        child = entry.name
                        break
                    _remove(os.unlink, fd, entry.name)
            if child is not None:
                inner = _open_dir(fd, child)
                os.close(fd)
                fd = inner
                names.append(child)
                continue
            if not names:
                return
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            _remove(os.rmdir, fd, names.pop())
    finally:
        os.close(fd)


def _remove(remove: Callable[..., None], parent: int, name: str) -> None:
    """`remove(name, dir_fd=parent)` (os.unlink or os.rmdir), gone already being fine; a parent
    the job made read-only is made writable first."""
    try:
        remove(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except PermissionError:
        os.chmod(f"/proc/self/fd/{parent}", 0o700)
        with contextlib.suppress(FileNotFoundError):
            remove(name, dir_fd=parent)


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
    """Regular files below `root` matching any glob in `patterns` (relative paths), size-capped.
    Walked without recursion and never through a link; a directory whose path is past what the
    system can open is left out."""
    if not patterns:
        return {}
    found: dict[str, bytes] = {}
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        try:
            with os.scandir(root / rel_dir if rel_dir else root) as entries:
                listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        except OSError:
            continue
        for name, is_dir in sorted(listed):
            rel = os.path.join(rel_dir, name) if rel_dir else name
            if is_dir:
                pending.append(rel)
            elif any(fnmatch.fnmatch(rel, p) for p in patterns):
                fd = _open_regular(root / rel)
                if fd is not None:
                    found[rel] = _read_capped(fd, max_bytes)
    return found


def copy_tree(src: Path, dst: Path) -> None:
    """Copy regular files, directories and symlinks (as links); skip FIFOs, sockets, devices.
    Walked without recursion; OSError (ENAMETOOLONG) when the job nested its directories past
    what the system's paths can name."""
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        source, target = src / rel_dir, dst / rel_dir
        target.mkdir(parents=True, exist_ok=True)
        with os.scandir(source) as entries:
            listed = [(e.name, e.stat(follow_symlinks=False).st_mode) for e in entries]
        for name, mode in listed:
            rel = os.path.join(rel_dir, name) if rel_dir else name
            if stat.S_ISDIR(mode):
                pending.append(rel)
            elif stat.S_ISLNK(mode):
                link = target / name
                with contextlib.suppress(FileNotFoundError):
                    if not stat.S_ISDIR(os.lstat(link).st_mode):
                        os.unlink(link)
                os.symlink(os.readlink(source / name), link)
            elif stat.S_ISREG(mode):
                with contextlib.suppress(FileNotFoundError):
                    if not stat.S_ISDIR(os.lstat(target / name).st_mode):
                        os.unlink(target / name)  # never write through what is there
                shutil.copy2(source / name, target / name, follow_symlinks=False)


def move_entries(src: Path, dst: Path) -> None:
    """Move every top-level entry of `src` into the (empty) `dst`: O(1) renames, no copying."""
    for entry in os.scandir(src):
        os.rename(entry.path, dst / entry.name)
