"""The closing summary of a rollout: outcomes, pass@k, endings, failures, time and tokens.

    summary = summarize(run_dir)          # or summarize(trajectories)
    print(format_summary(summary))

The definitions are the evaluation's end-to-end tier (`honing.eval.metrics`): infrastructure
failures counted apart and left out of success rates, mean rewards and pass@k; endings,
failures and mean times over all trajectories (docs/envs.md, "Evaluation"). From a run
directory only the scalar columns are read, so summarizing a large store is cheap. Not covered
here: the tiers that need each step's records (well-formed and useful steps, failure loops),
which `honing eval` computes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from honing.eval.metrics import pass_at_k, pass_at_k_values
from honing.records import Ending, Trajectory
from honing.store.files import complete_shards
from honing.store.query import read_shard


@dataclass(frozen=True)
class _Row:
    """What a summary needs of one trajectory (the scalar columns of its row)."""

    task_id: str
    domain: str
    success: bool
    ending: str
    failure: str | None
    reward: float
    generation_s: float
    env_s: float
    queue_s: float
    total_s: float
    n_tokens: int
    model_tokens: int
    steps: int
    n_retries: int

    @property
    def infra_failed(self) -> bool:
        return self.ending == Ending.INFRA_ERROR.value


@dataclass(frozen=True)
class Outcome:
    """Success of a set of trajectories, infrastructure failures apart."""

    trajectories: int
    tasks: int
    infra_failed: int
    judged: int
    passed: int
    success_rate: float | None  # None when nothing could be judged
    mean_reward: float | None
    pass_at_k: dict[int, float]


@dataclass(frozen=True)
class RolloutSummary:
    overall: Outcome
    by_domain: dict[str, Outcome]
    endings: dict[str, int]
    failures: dict[str, int]  # failure reason -> trajectories it ended
    retries: int  # retried attempts, all trajectories together
    mean_steps: float | None
    mean_generation_s: float | None
    mean_env_s: float | None
    mean_queue_s: float | None
    mean_total_s: float | None
    tokens: int
    model_tokens: int


def summarize(source: str | Path | Sequence[Trajectory]) -> RolloutSummary:
    """The summary of a run directory's store or of trajectories in memory."""
    if isinstance(source, str | Path):
        return _summarize(_rows_of_store(Path(source)))
    return _summarize([_row_of(t) for t in source])


def _row_of(t: Trajectory) -> _Row:
    return _Row(
        task_id=t.task_id,
        domain=t.domain,
        success=t.success,
        ending=Ending(t.ending).value,
        failure=t.failure,
        reward=t.reward,
        generation_s=t.generation_s,
        env_s=t.env_s,
        queue_s=t.queue_s,
        total_s=t.total_s,
        n_tokens=len(t.token_ids),
        model_tokens=t.model_tokens,
        steps=t.steps,
        n_retries=len(t.retries),
    )


def _rows_of_store(run_dir: Path) -> list[_Row]:
    names = [f.name for f in fields(_Row)]
    rows = []
    for shard in complete_shards(run_dir):
        for values in read_shard(shard, names).to_pylist():
            rows.append(_Row(**values))
    return rows


def _summarize(rows: Sequence[_Row]) -> RolloutSummary:
    domains: dict[str, list[_Row]] = defaultdict(list)
    for r in rows:
        domains[r.domain].append(r)
    failures = Counter(r.failure for r in rows if r.failure is not None)
    return RolloutSummary(
        overall=_outcome(rows),
        by_domain={d: _outcome(rs) for d, rs in sorted(domains.items())},
        endings=dict(sorted(Counter(r.ending for r in rows).items())),
        failures=dict(sorted(failures.items())),
        retries=sum(r.n_retries for r in rows),
        mean_steps=_mean(r.steps for r in rows),
        mean_generation_s=_mean(r.generation_s for r in rows),
        mean_env_s=_mean(r.env_s for r in rows),
        mean_queue_s=_mean(r.queue_s for r in rows),
        mean_total_s=_mean(r.total_s for r in rows),
        tokens=sum(r.n_tokens for r in rows),
        model_tokens=sum(r.model_tokens for r in rows),
    )


def _outcome(rows: Sequence[_Row]) -> Outcome:
    judged = [r for r in rows if not r.infra_failed]
    passed = sum(r.success for r in judged)
    per_task: dict[str, list[bool]] = defaultdict(list)
    for r in judged:
        per_task[r.task_id].append(r.success)
    most = max((len(s) for s in per_task.values()), default=0)
    at_k: dict[int, float] = {}
    if most > 1:
        for k in pass_at_k_values(most):
            values = [pass_at_k(len(s), sum(s), k) for s in per_task.values() if len(s) >= k]
            at_k[k] = sum(values) / len(values)
    return Outcome(
        trajectories=len(rows),
        tasks=len({r.task_id for r in rows}),
        infra_failed=len(rows) - len(judged),
        judged=len(judged),
        passed=passed,
        success_rate=passed / len(judged) if judged else None,
        mean_reward=_mean(r.reward for r in judged),
        pass_at_k=at_k,
    )


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return sum(items) / len(items) if items else None


# -- text --------------------------------------------------------------------------------------
def format_summary(summary: RolloutSummary) -> str:
    """A few lines for the end of `honing rollout`."""
    o = summary.overall
    lines = [
        f"{o.trajectories} trajectories · {o.tasks} tasks · {_outcome_text(o)}",
    ]
    if len(summary.by_domain) > 1:
        lines.append(
            "by domain: "
            + " · ".join(
                f"{d or '(none)'} {_outcome_text(x)}" for d, x in summary.by_domain.items()
            )
        )
    lines.append("endings: " + _counts(summary.endings))
    if summary.failures:
        lines.append("failures: " + _counts(summary.failures))
    lines.append(
        f"per trajectory: {_num(summary.mean_steps)} steps, generation "
        f"{_secs(summary.mean_generation_s)}, env {_secs(summary.mean_env_s)}, queue "
        f"{_secs(summary.mean_queue_s)}, total {_secs(summary.mean_total_s)} · tokens "
        f"{summary.tokens:,} ({summary.model_tokens:,} generated) · retries {summary.retries}"
    )
    return "\n".join(lines)


def _outcome_text(o: Outcome) -> str:
    rate = "n/a" if o.success_rate is None else f"{o.success_rate:.1%}"
    text = f"success {rate} ({o.passed}/{o.judged}; infra failures {o.infra_failed})"
    if o.mean_reward is not None:
        text += f" · mean reward {o.mean_reward:.3f}"
    if o.pass_at_k:
        text += " · " + " ".join(f"pass@{k} {v:.3f}" for k, v in o.pass_at_k.items())
    return text


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _secs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}s"
