"""Advantage gae (PPO with a learned critic) in the learner, on a tiny random Llama: an update
runs and reports the critic's statistics, the critic learns a fixed batch, value_coef scales the
value loss's gradient into the trunk, process rewards reach GAE, group estimators are untouched,
and the config refuses critic settings that would do nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from learner_helpers import PROMPTS, trajectory

from honing.config import validate_model
from honing.errors import ConfigError
from honing.observe.metrics import Timings, update_metrics
from honing.records import Group, Trajectory, Turn
from honing.trainer import Learner, LearnerConfig, LoraSettings
from honing.trainer.run_config import TrainConfig


def on_policy_groups(learner: Learner, outcomes: list[float], size: int = 2) -> list[Group]:
    """Groups of `size` with random tokens and the learner's own logprobs (importance weight 1)."""
    gen = torch.Generator().manual_seed(0)
    trajs = []
    for i, r in enumerate(outcomes):
        n = 5 + 3 * i
        trajs.append(
            trajectory(PROMPTS[i % 3], torch.randint(10, 4000, (n,), generator=gen).tolist(), r)
        )
    for t, lp in zip(trajs, learner.logprobs(trajs), strict=True):
        t.logprobs = lp
    return [Group(f"t{i}", f"g{i}", trajs[i : i + size]) for i in range(0, len(trajs), size)]


def gae(**overrides: object) -> LearnerConfig:
    return LearnerConfig(advantage="gae", lr=1e-3, **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize("lora", [None, LoraSettings(r=4, alpha=8)], ids=["full", "lora"])
def test_a_gae_update_steps_the_policy_and_the_critic(
    tiny_model_dir: Path, lora: LoraSettings | None
) -> None:
    learner = Learner(tiny_model_dir, gae(lora=lora, micro_batch_tokens=40))
    assert learner.critic is not None
    assert learner.critic.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2)  # 10 x lr
    head = learner.critic.head
    assert not head.weight.any() and not head.bias.any()  # a fresh head predicts 0
    groups = on_policy_groups(learner, [1.0, 0.0, 0.5, 0.0])
    stats = learner.update(groups)
    assert stats.stepped and stats.micro_batches > 1
    # the values before the update were the zero head's: nothing explained yet
    assert stats.value_mean == 0.0 and stats.explained_variance == 0.0
    assert stats.value_loss > 0.0 and stats.advantage_abs_mean > 0.0
    # one step per batch: the critic is scored by the weights it trains, so the clip cannot bind
    assert stats.value_clip_frac == 0.0
    assert head.weight.any() and head.bias.any()  # the head learned
    second = learner.update(groups)
    assert second.value_mean != 0.0 and second.explained_variance != 0.0
    assert "value_head" not in " ".join(learner.weights())  # the engine gets the policy only


def test_the_critic_learns_a_fixed_batch(tiny_model_dir: Path) -> None:
    learner = Learner(tiny_model_dir, gae(critic_lr=3e-2))
    groups = on_policy_groups(learner, [1.0, 0.0, 1.0, 0.0, 0.5, 0.0])
    losses, explained = [], []
    for _ in range(8):
        stats = learner.update(groups)
        losses.append(stats.value_loss)
        explained.append(stats.explained_variance)
    assert losses[-1] < 0.5 * losses[0], losses
    assert explained[-1] > explained[0], explained


def policy_gradient(learner: Learner, groups: list[Group]) -> torch.Tensor:
    """The policy's accumulated gradient on `groups` (no step), flattened."""
    assert learner.critic is not None
    learner.backward(groups)
    grad = torch.cat([p.grad.flatten() for p in learner.parameters if p.grad is not None])
    learner.optimizer.zero_grad(set_to_none=True)
    learner.critic.optimizer.zero_grad(set_to_none=True)
    return grad


def test_value_coef_scales_the_value_gradient_into_the_trunk(tiny_model_dir: Path) -> None:
    grads = {}
    for coef in (0.0, 0.1, 0.2):
        learner = Learner(tiny_model_dir, gae(value_coef=coef))
        assert learner.critic is not None
        with torch.no_grad():  # a head that is not zero, so the value loss reaches the trunk
            gen = torch.Generator().manual_seed(0)
            learner.critic.head.weight.copy_(
                torch.randn(learner.critic.head.weight.shape, generator=gen)
            )
        grads[coef] = policy_gradient(learner, on_policy_groups(learner, [1.0, 0.0, 0.5, 0.0]))
    value_part = grads[0.1] - grads[0.0]
    assert float(value_part.norm()) > 1e-3 * float(grads[0.0].norm())  # it does reach the trunk
    torch.testing.assert_close(grads[0.2] - grads[0.0], 2 * value_part, rtol=1e-3, atol=1e-7)


def two_turn_trajectory(well_formed: float, seed: int) -> Trajectory:
    """prompt (4) | turn 0 (3 model tokens) | observation (2) | turn 1 (3) | observation (1);
    the outcome is 0 in every episode."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 4000, (13,), generator=gen).tolist()
    mask = [0] * 4 + [1] * 3 + [0] * 2 + [1] * 3 + [0]
    turns = [
        Turn(role="user", text="q", start=0, end=4),
        Turn(role="assistant", text="a0", start=4, end=7),
        Turn(role="tool", text="o0", start=7, end=9, components={"well_formed": well_formed}),
        Turn(role="assistant", text="a1", start=9, end=12),
        Turn(role="tool", text="o1", start=12, end=13, components={"outcome": 0.0}),
    ]  # fmt: skip
    return Trajectory(
        task_id="t",
        domain="math",
        turns=turns,
        token_ids=ids,
        loss_mask=mask,
        logprobs=[-3.0 if m else 0.0 for m in mask],
        versions=[0 if m else -1 for m in mask],
        prompt_len=4,
        components={"outcome": 0.0},
    )


def test_process_rewards_reach_gae(tiny_model_dir: Path) -> None:
    group = Group("t", "g", [two_turn_trajectory(float(i % 2), i) for i in range(4)])
    outcome_only = Learner(tiny_model_dir, gae(dynamic_sampling=False))
    with_process = Learner(
        tiny_model_dir,
        gae(dynamic_sampling=False, process_weight=0.5, process_components=["well_formed"]),
    )
    # all rewards 0 and a zero head: nothing to learn, for the policy or the critic
    assert float(policy_gradient(outcome_only, [group]).abs().max()) == 0.0
    assert float(policy_gradient(with_process, [group]).abs().max()) > 0.0
    stats = with_process.update([group])
    assert stats.value_loss > 0.0  # the returns carry the turn rewards


def test_a_group_estimator_has_no_critic(tiny_model_dir: Path, tmp_path: Path) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig(lr=1e-3))
    assert learner.critic is None
    stats = learner.update(on_policy_groups(learner, [1.0, 0.0]))
    assert stats.stepped
    assert (stats.value_loss, stats.value_clip_frac, stats.value_mean) == (0.0, 0.0, 0.0)
    assert stats.explained_variance == 0.0
    learner.save(tmp_path)
    assert not any(p.name.startswith("value_") for p in tmp_path.iterdir())


def test_critic_stats_reach_the_metric_sinks(tiny_model_dir: Path) -> None:
    learner = Learner(tiny_model_dir, gae())
    stats = learner.update(on_policy_groups(learner, [1.0, 0.0]))
    learner_fields = {k: getattr(stats, k) for k in stats.__dataclass_fields__}  # as the loop does
    metrics = update_metrics(
        [], learner_version=1, learner=learner_fields, timings=Timings(0.0, 0.0, 0.0)
    )
    for name in ("value_loss", "value_clip_frac", "value_mean", "explained_variance"):
        assert metrics.scalars[f"learner/{name}"] == getattr(stats, name)


def test_critic_settings_need_advantage_gae() -> None:
    assert LearnerConfig(lr=1e-4).critic_learning_rate == pytest.approx(1e-3)
    assert gae(critic_lr=5e-4).critic_learning_rate == 5e-4
    with pytest.raises(ValueError, match="gamma, value_coef configure the critic"):
        LearnerConfig(gamma=0.99, value_coef=0.5)
    with pytest.raises(ConfigError, match="critic_lr configure the critic of advantage 'gae'"):
        validate_model(
            TrainConfig,
            {"out": "run", "steps": 1, "train": {"m": {"tasks": "synthetic-math"}},
             "learner": {"advantage": "rloo", "critic_lr": 1e-4}},
        )  # fmt: skip
    with pytest.raises(ConfigError, match=r"learner\.lam"):
        validate_model(
            TrainConfig,
            {"out": "run", "steps": 1, "train": {"m": {"tasks": "synthetic-math"}},
             "learner": {"advantage": "gae", "lam": 1.5}},
        )  # fmt: skip
