"""Evaluation in three tiers: single step, trajectory, end to end (with pass@k).

    policies   the `Policy` protocol; scripted `reference` and `noop` policies
    metrics    the recorded `Step`/`Episode` and pure functions computing each tier
    runner     k episodes per task through the registered environments; the `EvalReport`
    model      the same for a model: an engine acting through the rollout agent loop
    summary    the closing summary of a stored rollout (success, pass@k, endings, time)

Covered: every registered domain, reported overall, per domain and per tag; infrastructure
failures counted apart from the policy's failures. Not covered yet: model-graded judgements of
single actions.
"""

from honing.eval.metrics import (
    EndToEnd,
    Episode,
    SingleStep,
    Step,
    Tiers,
    Trajectory,
    pass_at_k,
)
from honing.eval.policies import POLICIES, Context, NoopPolicy, Policy, ReferencePolicy, make_policy
from honing.eval.runner import (
    EvalReport,
    check_domains,
    evaluate,
    report,
    run_episode,
    run_episodes,
)

__all__ = [
    "POLICIES",
    "Context",
    "EndToEnd",
    "Episode",
    "EvalReport",
    "NoopPolicy",
    "Policy",
    "ReferencePolicy",
    "SingleStep",
    "Step",
    "Tiers",
    "Trajectory",
    "check_domains",
    "evaluate",
    "make_policy",
    "pass_at_k",
    "report",
    "run_episode",
    "run_episodes",
]
