"""The evaluator: k episodes of every task, each played by a `Player`, and the report of them.

    async with SandboxPool(config) as pool:
        report = await evaluate(load_tasks("humaneval"), make_policy("reference"), pool, k=1)
        report = await evaluate(taskset, EnginePlayer(engine, agent, name="model:…"), pool, k=4)
    report.end_to_end.success_rate, report.to_json_dict()

A player plays one episode of a task and records every step: a scripted `Policy` (wrapped in a
`PolicyPlayer` here) or a model (`honing.eval.model.EnginePlayer`). Every episode gets its own
environment from the registry, all on the one shared pool, at most `concurrency` at once (default:
the player's); the report is computed from the records alone. An infrastructure failure ends its
episode as one; any other exception stops the evaluation; a domain with no registered environment
is refused before anything runs. Not covered: storing the episodes (the trajectory store's job)
and retrying infrastructure failures (the scheduler's); both consume the same records.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from honing.envs import registry
from honing.envs.base import EnvConfig
from honing.errors import ConfigError, SandboxError
from honing.eval.metrics import (
    EndToEnd,
    Episode,
    SingleStep,
    Step,
    Tiers,
    Trajectory,
    by_domain,
    by_tag,
    pass_at_k_values,
    tiers,
)
from honing.eval.policies import Context, Policy
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask, TaskSet


@dataclass(frozen=True)
class EvalReport:
    """The three tiers over all episodes, and per domain and per tag."""

    policy: str
    tasks: str  # the task set's name
    version: str  # the task set's content version
    samples: int  # episodes per task (k)
    max_steps: int
    end_to_end: EndToEnd
    single_step: SingleStep
    trajectory: Trajectory
    by_domain: dict[str, Tiers]
    by_tag: dict[str, Tiers]
    elapsed_s: float

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_domains(tasks: Sequence[AnyTask]) -> None:
    """Refuse a task set with a domain no environment is registered for, naming it."""
    known = registry.environments()
    missing: dict[str, int] = {}
    for task in tasks:
        if task.domain not in known:
            missing[task.domain] = missing.get(task.domain, 0) + 1
    if missing:
        found = ", ".join(f"{d!r} ({n} tasks)" for d, n in sorted(missing.items()))
        available = ", ".join(sorted(known))
        raise ConfigError(
            f"cannot evaluate domain {found}: no environment is registered for it; "
            f"available: {available}"
        )


@runtime_checkable
class Player(Protocol):
    """Plays one episode of a task to its end, recording every step."""

    name: str  # the report's `policy`

    def default_concurrency(self, pool: SandboxPool) -> int:
        """Episodes at once when the caller names no number."""
        ...

    async def play(
        self, task: AnyTask, sample: int, pool: SandboxPool, config: EnvConfig
    ) -> Episode: ...


class PolicyPlayer:
    """A scripted `Policy` acting step by step; a sandbox exception ends the episode as an
    infrastructure failure."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name

    def default_concurrency(self, pool: SandboxPool) -> int:
        # Scripted policies answer at once: twice the cells keeps every cell busy while the host
        # side of other episodes (writing files, parsing verdicts) runs.
        return 2 * pool.config.size

    async def play(
        self, task: AnyTask, sample: int, pool: SandboxPool, config: EnvConfig
    ) -> Episode:
        """One episode of `task` to its end (or until the policy stops), recording each step."""
        env = registry.make_env(task.domain, pool, config)
        steps: list[Step] = []
        stopped, error = False, ""
        try:
            observation = await env.reset(task)
            while not env.done:
                action = await self.policy.act(Context(task, env, observation, tuple(steps)))
                if action is None:
                    stopped = True
                    break
                result = await env.step(action)
                steps.append(Step(observation, action, result))
                observation = result.observation
        except SandboxError as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            await env.close()
        return Episode(task.id, task.domain, tuple(task.tags), sample, tuple(steps), stopped, error)


def as_player(player: Player | Policy) -> Player:
    """`player` itself, or a scripted policy wrapped in a `PolicyPlayer`."""
    return player if isinstance(player, Player) else PolicyPlayer(player)


async def play_episodes(
    tasks: Sequence[AnyTask],
    player: Player | Policy,
    pool: SandboxPool,
    *,
    k: int = 1,
    config: EnvConfig | None = None,
    concurrency: int | None = None,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """`k` episodes of every task, in task order; `on_episode` hears of each as it ends."""
    if k < 1:
        raise ConfigError(f"k must be at least 1, not {k}")
    check_domains(tasks)
    playing = as_player(player)
    env_config = config or EnvConfig()
    limit = asyncio.Semaphore(concurrency or playing.default_concurrency(pool))

    async def one(task: AnyTask, sample: int) -> Episode:
        async with limit:
            episode = await playing.play(task, sample, pool, env_config)
        if on_episode is not None:
            on_episode(episode)
        return episode

    jobs = [asyncio.ensure_future(one(t, s)) for t in tasks for s in range(k)]
    try:
        return list(await asyncio.gather(*jobs))
    except BaseException:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise


def report(
    episodes: Sequence[Episode],
    *,
    policy: str,
    taskset: TaskSet,
    samples: int,
    max_steps: int,
    elapsed_s: float = 0.0,
) -> EvalReport:
    """The report of recorded episodes (pure: nothing is run)."""
    ks = pass_at_k_values(samples)
    overall = tiers(episodes, ks)
    return EvalReport(
        policy=policy,
        tasks=taskset.name,
        version=taskset.version,
        samples=samples,
        max_steps=max_steps,
        end_to_end=overall.end_to_end,
        single_step=overall.single_step,
        trajectory=overall.trajectory,
        by_domain={name: tiers(group, ks) for name, group in by_domain(episodes).items()},
        by_tag={name: tiers(group, ks) for name, group in by_tag(episodes).items()},
        elapsed_s=elapsed_s,
    )


async def evaluate(
    taskset: TaskSet,
    player: Player | Policy,
    pool: SandboxPool,
    *,
    k: int = 1,
    config: EnvConfig | None = None,
    concurrency: int | None = None,
    on_episode: Callable[[Episode], None] | None = None,
) -> EvalReport:
    """Run `k` episodes of every task of `taskset` with `player` and report the three tiers."""
    playing = as_player(player)
    env_config = config or EnvConfig()
    started = time.monotonic()
    episodes = await play_episodes(
        taskset.tasks,
        playing,
        pool,
        k=k,
        config=env_config,
        concurrency=concurrency,
        on_episode=on_episode,
    )
    return report(
        episodes,
        policy=playing.name,
        taskset=taskset,
        samples=k,
        max_steps=env_config.max_steps,
        elapsed_s=time.monotonic() - started,
    )
