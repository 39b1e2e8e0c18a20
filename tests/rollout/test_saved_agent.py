"""The agent settings saved beside a model (honing_agent.json): round trip, absent, damaged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from honing.errors import ConfigError
from honing.rollout.saved_agent import AGENT_FILE, SavedAgent, load_agent, save_agent


def test_saved_settings_load_back_and_describe_themselves(tmp_path: Path) -> None:
    agent = SavedAgent(system_prompt="", max_turns=2, max_new_tokens=48, max_total_tokens=2048)
    path = save_agent(tmp_path, agent)
    assert path == tmp_path / AGENT_FILE
    assert load_agent(tmp_path) == agent
    assert (
        agent.describe() == "2 turn(s) of at most 48 tokens, system prompt: tool descriptions only"
    )
    assert "honing's default" in agent.model_copy(update={"system_prompt": None}).describe()
    short = agent.model_copy(update={"restate": False})
    save_agent(tmp_path, short)
    assert load_agent(tmp_path) == short and short.describe().endswith("show what changed")


def test_a_directory_without_settings_has_none(tmp_path: Path) -> None:
    assert load_agent(tmp_path) is None


GOOD = {"system_prompt": "", "max_turns": 1, "max_new_tokens": 8, "max_total_tokens": 64}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{oops", "unreadable"),
        (json.dumps({**GOOD, "max_turns": 0}), "max_turns: Input should be greater"),
        (json.dumps({**GOOD, "turns": 3}), "turns: Extra inputs"),
    ],
)
def test_a_damaged_file_is_an_error_naming_the_file_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / AGENT_FILE).write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_agent(tmp_path)
    assert str(tmp_path / AGENT_FILE) in str(info.value)
