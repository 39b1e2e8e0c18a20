"""The version of each domain's verifier, recorded beside the rewards it gives on a re-score.

    verifier_version("math")   # 'math:3f9c0a1b7d2e (math-verify 0.9.0, python 3.11.7)'

A digest of everything that scores the domain, found from its environment class: the code (not
the docstrings, comments or layout) of its module and of the `honing.domains`, `honing.envs` and
`honing.tasks` modules it imports, the programs they run in the sandbox, the distributions the
judges declare, and the Python version (docs/rollout.md, "Re-scoring without regeneration").
Not covered: the task data (a task's answer is versioned with its task set), the sandbox's
limits (recorded with the run), and code a judge imports lazily inside a function.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import platform
import re
from collections.abc import Sequence
from pathlib import Path

from honing.errors import ConfigError

SCOPE = ("honing.domains", "honing.envs", "honing.tasks")
_SIBLING = re.compile(r"""["'](\w+)\.py["']""")
_REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@functools.cache
def verifier_version(domain: str) -> str:
    """`DOMAIN:DIGEST (distribution version, …, python X.Y.Z)` (see the module docstring)."""
    from honing.envs.registry import environments

    found = environments()
    if domain not in found:
        known = ", ".join(sorted(found))
        raise ConfigError(f"no environment, so no verifier, for domain {domain!r}; known: {known}")
    module = found[domain].__module__
    # a domain of honing's own is followed within honing; another package's within its module
    scope = SCOPE if module.startswith("honing.") else (*SCOPE, module)
    return version_of(domain, module, scope)


def version_of(name: str, module: str, scope: Sequence[str] = SCOPE) -> str:
    """The version of the verifier rooted at `module` (its imports followed within `scope`)."""
    files = judge_files(module, scope)
    declared = sorted({d for m in files.values() if m for d in _declared(m)})
    packages = [f"{d} {_installed(d)}" for d in declared]
    packages.append(f"python {platform.python_version()}")
    digest = hashlib.sha256()
    for label, path in sorted((label, path) for path, label in _labels(files).items()):
        digest.update(label.encode() + b"\0" + _code(path) + b"\0")
    for dist in sorted(_requirements(declared)):
        digest.update(f"{dist} {_installed(dist)}\0".encode())
    digest.update(platform.python_version().encode())
    return f"{name}:{digest.hexdigest()[:12]} ({', '.join(packages)})"


def _code(path: Path) -> bytes:
    """What a source file computes: its syntax tree without docstrings, comments or layout, so
    that rewording a docstring does not make a new verifier version."""
    try:
        tree = ast.parse(path.read_bytes())
    except SyntaxError:
        return path.read_bytes()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def judge_files(module: str, scope: Sequence[str] = SCOPE) -> dict[Path, str | None]:
    """The source files of `module`'s verifier: path -> module name (None: a sibling program)."""
    found: dict[Path, str | None] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = _origin(name)
        if path in found:
            continue
        found[path] = name
        source = path.read_text()
        for sibling in _SIBLING.findall(source):
            program = path.with_name(f"{sibling}.py")
            if program.is_file() and program != path:
                found.setdefault(program, None)
        for node in ast.parse(source).body:  # top-level imports only
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            todo += [n for n in names if _in(n, scope) and _is_module(n)]
    return found


def _in(name: str, scope: Sequence[str]) -> bool:
    return any(name == s or name.startswith(s + ".") for s in scope)


def _is_module(name: str) -> bool:
    """Whether `name` is a module (`from m import x` names x: a module, or a name in m)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _origin(module: str) -> Path:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ConfigError(f"verifier module {module} not found; is honing installed completely?")
    return Path(spec.origin)


def _labels(files: dict[Path, str | None]) -> dict[Path, str]:
    """A name per file that does not depend on where honing is installed."""
    return {p: m if m is not None else f"{p.parent.name}/{p.name}" for p, m in files.items()}


def _declared(module: str) -> list[str]:
    """The distributions a judge module declares its sandbox runtime needs (`DISTRIBUTIONS`)."""
    declared = getattr(importlib.import_module(module), "DISTRIBUTIONS", [])
    return [str(d) for d in declared]


def _requirements(distributions: Sequence[str]) -> set[str]:
    """`distributions` and what they require, transitively, as installed (extras left out)."""
    seen: set[str] = set()
    todo = list(distributions)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            match = _REQUIREMENT.match(requirement)
            if match and "extra ==" not in requirement:
                todo.append(match.group(0))
    return seen


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
