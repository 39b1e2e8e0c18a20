"""A validator learns to judge from evidence: a tiny real model reviews code fixes whose tests it
sees run (`checks: [run_tests]`, on the state after the submission), K verdicts sampled on each
submission form its group (`verdicts`), each priced by what it costs the team (`verdict_value`),
and within a few updates of the real engine -> learner -> weight sync loop its verdict accuracy
rises from a coin flip.

The executor is scripted (half its fixes right, half wrong by a token or two) so that only the
validator learns. The validator starts from a 2-layer random Llama given a few supervised steps
to answer "Accept" or "Reject" at about even odds whatever it is shown: RL must then make the
verdict follow the evidence.

Checked by hand once (2026-12-06): as written, the training batches' accuracy went 0.56 -> 0.94
over the 10 updates and the test passed. With the checks removed (the validator shown the code
alone, as a review without evidence is), accuracy stayed at 0.48-0.52 (the verdict collapsed to
one answer per fix) and the test failed, (0.58, 0.50).

The verdicts are sampled with seeds (`SEED`): unseeded, each request drew its seed in the order
requests reached the engine, which the sandbox's timing changes, and one CI host in several saw
the verdicts collapse to one answer (0.55 -> 0.50). Seeded (2026-12-06, 2-core AMD EPYC), seeds
0-4 all passed: before -> after 0.66 -> 1.00, 0.38 -> 0.95, 0.58 -> 1.00, 0.47 -> 0.84,
0.44 -> 0.95.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from honing.domains.code.task import CodeTask
from honing.envs.base import EnvConfig
from honing.envs.registry import make_env
from honing.records import Group, Trajectory, by_role
from honing.rollout.agent import AgentConfig
from honing.rollout.engines.base import SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.rollout.team import RoleEngines, TeamConfig, run_team_episode
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask
from honing.trainer import Learner, LearnerConfig, sync_weights

ON_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
UPDATES = 10
EPISODES = 8  # team episodes (submissions) per update: half right, half wrong
K = 8  # verdicts sampled on each submission: the validator's group
TEAM = TeamConfig.model_validate({
    "roles": [
        {"kind": "executor"},
        {"kind": "validator", "checks": ["run_tests"], "max_turns": 1, "max_new_tokens": 3,
         "system_prompt": ""},
    ],
    "submit_tools": [],
    "max_rounds": 1,
    "verdicts": K,
    "rewards": {"validator_outcome": 0.0, "verdict": 1.0},
})  # fmt: skip
# Seeded: each verdict samples with a seed of its own (task, sample, seat, turn), not one drawn
# in the order requests reach the engine, which a sandbox's timing changes from host to host.
SEED = 2
AGENT = AgentConfig(sampling=SamplingParams(max_new_tokens=512, temperature=1.0, seed=SEED),
                    max_turns=1)  # fmt: skip


# name: (right body, wrong body, a test). The two fixes of a task differ by a token or two, so
# that a validator shown only the code cannot tell them apart; the tests' results can.
FUNCTIONS = {
    "inc": ("x + 1", "x + 2", "inc(1) == 2"), "double": ("x * 2", "x + 2", "double(3) == 6"),
    "square": ("x * x", "x + x", "square(4) == 16"), "neg": ("-x", "x", "neg(5) == -5"),
    "half": ("x // 2", "x // 3", "half(8) == 4"), "mod3": ("x % 3", "x % 4", "mod3(7) == 1"),
    "dec": ("x - 1", "x + 1", "dec(1) == 0"), "cube": ("x ** 3", "x ** 2", "cube(2) == 8"),
}  # fmt: skip


@pytest.fixture(scope="module")
def tasks() -> list[AnyTask]:
    return [CodeTask(id=f"learn/{name}", prompt=f"def {name}(x):", entry_point=name,
                     tests=f"assert {test}\n", reference=f"def {name}(x):\n    return {right}\n")
            for name, (right, _, test) in FUNCTIONS.items()]  # fmt: skip


def fixes(task: AnyTask) -> tuple[str, str]:
    """A right fix (the reference) and a wrong one (a token or two changed)."""
    name = task.id.removeprefix("learn/")
    right, wrong, _ = FUNCTIONS[name]
    return tuple(
        f"```python\ndef {name}(x):\n    return {body}\n```"  # type: ignore[return-value]
        for body in (right, wrong)
    )


class Team:
    """The scripted executor and the validator's engine; plays one update's episodes."""

    def __init__(self, pool: SandboxPool, validator: HFEngine, tok: Any) -> None:
        self.pool, self.validator, self.tok = pool, validator, tok

    async def play(self, tasks: list[AnyTask], start: int) -> list[Trajectory]:
        """EPISODES team episodes from task `start` on, even ones right, odd ones wrong; the
        validator trajectories, split by submission (each group K verdicts)."""

        async def one(i: int) -> list[Group]:
            task = tasks[(start + i) % len(tasks)]
            fix = fixes(task)[i % 2]
            executor = ScriptedEngine(lambda _p, _n: fix, tokenizer=self.tok)
            engines = RoleEngines({"executor": executor, "validator": self.validator}, "executor")
            env = make_env("code", self.pool, EnvConfig(max_steps=2))
            lead = await run_team_episode(task, env, engines, TEAM, AGENT, sample=i)
            judged = lead.partners[0].components  # the verifier's verdict on the fix
            good = judged["accepted_good"] + judged["rejected_good"]
            assert good == float(i % 2 == 0), lead.detail  # the fixes are what they claim
            lead.id = f"u{start}/{i}"
            return by_role([Group(task.id, f"u{start}-{i}", [lead])])

        played = await asyncio.gather(*(one(i) for i in range(EPISODES)))
        return [t for groups in played for g in groups for t in g.trajectories
                if t.role == "validator"]  # fmt: skip


def accuracy(validators: list[Trajectory]) -> float:
    return sum(t.components["verdict_correct"] for t in validators) / len(validators)


def groups_of(validators: list[Trajectory]) -> list[Group]:
    by_id: dict[str, list[Trajectory]] = {}
    for t in validators:
        by_id.setdefault(t.group_id, []).append(t)
    return [Group(ts[0].task_id, gid, ts) for gid, ts in by_id.items()]


def even_odds(learner: Learner, prompts: list[list[int]], tok: Any, steps: int = 40) -> None:
    """Supervised steps teaching the model to answer "Accept" or "Reject" then end, each on
    every prompt: a verdict at even odds, whatever the prompt shows."""
    end = tok.convert_tokens_to_ids("<|im_end|>")
    verdicts = [tok.encode(word, add_special_tokens=False) for word in ("Accept", "Reject")]
    assert verdicts[0][0] != verdicts[1][0]  # the first token is the choice
    model = learner.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.zeros(())
        for prompt in prompts:
            for verdict in verdicts:
                ids = torch.tensor([prompt + verdict + [end]])
                logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
                loss = loss + torch.nn.functional.cross_entropy(logits, ids[0, len(prompt) :])
        (loss / (2 * len(prompts))).backward()
        optimizer.step()


@ON_MODULE_LOOP
async def test_the_validator_learns_to_judge_from_the_tests_it_sees(
    module_pool: SandboxPool,
    make_random_llama: Callable[[str, float], Path],
    tasks: list[AnyTask],
) -> None:
    model_dir = make_random_llama("validator", 0.1)
    tok = load_tokenizer(model_dir)
    learner = Learner(model_dir, LearnerConfig(lr=3e-3, temperature=1.0))
    async with HFEngine(model_dir, dtype="float32", max_batch=64, seed=0) as engine:
        team = Team(module_pool, engine, tok)
        seen = await team.play(tasks, 0)  # the real validator prompts, to set the odds on
        prompts = sorted({tuple(t.token_ids[: t.prompt_len]) for t in seen})
        even_odds(learner, [list(p) for p in prompts], tok)
        await sync_weights(learner, engine)
        before = accuracy(await team.play(tasks, 0))
        for step in range(UPDATES):
            validators = await team.play(tasks, step + 1)
            stats = learner.update(groups_of(validators))
            assert stats.stepped or stats.dropped_groups == EPISODES  # all agreed: nothing to do
            await sync_weights(learner, engine)
        after = accuracy(await team.play(tasks, 0))
    assert 0.3 < before < 0.7, before  # a coin flip at the start
    assert after >= before + 0.2 and after >= 0.75, (before, after)
