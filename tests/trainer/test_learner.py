"""The learner on a tiny random Llama: logprob match with the hf engine, gradient accumulation
equivalence, the loss really optimising, weight sync to the engine, and the loud warnings."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from learner_helpers import PROMPTS, trajectory

from honing.precision import auto_dtype
from honing.records import Group, Trajectory
from honing.rl import Aggregation
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.trainer import (
    Learner,
    LearnerConfig,
    LoraSettings,
    check_logprob_match,
    sync_weights,
)

pytestmark = pytest.mark.dtype  # run again under each forced auto dtype (make test)


async def sample(
    engine: HFEngine, temperature: float, n: int = 4, tokens: int = 12
) -> list[Trajectory]:
    prompts = [Prompt(token_ids=p) for p in PROMPTS for _ in range(n)]
    gens = await engine.generate(
        prompts, SamplingParams(temperature=temperature, max_new_tokens=tokens, seed=3)
    )
    return [
        trajectory(p.token_ids or [], g.token_ids, float(i % 2), g.logprobs, g.versions)
        for i, (p, g) in enumerate(zip(prompts, gens, strict=True))
    ]


def groups_of(trajectories: list[Trajectory], size: int = 4) -> list[Group]:
    return [
        Group(f"t{i}", f"g{i}", trajectories[i : i + size])
        for i in range(0, len(trajectories), size)
    ]


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
async def test_learner_logprobs_match_the_hf_engine(
    tiny_model_dir: Path, temperature: float
) -> None:
    async with HFEngine(tiny_model_dir, dtype="float32", eos_ids=[]) as engine:
        trajs = await sample(engine, temperature)
    learner = Learner(tiny_model_dir, LearnerConfig(temperature=temperature, micro_batch_tokens=40))
    report = check_logprob_match(learner, trajs)
    assert report.tokens == sum(t.model_tokens for t in trajs)
    assert report.max_abs_diff < 1e-4, str(report)


def make_trajs(outcomes: list[float]) -> list[Trajectory]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for i, r in enumerate(outcomes):
        n = 5 + 3 * i
        ids = torch.randint(10, 4000, (n,), generator=gen).tolist()
        out.append(trajectory(PROMPTS[i % 3], ids, r, [-3.0] * n, [0] * n))
    return out


@pytest.mark.parametrize("aggregation", ["token", "sequence", "constant"])
def test_micro_batched_gradient_equals_one_batch(
    tiny_model_dir: Path, aggregation: Aggregation
) -> None:
    trajs = make_trajs([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.2])
    scorer = Learner(tiny_model_dir, LearnerConfig())
    for k, (t, lp) in enumerate(zip(trajs, scorer.logprobs(trajs), strict=True)):
        # near-policy behaviour logprobs: importance weights exp(±0.1), not 1 and not tiny
        t.logprobs = [
            x + (0.1 if k % 2 else -0.1) * m for x, m in zip(lp, t.loss_mask, strict=True)
        ]
    groups = groups_of(trajs)
    grads = []
    for budget in (10_000, 16):
        config = LearnerConfig(
            micro_batch_tokens=budget, aggregation=aggregation, kl_coef=0.1, shared_prefix=False
        )  # packing alone (the shared prefix has its own test)
        learner = Learner(tiny_model_dir, config)
        _, batch, _ = learner.backward(groups)
        assert batch is not None
        assert len(batch.micro_batches) == (1 if budget == 10_000 else 8)
        grads.append(
            {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}
        )
    one, many = grads
    assert one.keys() == many.keys() and one
    scale = max(float(g.abs().max()) for g in one.values())
    assert scale > 1e-3  # a real gradient, so the comparison below means something
    for name in one:
        torch.testing.assert_close(many[name], one[name], atol=1e-5 * scale, rtol=1e-4)


def sequence_logprob(learner: Learner, t: Trajectory) -> float:
    (lp,) = learner.logprobs([t])
    return sum(lp)


@pytest.mark.parametrize("lora", [None, LoraSettings(r=4, alpha=8)])
def test_update_raises_the_positive_advantage_sequence(
    tiny_model_dir: Path, lora: LoraSettings | None
) -> None:
    good, bad = make_trajs([1.0, 0.0])
    config = LearnerConfig(lr=1e-2 if lora else 1e-3, lora=lora)
    learner = Learner(tiny_model_dir, config)
    # behaviour logprobs equal to the learner's: on-policy, importance weight 1
    for t, lp in zip((good, bad), learner.logprobs([good, bad]), strict=True):
        t.logprobs = lp
    before = [sequence_logprob(learner, t) for t in (good, bad)]
    stats = learner.update([Group("t", "g", [good, bad])])
    after = [sequence_logprob(learner, t) for t in (good, bad)]
    assert stats.stepped and stats.version == 1 and learner.version == 1
    assert stats.sequences == 2 and stats.tokens == good.model_tokens + bad.model_tokens
    assert stats.grad_norm > 0
    assert stats.is_weight_mean == pytest.approx(1.0, abs=1e-4)
    assert after[0] > before[0]
    assert after[1] < before[1]


@pytest.mark.parametrize(
    "config",
    [
        LearnerConfig(
            lr=1e-3, policy_loss="gspo", aggregation="sequence", eps_low=3e-4, eps_high=4e-4
        ),
        LearnerConfig(lr=1e-3, policy_loss="cispo", eps_low=1.0, eps_high=0.28),
    ],
    ids=["gspo", "cispo"],
)
def test_gspo_and_cispo_updates_change_the_weights_the_right_way(
    tiny_model_dir: Path, config: LearnerConfig
) -> None:
    good, bad = make_trajs([1.0, 0.0])
    learner = Learner(tiny_model_dir, config)
    for t, lp in zip((good, bad), learner.logprobs([good, bad]), strict=True):
        t.logprobs = lp
    weights = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    before = [sequence_logprob(learner, t) for t in (good, bad)]
    stats = learner.update([Group("t", "g", [good, bad])])
    after = [sequence_logprob(learner, t) for t in (good, bad)]
    assert stats.stepped and stats.grad_norm > 0
    assert any(not torch.equal(p, weights[n]) for n, p in learner.model.named_parameters())
    assert after[0] > before[0]
    assert after[1] < before[1]


@pytest.mark.parametrize(
    "lora", [None, LoraSettings(r=4, alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])]
)
async def test_weight_sync_makes_the_engine_equal_the_learner(
    tiny_model_dir: Path, lora: LoraSettings | None
) -> None:
    # A large step, so that the change is far above the engine/learner numerical noise (1e-4).
    learner = Learner(tiny_model_dir, LearnerConfig(lr=5e-2, lora=lora))
    async with HFEngine(tiny_model_dir, dtype="float32", eos_ids=[]) as engine:
        trajs = await sample(engine, 1.0)
        for t, lp in zip(trajs, learner.logprobs(trajs), strict=True):
            t.logprobs = lp
        stats = learner.update(groups_of(trajs))
        assert stats.stepped
        weights = learner.weights()
        if lora is not None:  # only the adapted modules, under the base names
            assert weights and all(
                n.startswith("model.layers.")
                and n.endswith(("q_proj.weight", "v_proj.weight", "down_proj.weight"))
                for n in weights
            )
        sync = await sync_weights(learner, engine)
        assert engine.version == sync.version == 1 and sync.tensors == len(weights)
        greedy = await sample(engine, 0.0, n=1)
    report = check_logprob_match(learner, greedy)
    assert report.max_abs_diff < 1e-4, str(report)
    # the engine's greedy tokens are the learner's argmax at every generated position
    for t in greedy:
        ids = torch.tensor([t.token_ids])
        with torch.no_grad():
            logits = learner.model(input_ids=ids).logits[0, :-1]
        start = t.prompt_len
        assert logits[start - 1 :].argmax(-1).tolist() == t.token_ids[start:]
    # and they differ from the initial model's: the sync really changed the weights
    fresh = Learner(tiny_model_dir, LearnerConfig())
    before = dict(fresh.model.named_parameters())
    assert any(not torch.equal(w, before[n]) for n, w in weights.items())
    assert check_logprob_match(fresh, greedy).max_abs_diff > 1e-3


async def test_sync_into_an_engine_in_its_own_dtype_serves_the_weights_cast_to_it(
    tiny_model_dir: Path,
) -> None:
    """An engine left at `auto` loads in the host's dtype (bf16 on bf16 hardware): a sync from
    the float32 learner gives it exactly the learner's weights cast to that dtype."""
    learner = Learner(tiny_model_dir, LearnerConfig())
    with torch.no_grad():  # a stand-in for an update: every weight moves
        gen = torch.Generator().manual_seed(0)
        for p in learner.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    async with HFEngine(tiny_model_dir, dtype="auto", eos_ids=[]) as engine:
        served_dtype = getattr(torch, auto_dtype())
        assert engine.model.dtype == served_dtype
        await sync_weights(learner, engine)
        served = dict(engine.model.named_parameters())
        weights = learner.weights()
        assert weights and weights.keys() <= served.keys()
        for name, tensor in weights.items():
            assert torch.equal(served[name], tensor.to(served_dtype)), name


def test_all_zero_variance_groups_warn_and_take_no_step(
    tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig())
    groups = groups_of(make_trajs([1.0, 1.0, 0.0, 0.0]), size=2)
    with caplog.at_level(logging.WARNING):
        stats = learner.update(groups)
    assert not stats.stepped and stats.dropped_groups == 2 and learner.version == 0
    assert "zero variance" in caplog.text


def test_dynamic_sampling_drops_and_counts(tiny_model_dir: Path) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig())
    groups = groups_of(make_trajs([1.0, 1.0, 0.0, 1.0]), size=2)
    stats = learner.update(groups)
    assert (
        stats.stepped and stats.groups == 2 and stats.dropped_groups == 1 and stats.sequences == 2
    )


def test_scale_by_kept_steps_at_the_kept_share_of_the_learning_rate(tiny_model_dir: Path) -> None:
    """One group of two kept: the step is taken at lr x 1/2. AdamW's step is linear in the
    learning rate (decay included), so every weight moves exactly half as far as without the
    option; the schedule's rate is back for the next update."""
    groups = groups_of(make_trajs([1.0, 1.0, 0.0, 1.0]), size=2)
    moved = []
    for scale in (False, True):
        learner = Learner(tiny_model_dir, LearnerConfig(scale_by_kept=scale))
        before = [p.detach().clone() for p in learner.parameters]
        stats = learner.update(groups)
        assert stats.stepped and stats.dropped_groups == 1
        assert stats.lr == pytest.approx(learner.config.lr * (0.5 if scale else 1.0))
        assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(learner.config.lr)
        moved.append([p.detach() - b for p, b in zip(learner.parameters, before, strict=True)])
    assert any(float(d.abs().max()) > 0 for d in moved[0])
    off = sum(float((s - 0.5 * f).abs().sum()) for f, s in zip(*moved, strict=True))
    total = sum(float((0.5 * f).abs().sum()) for f in moved[0])
    assert off / total < 1e-3  # the rest is fp32 rounding of weights near 1 (norms)


def test_zero_gradient_warns_after_several_updates(
    tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig(dynamic_sampling=False, zero_grad_warn_after=2))
    groups = groups_of(make_trajs([1.0, 1.0]), size=2)
    with caplog.at_level(logging.WARNING):
        first = learner.update(groups)
        assert first.grad_norm == 0.0 and "exactly 0" not in caplog.text
        learner.update(groups)
    assert "exactly 0 for 2 updates" in caplog.text


@pytest.mark.parametrize("lora", [None, LoraSettings(r=4, alpha=8)])
def test_kl_to_the_reference_starts_at_zero_then_grows(
    tiny_model_dir: Path, lora: LoraSettings | None
) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig(kl_coef=0.1, lr=1e-2, lora=lora))
    assert (learner.reference is None) == (lora is not None)  # LoRA: no second copy
    groups = groups_of(make_trajs([1.0, 0.0]), size=2)
    first = learner.update(groups)
    second = learner.update(groups)
    assert first.kl == pytest.approx(0.0, abs=1e-6)
    assert second.kl > 1e-6


def test_no_reference_model_without_kl(tiny_model_dir: Path) -> None:
    assert Learner(tiny_model_dir, LearnerConfig()).reference is None


def test_bf16_autocast_update_and_schedule(tiny_model_dir: Path) -> None:
    config = LearnerConfig(
        dtype="bfloat16", warmup_steps=2, schedule="cosine", schedule_steps=4, lr=1e-3
    )
    learner = Learner(tiny_model_dir, config)
    groups = groups_of(make_trajs([1.0, 0.0]), size=2)
    lrs = []
    for _ in range(4):
        stats = learner.update(groups)
        assert stats.stepped and torch.isfinite(torch.tensor(stats.loss))
        lrs.append(stats.lr)
    # warm-up 1/3, 2/3 of lr, then cosine from the peak: 1, cos(pi/2) -> 0.5
    assert lrs == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3, 0.5e-3])


def test_stale_tokens_are_left_out(tiny_model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = LearnerConfig(max_staleness=1)
    learner = Learner(tiny_model_dir, config, version=2)
    old, fresh = make_trajs([1.0, 0.0])
    old.versions = [v if v < 0 else 0 for v in old.versions]  # two versions behind
    fresh.versions = [v if v < 0 else 1 for v in fresh.versions]
    stats = learner.update([Group("t", "g", [old, fresh])])
    assert stats.stepped and stats.stale_tokens == old.model_tokens
    assert stats.tokens == fresh.model_tokens
    with caplog.at_level(logging.WARNING):
        # now at version 3: both are 2+ versions behind
        none_left = learner.update([Group("t", "g", [old, fresh])])
    assert not none_left.stepped and "max_staleness" in caplog.text


def test_logprobs_need_no_reward(tiny_model_dir: Path) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig())
    unscored = make_trajs([1.0, 0.0])
    for t in unscored:
        t.components = {}
    short, long = learner.logprobs(unscored)
    assert len(short) == len(unscored[0].token_ids) and len(long) == len(unscored[1].token_ids)
    assert all(lp == 0.0 for lp, m in zip(short, unscored[0].loss_mask, strict=True) if not m)
    assert all(lp < 0.0 for lp, m in zip(long, unscored[1].loss_mask, strict=True) if m)
