"""A team in the closed loop: `team:` in the run config makes `honing train` play each episode
as analyst → executor ↔ validator; every role is stored, logged and trained on its own group,
and the update records the validator's precision and recall.

The `dare` domain of test_risk_training is reused: one tool call reaches (or misses) a goal.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path

from test_risk_training import config, dare, lines  # noqa: F401 (the fixture)

from honing.rollout.engines.base import Prompt
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.store import read_trajectories
from honing.tasks.domains import Domain
from honing.trainer.loop import train

GOAL = re.compile(r"Reach goal (\d+)\.")
TEAM = {
    "roles": [{"kind": "analyst"}, {"kind": "executor"}, {"kind": "validator"}],
    "submit_tools": ["work"],
    "max_rounds": 1,
}


def team_engine(model: Path) -> ScriptedEngine:
    """The executor reaches the goal on even seeds and misses it on odd ones; the validator
    accepts on seeds not divisible by 3 (so it is sometimes right, sometimes wrong)."""
    tokenizer = load_tokenizer(model)

    def respond(prompt: Prompt, seed: int) -> str:
        text = tokenizer.decode(prompt.token_ids or [])
        if "You are the analyst" in text:
            return "1. Call work with the goal."
        if "You are the validator" in text:
            return "ACCEPT" if seed % 3 else "REJECT: check the goal"
        goal = int(GOAL.findall(text)[-1]) + (seed % 2)
        return f'<tool_call>{{"name": "work", "arguments": {{"goal": {goal}}}}}</tool_call>'

    return ScriptedEngine(respond, tokenizer=tokenizer, by_seed=True)


def test_a_team_is_trained_role_by_role(dare: Domain, tmp_path: Path, tiny_model_dir: Path) -> None:  # noqa: F811
    cfg = config(tmp_path, tiny_model_dir, "team", team=TEAM, steps=1)
    asyncio.run(train(cfg, engine=team_engine(tiny_model_dir)))
    stored = read_trajectories(tmp_path / "team")
    # 1 update x 2 tasks x 4 samples, each played by 3 roles
    assert Counter(t.role for t in stored) == {"analyst": 8, "executor": 8, "validator": 8}
    for t in stored:
        assert t.group_id.endswith(f":{t.role}")
        assert t.model_tokens > 0  # each role generated, and is trained on its own tokens
    groups = Counter(t.group_id for t in stored)
    assert len(groups) == 2 * 3 and set(groups.values()) == {4}
    leads = {(t.group_id.rsplit(":", 1)[0], t.sample): t for t in stored if t.role == "executor"}
    for t in stored:  # every role shares the team's outcome
        assert t.success == leads[(t.group_id.rsplit(":", 1)[0], t.sample)].success
    validators = [t for t in stored if t.role == "validator"]
    assert {t.components["verdict_correct"] for t in validators} <= {0.0, 1.0}
    assert len({t.reward for t in validators}) > 1

    updates = lines(tmp_path / "team" / "metrics.jsonl")
    assert len(updates) == 1
    for u in updates:
        assert u["learner"]["groups"] == 6  # (task, role) groups
        team = u["team"]
        assert set(team) >= {"reviews", "verdict_accuracy", "reward/validator"}
        assert 0.0 <= team["verdict_accuracy"] <= 1.0
    episodes = [e for e in lines(tmp_path / "team" / "events.jsonl") if e["kind"] == "episode"]
    assert Counter(e["role"] for e in episodes) == {"analyst": 8, "executor": 8, "validator": 8}
    # The figures agree with the stored verdicts.
    counts: Counter[str] = Counter()
    for t in validators:
        for name in ("accepted_good", "accepted_bad", "rejected_good", "rejected_bad"):
            counts[name] += int(t.components.get(name, 0))
    assert sum(u["team"]["reviews"] for u in updates) == sum(counts.values())
    json.dumps(updates)  # plain JSON
