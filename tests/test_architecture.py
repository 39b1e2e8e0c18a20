"""The layering of docs/architecture.md holds: every import in `honing/` (inside functions too)
points to a lower layer, and every package has a layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "honing"
ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")


def layers() -> dict[str, int]:
    """Package (or top-level module) -> layer, from the table of docs/architecture.md."""
    found: dict[str, int] = {}
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        row = ROW.match(line)
        if row:
            for name in re.findall(r"`([\w.]+)`", row.group(2)):
                found[name] = int(row.group(1))
    return found


def part_of(module: str) -> str:
    """The package a dotted module belongs to: `honing.trainer.loop` -> `trainer`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "honing"


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of honing in a file, wherever it is."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        out += [(node.lineno, n) for n in names if n == "honing" or n.startswith("honing.")]
    return out


def test_every_package_has_a_layer() -> None:
    table = layers()
    assert table, "docs/architecture.md has no layer table"
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    present = modules | {d.name for d in PACKAGE.iterdir() if (d / "__init__.py").is_file()}
    assert present - set(table) == set(), "give these a layer in docs/architecture.md"
    assert set(table) - present - {"honing"} == set(), "the table names what is not in honing/"


def test_imports_point_down_the_layers() -> None:
    table = layers()
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        here = part_of(module)
        for line, target in imports(path):
            there = part_of(target)
            if there == here:
                continue
            if table[there] >= table[here]:
                wrong.append(
                    f"{path.relative_to(ROOT)}:{line}: {here} (layer {table[here]}) imports "
                    f"{target} ({there}, layer {table[there]})"
                )
    assert not wrong, "imports must point to a lower layer:\n" + "\n".join(wrong)


def domain_packages() -> list[str]:
    """The built-in domains that are one package each (`honing/domains/<name>/`)."""
    return sorted(d.name for d in (PACKAGE / "domains").iterdir() if (d / "__init__.py").is_file())


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_a_domain_package_is_imported_only_by_itself_and_the_domains_index() -> None:
    """Nothing in honing outside `honing/domains/<name>/` imports that domain (the registry finds
    it through `honing.domains`, which imports every built-in domain), and domain packages do not
    import each other. Checked by hand to fail: `from honing.domains.math.task import MathTask`
    planted in honing/envs/tools.py, and in honing/domains/sql/env.py."""
    packages = domain_packages()
    assert {"code", "finance", "math", "sql", "structure", "tools"} <= set(packages)
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_of(path)
        if module == "honing.domains":
            continue
        for line, target in imports(path):
            for name in packages:
                home = f"honing.domains.{name}"
                inside = module == home or module.startswith(home + ".")
                if (target == home or target.startswith(home + ".")) and not inside:
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: imports {target}")
    assert not wrong, "only a domain's own package imports it:\n" + "\n".join(wrong)


def test_a_domains_task_and_generator_do_not_import_its_environment() -> None:
    """Tasks are data: a domain's `task` and `generate` modules build tasks without its
    environment (or the judge's sandbox programs), so loading a task set never needs either.
    Checked by hand to fail: `from honing.domains.math.env import MathEnv`, and `from
    honing.domains.math import env` inside a function, planted in
    honing/domains/math/generate.py."""
    graph = import_graph()  # `from honing.domains.x import env` counts as importing x.env
    wrong = []
    for name in domain_packages():
        for stem in ("task", "generate"):
            module = f"honing.domains.{name}.{stem}"
            banned = {f"honing.domains.{name}.env", f"honing.domains.{name}.judge"}
            wrong += [f"{module} imports {t}" for t in sorted(graph.get(module, set()) & banned)]
    assert not wrong, "a domain's tasks do not need its environment:\n" + "\n".join(wrong)


def test_a_domain_package_has_the_parts_of_one() -> None:
    """Each domain package has its task model, environment and generator modules, and its
    `__init__` registers it. (Its judge is `judge.py`, or the environment's own rules where the
    references are played through it, as structure's are.)"""
    for name in domain_packages():
        home = PACKAGE / "domains" / name
        parts = ("task", "env", "generate")
        missing = [f"{s}.py" for s in parts if not (home / f"{s}.py").is_file()]
        assert not missing, f"honing/domains/{name}/ lacks {missing}"
        assert "register(" in (home / "__init__.py").read_text(), name


# Import circles that predate the rule and wait for the trainer and export packages to be split
# (issue 39); the set may only shrink: a circle gone from the code must go from here too.
KNOWN_CIRCLES = {
    frozenset({"honing.export.card", "honing.export.model", "honing.export.quantize"}),
    frozenset({"honing.trainer.remote", "honing.trainer.run_config", "honing.trainer.run_dir",
               "honing.trainer.sources"}),
}  # fmt: skip


def import_graph() -> dict[str, set[str]]:
    """File-level imports between honing's modules: every import, inside functions and under
    `TYPE_CHECKING` too; `from pkg import name` counts as importing `pkg.name` when that is a
    module, else `pkg`."""
    modules = {module_of(p): p for p in PACKAGE.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                target = resolve(name) if name.startswith("honing") else None
                if target is not None and target != module:
                    graph[module].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_new_import_circles() -> None:
    """No module imports one that imports it back, however far round, counting imports inside
    functions and under `TYPE_CHECKING`, but for the circles listed in `KNOWN_CIRCLES`. Checked
    by hand to fail: `from honing.tasks.load import TaskSet` planted inside a function of
    honing/tasks/schema.py (load imports schema through taskset)."""
    found = circles(import_graph())
    new = [sorted(c) for c in found - KNOWN_CIRCLES]
    assert not new, "import circles (break them by moving what they share):\n" + "\n".join(
        " <-> ".join(c) for c in new
    )
    gone = [sorted(c) for c in KNOWN_CIRCLES - found]
    assert not gone, f"these circles are gone: take them out of KNOWN_CIRCLES: {gone}"


def test_no_layer_above_the_domains_branches_on_a_built_in_domain() -> None:
    """No code outside `honing/domains/` compares a task's `domain` with a built-in domain's name
    (what a domain does differently is a `Domain` field: its question key, its submit tools, its
    team hooks). Checked by hand to fail: `if task.domain == "math":` planted in
    honing/tasks/load.py."""
    names = set(domain_packages())
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(PACKAGE / "domains"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            domain = any(isinstance(s, ast.Attribute) and s.attr == "domain" for s in sides)
            named = [
                c.value
                for s in sides
                for c in ast.walk(s)
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value in names
            ]
            if domain and named:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: compares domain to {named}")
    assert not wrong, "branch on a Domain field, not on a domain's name:\n" + "\n".join(wrong)
