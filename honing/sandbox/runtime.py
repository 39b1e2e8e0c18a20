"""Named runtimes: the sandbox interpreter plus a set of pip packages, built once, cached by hash.

A runtime is a `site-packages` directory made by `pip install --target` with the same interpreter
the sandbox runs, so compiled wheels match. Its id is the SHA-256 of the interpreter version and
the normalised requirements; building the same requirements again is a no-op. Cells mount it
read-only at /opt/honing/runtime and put it first on `sys.path`. A name maps to an id in
`names/NAME.json`; rebuilding a name with other requirements repoints it.

The store lives in $HONING_HOME/runtimes (default ~/.cache/honing/runtimes). Building needs the
package index (or a local wheel directory given in the requirements); running never does.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from honing.config import default_home
from honing.errors import RuntimeBuildError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class RuntimeInfo:
    name: str
    id: str
    path: Path
    requirements: list[str]
    built_s: float
    cached: bool


class RuntimeStore:
    def __init__(self, home: Path | None = None) -> None:
        self.dir = (home or default_home()) / "runtimes"

    def resolve(self, name: str) -> Path:
        """The site-packages directory of runtime `name`; an error says how to build it."""
        ref = self.dir / "names" / f"{name}.json"
        if not ref.is_file():
            raise RuntimeBuildError(
                f"runtime {name!r} is not built (looked in {self.dir}). Build it with "
                f"`honing sandbox runtime build {name} -r requirements.txt`."
            )
        runtime_id = str(json.loads(ref.read_text())["id"])
        path = self.dir / runtime_id / "site-packages"
        if not (self.dir / runtime_id / "COMPLETE").exists():
            raise RuntimeBuildError(f"runtime {name!r} ({runtime_id}) is incomplete: rebuild it")
        return path

    def all(self) -> list[RuntimeInfo]:
        out = []
        for ref in sorted((self.dir / "names").glob("*.json")):
            meta = json.loads(ref.read_text())
            out.append(
                RuntimeInfo(
                    ref.stem,
                    meta["id"],
                    self.dir / meta["id"] / "site-packages",
                    meta["requirements"],
                    meta.get("built_s", 0.0),
                    True,
                )
            )
        return out

    @staticmethod
    def _digest(version: str, reqs: list[str], base: Path) -> str:
        """Hash of the interpreter version, the requirements and any local files they name."""
        h = hashlib.sha256(json.dumps([version, reqs]).encode())
        for req in reqs:
            local = base / req
            if local.is_file():
                h.update(local.read_bytes())
        return h.hexdigest()[:16]

    def build(self, name: str, requirements_file: Path) -> RuntimeInfo:
        """Runtime `name` from a pip requirements file (needs the package index once)."""
        try:
            lines = requirements_file.read_text().splitlines()
        except OSError as exc:
            raise RuntimeBuildError(f"{requirements_file}: cannot read: {exc.strerror}") from exc
        reqs = sorted({ln.split("#", 1)[0].strip() for ln in lines} - {""})
        digest = self._digest(_python_version(), reqs, requirements_file.resolve().parent)
        return self._build(name, digest, reqs, lambda d: _pip_install(d, requirements_file, reqs))

    def build_from_installed(self, name: str, distributions: list[str]) -> RuntimeInfo:
        """Runtime `name` from distributions installed beside honing, with their dependencies:
        offline, and exactly the versions honing itself runs."""
        found = _installed_closure(distributions)
        pins = sorted(f"{d.metadata['Name']}=={d.version}" for d in found)
        digest = hashlib.sha256(json.dumps([_python_version(), pins]).encode()).hexdigest()[:16]
        return self._build(name, digest, pins, lambda d: _copy_installed(d, found))

    def _build(
        self, name: str, digest: str, reqs: list[str], fill: Callable[[Path], None]
    ) -> RuntimeInfo:
        if not NAME_RE.match(name):
            raise RuntimeBuildError(
                f"runtime name {name!r} is invalid: use letters, digits, '.', '_' or '-'"
            )
        target = self.dir / digest
        cached = (target / "COMPLETE").exists()
        started = time.perf_counter()
        if not cached:
            staging = target.with_name(target.name + f".building-{os.getpid()}")
            shutil.rmtree(staging, ignore_errors=True)
            (staging / "site-packages").mkdir(parents=True)
            try:
                fill(staging / "site-packages")
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            (staging / "requirements.txt").write_text("\n".join(reqs) + "\n")
            (staging / "COMPLETE").write_text("")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)
        built_s = time.perf_counter() - started
        (self.dir / "names").mkdir(parents=True, exist_ok=True)
        meta = {"id": digest, "requirements": reqs, "python": _python_version(), "built_s": built_s}
        (self.dir / "names" / f"{name}.json").write_text(json.dumps(meta, indent=2))
        return RuntimeInfo(name, digest, target / "site-packages", reqs, built_s, cached)


def _python_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))


def _pip_install(site: Path, requirements_file: Path, reqs: list[str]) -> None:
    if not reqs:
        return
    # pip of the running interpreter: the same version as the sandbox's, so wheels match.
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-input",
           "--disable-pip-version-check", "--target", str(site),
           "-r", str(requirements_file.resolve())]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=requirements_file.resolve().parent
    )
    if proc.returncode != 0:
        raise RuntimeBuildError(
            f"pip could not install {requirements_file}:\n{proc.stderr.strip()[-2000:]}"
        )


def _installed_closure(names: list[str]) -> list[metadata.Distribution]:
    """The named installed distributions and everything they require (extras left out)."""
    from packaging.requirements import Requirement

    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if name in names:
                raise RuntimeBuildError(
                    f"{name} is not installed beside honing: pip install it, or use -r"
                ) from None
            continue  # an optional or stdlib-provided requirement
        found[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(found.values())


def _copy_installed(site: Path, dists: list[metadata.Distribution]) -> None:
    """Hard-link (or copy) each distribution's files that live in site-packages."""
    for dist in dists:
        root = Path(str(dist.locate_file(""))).resolve()
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file))).resolve()
            if root not in source.parents or not source.is_file() or "__pycache__" in source.parts:
                continue  # scripts in bin/, byte-code: not needed
            target = site / source.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
