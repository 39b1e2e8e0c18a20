"""Re-scoring a run without regenerating it (`honing store rescore RUN [--tasks SPEC]`).

    plan = plan_rescore(Path("runs/q8"))                   # tasks, env config, sandbox; checked
    async with SandboxPool(plan.sandbox) as pool:
        rows = await rescore_run(plan, pool, on_row=print)  # -> list[Rescore], in store order
    write_rescores(plan.run_dir, rows, plan.meta(rows))

Settings come from `RUN/config.yaml` (`honing train`: the train sources, `env` with `max_steps` =
`agent.max_turns` as the loop plays, the sandbox) or `RUN/rollout.json` (`honing rollout`: its
task set, `max_steps` = its `max_turns`); `--tasks SPEC` replaces the task sources. A stored task
that cannot be found, or a domain without an environment, is an error before anything runs.
Trajectories are replayed `concurrency` at a time, one shard in memory at a time.

Not covered: held-out evaluations (not in the store) and the warm start's traces.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from honing import __version__
from honing.config import SandboxConfig, validate_model
from honing.envs import registry
from honing.envs.base import EnvConfig
from honing.envs.verifiers import verifier_version
from honing.errors import ConfigError, HoningError
from honing.records import Trajectory
from honing.rollout.agent import AgentConfig
from honing.rollout.replay import replay
from honing.sandbox import SandboxPool
from honing.store.files import Shard, complete_shards
from honing.store.query import read_shard
from honing.store.rescore import Rescore, RescoreMeta
from honing.store.schema import from_table
from honing.tasks.load import AnyTask, TaskSet, load_tasks
from honing.trainer.run_dir import CONFIG_FILE, RunDir
from honing.trainer.sources import load_source

ROLLOUT_FILE = "rollout.json"  # honing.rollout.offline
_SHARD_SUFFIX = re.compile(r"\[\d+/\d+\]$")  # a sharded task set's name: `tasks[0/4]`


@dataclass(frozen=True)
class RescorePlan:
    """What a re-score replays, with what: resolved and checked before anything runs."""

    run_dir: Path
    tasks: dict[str, AnyTask]  # by id
    source: str  # where the tasks came from, for the record
    env: EnvConfig
    sandbox: SandboxConfig
    settings: dict[str, Any]  # the run's agent settings, for the record
    shards: list[Shard]  # the store as it was planned (a run still writing adds more)
    domains: list[str]

    @property
    def total(self) -> int:
        """Trajectories to replay."""
        return sum(s.rows for s in self.shards)

    def meta(self, rows: list[Rescore]) -> RescoreMeta:
        return RescoreMeta(
            run=str(self.run_dir),
            tasks=self.source,
            verifiers={d: verifier_version(d) for d in self.domains},
            settings={
                "env": self.env.model_dump(mode="json"),
                **self.settings,
                "sandbox": self.sandbox.model_dump(mode="json"),
            },
            created_at=time.time(),
            honing_version=__version__,
        )


def plan_rescore(
    run_dir: Path, tasks: str | None = None, *, isolation: str | None = None
) -> RescorePlan:
    """The tasks and settings to re-score `run_dir` with (see the module docstring); a
    `HoningError` that says what is missing and what to do."""
    shards = complete_shards(run_dir)  # StoreError: no run, no store, a damaged shard
    config_path, rollout_path = run_dir / CONFIG_FILE, run_dir / ROLLOUT_FILE
    settings: dict[str, Any]
    if config_path.is_file():
        config = RunDir(run_dir).config()
        env = config.env_config
        sandbox = config.sandbox
        settings = {"agent": config.agent.model_dump(mode="json")}
        sources: list[tuple[str, Callable[[], TaskSet]]] = [
            (f"{config_path} train.{name} ({source.tasks})",
             functools.partial(load_source, name, source))
            for name, source in config.train.items()
        ]  # fmt: skip
    elif rollout_path.is_file():
        agent, spec = _rollout_settings(rollout_path)
        env = EnvConfig(max_steps=agent.max_turns)
        sandbox = SandboxConfig()
        settings = {"agent": agent.model_dump(mode="json", exclude={"sampling", "deadlines"})}
        sources = [(f"{rollout_path} ({spec})", functools.partial(load_tasks, spec))]
    elif tasks is not None:
        env, sandbox, settings, sources = EnvConfig(), SandboxConfig(), {}, []
    else:
        raise ConfigError(
            f"{run_dir}: neither {CONFIG_FILE} (honing train) nor {ROLLOUT_FILE} (honing rollout) "
            "says where its tasks came from; give the task set with --tasks SPEC"
        )
    if tasks is not None:
        sources = [(f"--tasks {tasks}", functools.partial(load_tasks, tasks))]
    if isolation is not None:
        sandbox = validate_model(SandboxConfig, {**sandbox.model_dump(), "isolation": isolation},
                                 source="--isolation")  # fmt: skip
    by_id = _tasks_by_id(sources)
    ids, domains = _stored_ids(shards)
    _check(run_dir, ids, domains, by_id, "; ".join(s for s, _ in sources))
    return RescorePlan(
        run_dir=run_dir,
        tasks=by_id,
        source="; ".join(s for s, _ in sources),
        env=env,
        sandbox=sandbox,
        settings=settings,
        shards=shards,
        domains=sorted(domains),
    )


async def rescore_run(
    plan: RescorePlan,
    pool: SandboxPool,
    *,
    concurrency: int | None = None,
    on_row: Callable[[Rescore], None] | None = None,
) -> list[Rescore]:
    """Replay every stored trajectory (`concurrency` at a time; default twice the pool's cells);
    the rows in store order. `on_row` is called as each one finishes."""
    limit = asyncio.Semaphore(concurrency or 2 * plan.sandbox.size)
    rows: list[Rescore] = []

    async def one(trajectory: Trajectory) -> Rescore:
        async with limit:
            env = registry.make_env(trajectory.domain, pool, plan.env)
            row = await replay(trajectory, plan.tasks[trajectory.task_id], env,
                               verifier=verifier_version(trajectory.domain))  # fmt: skip
        if on_row is not None:
            on_row(row)
        return row

    for shard in plan.shards:
        trajectories = list(from_table(read_shard(shard)))
        rows += await asyncio.gather(*(one(t) for t in trajectories))
    return rows


def _rollout_settings(path: Path) -> tuple[AgentConfig, str]:
    """The agent settings and task set `honing rollout` recorded in `rollout.json`."""
    try:
        meta = json.loads(path.read_text())
        agent = validate_model(AgentConfig, meta["agent"], source=str(path))
        spec = _SHARD_SUFFIX.sub("", str(meta["tasks"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"{path}: not a readable rollout record ({type(exc).__name__}: {exc}); give the "
            "task set with --tasks SPEC"
        ) from exc
    return agent, spec


def _tasks_by_id(sources: list[tuple[str, Callable[[], TaskSet]]]) -> dict[str, AnyTask]:
    by_id: dict[str, AnyTask] = {}
    where: dict[str, str] = {}
    for name, load in sources:
        try:
            taskset = load()
        except HoningError as exc:
            raise ConfigError(f"{name}: cannot load the tasks: {exc}") from exc
        for task in taskset.tasks:
            if task.id in by_id and by_id[task.id] != task:
                raise ConfigError(
                    f"task {task.id!r} is in {where[task.id]} and, different, in {name}: which "
                    "one was played is unclear; give the task set with --tasks SPEC"
                )
            by_id.setdefault(task.id, task)
            where.setdefault(task.id, name)
    return by_id


def _stored_ids(shards: list[Shard]) -> tuple[dict[str, int], set[str]]:
    """Task ids (with their counts) and domains of the stored trajectories, from two columns."""
    ids: dict[str, int] = {}
    domains: set[str] = set()
    for shard in shards:
        table = read_shard(shard, ["task_id", "domain"])
        for task_id in table.column("task_id").to_pylist():
            ids[task_id] = ids.get(task_id, 0) + 1
        domains.update(table.column("domain").to_pylist())
    return ids, domains


def _check(run_dir: Path, ids: dict[str, int], domains: set[str], by_id: dict[str, AnyTask],
           source: str) -> None:  # fmt: skip
    known = registry.environments()
    unknown = sorted(d for d in domains if d not in known)
    if unknown:
        raise ConfigError(
            f"{run_dir}: trajectories of domain(s) {unknown} have no environment here (known: "
            f"{', '.join(sorted(known))})"
        )
    missing = [task_id for task_id in ids if task_id not in by_id]
    if missing:
        count = sum(ids[t] for t in missing)
        shown = ", ".join(repr(t) for t in missing[:5]) + (" …" if len(missing) > 5 else "")
        raise ConfigError(
            f"{run_dir}: {count} of {sum(ids.values())} stored trajectories are of "
            f"{len(missing)} task(s) not in {source or 'the given tasks'} ({shown}); give the "
            "task set they were played on with --tasks SPEC"
        )
