"""Host-side file handling for cell workspaces, written so a hostile job cannot steer it.

A job controls everything in its workspace, symlinks included. The host therefore never follows a
symlink it finds there: input files are written only below the workspace's real path and opened
with O_NOFOLLOW, output files are read only when they are regular files, and moving or deleting
entries acts on the entries themselves, never on what a link points to.
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
        data = content.encode() if isinstance(content, str) else content
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        fd = os.open(target, flags, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def read_file(root: Path, relpath: str) -> bytes:
    """A regular file below `root`, opened without following a symlink at the last component
    and with every parent inside `root`."""
    target = safe_target(root, relpath)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise FileNotFoundError(f"no regular file {relpath!r} in the workspace") from exc
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise FileNotFoundError(f"{relpath!r} in the workspace is not a regular file")
        return f.read()


def read_files(root: Path, patterns: list[str], max_bytes: int) -> dict[str, bytes]:
    """Regular files below `root` matching any glob in `patterns` (relative paths), size-capped."""
    if not patterns:
        return {}
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        for name in filenames:
            rel = name if rel_dir == "." else os.path.join(rel_dir, name)
            if not any(fnmatch.fnmatch(rel, p) for p in patterns):
                continue
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue  # a symlink or unreadable: never followed
            with os.fdopen(fd, "rb") as f:
                if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    found[rel] = f.read(max_bytes)
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return found


def move_entries(src: Path, dst: Path) -> None:
    """Move every top-level entry of `src` into the (empty) `dst`: O(1) renames, no copying."""
    for entry in os.scandir(src):
        os.rename(entry.path, dst / entry.name)
