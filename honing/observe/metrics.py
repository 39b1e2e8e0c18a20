"""What one update's trajectories say, as numbers: pure functions from records to metrics.

    m = update_metrics(trajectories, learner_version=3, learner=stats_dict,
                       timings=Timings(rollout_s=12.0, update_s=3.0, sync_s=0.2))
    signal = learning_signal(groups)          # how many groups could teach anything
    signal_warning(recent_signals, entropy)   # a warning when most could not, several times
    m.scalars["train/success/domain/math"], m.histograms["reward/all"]
    outcomes(trajectories)                    # success and mean reward, infra failures apart
    risk_summary(trajectories)                # risk rate and mean risk cost, by domain and tag
    team_summary(trajectories)                # a team's validator precision/recall, rounds
    episode_fields(trajectory, split="train", set="math", staleness=0)   # an `episode` event

docs/observability.md lists the scalar and histogram names ("Metric names") and how a failure
is named. Success and reward figures are over the judged episodes: an infrastructure failure is
never a reward of 0. Not covered: where the numbers go (`honing.observe.sinks`), the event log
(`honing.observe.events`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from honing.records import ROLE_CREDIT, Ending, Group, Trajectory


@dataclass(frozen=True)
class Timings:
    """Wall seconds of one update's phases."""

    rollout_s: float
    update_s: float
    sync_s: float


@dataclass(frozen=True)
class Metrics:
    """One step's scalars and histograms (raw values; the sink bins them)."""

    scalars: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, list[float]] = field(default_factory=dict)


def failure_reason(trajectory: Trajectory) -> str | None:
    """Why an episode failed: its failure, else its ending; None when it succeeded."""
    if trajectory.success:
        return None
    if trajectory.failure:
        return trajectory.failure
    if trajectory.ending is Ending.DONE:
        return "unsolved"  # judged, not solved, no failure named (a wrong final answer)
    return trajectory.ending.value


SANDBOX_ERROR = "sandbox_error"  # the FailureReason an environment gives a failed sandbox


def sandbox_errors(trajectory: Trajectory) -> int:
    """The episode's attempts that a sandbox failure ended: its retries whose cause is a
    `sandbox_error`, and its last attempt when the infrastructure failed it for one (the
    agent raises `InfraFailure("step", "sandbox_error: ...")`; the scheduler keeps the cause)."""
    retried = sum(1 for r in trajectory.retries if r.cause.startswith(SANDBOX_ERROR))
    last = trajectory.infrastructure_failed and f"{SANDBOX_ERROR}:" in trajectory.detail
    return retried + int(last)


def unaided(trajectory: Trajectory) -> bool:
    """Whether the episode called no tool but `answer` (an answer from memory, not worked out
    with the environment's tools)."""
    return all(
        call.get("function", {}).get("name") == "answer"
        for turn in trajectory.turns
        if turn.role == "assistant"
        for call in turn.tool_calls
    )


def staleness(trajectory: Trajectory, learner_version: int) -> int | None:
    """Policy versions between the tokens and the learner that trains on them (None: the episode
    generated nothing)."""
    if trajectory.policy_version < 0:
        return None
    return learner_version - trajectory.policy_version


def staleness_counts(values: Iterable[int | None]) -> dict[str, int]:
    """`{"<lag>": count}` of the known values, in lag order (the `update` event's field)."""
    counts = Counter(v for v in values if v is not None)
    return {str(lag): counts[lag] for lag in sorted(counts)}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def judged(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """The episodes the environment judged: all but those the infrastructure failed
    (`Trajectory.infrastructure_failed`), which success and reward figures leave out."""
    return [t for t in trajectories if not t.infrastructure_failed]


@dataclass(frozen=True)
class Outcomes:
    """Success rate and mean reward over a batch's judged episodes (None: it has none), and the
    episodes left out of both because the infrastructure failed them."""

    success: float | None
    reward: float | None
    infra_failures: int


def outcomes(trajectories: Sequence[Trajectory]) -> Outcomes:
    """The `Outcomes` of `trajectories`: the trainer's per-update report and `train/success`,
    `train/reward`, `train/infra_failures` are this."""
    scored = judged(trajectories)
    return Outcomes(
        success=_mean([float(t.success) for t in scored]) if scored else None,
        reward=_mean([t.reward for t in scored]) if scored else None,
        infra_failures=len(trajectories) - len(scored),
    )


@dataclass(frozen=True)
class RiskSummary:
    """The risk of a batch's judged episodes (None: it has none): the share that took at least
    one risky action (`rate`), their mean risk cost (`cost`), and the events by kind."""

    rate: float | None
    cost: float | None
    events: dict[str, int]


def acting(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """The trajectories that acted in the environment: a single agent's, and of a team episode
    its executor's (the one with `team_rounds`), whose steps are what the environment kept. The
    other roles' are the same episode seen from elsewhere: counted beside it, they would dilute
    a team's risk rate by its number of roles."""
    return [t for t in trajectories if not t.role or "team_rounds" in t.components]


def risk_summary(trajectories: Sequence[Trajectory]) -> RiskSummary:
    """Over the judged episodes that acted (`acting`): a team's risk is its executor's steps'."""
    scored = acting(judged(trajectories))
    return RiskSummary(
        rate=_mean([float(t.risk > 0) for t in scored]) if scored else None,
        cost=_mean([t.risk for t in scored]) if scored else None,
        events=dict(sorted(Counter(e.name for t in scored for e in t.risks).items())),
    )


def risk_scalars(trajectories: Sequence[Trajectory], prefix: str = "risk") -> dict[str, float]:
    """`risk/rate`, `risk/cost`, and per domain, tag and event kind (`risk/rate/domain/<d>`,
    `risk/rate/tag/<t>`, `risk/events/<kind>`) of the judged episodes."""
    s: dict[str, float] = {}
    scored = acting(judged(trajectories))
    summary = risk_summary(scored)
    if summary.rate is None or summary.cost is None:
        return s
    s[f"{prefix}/rate"] = summary.rate
    s[f"{prefix}/cost"] = summary.cost
    for domain, group in _by(scored, lambda t: [t.domain]).items():
        s[f"{prefix}/rate/domain/{domain}"] = _mean([float(t.risk > 0) for t in group])
    for tag, group in _by(scored, lambda t: t.tags).items():
        s[f"{prefix}/rate/tag/{tag}"] = _mean([float(t.risk > 0) for t in group])
    for name, count in summary.events.items():
        s[f"{prefix}/events/{name}"] = float(count)
    return s


@dataclass(frozen=True)
class TeamSummary:
    """A team's figures over its judged episodes (honing.rollout.team). The validator's verdicts
    are scored against the verifier's on the same submission, "positive" meaning accepted:
    precision is the share of its accepts that were right, recall the share of right submissions
    it accepted. `rounds` is the mean number of reviews in the episodes whose last submission was
    accepted (rounds to acceptance); `accepted` the share of episodes that ended accepted."""

    episodes: int  # team episodes (executor trajectories)
    reviews: int
    precision: float | None
    recall: float | None
    verdict_accuracy: float | None
    rounds: float | None
    accepted: float | None
    reward: dict[str, float]  # mean reward per role


def team_summary(trajectories: Sequence[Trajectory]) -> TeamSummary | None:
    """The `TeamSummary` of the judged team trajectories among `trajectories` (each role's, as
    `honing.records.by_role` leaves them); None when none was played by a team."""
    scored = [t for t in judged(trajectories) if t.role]
    if not scored:
        return None
    leads = [t for t in scored if "team_rounds" in t.components]
    counts: Counter[str] = Counter()
    for t in scored:
        for name in ("accepted_good", "accepted_bad", "rejected_good", "rejected_bad"):
            counts[name] += int(t.components.get(name, 0.0))
    accepts = counts["accepted_good"] + counts["accepted_bad"]
    good = counts["accepted_good"] + counts["rejected_good"]
    reviews = sum(counts.values())
    right = counts["accepted_good"] + counts["rejected_bad"]
    ended_accepted = [t for t in leads if t.components.get("team_accepted", 0.0) >= 1.0]
    reviewed = [t for t in leads if t.components.get("team_rounds", 0.0) > 0]
    by_role = _by(scored, lambda t: [t.role])
    return TeamSummary(
        episodes=len(leads),
        reviews=reviews,
        precision=counts["accepted_good"] / accepts if accepts else None,
        recall=counts["accepted_good"] / good if good else None,
        verdict_accuracy=right / reviews if reviews else None,
        rounds=_mean([t.components["team_rounds"] for t in ended_accepted])
        if ended_accepted
        else None,
        accepted=len(ended_accepted) / len(reviewed) if reviewed else None,
        reward={role: _mean([t.reward for t in group]) for role, group in by_role.items()},
    )


def team_scalars(trajectories: Sequence[Trajectory], prefix: str = "team") -> dict[str, float]:
    """`team/precision`, `team/recall`, `team/verdict_accuracy`, `team/rounds`,
    `team/accepted`, `team/reviews` and `team/reward/<role>`, for those that were measured."""
    summary = team_summary(trajectories)
    if summary is None:
        return {}
    s = {f"{prefix}/reviews": float(summary.reviews)}
    for name in ("precision", "recall", "verdict_accuracy", "rounds", "accepted"):
        value = getattr(summary, name)
        if value is not None:
            s[f"{prefix}/{name}"] = value
    s.update({f"{prefix}/reward/{role}": r for role, r in summary.reward.items()})
    return s


def _by(trajectories: Iterable[Trajectory], keys: Any) -> dict[str, list[Trajectory]]:
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        for key in keys(t):
            groups[key].append(t)
    return dict(sorted(groups.items()))


def update_metrics(
    trajectories: Sequence[Trajectory],
    *,
    learner_version: int,
    learner: Mapping[str, float | int | bool],
    timings: Timings,
    busy_fraction: float | None = None,
) -> Metrics:
    """The scalars and histograms of one update (see the module docstring for the names).
    `learner_version`: the learner's version when it trained on them (for staleness)."""
    s: dict[str, float] = {}
    h: dict[str, list[float]] = {}
    scored = judged(trajectories)
    summary = outcomes(trajectories)
    if trajectories:
        s["train/infra_failures"] = float(summary.infra_failures)
    if summary.success is not None and summary.reward is not None:
        s["train/success"] = summary.success
        s["train/reward"] = summary.reward
        h["reward/all"] = [t.reward for t in scored]
    for domain, group in _by(scored, lambda t: [t.domain]).items():
        s[f"train/success/domain/{domain}"] = _mean([float(t.success) for t in group])
        s[f"train/reward/domain/{domain}"] = _mean([t.reward for t in group])
        h[f"reward/domain/{domain}"] = [t.reward for t in group]
    for tag, group in _by(scored, lambda t: t.tags).items():
        s[f"train/success/tag/{tag}"] = _mean([float(t.success) for t in group])
        s[f"train/reward/tag/{tag}"] = _mean([t.reward for t in group])
        h[f"reward/tag/{tag}"] = [t.reward for t in group]
    components: dict[str, list[float]] = defaultdict(list)
    for t in scored:
        for name, value in t.components.items():
            components[name].append(value)
    for name, values in sorted(components.items()):
        s[f"train/reward/component/{name}"] = _mean(values)
        h[f"reward/component/{name}"] = values
    s.update(risk_scalars(scored))
    s.update(team_scalars(scored))
    if actors := acting(scored):
        h["risk/cost"] = [t.risk for t in actors]
    answered = [t for t in scored if "outcome" in t.components]
    for domain, group in _by(answered, lambda t: [t.domain]).items():
        s[f"train/unaided_answers/domain/{domain}"] = _mean([float(unaided(t)) for t in group])
    reasons = Counter(r for r in map(failure_reason, trajectories) if r is not None)
    for reason, count in sorted(reasons.items()):
        s[f"train/failures/{reason}"] = float(count)
    retries = Counter(r.stage for t in trajectories for r in t.retries)
    for stage, count in sorted(retries.items()):
        s[f"retries/{stage}"] = float(count)
    lags = [v for v in (staleness(t, learner_version) for t in trajectories) if v is not None]
    if lags:
        s["staleness/mean"] = _mean([float(v) for v in lags])
        s["staleness/max"] = float(max(lags))
        h["staleness"] = [float(v) for v in lags]
    s["time/rollout_s"] = timings.rollout_s
    s["time/update_s"] = timings.update_s
    s["time/sync_s"] = timings.sync_s
    if trajectories:
        s["time/generation_per_sample_s"] = _mean([t.generation_s for t in trajectories])
        s["time/queue_wait_s"] = _mean([t.queue_s for t in trajectories])
    steps = [turn for t in trajectories for turn in t.turns if turn.role == "tool"]
    if steps:
        s["time/env_step_s"] = _mean([turn.step_s for turn in steps])
    tools: dict[str, list[float]] = defaultdict(list)
    for turn in steps:
        for tool, seconds in turn.tool_s.items():
            tools[tool].append(seconds)
    for tool, values in sorted(tools.items()):
        s[f"time/tool/{tool}_s"] = _mean(values)
    if timings.rollout_s > 0:
        tokens = sum(t.model_tokens for t in trajectories)
        s["throughput/tokens_per_s"] = tokens / timings.rollout_s
        s["throughput/episodes_per_s"] = len(trajectories) / timings.rollout_s
    for name, value in learner.items():
        if isinstance(value, int | float):  # bools too, as 0/1
            s[f"learner/{name}"] = float(value)
    if busy_fraction is not None:
        s["sandbox/busy_fraction"] = busy_fraction
    return Metrics(scalars=s, histograms=h)


def eval_scalars(
    set_name: str,
    success: float | None,
    well_formed: float | None,
    risk_rate: float | None = None,
    prefix: str = "eval",
) -> dict[str, float]:
    """`eval/<set>/success`, `eval/<set>/well_formed` and `eval/<set>/risk_rate`, for the values
    that were measured (`prefix`: `validation` for a validation set)."""
    out = {}
    if success is not None:
        out[f"{prefix}/{set_name}/success"] = success
    if well_formed is not None:
        out[f"{prefix}/{set_name}/well_formed"] = well_formed
    if risk_rate is not None:
        out[f"{prefix}/{set_name}/risk_rate"] = risk_rate
    return out


def episode_fields(
    trajectory: Trajectory, *, split: str, set: str, staleness: int | None
) -> dict[str, Any]:
    """The fields of one `episode` event (docs/observability.md)."""
    t = trajectory
    tool_s: dict[str, float] = defaultdict(float)
    for turn in t.turns:
        for tool, seconds in turn.tool_s.items():
            tool_s[tool] += seconds
    return {
        "split": split,
        "set": set,
        "task_id": t.task_id,
        "domain": t.domain,
        "tags": list(t.tags),
        "sample": t.sample,
        "role": t.role,
        "success": t.success,
        "reward": t.reward,
        "components": dict(t.components),
        "risk": t.risk,
        "risks": [e.to_json_dict() for e in t.risks],
        "ending": t.ending.value,
        "failure": failure_reason(t),
        "detail": t.detail,
        "retries": [{"stage": r.stage, "cause": r.cause} for r in t.retries],
        "sandbox_errors": sandbox_errors(t),
        "generation_s": t.generation_s,
        "env_s": t.env_s,
        "queue_s": t.queue_s,
        "total_s": t.total_s,
        "turns": sum(1 for turn in t.turns if turn.role == "assistant"),
        "model_tokens": t.model_tokens,
        "gen_s": [turn.generation_s for turn in t.turns if turn.role == "assistant"],
        "step_s": [turn.step_s for turn in t.turns if turn.role == "tool"],
        "tool_s": dict(sorted(tool_s.items())),
        "policy_version": t.policy_version,
        "staleness": staleness,
    }


@dataclass(frozen=True)
class Signal:
    """How much one update's groups could teach: GRPO learns only from groups whose rewards
    differ."""

    groups: int  # groups with a judged episode (one the infrastructure did not fail)
    zero_variance: int  # groups whose judged rewards are all equal
    all_failed: int  # ... of them, every judged sample unsuccessful
    all_solved: int  # ... of them, every judged sample successful
    reward_mean: float | None  # over the update's judged episodes; None: there are none
    reward_std: float | None  # ... (population std)
    # The sampling distribution's entropy per model token, estimated over every judged episode
    # (dropped groups too) as the mean of -log p of the sampled tokens (the engine's logprobs,
    # at the sampling temperature); None without model tokens. The learner's `entropy` covers
    # only the groups it kept, and nothing when it kept none.
    sampled_entropy: float | None = None
    # Extra draws of groups_per_step tasks the update played because too few of its groups had
    # a signal (honing.trainer.run_config.Refill); `groups` counts theirs too.
    refills: int = 0

    @property
    def zero_variance_share(self) -> float:
        return self.zero_variance / self.groups if self.groups else 0.0

    def scalars(self) -> dict[str, float]:
        """The per-update scalars (see the module docstring)."""
        n = max(1, self.groups)
        scalars = {
            "signal/zero_variance_share": self.zero_variance_share,
            "signal/all_failed_share": self.all_failed / n,
            "signal/all_solved_share": self.all_solved / n,
        }
        if self.reward_std is not None:
            scalars["train/reward_std"] = self.reward_std
        if self.sampled_entropy is not None:
            scalars["signal/sampled_entropy"] = self.sampled_entropy
        return scalars


def learning_signal(groups: Sequence[Group], risk_weight: float = 0.0) -> Signal:
    """The update's `Signal` over its judged episodes (an infrastructure failure is no reward):
    zero-variance groups (equal rewards, as dynamic sampling drops them), split by whether they
    all failed or all succeeded, and the reward's mean and std. With risk priced, a reward is
    the episode's reward less `risk_weight` times its risk cost, as the learner sees it."""
    kept = [scored for g in groups if (scored := judged(g.trajectories))]

    def value(t: Trajectory) -> float:
        reward = t.components.get(ROLE_CREDIT, t.reward)  # a team role: what it is trained on
        return reward - risk_weight * t.risk if risk_weight else reward

    flat = [value(t) for g in kept for t in g]
    zero = [g for g in kept if len({value(t) for t in g}) == 1]
    mean = _mean(flat) if flat else None
    std = None if mean is None else (sum((r - mean) ** 2 for r in flat) / len(flat)) ** 0.5
    surprise = [-lp for g in kept for t in g
                for lp, m in zip(t.logprobs, t.loss_mask, strict=False) if m]  # fmt: skip
    return Signal(
        groups=len(kept),
        zero_variance=len(zero),
        all_failed=sum(1 for g in zero if not any(t.success for t in g)),
        all_solved=sum(1 for g in zero if all(t.success for t in g)),
        reward_mean=mean,
        reward_std=std,
        sampled_entropy=_mean(surprise) if surprise else None,
    )


LOW_ENTROPY = 0.1  # mean token entropy (nats) under which sampling barely varies


def signal_warning(
    history: Sequence[Signal], entropy: float | None, *, after: int = 3, share: float = 0.5
) -> str | None:
    """A warning when each of the last `after` updates had more than `share` of its groups with
    equal rewards, said once per such streak (at the update that completes it), naming the
    likely causes; None otherwise. `entropy`: the policy's mean token entropy at the last one."""

    def starved(signal: Signal) -> bool:
        return signal.groups > 0 and signal.zero_variance_share > share

    recent = history[-after:]
    if len(recent) < after or not all(starved(s) for s in recent):
        return None
    if len(history) > after and starved(history[-after - 1]):
        return None  # the same streak: already said
    zero = sum(s.zero_variance for s in recent)
    total = sum(s.groups for s in recent)
    failed, solved = sum(s.all_failed for s in recent), sum(s.all_solved for s in recent)
    causes = []
    if failed * 2 >= zero:
        causes.append(
            f"{failed} of them failed every sample: the tasks are too hard for the policy "
            "(easier tasks, a warm start, or larger groups: n)"
        )
    if solved * 2 >= zero:
        causes.append(
            f"{solved} of them solved every sample: the tasks are too easy (harder tasks)"
        )
    if not causes:
        causes.append(
            "their rewards are equal without all failing or all succeeding: check the "
            "environment's reward components"
        )
    if entropy is not None and entropy < LOW_ENTROPY:
        causes.append(
            f"the policy's entropy is {entropy:.3f}: it samples nearly the same answer every "
            "time (raise agent.temperature)"
        )
    return (
        f"little learning signal: in each of the last {after} updates more than "
        f"{100 * share:.0f}% of the groups had equal rewards ({zero} of {total} groups), and "
        f"GRPO learns nothing from those; {'; '.join(causes)}"
    )
