"""Task sources of a training run: loading a configured source, and keeping held-out sets unseen.

    load_source(name, TaskSource(tasks="synthetic-math", count=256, seed=1))   -> TaskSet
    load_source(name, source, heldout=True)   -> a held-out set (about half in unseen wordings)
    warm_start_tasks(config.warm_start)   -> the trace tasks: `traces` and `extra_traces`
    without_overlap(heldout, [train, ...], chats)   -> the held-out tasks nothing trained on asks
    heldout_sets(config)   -> a run's held-out sets as `honing train` evaluates them
    validation_sets(config)   -> its validation sets (held-out tasks left out too)
    TaskMixer(sets, weights, seed).draw(step, names, count, cursors)   -> an update's tasks
    TaskMixer(...).draw(step, names, count, cursors, curriculum)   -> too easy/hard ones deferred
    TaskMixer(...).draw(..., refill=R)   -> the update's R-th extra draw (`refill`)

A held-out task is left out when a training task asks the same (`honing.tasks.load.question_key`:
the same calculation in other words counts), or when its prompt appears in a user message of the
warm start's chat data (`warm_start.data`), where only the wording is known, or of the traces of
another run's warm start when the run starts from that warm start's model
(`model: RUN/warm_start/model`, `starting_traces`).

Not covered: the phases that name the sources of each update (`honing.trainer.run_config`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from pathlib import Path

from honing.errors import ConfigError
from honing.tasks import domains
from honing.tasks.load import AnyTask, TaskSet, load_tasks, question_key
from honing.trainer.curriculum import Curriculum
from honing.trainer.run_config import SYNTHETIC_PREFIX, TaskSource, TrainConfig, WarmStart
from honing.trainer.run_dir import DONE_FILE

log = logging.getLogger(__name__)


def load_source(name: str, source: TaskSource, *, heldout: bool = False) -> TaskSet:
    """The tasks of one configured source, filtered by tags and limit; never empty. About half
    of a held-out synthetic source with held-out wordings (`honing.tasks.domains.phrased_sets`)
    is worded as training never is, unless its `phrasings` says otherwise."""
    if source.tasks.startswith(SYNTHETIC_PREFIX):
        from honing.tasks.synthetic import as_taskset

        phrasings = source.phrasings or ("heldout" if heldout else "train")
        generators = domains.generators()
        key = source.tasks.removeprefix(SYNTHETIC_PREFIX)
        if key not in generators:
            raise ConfigError(
                f"{name}: unknown synthetic task set {source.tasks!r} (allowed: "
                f"{', '.join(SYNTHETIC_PREFIX + d for d in generators)})"
            )
        count = source.count or domains.SYNTHETIC_SIZE
        seed = domains.SYNTHETIC_SEED if source.seed is None else source.seed
        named = source.count or source.seed is not None
        generated = list(generators[key](count, seed, phrasings))
        taskset = as_taskset(f"{source.tasks}/{seed}" if named else source.tasks, generated)
    else:
        taskset = load_tasks(source.tasks)
    tasks = taskset.tasks
    if source.tags:
        tasks = [t for t in tasks if set(t.tags) & set(source.tags)]
    if source.limit is not None:
        tasks = tasks[: source.limit]
    if not tasks:
        raise ConfigError(
            f"task source {name!r} ({source.tasks}) has no tasks"
            + (f" with tags {source.tags}" if source.tags else "")
        )
    return TaskSet(taskset.name, tasks, taskset.quarantined, taskset.total, taskset.origins)


def warm_start_tasks(warm: WarmStart) -> TaskSet:
    """The warm start's trace tasks: those of `traces`, then those of each `extra_traces` source
    that are not already there (by id: the same generator and seed twice gives the same tasks)."""
    if warm.traces is None:
        raise ConfigError("warm_start has no traces (it trains on warm_start.data)")
    first = load_source("warm_start", warm.traces)
    if not warm.extra_traces:
        return first
    tasks, quarantined = list(first.tasks), list(first.quarantined)
    origins, total, names = dict(first.origins), first.total, [first.name]
    ids = {t.id for t in tasks}
    for i, source in enumerate(warm.extra_traces):
        extra = load_source(f"warm_start.extra_traces[{i}]", source)
        new = [t for t in extra.tasks if t.id not in ids]
        ids.update(t.id for t in new)
        tasks += new
        quarantined += extra.quarantined
        origins.update({t.id: extra.origins[t.id] for t in new if t.id in extra.origins})
        total += extra.total
        names.append(extra.name + (f" {source.tags}" if source.tags else ""))
        log.debug("warm start: %d more trace tasks from %s (%d already there)",
                  len(new), names[-1], len(extra.tasks) - len(new))  # fmt: skip
    return TaskSet(" + ".join(names), tasks, quarantined, total, origins)


def without_overlap(
    heldout: TaskSet, train: Sequence[TaskSet], chats: Sequence[str] = (), kind: str = "held-out"
) -> TaskSet:
    """The held-out tasks that no training task asks (`question_key`: the same problem in other
    words is the same task) and whose prompt no text of `chats` (user messages trained on)
    contains; the number dropped is logged. A held-out set must be unseen."""
    seen = {question_key(t) for ts in train for t in ts.tasks}
    said = "\0".join(chats)  # one search per task; a prompt holds no NUL, so none spans two
    kept = [
        t for t in heldout.tasks if question_key(t) not in seen and not (said and t.prompt in said)
    ]
    if len(kept) < len(heldout.tasks):
        log.info(
            "%s %s: %d task(s) also asked in training or the warm start%s, left out",
            kind,
            heldout.name,
            len(heldout.tasks) - len(kept),
            " or a held-out set" if kind == "validation" else "",
        )
    if not kept:
        raise ConfigError(
            f"{kind} set {heldout.name!r}: every task is also asked in training or the warm "
            f"start{' or a held-out set' if kind == 'validation' else ''}; use another seed or "
            "source for it"
        )
    return TaskSet(heldout.name, kept, heldout.quarantined, heldout.total, heldout.origins)


def heldout_sets(config: TrainConfig, limit: int | None = None) -> dict[str, TaskSet]:
    """The run's held-out sets as `honing train` evaluates them: tasks that training or the warm
    start (its traces, or the user messages of its chat data) asks are left out; the first
    `limit` tasks of each when given."""
    seen, chats = _trained_on(config)
    return _unseen(config.heldout, seen, chats, limit)


def validation_sets(config: TrainConfig, limit: int | None = None) -> dict[str, TaskSet]:
    """The run's validation sets as `honing train` evaluates them: as `heldout_sets`, and the
    tasks a held-out set asks are left out too (nothing is chosen on the held-out tasks)."""
    if not config.validation:
        return {}
    seen, chats = _trained_on(config)
    heldout = list(heldout_sets(config).values())
    return _unseen(config.validation, [*seen, *heldout], chats, limit, "validation")


def _trained_on(config: TrainConfig) -> tuple[list[TaskSet], list[str]]:
    """The task sets training and the warm start ask, and the user messages of its chat data
    (and of the traces of another run's warm start that `model` names: `starting_traces`)."""
    seen = [load_source(n, s) for n, s in config.train.items()]
    chats: list[str] = []
    warm = config.warm_start
    if warm is not None and warm.traces is not None:
        seen.append(warm_start_tasks(warm))
    data = [str(warm.data)] if warm is not None and warm.data is not None else []
    traces = starting_traces(config.model)
    if traces is not None:
        data.append(str(traces))
    if data:
        from honing.trainer.sft import load_chat_data  # torch: only when a run has chat data

        examples = [e for path in data for e in load_chat_data(path)]
        chats = [m.content for e in examples for m in e.messages if m.role == "user"]
    return seen, chats


def starting_traces(model: str) -> Path | None:
    """The traces a run's warm start trained `model` on, when `model` is that warm start's model
    (`RUN/warm_start/model`, finished: its done.json beside it) and it was trained on traces:
    a run that starts from another run's warm start leaves those tasks out of its held-out sets
    too. None for any other model (a built-in name, an export, a checkpoint)."""
    directory = Path(model)
    if directory.name != "model" or not directory.is_dir():
        return None
    traces = directory.parent / "traces.jsonl"
    if (directory.parent / DONE_FILE).is_file() and traces.is_file():
        log.info("held-out sets: the tasks of %s (%s's warm start) are left out too", traces,
                 model)  # fmt: skip
        return traces
    return None


def _unseen(
    sources: dict[str, TaskSource],
    seen: list[TaskSet],
    chats: list[str],
    limit: int | None,
    kind: str = "held-out",
) -> dict[str, TaskSet]:
    sets = {}
    for name, source in sources.items():
        taskset = without_overlap(load_source(name, source, heldout=True), seen, chats, kind)
        if limit is not None:
            taskset.tasks = taskset.tasks[:limit]
        sets[name] = taskset
    return sets


class TaskMixer:
    """Draws the tasks of each update: a source per slot by weight, then that source's next task
    in a seeded permutation (a new one each epoch). A pure function of (seed, step, cursors), and
    of the curriculum's records when one is given."""

    def __init__(self, sources: dict[str, TaskSet], weights: dict[str, float], seed: int) -> None:
        self.sources = sources
        self.weights = weights
        self.seed = seed
        self._orders: dict[tuple[str, int], list[int]] = {}  # the last epoch's of each source

    def _order(self, name: str, epoch: int) -> list[int]:
        order = self._orders.get((name, epoch))
        if order is None:
            order = list(range(len(self.sources[name].tasks)))
            random.Random(f"{self.seed}:{name}:{epoch}").shuffle(order)
            self._orders = {k: v for k, v in self._orders.items() if k[0] != name}
            self._orders[(name, epoch)] = order
        return order

    def draw(
        self,
        step: int,
        names: Sequence[str],
        count: int,
        cursors: dict[str, tuple[int, int]],
        curriculum: Curriculum | None = None,
        refill: int = 0,
    ) -> list[tuple[str, AnyTask]]:
        """`count` (source, task) pairs for update `step`; advances `cursors` in place. With a
        `curriculum`, a task it does not `keep` is passed over to its source's next epoch (at
        most a whole permutation's worth in one slot: then the next task is taken anyway).
        `refill` R > 0: the update's R-th extra draw (`refill`), its sources chosen afresh."""
        key = f"{step}" if not refill else f"{step}:refill:{refill}"
        rng = random.Random(f"{self.seed}:step:{key}")
        chosen = rng.choices(list(names), weights=[self.weights[n] for n in names], k=count)
        deferring = random.Random(f"{self.seed}:curriculum:{key}")
        out = []
        for name in chosen:
            tasks = self.sources[name].tasks
            for passed in range(len(tasks) + 1):
                epoch, pos = cursors.get(name, (0, 0))
                task = tasks[self._order(name, epoch)[pos]]
                pos += 1
                if pos == len(tasks):
                    epoch, pos = epoch + 1, 0
                cursors[name] = (epoch, pos)
                if (
                    curriculum is None
                    or passed == len(tasks)
                    or curriculum.keep(curriculum.key(name, task), deferring)
                ):
                    break
            out.append((name, task))
        return out
