"""Loading task sets: JSONL, Parquet or a saved `datasets` directory, local or by fsspec URL.

    load_tasks("tasks.jsonl")              # or .jsonl.gz, .parquet, a datasets directory,
    load_tasks("s3://bucket/tasks.parquet") # any fsspec URL (memory:// in tests), or a built-in
    load_tasks("humaneval")                 # name: see `builtin_sets`

Covered: invalid rows, duplicate ids and duplicate content quarantined with where they came from
(never a stopped load), the version of a task set, and `question_key` (what a task asks, whatever
its wording); docs/tasks.md, "The modules in detail". Not covered: running references
(`honing.tasks.quality.verify_references`, which needs a sandbox).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from honing.errors import ConfigError
from honing.tasks.taskset import AnyTask as AnyTask  # re-exported: callers find them here
from honing.tasks.taskset import Quarantined as Quarantined
from honing.tasks.taskset import TaskSet as TaskSet
from honing.tasks.taskset import content_version as content_version
from honing.tasks.taskset import shard_of as shard_of


def load_tasks(spec: str) -> TaskSet:
    """Load a task set by built-in name, path or fsspec URL; bad rows are quarantined."""
    sets = builtin_sets()
    if spec in sets:
        return sets[spec]()
    return tasks_from_rows(spec, read_rows(spec))


def builtin_sets() -> dict[str, Callable[[], TaskSet]]:
    """The built-in task sets every domain brings: `synthetic-<generator>` (64 tasks, seed 0,
    held-out wording), `examples-<domain>`, and its own named sets."""
    from honing.tasks.domains import SYNTHETIC_SEED, SYNTHETIC_SIZE, Generator, registry

    out: dict[str, Callable[[], TaskSet]] = {}
    for domain in registry().values():
        for key, gen in domain.generators.items():
            name = f"synthetic-{key}"

            def synthetic(name: str = name, gen: Generator = gen) -> TaskSet:
                return as_taskset(name, list(gen(SYNTHETIC_SIZE, SYNTHETIC_SEED, "heldout")))

            out[name] = synthetic
        if domain.examples is not None:
            out[f"examples-{domain.name}"] = partial(
                jsonl_set, f"examples-{domain.name}", domain.examples
            )
        out.update(domain.sets)
    return out


def as_taskset(name: str, tasks: Iterable[AnyTask]) -> TaskSet:
    """Typed tasks as a `TaskSet`, through the same validation and de-duplication as files."""
    rows = ((name, i, t.model_dump(mode="json")) for i, t in enumerate(tasks, start=1))
    return tasks_from_rows(name, rows)


def jsonl_set(name: str, path: Path) -> TaskSet:
    """The task set `name` read from a JSONL file a domain ships (`honing/domains/<d>/data/`: its
    examples, its tasks that tempt risk; docs/tasks.md, "Tasks that tempt risk")."""
    return tasks_from_rows(name, read_rows(str(path)))


def tasks_from_rows(name: str, rows: Iterator[tuple[str, int | None, Any]]) -> TaskSet:
    """Validate and de-duplicate `(source, line, row)` triples into a `TaskSet`."""
    from honing.tasks.domains import task_adapter

    adapter = task_adapter()
    tasks: list[AnyTask] = []
    quarantined: list[Quarantined] = []
    seen_ids: dict[str, str] = {}
    seen_content: dict[str, str] = {}
    origins: dict[str, tuple[str, int | None]] = {}
    total = 0
    for source, line, row in rows:
        total += 1
        where = f"{source}:{line}" if line is not None else source
        if isinstance(row, UnreadableRow):
            quarantined.append(Quarantined(source, line, None, None, row.reason, row.raw))
            continue
        if not isinstance(row, dict):
            quarantined.append(Quarantined(source, line, None, None,
                                           f"a task must be an object, not {type(row).__name__}",
                                           row))  # fmt: skip
            continue
        task_id = row.get("id") if isinstance(row.get("id"), str) else None
        try:
            # Columnar formats have every column in every row: a null means "absent".
            task = adapter.validate_python(_without_nulls(row))
        except ValidationError as exc:
            errors = _field_errors(exc)
            fields = ", ".join(dict.fromkeys(f for f, _ in errors))
            reason = "; ".join(f"{f}: {m}" for f, m in errors)
            quarantined.append(Quarantined(source, line, task_id, fields, reason, row))
            continue
        if task.id in seen_ids:
            quarantined.append(
                Quarantined(
                    source, line, task.id, "id", f"duplicate id (first at {seen_ids[task.id]})", row
                )
            )
            continue
        key = _content_key(task)
        if key in seen_content:
            quarantined.append(
                Quarantined(
                    source, line, task.id, None, f"duplicate of task {seen_content[key]!r}", row
                )
            )
            continue
        seen_ids[task.id] = where
        seen_content[key] = task.id
        tasks.append(task)
        origins[task.id] = (source, line)
    return TaskSet(name, tasks, quarantined, total, origins)


@dataclass(frozen=True)
class UnreadableRow:
    """A row a reader could not parse, with its raw text, in place of the row."""

    reason: str
    raw: str


def _without_nulls(value: Any) -> Any:
    """Nulls in objects mean "absent" in every format: columnar files pad every row's objects
    with the keys of all rows, so dropping them is what makes formats load alike."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _content_key(task: AnyTask) -> str:
    content = task.model_dump(mode="json", exclude={"id", "tags", "metadata", "reference"})
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def question_key(task: AnyTask) -> str:
    """What `task` asks, whatever its wording: two tasks with the same key are the same problem.
    Its domain's `Domain.question_key` when it has one and it gives a key (math: the task's
    calculation, "Add 12 and 30" and "What is 30 plus 12?" one problem); else its domain and
    prompt."""
    from honing.tasks.domains import registry  # not at the top: no judge depends on it

    domain = registry().get(task.domain)
    own = domain.question_key(task) if domain is not None and domain.question_key else None
    return own if own is not None else f"{task.domain}:{task.prompt}"


def _field_errors(exc: ValidationError) -> list[tuple[str, str]]:
    """(field, message) per error, with pydantic's union tag stripped from the location."""
    from honing.tasks import domains

    out: list[tuple[str, str]] = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            allowed = ", ".join(domains.names())
            out.append(("domain", f"missing or unknown domain; allowed: {allowed}"))
            continue
        if loc and loc[0] in domains.registry():
            loc = loc[1:]
        fld = ".".join(loc) or None
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown field (see docs/tasks.md for each domain's fields)"
        elif err["type"] == "missing":
            message = "required field is missing"
        out.append((fld or "(row)", message))
    return out


# -- readers ---------------------------------------------------------------------------------
def read_rows(spec: str) -> Iterator[tuple[str, int | None, Any]]:
    """`(source, line, row)` for each row of a JSONL/Parquet file or datasets directory."""
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(spec)
    except (ValueError, ImportError) as exc:
        raise ConfigError(f"{spec}: cannot open: {exc}") from exc
    if not fs.exists(path):
        raise ConfigError(f"{spec}: no such file or directory (and not a built-in task set)")
    if fs.isdir(path):
        yield from _read_datasets_dir(fs, path, spec)
    elif path.endswith(".parquet"):
        yield from _read_parquet(fs, path, spec)
    elif path.endswith((".jsonl", ".jsonl.gz", ".json", ".ndjson")):
        yield from _read_jsonl(fs, path, spec)
    else:
        raise ConfigError(
            f"{spec}: unknown format; use .jsonl(.gz), .parquet or a `datasets` directory"
        )


def _read_jsonl(fs: Any, path: str, spec: str) -> Iterator[tuple[str, int | None, Any]]:
    with fs.open(path, "rb") as raw:
        stream = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
        try:
            for number, line in enumerate(stream, start=1):
                text = line.decode("utf-8", errors="replace").strip()
                if not text:
                    continue
                try:
                    yield spec, number, json.loads(text)
                except json.JSONDecodeError as exc:
                    reason = f"not valid JSON ({exc.msg} at column {exc.colno})"
                    yield spec, number, UnreadableRow(reason, text)
        except (OSError, EOFError, zlib.error) as exc:
            raise ConfigError(f"{spec}: not a readable gzip file: {exc}") from exc


def _read_parquet(fs: Any, path: str, spec: str) -> Iterator[tuple[str, int | None, Any]]:
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as f:
        try:
            table = pq.read_table(f)
        except Exception as exc:  # pyarrow raises several types for a corrupt file
            raise ConfigError(f"{spec}: not a readable Parquet file: {exc}") from exc
    for number, row in enumerate(table.to_pylist(), start=1):
        yield spec, number, row


def _read_datasets_dir(fs: Any, path: str, spec: str) -> Iterator[tuple[str, int | None, Any]]:
    """A directory written by `datasets.Dataset.save_to_disk` (Arrow stream files + state.json)."""
    import pyarrow as pa

    if fs.exists(f"{path}/dataset_dict.json"):
        with fs.open(f"{path}/dataset_dict.json", "rb") as f:
            splits = json.load(f).get("splits", [])
        raise ConfigError(f"{spec}: a DatasetDict; point at one split: "
                          + ", ".join(f"{spec.rstrip('/')}/{s}" for s in splits))  # fmt: skip
    if not fs.exists(f"{path}/state.json"):
        raise ConfigError(f"{spec}: a directory, but not one saved by `datasets` (no state.json)")
    with fs.open(f"{path}/state.json", "rb") as f:
        files = [d["filename"] for d in json.load(f).get("_data_files", [])]
    for name in files:
        with fs.open(f"{path}/{name}", "rb") as f:
            table = pa.ipc.open_stream(f).read_all()
        for number, row in enumerate(table.to_pylist(), start=1):
            yield f"{spec.rstrip('/')}/{name}", number, row
