"""The examples in honing's docstrings (`>>>`) run and print what they say.

Every module under honing/ whose source holds a docstring example is imported and run through
`doctest` (pytest is not given `--doctest-modules`: most modules have no example, and importing
each one would only slow the suite). A module whose examples all pass adds nothing to the output;
one that fails is named with doctest's own report. Not covered: examples in docs/*.md.

Checked by hand once (2026-12-07): with one expected value in honing/trainer/gains.py changed,
the test failed naming the module (1 of 3 examples failed) and printing the example.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import honing

PACKAGE = Path(honing.__file__).parent


def modules_with_examples() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(line.lstrip().startswith(">>> ") for line in path.read_text().splitlines()):
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_some_module_has_examples() -> None:
    """The scan finds the examples it is meant to run (an empty list would pass vacuously)."""
    assert "honing.eval.metrics" in modules_with_examples()


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
