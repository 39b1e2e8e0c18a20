"""RL really learns: a tiny real model, rewarded for one choice, makes it more often within a few
updates of the real engine -> learner -> weight sync loop. This is the test that fails when
learning breaks (a flipped advantage, a loss that does not optimise, a sync that does not land).

Checked by hand once (2026-12-01): with the learner's `grpo` advantages negated, the rewarded
choice fell from 14% to 0% over the same updates and this test failed; as written it rose to 100%.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from honing.records import Group, Trajectory
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.rollout.models import load_tokenizer
from honing.trainer import Learner, LearnerConfig, sync_weights

UPDATES = 6
GROUPS, N = 4, 8  # groups per update, samples per group


@pytest.fixture(scope="module")
def chooser_dir(make_random_llama: Callable[[str, float], Path]) -> Path:
    """A 2-layer random Llama whose first reply token is one of a few likely ones (initialiser
    std 0.7): a choice the reward can shape."""
    return make_random_llama("chooser", 0.7)


def prompt_ids(model_dir: Path) -> list[int]:
    tokenizer = load_tokenizer(model_dir)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Call the tool."}], add_generation_prompt=True, tokenize=True
    )
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


async def sample(engine: HFEngine, prompt: list[int], count: int, target: int) -> list[Trajectory]:
    gens = await engine.generate(
        [Prompt(token_ids=prompt) for _ in range(count)],
        SamplingParams(temperature=1.0, max_new_tokens=2),  # unseeded: the engine's seeds
    )
    return [
        Trajectory(
            task_id="choose", domain="tools", token_ids=prompt + g.token_ids,
            loss_mask=[0] * len(prompt) + [1] * len(g.token_ids),
            logprobs=[0.0] * len(prompt) + g.logprobs, versions=[-1] * len(prompt) + g.versions,
            prompt_len=len(prompt), reward=float(g.token_ids[0] == target),
            components={"outcome": float(g.token_ids[0] == target)},
            success=g.token_ids[0] == target,
        )
        for g in gens
    ]  # fmt: skip


def rate(trajectories: list[Trajectory]) -> float:
    return sum(t.success for t in trajectories) / len(trajectories)


async def test_rl_raises_the_rewarded_choice_within_a_few_updates(chooser_dir: Path) -> None:
    prompt = prompt_ids(chooser_dir)
    learner = Learner(chooser_dir, LearnerConfig(lr=3e-3, temperature=1.0))
    with torch.no_grad():
        first = learner.model(input_ids=torch.tensor([prompt])).logits[0, -1].softmax(-1)
    target = int(first.topk(2).indices[1])  # the second choice: rewarded, not yet preferred
    async with HFEngine(chooser_dir, dtype="float32", eos_ids=[], max_batch=32, seed=0) as engine:
        before = rate(await sample(engine, prompt, 128, target))
        for step in range(UPDATES):
            batch = await sample(engine, prompt, GROUPS * N, target)
            groups = [Group("choose", f"g{step}-{i}", batch[i * N : (i + 1) * N])
                      for i in range(GROUPS)]  # fmt: skip
            stats = learner.update(groups)
            assert stats.stepped or stats.dropped_groups == GROUPS
            await sync_weights(learner, engine)
        after = rate(await sample(engine, prompt, 128, target))
    assert 0.1 < before < 0.5, before  # a real choice at the start, not a sure thing
    assert after >= before + 0.3 and after >= 0.6, (before, after)
