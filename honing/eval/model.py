"""The engine players: a model plays each episode through the agent loop, alone or as a team.

    report = await evaluate(taskset, EnginePlayer(engine, agent, name="model:…"), pool, k=4)
    team = TeamPlayer(engine, agent, team_config, name="model:… · team")
    report = await evaluate(taskset, team, pool, k=4); figures = team_figures(team.trajectories)
    engines = await open_team_engines(team_config, models, "model:DIR", engine, load)  # own models

Each episode is played by the token-faithful agent loop (`run_episode`, `run_team_episode`) as
in training; every step that stands is an eval `Step`, so the tiers come from the same pure
functions as a scripted policy's. A team's steps are its executor's that stand (a submission the
validator sent back was rolled back: not a step). A team's roles share the policy's engine, or,
with models of their own (a team file's `models:`), play on a `RoleEngines`
(`open_team_engines`). An infrastructure failure (engine, sandbox) is counted apart, never as
the model's failure; an episode left unfinished (token budget, no action) counts as stopped.
Not covered: retries, storing the trajectories (`honing rollout`), and the risk of a submission
sent back (it ran; the executor's trajectory keeps it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from honing.envs import registry
from honing.envs.base import Action, EnvConfig, Observation, StepResult
from honing.eval.metrics import Episode, Step
from honing.observe.metrics import judged, team_summary
from honing.records import Ending, Trajectory
from honing.rollout.agent import AgentConfig, EnvLike, InfraFailure, run_episode
from honing.rollout.engines.base import Engine
from honing.rollout.team import RoleEngines, TeamConfig, run_team_episode
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask

OnStep = Callable[[Observation, Action, StepResult], None]


class EnginePlayer:
    """`engine` acting through the agent loop with `agent`. `on_trajectory` receives each
    episode's agent-loop trajectory (timings and tokens included; an infrastructure failure's
    partial one flagged `Ending.INFRA_ERROR`, `failure="infra:<stage>"`, as the scheduler does)."""

    CONCURRENCY = 32  # episodes at once by default: the engine decodes them together

    def __init__(
        self,
        engine: Engine,
        agent: AgentConfig,
        *,
        name: str,
        on_trajectory: Callable[[Trajectory], None] | None = None,
    ) -> None:
        self.engine, self.agent, self.name = engine, agent, name
        self.on_trajectory = on_trajectory

    def default_concurrency(self, pool: SandboxPool) -> int:
        return self.CONCURRENCY

    async def play(
        self, task: AnyTask, sample: int, pool: SandboxPool, config: EnvConfig
    ) -> Episode:
        """One episode of `task` played by the engine, every step recorded."""

        def run(env: EnvLike, record: OnStep) -> Awaitable[Trajectory]:
            return run_episode(task, env, self.engine, self.agent, sample=sample, on_step=record)

        return await _play(task, sample, pool, config, run, self.on_trajectory)


class TeamPlayer:
    """`engine` playing every role of `team` (honing.rollout.team), each on `agent`'s settings
    (as `honing train` does). The episode's steps are the executor's that stand. Every role's
    trajectory of every episode is kept in `trajectories` (for `team_figures`); `on_trajectory`
    receives each episode's executor trajectory, the other roles' in its `partners` (an
    infrastructure failure's partial ones flagged as `EnginePlayer` flags its)."""

    CONCURRENCY = EnginePlayer.CONCURRENCY

    def __init__(
        self,
        engine: Engine,
        agent: AgentConfig,
        team: TeamConfig,
        *,
        name: str,
        on_trajectory: Callable[[Trajectory], None] | None = None,
    ) -> None:
        self.engine, self.agent, self.team, self.name = engine, agent, team, name
        self.on_trajectory = on_trajectory
        self.trajectories: list[Trajectory] = []

    def default_concurrency(self, pool: SandboxPool) -> int:
        return self.CONCURRENCY

    async def play(
        self, task: AnyTask, sample: int, pool: SandboxPool, config: EnvConfig
    ) -> Episode:
        """One team episode of `task`, the executor's standing steps recorded."""

        def run(env: EnvLike, record: OnStep) -> Awaitable[Trajectory]:
            return run_team_episode(task, env, self.engine, self.team, self.agent,
                                    sample=sample, on_step=record)  # fmt: skip

        return await _play(task, sample, pool, config, run, self._heard)

    def _heard(self, lead: Trajectory) -> None:
        self.trajectories += [lead, *lead.partners]
        if self.on_trajectory is not None:
            self.on_trajectory(lead)


@dataclass
class TeamEngines:
    """What a team plays on (`open_team_engines`): `engine`, the policy's or a `RoleEngines`;
    `played`, the model each role played; `opened`, the engines opened for roles (`close`)."""

    engine: Engine
    played: dict[str, str]
    opened: list[Engine] = field(default_factory=list)

    async def close(self) -> None:
        """Close the engines opened for roles (not the policy's)."""
        for engine in self.opened:
            await engine.close()


async def open_team_engines(
    team: TeamConfig,
    models: Mapping[str, Path],
    policy: str,
    engine: Engine,
    load: Callable[[Path], Engine],
) -> TeamEngines:
    """The engines `team` plays on: `engine` (the policy's, named `policy`) for each role that
    `models` does not name; for each other, an engine `load`ed from its model directory (once per
    directory; the policy's own directory plays on `engine`). No models: `engine` itself."""
    if not models:
        return TeamEngines(engine, {r.role: policy for r in team.roles})
    own = Path(policy.removeprefix("model:")).resolve() if policy.startswith("model:") else None
    out = TeamEngines(engine, {})
    loaded: dict[Path, Engine] = {}
    engines: dict[str, Engine] = {}
    try:
        for role in team.roles:
            directory = models.get(role.role)
            if directory is None:
                engines[role.role], out.played[role.role] = engine, policy
                continue
            out.played[role.role] = f"model:{directory}"
            key = directory.resolve()
            if key == own:
                engines[role.role] = engine
                continue
            if key not in loaded:
                loaded[key] = load(directory)
                out.opened.append(loaded[key])
            engines[role.role] = loaded[key]
    except BaseException:
        await out.close()
        raise
    executor = team.role("executor")
    assert executor is not None  # TeamConfig has exactly one
    out.engine = RoleEngines(engines, executor.role)
    return out


async def _play(
    task: AnyTask,
    sample: int,
    pool: SandboxPool,
    config: EnvConfig,
    run: Callable[[EnvLike, OnStep], Awaitable[Trajectory]],
    heard: Callable[[Trajectory], None] | None,
) -> Episode:
    """One episode of `task` on a fresh environment, played by `run`, which records each step
    that stands; `heard` receives its trajectory (a partial one, flagged, on an infrastructure
    failure)."""
    env = registry.make_env(task.domain, pool, config)
    steps: list[Step] = []

    def record(observation: Observation, action: Action, result: StepResult) -> None:
        steps.append(Step(observation, action, result))

    tags = tuple(task.tags)
    try:
        trajectory = await run(env, record)
    except InfraFailure as exc:
        if heard is not None and exc.trajectory is not None:
            for t in [exc.trajectory, *exc.trajectory.partners]:  # no role of it was judged
                t.ending, t.failure, t.detail = Ending.INFRA_ERROR, f"infra:{exc.stage}", exc.cause
            heard(exc.trajectory)
        error = f"{exc.stage}: {exc.cause}"
        return Episode(task.id, task.domain, tags, sample, tuple(steps), error=error)
    if heard is not None:
        heard(trajectory)
    stopped = trajectory.ending in (Ending.STOPPED, Ending.CONTEXT_LIMIT, Ending.TIMEOUT)
    return Episode(task.id, task.domain, tags, sample, tuple(steps), stopped=stopped)


@dataclass(frozen=True)
class Figure:
    """One of a team's figures and what it is measured over."""

    value: float | None  # None: nothing to measure it on (n = 0)
    n: int


@dataclass(frozen=True)
class TeamFigures:
    """A team's per-role figures over its judged episodes: `honing.observe.metrics.TeamSummary`
    (its definitions), each figure with its n. The validator's verdicts are scored against the
    verifier's verdict on the same submission."""

    episodes: int  # judged team episodes
    precision: Figure  # right accepts / accepts (n: the validator's accepts)
    recall: Figure  # accepted right submissions / right submissions (n: those)
    verdict_accuracy: Figure  # right verdicts / reviews (n: the reviews)
    rounds: Figure  # mean reviews, over the episodes that ended accepted (n: those)
    accepted: Figure  # episodes that ended accepted / episodes with a review (n: those)
    reward: dict[str, Figure]  # mean reward per role (n: its judged trajectories)


def team_figures(trajectories: Sequence[Trajectory]) -> TeamFigures | None:
    """The `TeamFigures` of every role's trajectories (`TeamPlayer.trajectories`); None when
    no judged one was played by a team."""
    summary = team_summary(trajectories)
    if summary is None:
        return None
    scored = [t for t in judged(trajectories) if t.role]
    leads = [t for t in scored if "team_rounds" in t.components]
    counts: Counter[str] = Counter()
    for t in scored:
        for name in ("accepted_good", "accepted_bad", "rejected_good"):
            counts[name] += int(t.components.get(name, 0.0))
    ended_accepted = sum(t.components.get("team_accepted", 0.0) >= 1.0 for t in leads)
    roles = Counter(t.role for t in scored)
    return TeamFigures(
        episodes=summary.episodes,
        precision=Figure(summary.precision, counts["accepted_good"] + counts["accepted_bad"]),
        recall=Figure(summary.recall, counts["accepted_good"] + counts["rejected_good"]),
        verdict_accuracy=Figure(summary.verdict_accuracy, summary.reviews),
        rounds=Figure(summary.rounds, ended_accepted),
        accepted=Figure(
            summary.accepted, sum(t.components.get("team_rounds", 0.0) > 0 for t in leads)
        ),
        reward={role: Figure(r, roles[role]) for role, r in summary.reward.items()},
    )
