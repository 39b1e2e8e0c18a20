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
