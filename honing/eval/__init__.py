"""Evaluation in three tiers: single step, trajectory, end to end (with pass@k).

    policies   the `Policy` protocol; scripted `reference` and `noop` policies
    metrics    the recorded `Step`/`Episode` and pure functions computing each tier
    runner     the evaluator: k episodes per task, each played by a `Player` (`PolicyPlayer`:
               a scripted policy); the `EvalReport`
    model      `EnginePlayer`: a model playing through the rollout agent loop; `TeamPlayer`:
               the model as a team (honing.rollout.team), and its per-role `team_figures`
    config     `EvalConfig`: the settings behind `honing eval`
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
    Player,
    PolicyPlayer,
    check_domains,
    evaluate,
    play_episodes,
    report,
)

__all__ = [
    "POLICIES",
    "Context",
    "EndToEnd",
    "Episode",
    "EvalReport",
    "NoopPolicy",
    "Player",
    "Policy",
    "PolicyPlayer",
    "ReferencePolicy",
    "SingleStep",
    "Step",
    "Tiers",
    "Trajectory",
    "check_domains",
    "evaluate",
    "make_policy",
    "pass_at_k",
    "play_episodes",
    "report",
]
