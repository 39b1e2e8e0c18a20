"""A team file's `models:` and `--role-model ROLE=PATH`: which model each role of `honing eval
--team` plays (paths relative to the file, or to the working directory for the flag), and the
errors that name the file, the key or the flag and what to do. Every error here is raised before
an engine loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from honing.errors import ConfigError
from honing.eval.config import load_team_file, write_team_file

DUO = {"roles": [{"kind": "executor"}, {"kind": "validator", "name": "checker"}]}


def team_file(directory: Path, models: dict[str, str] | None = None) -> Path:
    path = directory / "team.yaml"
    write_team_file(path, DUO, models or {}, comment="a test's team")
    return path


def test_models_are_relative_to_the_file_and_the_flags_replace_them(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    (tmp_path / "exported").symlink_to(tiny_model_dir)
    path = team_file(tmp_path, {"checker": "exported"})
    assert path.read_text().startswith("# a test's team\nteam:\n")
    loaded = load_team_file(path)
    assert [r.role for r in loaded.team.roles] == ["executor", "checker"]
    assert loaded.models == {"checker": tmp_path / "exported"}
    flagged = load_team_file(path, {"checker": tiny_model_dir, "executor": tiny_model_dir})
    assert flagged.models == {"checker": tiny_model_dir, "executor": tiny_model_dir}
    # A run config's team: block with models beside it reads the same way.
    run = tmp_path / "run.yaml"
    run.write_text(f"model: m\nteam:\n  roles: [{{kind: executor}}]\nmodels: {{executor: "
                   f"{tiny_model_dir}}}\n")  # fmt: skip
    assert load_team_file(run).models == {"executor": tiny_model_dir}


def adapter_dir(directory: Path) -> Path:
    """What `honing export` of a LoRA run without --merge-lora writes (as far as checked)."""
    directory.mkdir()
    (directory / "adapter_config.json").write_text("{}")
    return directory


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (
            {"analyst": "m"},
            "models.analyst: the team has no role 'analyst'; its roles: executor, checker",
        ),
        (
            {"checker": "gone"},
            "models.checker: {dir}/gone does not exist: give the directory of "
            "the model this role plays",
        ),
        (
            {"checker": "adapter"},
            "models.checker: model '{dir}/adapter': {dir}/adapter is a LoRA "
            "adapter (adapter_config.json), not a model directory: export "
            "the run with `honing export RUN --merge-lora",
        ),
        ({"checker": ["m"]}, "models: expected a mapping of role names to model directories"),
    ],
)
def test_a_wrong_model_in_the_file_is_named(
    tmp_path: Path, models: dict[str, Any], message: str
) -> None:
    adapter_dir(tmp_path / "adapter")
    path = team_file(tmp_path, models)
    with pytest.raises(ConfigError) as info:
        load_team_file(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message.format(dir=tmp_path) in str(info.value)


TEAM = "roles: [{kind: executor}, {kind: validator}]\n"


@pytest.mark.parametrize(
    ("policy", "args", "message"),
    [
        (
            "model:MODEL",
            ["--role-model", "coach=MODEL"],
            "--role-model coach=MODEL: the team has no role 'coach'; its roles: executor, "
            "validator",
        ),
        (
            "model:MODEL",
            ["--role-model", "validator=DIR/nowhere"],
            "--role-model validator=DIR/nowhere: DIR/nowhere does not exist",
        ),
        (
            "model:MODEL",
            ["--role-model", "validator"],
            "--role-model 'validator': expected ROLE=PATH",
        ),
        ("reference", ["--role-model", "validator=MODEL"], "--team needs a model policy"),
        (
            "model:MODEL",
            ["--role-model", "validator=MODEL", "--no-team"],
            "--role-model gives a team's role its model: add --team TEAM.yaml",
        ),
    ],
)
def test_a_wrong_role_model_flag_is_named(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    tiny_model_dir: Path,
    policy: str,
    args: list[str],
    message: str,
) -> None:
    from typer.testing import CliRunner

    from honing.cli import app

    def fill(text: str) -> str:
        return text.replace("MODEL", str(tiny_model_dir)).replace("DIR", str(tmp_path))

    team = tmp_path / "team.yaml"
    team.write_text(TEAM)
    flags = [fill(a) for a in args if a != "--no-team"]
    if "--no-team" not in args:
        flags += ["--team", str(team)]
    monkeypatch.setenv("HONING_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, ["eval", "--tasks", "examples-math", "--policy",
                                      fill(policy), *flags])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert fill(message) in " ".join(result.stderr.split())
