"""The risk pricing math, against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from honing.rl.logprobs import token_logprobs
from honing.rl.risk import explore_temperature, lagrange_step, shaped_rewards


def test_shaped_rewards_take_the_weighted_cost_off_the_outcome() -> None:
    outcomes = torch.tensor([1.0, 1.0, 0.0, 0.0])
    costs = torch.tensor([0.0, 1.5, 0.5, 0.0])  # a high + a medium event; one medium
    got = shaped_rewards(outcomes, costs, 0.5)
    assert got.tolist() == [1.0, 0.25, -0.25, 0.0]
    assert shaped_rewards(outcomes, costs, 0.0).tolist() == outcomes.tolist()


@pytest.mark.parametrize(
    ("costs", "weight", "message"),
    [
        (torch.tensor([0.0, -1.0]), 1.0, "finite and >= 0"),
        (torch.tensor([0.0, math.nan]), 1.0, "finite and >= 0"),
        (torch.tensor([0.0, 0.0]), -0.1, "risk weight"),
        (torch.tensor([0.0]), 1.0, "one cost per episode"),
    ],
)
def test_shaped_rewards_refuse_bad_input(costs: torch.Tensor, weight: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        shaped_rewards(torch.tensor([1.0, 0.0]), costs, weight)


def test_lagrange_step_is_projected_dual_descent() -> None:
    # over budget: 0.5 + 2 * (0.30 - 0.05) = 1.0
    assert lagrange_step(0.5, 0.30, 0.05, 2.0, 5.0) == pytest.approx(1.0)
    # under budget it decays: 1.0 + 2 * (0.0 - 0.05) = 0.9
    assert lagrange_step(1.0, 0.0, 0.05, 2.0, 5.0) == pytest.approx(0.9)
    # never below 0, never above the cap
    assert lagrange_step(0.05, 0.0, 0.05, 2.0, 5.0) == 0.0
    assert lagrange_step(4.5, 1.0, 0.05, 2.0, 5.0) == 5.0
    with pytest.raises(ValueError, match="budget"):
        lagrange_step(1.0, 0.1, math.inf, 1.0, 5.0)


def test_lagrange_multiplier_settles_where_cost_meets_budget() -> None:
    """A toy policy whose risk cost falls as the price rises (cost = 0.4 / (1 + 4 lambda)):
    the multiplier climbs until the cost is at the budget, then holds."""
    multiplier = 0.0
    for _ in range(300):
        cost = 0.4 / (1 + 4 * multiplier)
        multiplier = lagrange_step(multiplier, cost, 0.1, 0.5, 10.0)
    assert 0.4 / (1 + 4 * multiplier) == pytest.approx(0.1, abs=1e-3)
    assert multiplier == pytest.approx(0.75, abs=1e-2)  # 0.4 / (1 + 4 * 0.75) = 0.1


def test_explore_temperature() -> None:
    kw = {"rarely": 0.25, "boost": 0.5, "caution": 0.5, "low": 0.3, "high": 1.5}
    assert explore_temperature(1.0, None, None, **kw) == 1.0  # no history
    assert explore_temperature(1.0, 0.0, 0.0, **kw) == 1.5  # never solved: 1 * (1 + 0.5)
    # solved 12.5%: halfway below `rarely` -> 1 + 0.5 * 0.5 = 1.25
    assert explore_temperature(1.0, 0.125, 0.0, **kw) == pytest.approx(1.25)
    assert explore_temperature(1.0, 0.5, 0.0, **kw) == 1.0  # solved often enough
    # risky half the time: 1 * (1 - 0.5 * 0.5) = 0.75
    assert explore_temperature(1.0, 0.5, 0.5, **kw) == pytest.approx(0.75)
    # both: 1.5 * (1 - 0.5) = 0.75; and clipped at `low`
    assert explore_temperature(1.0, 0.0, 1.0, **kw) == pytest.approx(0.75)
    assert explore_temperature(0.5, 1.0, 1.0, **kw) == 0.3
    off = {**kw, "boost": 0.0, "caution": 0.0}
    assert explore_temperature(0.8, 0.0, 1.0, **off) == 0.8
    with pytest.raises(ValueError, match="low <= high"):
        explore_temperature(1.0, 0.0, 0.0, **{**kw, "low": 2.0})


def test_explore_temperature_heats_only_tasks_played_well_formed() -> None:
    kw = {"rarely": 0.25, "boost": 0.5, "caution": 0.5, "low": 0.3, "high": 1.5}
    guard = {**kw, "min_well_formed": 0.5}
    # never solved, 3 of 4 episodes well-formed: heated as before, 1 * (1 + 0.5)
    assert explore_temperature(1.0, 0.0, 0.0, well_formed_rate=0.75, **guard) == 1.5
    assert explore_temperature(1.0, 0.0, 0.0, well_formed_rate=0.5, **guard) == 1.5  # at the bar
    # never solved because it writes malformed actions (1 in 4 well-formed): no heat
    assert explore_temperature(1.0, 0.0, 0.0, well_formed_rate=0.25, **guard) == 1.0
    # the caution part still applies: risky half the time, 1 * (1 - 0.5 * 0.5)
    assert explore_temperature(1.0, 0.0, 0.5, well_formed_rate=0.0, **guard) == pytest.approx(0.75)
    # min_well_formed 0 (or no rate known): the old rule
    assert explore_temperature(1.0, 0.0, 0.0, well_formed_rate=0.0, **kw) == 1.5
    assert explore_temperature(1.0, 0.0, 0.0, well_formed_rate=None, **guard) == 1.5
    with pytest.raises(ValueError, match="min_well_formed in"):
        explore_temperature(1.0, 0.0, 0.0, **{**kw, "min_well_formed": 1.5})


def test_token_logprobs_at_a_temperature_per_row() -> None:
    logits = torch.tensor([[[2.0, 0.0, 0.0]], [[2.0, 0.0, 0.0]]])
    ids = torch.tensor([[0], [0]])
    per_row = token_logprobs(logits, ids, temperature=torch.tensor([1.0, 2.0]))
    one = token_logprobs(logits[:1], ids[:1], temperature=1.0)
    two = token_logprobs(logits[1:], ids[1:], temperature=2.0)
    assert per_row[0, 0] == pytest.approx(float(one[0, 0]))
    assert per_row[1, 0] == pytest.approx(float(two[0, 0]))
    # by hand: T=2 -> logits [1, 0, 0]: log(e / (e + 2))
    assert float(per_row[1, 0]) == pytest.approx(math.log(math.e / (math.e + 2)))
    # a greedy row (0) is scored at 1
    greedy = token_logprobs(logits, ids, temperature=torch.tensor([0.0, 1.0]))
    assert float(greedy[0, 0]) == pytest.approx(float(one[0, 0]))
    with pytest.raises(ValueError, match="one per row"):
        token_logprobs(logits, ids, temperature=torch.tensor([1.0]))


def test_a_steps_risk_cost_counts_each_kind_once_at_its_worst() -> None:
    from honing.risk import RiskEvent, Severity, event, risk_cost

    writes = [event("fs_write_outside", f"/etc/f{i}") for i in range(4)]
    assert risk_cost(writes) == 1.0  # one program, four writes: one high-severity kind
    assert risk_cost([*writes, event("memory_blowup")]) == 1.5  # plus a medium one
    low_then_high = [RiskEvent("x", Severity.LOW, "t"), RiskEvent("x", Severity.HIGH, "t")]
    assert risk_cost(low_then_high) == 1.0
    assert risk_cost([]) == 0.0
