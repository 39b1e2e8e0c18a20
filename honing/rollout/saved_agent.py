"""The agent settings a model was trained with, saved beside its weights (`honing_agent.json`).

    save_agent(directory, SavedAgent(...))    `honing export` writes it from the run's config
    load_agent(directory) -> SavedAgent | None   `honing eval --policy model:DIR` and `honing
                                              serve DIR` read it and use it unless told otherwise
    served_agent(url, model) -> SavedAgent | None   what `honing serve` lists in /v1/models

A policy trained with a 2-turn limit, 48 tokens a turn and the tool descriptions alone as its
system prompt is measured fairly only when it is played that way: these are the settings, in one
typed record. Not covered: the sampling temperature of a user's evaluation (greedy by default) and
the environment's own limits (`EnvConfig`).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from honing.config import StrictModel
from honing.errors import ConfigError

AGENT_FILE = "honing_agent.json"


class SavedAgent(StrictModel):
    """How the model played its episodes in training."""

    system_prompt: str | None = Field(
        description="None: honing's default tool-use system prompt; '': the tool descriptions "
        "alone."
    )
    max_turns: int = Field(ge=1, description="Model turns per episode at most.")
    max_new_tokens: int = Field(ge=1, description="Tokens per model turn at most.")
    max_total_tokens: int = Field(ge=16, description="Prompt plus all turns at most.")
    restate: bool = Field(
        True,
        description="Each observation restated the whole task state; false: only what changed.",
    )
    tool_format: Literal["tool_call_tags"] = Field(
        "tool_call_tags",
        description='Calls as <tool_call>{"name": ..., "arguments": {...}}</tool_call>.',
    )

    def describe(self) -> str:
        prompt = {None: "honing's default", "": "tool descriptions only"}.get(
            self.system_prompt, f"{len(self.system_prompt or '')} characters"
        )
        return (
            f"{self.max_turns} turn(s) of at most {self.max_new_tokens} tokens, system prompt: "
            f"{prompt}" + ("" if self.restate else ", observations show what changed")
        )


def save_agent(directory: Path, agent: SavedAgent) -> Path:
    path = directory / AGENT_FILE
    path.write_text(json.dumps(agent.model_dump(mode="json"), indent=2) + "\n")
    return path


def load_agent(directory: str | Path) -> SavedAgent | None:
    """The settings saved in `directory`, or None when it has none (a model honing did not
    export). A damaged file is an error naming it and the field."""
    path = Path(directory) / AGENT_FILE
    if not path.is_file():
        return None
    try:
        return SavedAgent.model_validate(json.loads(path.read_text()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: unreadable ({e}); re-export the run, or delete it") from e
    except ValidationError as e:
        where = "; ".join(f"{'.'.join(map(str, x['loc'])) or '(file)'}: {x['msg']}"
                          for x in e.errors())  # fmt: skip
        raise ConfigError(f"{path}: {where}; re-export the run, or fix the field") from e


def served_agent(base_url: str, model: str | None = None) -> SavedAgent | None:
    """The settings an OpenAI-compatible server lists for `model` (default: its only model) in
    GET /models as `honing_agent` (honing serve does; vLLM and others do not: None)."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=10) as response:
            listed = json.load(response).get("data") or []
    except (OSError, ValueError, AttributeError):
        return None  # not reachable or not a model list: the evaluation will say so itself
    chosen = [m for m in listed if isinstance(m, dict) and (model is None or m.get("id") == model)]
    if len(chosen) != 1 or not isinstance(chosen[0].get("honing_agent"), dict):
        return None
    try:
        return SavedAgent.model_validate(chosen[0]["honing_agent"])
    except ValidationError:
        return None
