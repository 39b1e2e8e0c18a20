"""Loading: every format gives the same tasks and version; bad rows are quarantined, not fatal."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from honing.domains.code.task import CodeTask
from honing.domains.math.task import MathTask
from honing.errors import ConfigError
from honing.tasks import TaskSet, domains, load_tasks, tasks_from_rows

Rows = list[dict[str, Any]]


def dumped(taskset: TaskSet) -> list[dict[str, Any]]:
    return sorted((t.model_dump(mode="json") for t in taskset.tasks), key=lambda d: d["id"])


def expected(rows: Rows) -> list[dict[str, Any]]:
    tasks = [domains.task_adapter().validate_python(r).model_dump(mode="json") for r in rows]
    return sorted(tasks, key=lambda d: d["id"])


# -- every format, same tasks, same version ------------------------------------------------------
def _jsonl(tmp: Path, rows: Rows, fmt: SimpleNamespace, mem: Callable[[str], str]) -> str:
    return str(fmt.write_jsonl(tmp / "tasks.jsonl", rows))


def _jsonl_gz(tmp: Path, rows: Rows, fmt: SimpleNamespace, mem: Callable[[str], str]) -> str:
    return str(fmt.write_jsonl_gz(tmp / "tasks.jsonl.gz", rows))


def _parquet(tmp: Path, rows: Rows, fmt: SimpleNamespace, mem: Callable[[str], str]) -> str:
    fmt.write_parquet(tmp / "tasks.parquet", rows)
    return str(tmp / "tasks.parquet")


def _datasets_dir(tmp: Path, rows: Rows, fmt: SimpleNamespace, mem: Callable[[str], str]) -> str:
    return str(fmt.save_dataset(tmp / "saved", rows))


def _memory_jsonl(tmp: Path, rows: Rows, fmt: SimpleNamespace, mem: Callable[[str], str]) -> str:
    import fsspec

    url = mem("tasks.jsonl")
    with fsspec.open(url, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return url


def _memory_parquet(tmp: Path, rows: Rows, fmt: SimpleNamespace, mem: Callable[[str], str]) -> str:
    import fsspec

    url = mem("tasks.parquet")
    with fsspec.open(url, "wb") as f:
        fmt.write_parquet(f, rows)
    return url


def _memory_datasets_dir(
    tmp: Path, rows: Rows, fmt: SimpleNamespace, mem: Callable[[str], str]
) -> str:
    import fsspec

    local = fmt.save_dataset(tmp / "saved", rows)
    url = mem("saved")
    fs, root = fsspec.core.url_to_fs(url)
    for file in local.iterdir():
        fs.pipe_file(f"{root}/{file.name}", file.read_bytes())
    return url


WRITERS = {
    "jsonl": _jsonl,
    "jsonl.gz": _jsonl_gz,
    "parquet": _parquet,
    "datasets-dir": _datasets_dir,
    "memory-jsonl": _memory_jsonl,
    "memory-parquet": _memory_parquet,
    "memory-datasets-dir": _memory_datasets_dir,
}


@pytest.fixture
def write(tmp_path: Path, fmt: SimpleNamespace, memfs: Callable[[str], str]) -> Callable[..., str]:
    """`write(kind, rows, name)`: the spec of `rows` written in format `kind` under `name`."""

    def go(kind: str, rows: Rows, name: str = "a") -> str:
        folder = tmp_path / name
        folder.mkdir()
        return WRITERS[kind](folder, rows, fmt, lambda n: memfs(f"{name}/{n}"))

    return go


@pytest.fixture
def reference_version(tmp_path: Path, rows: Rows, fmt: SimpleNamespace) -> str:
    """The version of the fixture set, loaded from plain JSONL."""
    folder = tmp_path / "reference"
    folder.mkdir()
    return load_tasks(str(fmt.write_jsonl(folder / "ref.jsonl", rows))).version


@pytest.mark.parametrize("kind", list(WRITERS))
def test_every_format_loads_the_same_tasks_and_version(
    kind: str, rows: Rows, write: Callable[..., str], reference_version: str
) -> None:
    taskset = load_tasks(write(kind, rows))
    assert taskset.quarantined == []
    assert taskset.total == len(rows)
    assert dumped(taskset) == expected(rows)
    assert {type(t) for t in taskset.tasks} == {CodeTask, MathTask}
    assert taskset.version == reference_version
    assert len(reference_version) == 16 and int(reference_version, 16) >= 0


@pytest.mark.parametrize("kind", list(WRITERS))
def test_row_order_does_not_change_the_version(
    kind: str, rows: Rows, write: Callable[..., str], reference_version: str
) -> None:
    shuffled = list(reversed(rows))
    random.Random(7).shuffle(shuffled)
    shuffled.reverse()
    assert [r["id"] for r in shuffled] != [r["id"] for r in rows]
    assert load_tasks(write(kind, shuffled)).version == reference_version


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda r: r[2].update(prompt="What is 17 times 23?"), id="prompt"),
        pytest.param(lambda r: r[2].update(answer="391.0", reference="391.0"), id="answer"),
        pytest.param(lambda r: r[0].update(id="code/plus"), id="id"),
        pytest.param(lambda r: r[1].update(reference="def neg(x): return -x"), id="reference"),
        pytest.param(lambda r: r[3].update(tags=["fractions"]), id="tags"),
        pytest.param(lambda r: r.pop(), id="one-task-fewer"),
    ],
)
def test_different_content_gives_a_different_version(
    change: Callable[[Rows], Any], rows: Rows, write: Callable[..., str], reference_version: str
) -> None:
    change(rows)
    for kind in ("jsonl", "parquet"):
        taskset = load_tasks(write(kind, rows, name=kind))
        assert taskset.quarantined == []
        assert taskset.version != reference_version, kind


@pytest.mark.parametrize("kind", ["parquet", "datasets-dir"])
def test_columnar_formats_do_not_add_metadata_keys(kind: str, write: Callable[..., str]) -> None:
    # A table's struct column holds the union of the keys of every row's `metadata`; a row that
    # lacks one of them must not come back with it set to None (that would change its content
    # and so the version of the set).
    rows = [
        {"id": "a", "domain": "math", "prompt": "1+1?", "answer": "2", "metadata": {"k": "v"}},
        {"id": "b", "domain": "math", "prompt": "2+2?", "answer": "4", "metadata": {"n": 1}},
    ]
    from_jsonl = load_tasks(write("jsonl", rows, name="j"))
    from_table = load_tasks(write(kind, rows, name="t"))
    assert from_table.quarantined == []
    assert [t.metadata for t in from_table.tasks] == [{"k": "v"}, {"n": 1}]
    assert from_table.version == from_jsonl.version


def test_version_is_the_same_across_loads(rows: Rows, write: Callable[..., str]) -> None:
    spec = write("jsonl", rows)
    assert load_tasks(spec).version == load_tasks(spec).version


def test_parquet_with_rows_missing_optional_fields_matches_jsonl(
    write: Callable[..., str],
) -> None:
    # Optional fields present in some rows only: a table stores nulls for the others, and `tags`,
    # `reference` and `metadata` must come back as their defaults, exactly as from JSONL.
    rows = [
        {"id": "a", "domain": "math", "prompt": "1+1?", "answer": "2", "tags": ["t"]},
        {"id": "b", "domain": "math", "prompt": "2+2?", "answer": "4", "reference": "4"},
        {"id": "c", "domain": "math", "prompt": "3+3?", "answer": "6", "metadata": {"k": "v"}},
    ]
    from_jsonl = load_tasks(write("jsonl", rows, name="j"))
    from_parquet = load_tasks(write("parquet", rows, name="p"))
    assert from_parquet.quarantined == []
    assert dumped(from_parquet) == dumped(from_jsonl) == expected(rows)
    assert from_parquet.version == from_jsonl.version


def test_origins_point_at_file_and_line(rows: Rows, write: Callable[..., str]) -> None:
    spec = write("jsonl", rows)
    taskset = load_tasks(spec)
    assert taskset.origins == {r["id"]: (spec, i) for i, r in enumerate(rows, start=1)}


def test_datasets_origins_point_at_the_arrow_file(rows: Rows, write: Callable[..., str]) -> None:
    spec = write("datasets-dir", rows)
    taskset = load_tasks(spec)
    sources = {source for source, _ in taskset.origins.values()}
    assert len(sources) == 1
    (source,) = sources
    assert source.startswith(spec) and source.endswith(".arrow")
    assert sorted(line for _, line in taskset.origins.values()) == [1, 2, 3, 4]


# -- errors that stop a load -----------------------------------------------------------------------
def test_dataset_dict_directory_names_its_splits(
    tmp_path: Path, rows: Rows, fmt: SimpleNamespace
) -> None:
    import datasets

    datasets.disable_progress_bars()
    table = fmt.columnar(rows)
    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(table), "test": datasets.Dataset.from_list(table[:1])}
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ConfigError) as info:
        load_tasks(str(tmp_path / "dd"))
    message = str(info.value)
    assert "DatasetDict" in message
    assert str(tmp_path / "dd" / "train") in message
    assert str(tmp_path / "dd" / "test") in message
    # and each split loads on its own
    assert len(load_tasks(str(tmp_path / "dd" / "train")).tasks) == len(rows)


def test_directory_not_saved_by_datasets_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.txt").write_text("hi")
    with pytest.raises(ConfigError, match=r"state\.json"):
        load_tasks(str(tmp_path / "plain"))


def test_corrupt_parquet_raises_config_error_naming_the_file(
    tmp_path: Path, rows: Rows, fmt: SimpleNamespace
) -> None:
    good = tmp_path / "good.parquet"
    fmt.write_parquet(good, rows)
    bad = tmp_path / "broken-tasks.parquet"
    data = good.read_bytes()
    bad.write_bytes(data[: len(data) // 2])  # truncated: no footer
    with pytest.raises(ConfigError) as info:
        load_tasks(str(bad))
    assert str(bad) in str(info.value)

    (tmp_path / "noise.parquet").write_bytes(b"this is not parquet at all" * 10)
    with pytest.raises(ConfigError, match=r"noise\.parquet"):
        load_tasks(str(tmp_path / "noise.parquet"))


def test_corrupt_gzip_raises_config_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.jsonl.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00 definitely not a gzip stream" * 4)
    with pytest.raises(ConfigError) as info:
        load_tasks(str(bad))
    assert str(bad) in str(info.value)


def test_missing_path_raises_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "tasks.jsonl"
    with pytest.raises(ConfigError) as info:
        load_tasks(str(missing))
    assert str(missing) in str(info.value)


def test_missing_memory_url_raises_config_error(memfs: Callable[[str], str]) -> None:
    with pytest.raises(ConfigError, match=r"absent\.parquet"):
        load_tasks(memfs("absent.parquet"))


@pytest.mark.parametrize("name", ["tasks.csv", "tasks.txt", "tasks"])
def test_unknown_extension_raises_config_error(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text('{"id": "a"}\n')
    with pytest.raises(ConfigError, match="unknown format"):
        load_tasks(str(tmp_path / name))


# -- bad rows are quarantined ----------------------------------------------------------------------
GOOD_1 = {"id": "g1", "domain": "math", "prompt": "1+1?", "answer": "2"}
GOOD_2 = {"id": "g2", "domain": "code", "prompt": "p", "entry_point": "f", "tests": "assert f()"}
NO_ANSWER = {"id": "no-answer", "domain": "math", "prompt": "2+2?"}
EXTRA = {"id": "extra", "domain": "code", "prompt": "q", "entry_point": "g", "tests": "t",
         "solution": "def g(): pass"}  # fmt: skip
BAD_DOMAIN = {"id": "bad-domain", "domain": "astrology", "prompt": "stars?"}
NO_DOMAIN = {"id": "no-domain", "prompt": "3+3?", "answer": "6"}
INVALID_JSON = '{"id": "broken", "domain": "math",'


def test_bad_jsonl_lines_are_quarantined_and_good_rows_still_load(tmp_path: Path) -> None:
    lines = [
        json.dumps(GOOD_1),  # 1
        "",  # 2: blank, skipped but counted as a line
        INVALID_JSON,  # 3
        json.dumps([1, 2]),  # 4
        json.dumps(NO_ANSWER),  # 5
        json.dumps(EXTRA),  # 6
        json.dumps(BAD_DOMAIN),  # 7
        json.dumps(NO_DOMAIN),  # 8
        json.dumps("just a string"),  # 9
        json.dumps(GOOD_2),  # 10
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    taskset = load_tasks(str(path))

    assert [t.id for t in taskset.tasks] == ["g1", "g2"]
    assert taskset.total == 9  # rows read, the blank line is not one
    assert taskset.origins == {"g1": (str(path), 1), "g2": (str(path), 10)}
    got = {q.line: q for q in taskset.quarantined}
    assert sorted(got) == [3, 4, 5, 6, 7, 8, 9]
    assert all(q.source == str(path) for q in taskset.quarantined)
    assert {line: q.field for line, q in got.items()} == {
        3: None,
        4: None,
        5: "answer",
        6: "solution",
        7: "domain",
        8: "domain",
        9: None,
    }
    assert "JSON" in got[3].reason
    assert "object" in got[4].reason and "object" in got[9].reason
    assert "missing" in got[5].reason
    assert "unknown field" in got[6].reason
    assert "domain" in got[7].reason
    # the raw row is kept, so nothing is lost
    assert got[4].row == [1, 2]
    assert got[5].row == NO_ANSWER
    assert got[6].row == EXTRA
    assert got[7].row == BAD_DOMAIN
    assert got[8].row == NO_DOMAIN
    assert got[9].row == "just a string"
    assert {got[n].task_id for n in (5, 6, 7, 8)} == {"no-answer", "extra", "bad-domain",
                                                     "no-domain"}  # fmt: skip
    assert got[4].task_id is None
    assert got[5].where == f"{path}:5"
    # each entry serialises to JSON
    for q in taskset.quarantined:
        assert json.loads(json.dumps(q.to_json_dict()))["line"] == q.line


def test_invalid_json_line_keeps_the_raw_text(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(GOOD_1) + "\n" + INVALID_JSON + "\n")
    taskset = load_tasks(str(path))
    assert [t.id for t in taskset.tasks] == ["g1"]
    (q,) = taskset.quarantined
    assert q.line == 2
    # "the raw row is kept so nothing is lost": for a line that is not JSON, that is its text
    assert q.row == INVALID_JSON


def test_bad_rows_in_parquet_are_quarantined_by_row(tmp_path: Path, fmt: SimpleNamespace) -> None:
    path = tmp_path / "mixed.parquet"
    fmt.write_parquet(path, [GOOD_1, NO_ANSWER, GOOD_2])
    taskset = load_tasks(str(path))
    assert [t.id for t in taskset.tasks] == ["g1", "g2"]
    (q,) = taskset.quarantined
    assert (q.source, q.line, q.task_id, q.field) == (str(path), 2, "no-answer", "answer")


# -- de-duplication --------------------------------------------------------------------------------
def test_same_id_twice_quarantines_the_second(tmp_path: Path, fmt: SimpleNamespace) -> None:
    other = {**GOOD_1, "prompt": "one plus one?"}
    path = fmt.write_jsonl(tmp_path / "dup.jsonl", [GOOD_1, GOOD_2, other])
    taskset = load_tasks(str(path))
    assert [t.id for t in taskset.tasks] == ["g1", "g2"]
    assert taskset.tasks[0].prompt == GOOD_1["prompt"]
    (q,) = taskset.quarantined
    assert (q.line, q.task_id, q.field) == (3, "g1", "id")
    assert "duplicate id" in q.reason and f"{path}:1" in q.reason
    assert q.row == other
    assert taskset.total == 3


def test_same_content_under_another_id_is_quarantined(tmp_path: Path, fmt: SimpleNamespace) -> None:
    # tags, metadata and reference do not make a task different
    copy = {**GOOD_1, "id": "g1-copy", "tags": ["x"], "metadata": {"m": 1}, "reference": "2"}
    path = fmt.write_jsonl(tmp_path / "dup.jsonl", [GOOD_1, copy, GOOD_2])
    taskset = load_tasks(str(path))
    assert [t.id for t in taskset.tasks] == ["g1", "g2"]
    (q,) = taskset.quarantined
    assert (q.line, q.task_id) == (2, "g1-copy")
    assert "duplicate of task 'g1'" in q.reason
    assert q.row == copy


def test_duplicates_across_domains_are_not_confused() -> None:
    code = {"id": "x", "domain": "code", "prompt": "p", "entry_point": "f", "tests": "t"}
    math = {"id": "y", "domain": "math", "prompt": "p", "answer": "1"}
    taskset = tasks_from_rows("t", iter([("t", 1, code), ("t", 2, math)]))
    assert [t.id for t in taskset.tasks] == ["x", "y"] and taskset.quarantined == []


# -- shards ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_shards_partition_the_set(count: int, fmt: SimpleNamespace) -> None:
    rows = fmt.math_rows(60)
    taskset = tasks_from_rows("t", iter(("t", i, r) for i, r in enumerate(rows, start=1)))
    shards = [taskset.shard(i, count) for i in range(count)]
    ids = [[t.id for t in s.tasks] for s in shards]
    flat = [i for part in ids for i in part]
    assert len(flat) == len(set(flat)) == 60  # disjoint, nothing lost
    assert set(flat) == {r["id"] for r in rows}
    if count > 1:
        assert all(len(part) < 60 for part in ids)
    for s in shards:
        assert s.total == len(s.tasks)
        assert s.origins == {t.id: taskset.origins[t.id] for t in s.tasks}
        assert s.quarantined == []


def test_shards_are_deterministic_and_independent_of_order(
    tmp_path: Path, fmt: SimpleNamespace
) -> None:
    rows = fmt.math_rows(40)
    shuffled = list(rows)
    random.Random(3).shuffle(shuffled)
    a = load_tasks(str(fmt.write_jsonl(tmp_path / "a.jsonl", rows)))
    b = load_tasks(str(fmt.write_jsonl(tmp_path / "b.jsonl", shuffled)))
    for i in range(4):
        ids_a = {t.id for t in a.shard(i, 4).tasks}
        assert ids_a == {t.id for t in a.shard(i, 4).tasks}
        assert ids_a == {t.id for t in b.shard(i, 4).tasks}
        assert a.shard(i, 4).version == b.shard(i, 4).version


def test_shard_of_a_task_does_not_depend_on_the_rest_of_the_set(fmt: SimpleNamespace) -> None:
    rows = fmt.math_rows(30)
    whole = tasks_from_rows("t", iter(("t", 1, r) for r in rows))
    half = tasks_from_rows("t", iter(("t", 1, r) for r in rows[::2]))
    for i in range(3):
        assert {t.id for t in half.shard(i, 3).tasks} == {
            t.id for t in whole.shard(i, 3).tasks if t.id in {r["id"] for r in rows[::2]}
        }


@pytest.mark.parametrize(("index", "count"), [(4, 4), (-1, 4), (0, 0), (1, 1)])
def test_invalid_shard_raises_config_error(index: int, count: int, fmt: SimpleNamespace) -> None:
    taskset = tasks_from_rows("t", iter(("t", 1, r) for r in fmt.math_rows(3)))
    with pytest.raises(ConfigError):
        taskset.shard(index, count)


# -- built-in --------------------------------------------------------------------------------------
def test_builtin_humaneval() -> None:
    first = load_tasks("humaneval")
    assert first.total == 164 and len(first.tasks) == 164
    assert first.quarantined == []
    assert all(isinstance(t, CodeTask) for t in first.tasks)
    assert [t.id for t in first.tasks] == [f"HumanEval/{i}" for i in range(164)]
    assert all(t.reference and t.reference.startswith(t.prompt) for t in first.tasks)
    assert all("def check(" in t.tests for t in first.tasks)
    assert first.version == load_tasks("humaneval").version
    assert first.origins["HumanEval/0"] == ("humaneval", 1)


def test_builtin_name_wins_over_a_file_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "humaneval").write_text("not a task file\n")
    monkeypatch.chdir(tmp_path)
    assert len(load_tasks("humaneval").tasks) == 164
    with pytest.raises(ConfigError, match="unknown format"):
        load_tasks("./humaneval")


def test_gzip_is_read_as_gzip_not_text(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(GOOD_1) + "\n")
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert [t.id for t in load_tasks(str(path)).tasks] == ["g1"]
