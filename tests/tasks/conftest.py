"""Fixtures for the tasks layer: a small set of valid task rows and writers for each format."""

from __future__ import annotations

import gzip
import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

CODE_TESTS = (
    "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
)

# Every row carries the same keys in `metadata`, so columnar formats (whose struct columns merge
# keys across rows) hold exactly the same content as JSONL.
ROWS: list[dict[str, Any]] = [
    {
        "id": "code/add",
        "domain": "code",
        "prompt": "def add(a, b):\n    '''Return a + b.'''\n",
        "entry_point": "add",
        "tests": CODE_TESTS,
        "reference": "def add(a, b):\n    return a + b\n",
        "tags": ["easy", "arith"],
        "metadata": {"origin": "handwritten"},
    },
    {
        "id": "code/neg",
        "domain": "code",
        "prompt": "def neg(x):\n    '''Return -x.'''\n",
        "entry_point": "neg",
        "tests": "assert neg(3) == -3\nassert neg(0) == 0\n",
        "tags": ["easy"],
        "metadata": {"origin": "handwritten"},
    },
    {
        "id": "math/product",
        "domain": "math",
        "prompt": "What is 17 * 23?",
        "answer": "391",
        "reference": "17*23 = 391",
        "tags": ["arith"],
        "metadata": {"origin": "textbook"},
    },
    {
        "id": "math/half",
        "domain": "math",
        "prompt": "What is one divided by two?",
        "answer": "\\frac{1}{2}",
        "reference": "0.5",
        "tags": [],
        "metadata": {"origin": "textbook"},
    },
]


def columnar(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with the union of all keys (None where absent), as a table stores them."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return [{k: row.get(k) for k in keys} for row in rows]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_jsonl_gz(path: Path, rows: list[Any]) -> Path:
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def write_parquet(target: Any, rows: list[dict[str, Any]]) -> None:
    """`target`: a local path or an open binary file (for fsspec)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(columnar(rows)), target)


def save_dataset(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A directory written by the real `datasets` library."""
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_list(columnar(rows)).save_to_disk(str(path))
    return path


def math_rows(n: int) -> list[dict[str, Any]]:
    """`n` distinct, valid math tasks."""
    return [
        {"id": f"m{i:03d}", "domain": "math", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)}
        for i in range(n)
    ]


@pytest.fixture
def rows() -> list[dict[str, Any]]:
    """Four valid tasks (two code, two math); all but `code/neg` have a reference."""
    return [dict(r) for r in ROWS]


@pytest.fixture
def fmt() -> SimpleNamespace:
    """The writers above, for test modules: `fmt.write_jsonl(path, rows)`…"""
    return SimpleNamespace(
        columnar=columnar,
        write_jsonl=write_jsonl,
        write_jsonl_gz=write_jsonl_gz,
        write_parquet=write_parquet,
        save_dataset=save_dataset,
        math_rows=math_rows,
    )


@pytest.fixture
def memfs() -> Iterator[Callable[[str], str]]:
    """`memfs(name)`: a `memory://` URL in a directory private to this test; removed afterwards."""
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/honing-tests-{secrets.token_hex(6)}"
    fs.mkdir(root)
    try:
        yield lambda name: f"memory://{root}/{name}"
    finally:
        if fs.exists(root):
            fs.rm(root, recursive=True)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No hub access and no writes to the real home from anything these tests run."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HONING_HOME", str(tmp_path / "honing-home"))
