"""Verifier versions: found from each domain's environment, they follow its judges' sources, the
programs they run and their packages, and nothing else."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from honing.envs import registry
from honing.envs.verifiers import judge_files, verifier_version, version_of
from honing.errors import ConfigError

TOY = "toyjudge_rescore"


def test_every_domain_has_a_version_covering_its_judges() -> None:
    for domain, env in registry.environments().items():
        modules = set(judge_files(env.__module__).values())
        assert {env.__module__, "honing.envs.base"} <= modules, domain
        assert verifier_version(domain).startswith(f"{domain}:")
    math = set(judge_files(registry.environments()["math"].__module__).values())
    assert {"honing.domains.math.judge", "honing.tasks.checkrun"} <= math
    assert not {"honing.domains.sql.judge", "honing.envs.kits.duckdb_runner"} & math
    assert f"math-verify {importlib.metadata.version('math-verify')}" in verifier_version("math")
    assert "duckdb" in verifier_version("sql") and "math-verify" not in verifier_version("sql")
    known = ", ".join(sorted(registry.environments()))
    assert {"code", "math", "sql", "tools"} <= set(registry.environments())
    with pytest.raises(ConfigError, match=rf"'chess'; known: {known}$"):
        verifier_version("chess")


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A package with an environment module, its judge (which declares a distribution and runs a
    sibling program), the program, and modules the verifier does not use."""
    package = tmp_path / TOY
    package.mkdir()
    files = {
        "__init__.py": "",
        "env.py": f"from {TOY}.check import judge\n\ndef later():\n    import {TOY}.lazy\n",
        "check.py": 'DISTRIBUTIONS = ["pyarrow"]\nPROGRAM = "prog.py"\n\n'
        "def judge(answer):\n    return answer == '42'\n",
        "prog.py": "print('verdict')\n",
        "lazy.py": "",
        "unrelated.py": "",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for name in [m for m in sys.modules if m == TOY or m.startswith(TOY + ".")]:
        del sys.modules[name]


def test_the_version_follows_the_judge_and_its_program(toy: Path) -> None:
    def version() -> str:
        return version_of("toy", f"{TOY}.env", scope=(TOY,))

    assert {p.name for p in judge_files(f"{TOY}.env", (TOY,))} == {"env.py", "check.py", "prog.py"}
    first = version()
    assert first == version() and first.startswith("toy:")
    assert f"(pyarrow {importlib.metadata.version('pyarrow')}, python " in first

    (toy / "unrelated.py").write_text("x = 1\n")
    (toy / "lazy.py").write_text("x = 1\n")  # imported inside a function: not followed
    assert version() == first

    judge = (toy / "check.py").read_text()
    reworded = judge.replace(
        "def judge(answer):\n", 'def judge(answer):\n    """Is it 42?"""  # why\n'
    )
    (toy / "check.py").write_text(f'"""The toy judge."""\n\n{reworded}\n\n')
    assert version() == first  # docstrings, comments and layout are not the judge
    (toy / "check.py").write_text(judge.replace("== '42'", "== '42 '"))
    fixed = version()
    assert fixed != first
    (toy / "prog.py").write_text("print('another verdict')\n")
    assert version() not in (first, fixed)


def test_a_missing_module_is_named() -> None:
    with pytest.raises(ConfigError, match=r"verifier module honing\.envs\.nothing not found"):
        version_of("ghost", "honing.envs.nothing")
