"""A scripted team for tests (imported as `team_script`: tests/ is on sys.path beside the root
conftest): tool-call text, and an engine that answers each team role from its own script."""

from __future__ import annotations

import json
from typing import Any

from honing.rollout.engines.base import Prompt
from honing.rollout.engines.scripted import ScriptedEngine

PLAN = "1. Multiply 347 by 86 with the calculator."


def call(name: str, **arguments: Any) -> str:
    """A tool call as the model writes it."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def team_engine(
    tok: Any, executor: list[str], validator: list[str], plan: str = PLAN
) -> ScriptedEngine:
    """Answers by role (read from the prompt's system message), each role's script in order
    (the last reply repeated once a script runs out)."""
    said = {"analyst": 0, "validator": 0, "executor": 0}

    def respond(prompt: Prompt, _: int) -> str:
        text = tok.decode(prompt.token_ids or [])
        role = ("analyst" if "You are the analyst" in text
                else "validator" if "You are the validator" in text else "executor")  # fmt: skip
        script = {"analyst": [plan], "validator": validator, "executor": executor}[role]
        i = said[role]
        said[role] += 1
        return script[min(i, len(script) - 1)]

    return ScriptedEngine(respond, tokenizer=tok)


def reject_then_accept(tok: Any) -> ScriptedEngine:
    """347 × 86: the executor calls the calculator, answers 29000 (the validator rejects it:
    rolled back), then 29842 (accepted)."""
    return team_engine(
        tok,
        executor=[
            call("calculator", expression="347*86"),
            call("answer", value="29000"),
            call("answer", value="29842"),
        ],
        validator=["The product is off.\nREJECT: 347 × 86 is not 29000", "ACCEPT"],
    )
