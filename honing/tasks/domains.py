"""The domain registry: a domain is one `register(Domain(...))`, and every per-domain table is
derived from it (the task union, the quality filter, the generators, the built-in sets, which
`honing.tasks.load.builtin_sets` lists).

    register(Domain(name="count", task=CountTask, env=CountEnv, check=play_references(CountEnv)))
    get("code").env, names(), task_adapter().validate_python(row), generators()

A domain module (`honing.domains.<name>`, or a user's own module) declares its task model, its
environment class, how its references are checked, its generators, its built-in sets and its
warm-start trace plan, and registers them once at import. The built-in domains and the
`honing.domains` entry points are imported the first time the registry is read: by name, as
plugins are, so no layer below them imports them. docs/envs.md, "Add a domain", walks through it.
Not covered: the environments themselves (`honing.envs`) and what each domain judges.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, Union

from pydantic import Field, TypeAdapter

from honing.errors import ConfigError
from honing.tasks.schema import (
    ReferenceVerdict as ReferenceVerdict,  # re-exported: what checks return
)
from honing.tasks.schema import TaskBase

if TYPE_CHECKING:
    from honing.sandbox import SandboxPool
    from honing.tasks.taskset import TaskSet

log = logging.getLogger(__name__)

BUILTIN_MODULE = "honing.domains"  # imports every built-in domain module
ENTRY_POINTS = "honing.domains"  # a package's own domains: `name = "pkg.module"`
SYNTHETIC_SIZE = 64  # tasks of a built-in synthetic-<key> set, and of a source without `count`
SYNTHETIC_SEED = 0  # their seed, unless the source gives one


ReferenceCheck = Callable[[Sequence[Any], "SandboxPool"], Awaitable[dict[str, ReferenceVerdict]]]


class Generator(Protocol):
    """A seeded task generator: the same `(n, seed)` gives the same tasks on any machine.
    `phrasings`: "train" words every task as training does; "heldout" words about half as
    training never does (a domain with one wording ignores it)."""

    def __call__(self, n: int, seed: int, phrasings: str) -> Sequence[Any]: ...


@dataclass(frozen=True)
class Domain:
    """Everything honing needs to know about one domain."""

    name: str
    task: type[TaskBase]  # its pydantic model; `domain: Literal[name]` tells rows apart
    env: Callable[..., Any]  # its Environment class: `env(pool, config)`
    # Judges each task given (with or without a reference) and returns a verdict per task it
    # judged; a task with a reference and no verdict is an error.
    check: ReferenceCheck
    generators: Mapping[str, Generator] = field(default_factory=dict)  # synthetic-<key>
    # The generators whose `phrasings="heldout"` words tasks as training never does (the
    # sources that take `phrasings`).
    heldout_wordings: tuple[str, ...] = ()
    # What a task asks, whatever its wording: two tasks with the same key are one problem, kept
    # apart across training and held-out sets (None, or a hook that returns None: its prompt).
    question_key: Callable[[Any], str | None] | None = None
    sets: Mapping[str, Callable[[], TaskSet]] = field(default_factory=dict)  # other built-ins
    examples: Path | None = None  # JSONL of hand-written examples: the set examples-<name>
    # Warm-start traces: (task, the env's reference actions) -> how to play it instead (None:
    # play the reference actions as they are).
    trace_plan: Callable[[Any, list[Any]], TracePlan | None] | None = None
    # Recovery traces: (task, the env's reference actions) -> a wrong first action the way a
    # policy gets it wrong, which the environment answers with an error (None: none for this
    # task). The warm start plays it, masked from the loss, then the reference: a second trace
    # of the task, beside its own (`warm_start.recovery_share`).
    slip: Callable[[Any, list[Any]], Any | None] | None = None
    # Teams: the tools whose calls submit the work for review (besides any action that ends the
    # episode); a team's `submit_tools` overrides them.
    submit_tools: tuple[str, ...] = ()
    # Team traces: (task, the reference's submitting action) -> plausible wrong versions of it,
    # most plausible first, for the validator to reject (None: a numeric answer one off, if any).
    wrong_submissions: Callable[[Any, Any], list[Any]] | None = None
    # Team traces: (task, a submitting action) -> one sentence on what it changes, the reason in
    # the scripted validator's verdict (None: "It submits the result shown.").
    describe_submission: Callable[[Any, Any], str] | None = None
    # (task, a solution) -> the solution and the task's tests as one plain program, no judge
    # around it: the load `honing sandbox humaneval` runs (None: the domain has none).
    plain_program: Callable[[Any, str], str] | None = None
    description: str = ""


_REGISTRY: dict[str, Domain] = {}
_LOCK = threading.RLock()
_discovered = False
_adapter: tuple[tuple[tuple[str, int], ...], TypeAdapter[Any]] | None = None


def register(domain: Domain) -> Domain:
    """Add `domain` (or replace the one of that name: a test's override); returns it."""
    fields = domain.task.model_fields
    tag = fields["domain"].default if "domain" in fields else None
    if tag != domain.name:
        raise ConfigError(
            f"domain {domain.name!r}: its task model {domain.task.__name__} must declare "
            f"`domain: Literal[{domain.name!r}] = {domain.name!r}` (found {tag!r})"
        )
    with _LOCK:
        _REGISTRY[domain.name] = domain
    return domain


def unregister(name: str) -> None:
    with _LOCK:
        _REGISTRY.pop(name, None)


@contextlib.contextmanager
def replaced(name: str, **changes: Any) -> Iterator[Domain]:
    """`name`'s domain with some of its parts replaced, until the block ends (tests: another
    judge, `replaced("math", env=LaxMathEnv)`)."""
    original = get(name)
    try:
        yield register(dataclasses.replace(original, **changes))
    finally:
        register(original)


def _discover() -> None:
    """Import the built-in domains and the entry points' once (each registers itself)."""
    global _discovered
    with _LOCK:
        if _discovered:
            return
        _discovered = True
        importlib.import_module(BUILTIN_MODULE)
        for point in entry_points(group=ENTRY_POINTS):
            try:
                point.load()
            except Exception as exc:  # a broken plugin must not stop honing
                log.warning("domain plugin %s (%s) failed to load: %s", point.name, point.value,
                            exc)  # fmt: skip


def registry() -> dict[str, Domain]:
    """Every registered domain, by name (a copy)."""
    _discover()
    with _LOCK:
        return dict(_REGISTRY)


def names() -> list[str]:
    return sorted(registry())


def get(name: str) -> Domain:
    """The domain called `name`; a ConfigError lists the registered ones."""
    found = registry().get(name)
    if found is None:
        raise ConfigError(
            f"no domain {name!r} is registered; available: {', '.join(names())} (a domain of "
            "your own: import its module, which calls honing.tasks.domains.register)"
        )
    return found


def task_adapter() -> TypeAdapter[Any]:
    """Validates a task row of any registered domain (told apart by its `domain` field)."""
    global _adapter
    domains = registry()
    key = tuple(sorted((n, id(d.task)) for n, d in domains.items()))
    with _LOCK:
        if _adapter is None or _adapter[0] != key:
            models = tuple(d.task for _, d in sorted(domains.items()))
            union: Any = models[0] if len(models) == 1 else Union[models]  # noqa: UP007
            _adapter = (key, TypeAdapter(Annotated[union, Field(discriminator="domain")]))
        return _adapter[1]


def phrased_sets() -> list[str]:
    """The synthetic sets whose held-out wording differs from training's (`synthetic-<key>` of each
    domain's `heldout_wordings`), sorted."""
    return sorted(f"synthetic-{key}" for d in registry().values() for key in d.heldout_wordings)


def generators() -> dict[str, Generator]:
    """Every domain's generators, by key (`synthetic-<key>` names the set)."""
    return {key: gen for d in registry().values() for key, gen in d.generators.items()}


@dataclass(frozen=True)
class TracePlan:
    """A domain's way to play a task's reference for warm-start traces: `actions` instead of
    the environment's reference actions, and `check_first`, which reads the first step's first
    tool result and says what is wrong with it (None: nothing)."""

    actions: list[Any]
    check_first: Callable[[str], str | None] | None = None
