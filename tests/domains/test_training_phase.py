"""`honing train` adds a newer domain (structure, finance) as a later phase: a math phase, then
math and the domain together, the held-out sets of both evaluated after each phase, with the
forgetting check. The policy is a scripted engine (on a tiny model's tokenizer) that plays each
task's reference for two seeds of three and a flawed version otherwise (a structure model
without what it cuts away; a finance answer without its citations)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from honing.rollout.engines.base import Prompt
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.store import read_trajectories
from honing.tasks.domains import get
from honing.trainer.loop import train
from honing.trainer.run_config import TrainConfig

ARITHMETIC = re.compile(r"What is (\d+) \+ (\d+)\?")


def math_tasks(path: Path, start: int, count: int) -> Path:
    rows = [{"id": f"add{i}", "domain": "math", "prompt": f"What is {10 + i} + {3 + i}?",
             "answer": str(13 + 2 * i)} for i in range(start, start + count)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def call(name: str, arguments: object) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def flawed(domain: str, reference: dict[str, Any]) -> dict[str, Any]:
    """A reference made wrong: the structure model's first object without what it cuts away, or
    the finance answer without its citations."""
    wrong = json.loads(json.dumps(reference))
    if domain == "finance":
        wrong["citations"] = []
    elif wrong["objects"][0].get("type") == "difference":
        wrong["objects"][0] = wrong["objects"][0]["children"][0]
    else:
        wrong["objects"] = wrong["objects"][1:] or wrong["objects"]
    return wrong


@pytest.mark.parametrize("domain", ["structure", "finance"])
def test_a_domain_joins_a_run_as_a_later_phase(
    domain: str, tmp_path: Path, tiny_model_dir: Path
) -> None:
    tokenizer = load_tokenizer(tiny_model_dir)
    [generate] = get(domain).generators.values()
    references = {  # by the prompt's opening, which identifies the task in the transcript
        t.prompt[:200]: t.target if domain == "structure" else json.loads(t.reference or "")
        for seed, phrasings in ((1, "train"), (2, "heldout"))  # as the sources draw them
        for t in generate(8 if seed == 1 else 4, seed, phrasings)
    }

    def respond(prompt: Prompt, seed: int) -> str:
        text = tokenizer.decode(prompt.token_ids or [])
        sums = ARITHMETIC.findall(text)
        if sums:
            a, b = sums[-1]
            return call("answer", {"value": str(int(a) + int(b))})
        goal = next(p for p in references if p in text)
        reference = references[goal] if seed % 3 else flawed(domain, references[goal])
        if domain == "finance":
            return call("answer", reference)
        if "built:" in text:
            return call("submit", {})
        return call("build", {"scene": reference})

    config = TrainConfig.model_validate({
        "model": str(tiny_model_dir),
        "out": str(tmp_path / "run"),
        "seed": 3,
        "train": {
            "math": {"tasks": str(math_tasks(tmp_path / "math.jsonl", 0, 12))},
            domain: {"tasks": f"synthetic-{domain}", "count": 8, "seed": 1},
        },
        "heldout": {
            "math": {"tasks": str(math_tasks(tmp_path / "math-heldout.jsonl", 40, 4))},
            domain: {"tasks": f"synthetic-{domain}", "count": 4, "seed": 2},
        },
        "phases": [
            {"name": "math", "steps": 1, "train": ["math"]},
            {"name": domain, "steps": 2, "train": ["math", domain]},
        ],
        "groups_per_step": 2,
        "n": 3,
        "learner": {"lr": 1e-3, "micro_batch_tokens": 4096},
        "agent": {"max_turns": 3, "max_new_tokens": 1024, "system_prompt": ""},
        "eval": {"every": 10, "forgetting_threshold": 0.05},
        "sandbox": {"pool_size": 2, "timeout_s": 20.0},
    })  # fmt: skip
    engine = ScriptedEngine(respond, tokenizer=tokenizer, by_seed=True)
    result = asyncio.run(train(config, engine=engine))

    assert result.steps == 3
    run = tmp_path / "run"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["phase"] for m in metrics] == ["math", domain, domain]
    assert set(metrics[0]["sources"]) == {"math"}
    evals = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]
    assert sorted({e["step"] for e in evals}) == [0, 1, 3]  # before, after each phase
    assert {e["set"] for e in evals if e["step"] == 3} == {"math", domain}
    after = result.after[domain]
    assert after.total == 4 and after.passed >= 1  # the held-out structure tasks were judged
    stored = [t for t in read_trajectories(run) if t.domain == domain]
    assert stored and any(t.success for t in stored) and not all(t.success for t in stored)
    assert json.loads((run / "result.json").read_text())["forgetting"] == []
