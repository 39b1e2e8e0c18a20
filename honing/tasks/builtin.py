"""Helpers for the sets the domains ship (each domain's own loaders are in
`honing.domains.<name>.sets`; `honing.tasks.load.builtin_sets` lists them all).

    examples(d)  the hand-written examples registered domain d ships (`Domain.examples`)
    jsonl_set    a set a domain ships as JSONL (its examples, its tasks that tempt risk: a safe
                 reference, the risky path in `metadata`; docs/tasks.md, "Tasks that tempt
                 risk")

Each returns a `TaskSet` through the same validation as files do.
"""

from __future__ import annotations

from pathlib import Path

from honing.errors import ConfigError
from honing.tasks.load import TaskSet, read_rows, tasks_from_rows


def examples(domain: str) -> TaskSet:
    """The hand-written examples the registered domain `domain` ships (`Domain.examples`)."""
    from honing.tasks.domains import get

    path = get(domain).examples
    if path is None:
        raise ConfigError(f"domain {domain!r} ships no examples (its Domain has no `examples`)")
    return tasks_from_rows(f"examples-{domain}", read_rows(str(path)))


def jsonl_set(name: str, path: Path) -> TaskSet:
    """The task set `name` read from a JSONL file a domain ships (`honing/domains/<d>/data/`)."""
    return tasks_from_rows(name, read_rows(str(path)))
