"""Pricing risk in training: the shaped reward, the Lagrange multiplier's step, and the
exploration temperature of a task.

    shaped_rewards(outcomes, costs, weight)          outcome - weight * risk cost, per episode
    lagrange_step(multiplier, cost_mean, budget, lr) the multiplier after one update (dual ascent)
    explore_temperature(base, solve_rate, risk_rate, settings)  one task's sampling temperature

An episode's risk cost C is the sum of its risk events' severity costs (`honing.risk`: high 1,
medium 0.5, low 0.25), never part of the environment's reward. Two ways to use it:
- penalty: train on R - w C with a fixed weight w;
- constrained: maximise E[R] subject to E[C] <= budget b. The Lagrangian
  L(theta, lambda) = E[R - lambda C] + lambda b is maximised over theta (the policy trains on
  R - lambda C) and minimised over lambda >= 0 by projected gradient descent: dL/dlambda =
  b - E[C], so lambda <- clip(lambda + eta (E[C] - b), 0, lambda_max). lambda grows while the
  policy spends more risk than the budget and decays back to 0 once it spends less (the
  "learned multiplier" of constrained policy optimisation; Altman 1999, Tessler et al. 2019,
  Stooke et al. 2020 for the PID-damped variant, not used here).

Not covered: detecting risk (`honing.risk`, the sandbox, the environments), which trajectories
an update trains on, and keeping the multiplier between updates (`honing.trainer`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def shaped_rewards(outcomes: Tensor, costs: Tensor, weight: float) -> Tensor:
    """[N] rewards `outcomes - weight * costs`: what the advantages are computed from when risk
    is priced. Both [N]; a negative weight or cost, or a non-finite value, is an error."""
    if outcomes.shape != costs.shape:
        raise ValueError(
            f"outcomes of shape {tuple(outcomes.shape)} and costs of shape "
            f"{tuple(costs.shape)}: pass one cost per episode"
        )
    if not math.isfinite(weight) or weight < 0:
        raise ValueError(f"risk weight {weight}: must be finite and >= 0")
    if bool((costs < 0).any()) or not bool(torch.isfinite(costs).all()):
        raise ValueError("risk costs must be finite and >= 0 (a cost is a sum of severities)")
    return outcomes - weight * costs.to(outcomes.dtype)


def lagrange_step(
    multiplier: float, cost_mean: float, budget: float, lr: float, max_multiplier: float
) -> float:
    """The multiplier after one update: `clip(multiplier + lr * (cost_mean - budget), 0,
    max_multiplier)` (projected dual descent on the Lagrangian; module docstring)."""
    for name, value in (
        ("multiplier", multiplier),
        ("cost_mean", cost_mean),
        ("budget", budget),
        ("lr", lr),
        ("max_multiplier", max_multiplier),
    ):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} {value}: must be finite and >= 0")  # fmt: skip
    return min(max(multiplier + lr * (cost_mean - budget), 0.0), max_multiplier)


def explore_temperature(
    base: float,
    solve_rate: float | None,
    risk_rate: float | None,
    *,
    rarely: float,
    boost: float,
    caution: float,
    low: float,
    high: float,
    well_formed_rate: float | None = None,
    min_well_formed: float = 0.0,
) -> float:
    """One task's sampling temperature from its recent history.

    A task the policy rarely solves (solve rate below `rarely`) is sampled hotter, up to
    `base * (1 + boost)` for one never solved: more varied attempts where the current ones all
    fail. Only while at least `min_well_formed` of its recent episodes were well-formed (no
    malformed action): a policy that fails because it has drifted into writing malformed actions
    is not helped by sampling them more widely, so such a task keeps `base`. A task whose
    episodes often take risky actions is sampled cooler, by the factor `1 - caution *
    risk_rate`: risky attempts are where the policy should stay near what it already does. The
    result is clipped to [low, high]; a task without history (None) keeps `base` for that part.
    With boost = caution = 0 it is `base` (clipped).
    """
    if (base < 0 or not (0 <= rarely <= 1) or boost < 0 or not (0 <= caution <= 1) or low > high
            or not (0 <= min_well_formed <= 1)):  # fmt: skip
        raise ValueError(
            f"explore_temperature: base {base}, rarely {rarely}, boost {boost}, caution "
            f"{caution}, low {low}, high {high}, min_well_formed {min_well_formed}: need base, "
            "boost >= 0, rarely, caution and min_well_formed in [0, 1] and low <= high"
        )
    t = base
    sound = well_formed_rate is None or well_formed_rate >= min_well_formed
    if solve_rate is not None and rarely > 0 and solve_rate < rarely and sound:
        t *= 1.0 + boost * (rarely - solve_rate) / rarely
    if risk_rate is not None:
        t *= 1.0 - caution * min(max(risk_rate, 0.0), 1.0)
    return min(max(t, low), high)
