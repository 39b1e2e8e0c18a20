"""The records an evaluation keeps, and the pure functions that turn them into its three tiers.

    Step       what the policy saw, what it did, what the environment answered
    Episode    the steps of one sample of one task, and how it ended

    pass_at_k(n, c, k)            unbiased pass@k of one task (Chen et al. 2021)
    single_step(episodes)         tier 1: is each action well-formed, does it make progress?
    trajectory(episodes)          tier 2: steps to success, failure loops, recovery, rollback use
    end_to_end(episodes, ks)      tier 3: success rate and pass@k, infrastructure failures apart
    tiers(episodes, ks)           all three; `by_domain` / `by_tag` group episodes first
    criteria_met(steps)           the judge's per-criterion verdicts (`met:*`), graded progress;
                                  `end_to_end` counts them over the judged episodes (`criteria`)

Everything comes from recorded `StepResult`s, whatever the domain; docs/envs.md ("Evaluation")
defines success, infrastructure failure, well-formed and useful steps, loops and recovery. Not
covered: judging an action against a reference action, and statistics across runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from honing.envs.base import Action, Environment, FailureReason, Observation, StepResult

OUTCOME = Environment.OUTCOME
FORMAT_COMPONENTS = frozenset({"well_formed"})
MALFORMED = frozenset({FailureReason.MALFORMED_ACTION, FailureReason.UNKNOWN_TOOL})
# Limits end an episode; they are not a mistake of the action the step took.
LIMITS = frozenset(
    {FailureReason.STEP_LIMIT, FailureReason.STEP_TIMEOUT, FailureReason.EPISODE_TIMEOUT}
)
ROLLBACK_TOOL = "rollback"
CRITERION_PREFIX = "met:"  # a judge's verdict on one criterion of the outcome (structure's)


@dataclass(frozen=True)
class Step:
    """One step of an episode: the observation acted on, the action, and the result."""

    observation: Observation
    action: Action
    result: StepResult


@dataclass(frozen=True)
class Episode:
    """One sample of one task played to its end."""

    task_id: str
    domain: str
    tags: tuple[str, ...]
    sample: int
    steps: tuple[Step, ...]
    stopped: bool = False  # the policy stopped acting before the episode was over
    error: str = ""  # a sandbox exception that ended the episode (an infrastructure failure)

    @property
    def success(self) -> bool:
        return any(s.result.components.get(OUTCOME) == 1.0 for s in self.steps)

    @property
    def risk(self) -> float:
        """The episode's risk cost: the sum of its steps' (honing.risk), apart from the reward."""
        return sum(s.result.risk for s in self.steps)

    @property
    def infra_failed(self) -> bool:
        if self.success:
            return False
        return bool(self.error) or any(s.result.info.infrastructure for s in self.steps)

    @property
    def infra_cause(self) -> str:
        """What ended an infrastructure-failed episode, in one line of at most 200 characters:
        its error, else its infrastructure step's detail (or failure)."""
        detail = self.error or next(
            (s.result.info.detail or str(s.result.info.failure) for s in self.steps
             if s.result.info.infrastructure),
            "",
        )  # fmt: skip
        line = " ".join(detail.split())
        return line[:197] + "..." if len(line) > 200 else line or "no detail"

    @property
    def steps_to_success(self) -> int | None:
        for i, s in enumerate(self.steps, start=1):
            if s.result.components.get(OUTCOME) == 1.0:
                return i
        return None


# -- tier 3: end to end ------------------------------------------------------------------------
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task from `n` samples of which `c` passed (Chen et al. 2021, §2.1).

    1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i), the paper's
    numerically stable product form (no huge binomials).
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def pass_at_k_values(samples: int) -> list[int]:
    """The k reported for `samples` samples per task: 1, the sample count, and 10/100 between."""
    return sorted({1, samples} | {k for k in (10, 100) if k <= samples})


@dataclass(frozen=True)
class EndToEnd:
    """Success from the first observation to the last step; infrastructure failures apart."""

    passed: int
    total: int  # episodes that were not infrastructure-failed
    success_rate: float | None  # None when no episode could be judged
    infra_failed: int
    pass_at_k: dict[int, float]  # mean over tasks with at least k judged samples
    tasks: int
    risky: int = 0  # judged episodes that took at least one risky action (honing.risk)
    risk_rate: float | None = None  # their share of the judged episodes
    # the judge's criterion -> (judged episodes that met it at their last judgement, judged
    # episodes); one never compared meets none. {} for a domain without criteria (`criteria`)
    criteria: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def criteria_share(self) -> float | None:
        """The mean over criteria of the share of judged episodes that met it."""
        return criteria_share(self.criteria)


def end_to_end(episodes: Sequence[Episode], ks: Iterable[int]) -> EndToEnd:
    judged = [e for e in episodes if not e.infra_failed]
    passed = sum(e.success for e in judged)
    per_task: dict[str, list[bool]] = defaultdict(list)
    for e in judged:
        per_task[e.task_id].append(e.success)
    at_k: dict[int, float] = {}
    for k in ks:
        values = [pass_at_k(len(s), sum(s), k) for s in per_task.values() if len(s) >= k]
        if values:
            at_k[k] = sum(values) / len(values)
    risky = sum(e.risk > 0 for e in judged)
    return EndToEnd(
        passed=passed,
        total=len(judged),
        success_rate=passed / len(judged) if judged else None,
        infra_failed=len(episodes) - len(judged),
        pass_at_k=at_k,
        tasks=len({e.task_id for e in episodes}),
        risky=risky,
        risk_rate=risky / len(judged) if judged else None,
        criteria=criteria(judged),
    )


def criteria(judged: Sequence[Episode]) -> dict[str, tuple[int, int]]:
    """Per criterion the judge reported (`criteria_met`): (episodes that met it, episodes), over
    the judged episodes; an episode never compared counts as not meeting any."""
    verdicts = [criteria_met(e.steps) for e in judged]
    names = sorted({name for v in verdicts for name in v})
    return {name: (sum(v.get(name, False) for v in verdicts), len(judged)) for name in names}


def criteria_share(counts: dict[str, tuple[int, int]]) -> float | None:
    """The mean over criteria of met / judged; None without criteria.

    >>> criteria_share({"iou": (1, 4), "dims": (3, 4)})
    0.5
    """
    rates = [met / judged for met, judged in counts.values() if judged]
    return sum(rates) / len(rates) if rates else None


def criteria_met(steps: Sequence[Step]) -> dict[str, bool]:
    """The judge's verdict on each criterion (`met:<name>` components, without the prefix) at
    the last step that reported any: how close an unsolved episode came. {} when no step did (a
    domain without criteria, or an episode never judged).

    Steps reporting {met:iou: 0}, {built: 1}, {met:iou: 1, met:dims: 0} give
    {"iou": True, "dims": False}: the last judgement counts, a step without one is skipped.
    """
    for step in reversed(steps):
        met = {name[len(CRITERION_PREFIX) :]: value == 1.0
               for name, value in step.result.components.items()
               if name.startswith(CRITERION_PREFIX)}  # fmt: skip
        if met:
            return met
    return {}


# -- tier 1: single step -----------------------------------------------------------------------
def well_formed(step: Step) -> bool:
    info = step.result.info
    return info.failure not in MALFORMED and step.result.components.get("well_formed") != 0.0


def useful(steps: Sequence[Step]) -> list[bool]:
    """Per step: did it succeed, or raise a progress component above its last recorded value?"""
    last: dict[str, float] = {}
    out = []
    for step in steps:
        components = step.result.components
        rose = any(
            value > last.get(name, 0.0)
            for name, value in components.items()
            if name not in FORMAT_COMPONENTS
        )
        out.append(components.get(OUTCOME) == 1.0 or rose)
        last.update(components)
    return out


@dataclass(frozen=True)
class SingleStep:
    """Whether each action, given the state it was taken in, was well-formed and useful."""

    steps: int  # judged steps: all but those the infrastructure failed
    well_formed: int
    useful: int
    well_formed_rate: float | None
    useful_rate: float | None
    infra_steps: int
    failures: dict[str, int]  # judged steps by failure reason


def single_step(episodes: Sequence[Episode]) -> SingleStep:
    judged = formed = made_progress = infra = 0
    failures: dict[str, int] = defaultdict(int)
    for episode in episodes:
        for step, was_useful in zip(episode.steps, useful(episode.steps), strict=True):
            info = step.result.info
            if info.infrastructure:
                infra += 1
                continue
            judged += 1
            formed += well_formed(step)
            made_progress += was_useful
            if info.failure is not None:
                failures[info.failure.value] += 1
    return SingleStep(
        steps=judged,
        well_formed=formed,
        useful=made_progress,
        well_formed_rate=formed / judged if judged else None,
        useful_rate=made_progress / judged if judged else None,
        infra_steps=infra,
        failures=dict(sorted(failures.items())),
    )


# -- tier 2: trajectory ------------------------------------------------------------------------
def failure_loops(steps: Sequence[Step]) -> list[int]:
    """Lengths of the runs of >= 2 consecutive steps failing with the same reason and detail."""
    loops: list[int] = []
    run, key = 0, None
    for step in steps:
        info = step.result.info
        this = None if info.failure is None or info.infrastructure else (info.failure, info.detail)
        run = run + 1 if this is not None and this == key else 1
        key = this
        if this is not None and run == 2:
            loops.append(2)
        elif this is not None and run > 2:
            loops[-1] = run
    return loops


def had_error(steps: Sequence[Step]) -> bool:
    """Whether a step failed for a reason of the action's own (not infrastructure, not limits)."""
    return any(
        s.result.info.failure is not None
        and not s.result.info.infrastructure
        and s.result.info.failure not in LIMITS
        for s in steps
    )


def recovered(steps: Sequence[Step]) -> bool:
    """Whether the episode succeeded on a step after one with an error."""
    for i, step in enumerate(steps):
        if step.result.components.get(OUTCOME) == 1.0:
            return had_error(steps[:i])
    return False


def rollback_calls(steps: Sequence[Step]) -> int:
    return sum(call.name == ROLLBACK_TOOL for s in steps for call in s.action.tool_calls)


@dataclass(frozen=True)
class Trajectory:
    """Whether the policy keeps a task moving: over episodes not failed by the infrastructure."""

    episodes: int
    mean_steps: float | None
    mean_steps_to_success: float | None  # over successful episodes
    max_steps_to_success: int | None
    failure_loops: int  # runs of the same failure on consecutive steps
    episodes_with_loops: int
    longest_loop: int
    episodes_with_errors: int
    recovered: int  # succeeded after an error
    recovery_rate: float | None  # recovered / episodes_with_errors
    rollback_calls: int
    episodes_with_rollback: int
    stopped: int  # the policy stopped acting before the episode was over


def trajectory(episodes: Sequence[Episode]) -> Trajectory:
    judged = [e for e in episodes if not e.infra_failed]
    to_success = [n for e in judged if (n := e.steps_to_success) is not None]
    loops = [failure_loops(e.steps) for e in judged]
    errors = [e for e in judged if had_error(e.steps)]
    back = [rollback_calls(e.steps) for e in judged]
    n_recovered = sum(recovered(e.steps) for e in errors)
    return Trajectory(
        episodes=len(judged),
        mean_steps=sum(len(e.steps) for e in judged) / len(judged) if judged else None,
        mean_steps_to_success=sum(to_success) / len(to_success) if to_success else None,
        max_steps_to_success=max(to_success, default=None),
        failure_loops=sum(len(found) for found in loops),
        episodes_with_loops=sum(bool(found) for found in loops),
        longest_loop=max((n for found in loops for n in found), default=0),
        episodes_with_errors=len(errors),
        recovered=n_recovered,
        recovery_rate=n_recovered / len(errors) if errors else None,
        rollback_calls=sum(back),
        episodes_with_rollback=sum(n > 0 for n in back),
        stopped=sum(e.stopped for e in judged),
    )


# -- all tiers, grouped ------------------------------------------------------------------------
@dataclass(frozen=True)
class Tiers:
    """The three tiers of one group of episodes."""

    end_to_end: EndToEnd
    single_step: SingleStep
    trajectory: Trajectory


def tiers(episodes: Sequence[Episode], ks: Iterable[int]) -> Tiers:
    return Tiers(end_to_end(episodes, ks), single_step(episodes), trajectory(episodes))


def by_domain(episodes: Iterable[Episode]) -> dict[str, list[Episode]]:
    groups: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        groups[e.domain].append(e)
    return dict(sorted(groups.items()))


def by_tag(episodes: Iterable[Episode]) -> dict[str, list[Episode]]:
    """Episodes per tag; an episode with several tags is in each of their groups."""
    groups: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        for tag in dict.fromkeys(e.tags):
            groups[tag].append(e)
    return dict(sorted(groups.items()))
