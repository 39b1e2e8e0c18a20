"""A team run exported and evaluated as a team. Per-role adapters (`team.adapters: per_role`, one
real update of the loop on a tiny model): one directory per role, each loadable and computing what
that role's learner in the checkpoint computes, the roles apart; `team.yaml` names them and
`load_team_file` reads it; `honing eval --team OUT/team.yaml` plays each role on its own model.
Shared adapters: one model plus a team.yaml without models. Quantising per role is refused; a URL
gets the whole tree.

The `coin` domain (tests/coin_domain.py) judges a reply by its length's parity, so that the tiny
random model's samples differ in reward and each role's adapter trains.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from coin_domain import coin_domain, generate

from honing.errors import CheckpointError, ConfigError, ExportError
from honing.eval.config import load_team, load_team_file
from honing.eval.model import open_team_engines
from honing.export import ExportResult, export_run, export_run_to_url
from honing.rollout.engines.base import Engine
from honing.rollout.engines.hf import HFEngine
from honing.rollout.team import RoleEngines
from honing.tasks.domains import Domain
from honing.trainer.checkpoint import latest_checkpoint
from honing.trainer.learner import Learner
from honing.trainer.loop import train
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import RunDir

IDS = torch.tensor([[1, 504, 3458, 314, 253, 1345, 28, 2]])
ROLES = ["analyst", "executor"]  # the team's order


@pytest.fixture(scope="module", autouse=True)
def coin() -> Iterator[Domain]:
    with coin_domain() as domain:
        yield domain


def team_run(root: Path, model: Path, adapters: str) -> Path:
    """One update of the loop, played by an analyst and an executor."""
    config = TrainConfig.model_validate({
        "name": f"coin-{adapters}",
        "model": str(model),
        "out": str(root / "run"),
        "seed": 5,
        "train": {"coin": {"tasks": "synthetic-coin", "count": 8, "seed": 1}},
        "steps": 1,
        "groups_per_step": 2,
        "n": 4,
        "learner": {"lr": 1e-2, "micro_batch_tokens": 2048, "lora": {"r": 4}},
        "agent": {"max_turns": 1, "max_new_tokens": 12, "system_prompt": ""},
        "team": {"roles": [{"kind": "analyst"}, {"kind": "executor"}], "max_rounds": 2,
                 "adapters": adapters},
        "eval": {"before": False},
        "sandbox": {"pool_size": 1, "timeout_s": 20.0},
    })  # fmt: skip
    assert asyncio.run(train(config)).steps == 1
    return root / "run"


@pytest.fixture(scope="module")
def per_role_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return team_run(tmp_path_factory.mktemp("per-role"), tiny_model_dir, "per_role")


@pytest.fixture(scope="module")
def merged(per_role_run: Path, tmp_path_factory: pytest.TempPathFactory) -> ExportResult:
    return export_run(per_role_run, tmp_path_factory.mktemp("exports") / "team", merge_lora=True)


def logits(model: Any) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(input_ids=IDS).logits
    return out


def from_pretrained(directory: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(directory))


def learner_logits(run: Path, learner: str) -> torch.Tensor:
    """The logits of the latest checkpoint's `learner` directory, loaded into a learner by hand."""
    config = RunDir(run).config()
    checkpoint = latest_checkpoint(run)
    assert checkpoint is not None
    model = Learner(str(config.model), config.learner_config)
    model.load(checkpoint / learner)
    model.model.eval()
    return logits(model.model)


# -- per-role adapters --------------------------------------------------------------------------


def test_each_role_is_exported_as_the_model_its_learner_trained(
    per_role_run: Path, merged: ExportResult
) -> None:
    out = merged.out
    assert dict(merged.roles) == {role: out / role for role in ROLES}
    assert merged.team_file == out / "team.yaml" and merged.layout == "model"
    assert "as a team of 2 roles (analyst, executor), each a model (fp32, " in merged.line()
    assert {p.name for p in out.iterdir()} == {"analyst", "executor", "team.yaml", "README.md"}
    found = {}
    for role in ROLES:
        names = {p.name for p in (out / role).iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json",
                "honing_agent.json", "README.md"} <= names  # fmt: skip
        found[role] = logits(from_pretrained(out / role))
    # Each role computes what its own learner in the checkpoint computes: the executor the run's
    # learner/, the analyst learner-analyst/.
    torch.testing.assert_close(found["executor"], learner_logits(per_role_run, "learner"))
    torch.testing.assert_close(found["analyst"], learner_logits(per_role_run, "learner-analyst"))
    assert not torch.allclose(found["executor"], found["analyst"])  # the adapters differ
    weights = [dict(from_pretrained(out / role).named_parameters()) for role in ROLES]
    differ = {n for n, p in weights[0].items() if not torch.equal(p, weights[1][n])}
    # Where the adapters are (LoRA on the attention and MLP projections), and nowhere else.
    assert differ and all(n.endswith("_proj.weight") for n in differ)
    assert torch.equal(weights[0]["model.embed_tokens.weight"],
                       weights[1]["model.embed_tokens.weight"])  # fmt: skip
    # Each role's card says which role it is; the team's says how to evaluate the team.
    assert "the analyst role" in (out / "analyst" / "README.md").read_text()
    card = " ".join((out / "README.md").read_text().split())
    assert "a team of 2 roles" in card and "| analyst | analyst | `analyst/` |" in card
    assert f"--policy model:{out / 'executor'} --team {out / 'team.yaml'}" in card


def test_the_team_file_holds_the_runs_team_and_names_each_roles_directory(
    per_role_run: Path, merged: ExportResult
) -> None:
    path = merged.out / "team.yaml"
    raw = yaml.safe_load(path.read_text())
    config = yaml.safe_load((per_role_run / "config.yaml").read_text())
    assert raw == {"team": config["team"], "models": {"analyst": "analyst",
                                                      "executor": "executor"}}  # fmt: skip
    assert path.read_text().startswith("# The team of the run run (step 1)")
    command = f"honing eval --tasks TASKS --policy model:{merged.out / 'executor'} --team {path}"
    assert f"# Evaluate it as a team:\n#   {command}\n" in path.read_text()
    loaded = load_team_file(path)
    assert loaded.team == RunDir(per_role_run).config().team
    assert loaded.models == {role: merged.out / role for role in ROLES}


def test_eval_plays_each_role_on_its_own_model(
    merged: ExportResult, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from honing.cli import app

    tasks = tmp_path / "coin.jsonl"
    tasks.write_text("".join(json.dumps(t.model_dump(mode="json")) + "\n"
                             for t in generate(3, 7, "")))  # fmt: skip
    monkeypatch.setenv("HONING_HOME", str(tmp_path / "home"))
    out = merged.out
    args = ["eval", "--tasks", str(tasks), "--policy", f"model:{out / 'executor'}", "--team",
            str(out / "team.yaml"), "--max-new-tokens", "8", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    teamed = json.loads(result.stdout)["team"]
    assert teamed["models"] == {role: f"model:{out / role}" for role in ROLES}
    # The name says which roles play another model than the policy's.
    assert (
        teamed["policy"]
        == f"model:{out / 'executor'} · team (analyst: model:{out / 'analyst'}, executor)"
    )
    assert teamed["end_to_end"]["total"] + teamed["end_to_end"]["infra_failed"] == 3
    assert set(teamed["roles"]["reward"]) == set(ROLES)

    # --role-model replaces the file's: the analyst plays the executor's model.
    again = CliRunner().invoke(app, [*args, "--role-model", f"analyst={out / 'executor'}"])
    assert again.exit_code == 0, again.output
    models = json.loads(again.stdout)["team"]["models"]
    assert models == {role: f"model:{out / 'executor'}" for role in ROLES}


async def test_each_role_gets_an_engine_of_its_own_model(merged: ExportResult) -> None:
    """What `honing eval --team` plays on: the analyst its own engine, the executor the policy's
    (the same directory: loaded once)."""
    out = merged.out
    team_file = load_team_file(out / "team.yaml")
    policy = HFEngine.load(out / "executor", dtype="float32")
    loaded: list[Path] = []

    def load(directory: Path) -> Engine:
        loaded.append(directory)
        return HFEngine.load(directory, dtype="float32")

    engines = await open_team_engines(team_file.team, team_file.models, f"model:{out / 'executor'}",
                                      policy, load)  # fmt: skip
    try:
        assert loaded == [out / "analyst"]
        assert isinstance(engines.engine, RoleEngines)
        analyst, executor = (engines.engine.for_role(r) for r in ROLES)
        assert executor is policy and analyst is not policy
        assert isinstance(analyst, HFEngine)
        torch.testing.assert_close(logits(analyst.model), logits(from_pretrained(out / "analyst")))
        assert not torch.allclose(logits(analyst.model), logits(policy.model))
    finally:
        await engines.close()
        await policy.close()


def test_the_adapter_layout_gives_each_role_its_adapter_and_base(
    per_role_run: Path, merged: ExportResult, tmp_path: Path
) -> None:
    out = tmp_path / "adapters"
    result = export_run(per_role_run, out)
    assert result.layout == "adapter" and dict(result.roles) == {r: out / r for r in ROLES}
    for role in ROLES:
        config = json.loads((out / role / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == str((out / role / "base").resolve())
        assert (out / role / "base" / "config.json").is_file()
        # peft loads the base and the adapter: the merged export's function
        torch.testing.assert_close(logits(from_pretrained(out / role)),
                                   logits(from_pretrained(merged.out / role)))  # fmt: skip
    # The team file holds the team; `honing eval` plays model directories, and says what to do.
    assert load_team(out / "team.yaml") == RunDir(per_role_run).config().team
    assert yaml.safe_load((out / "team.yaml").read_text())["models"] == {r: r for r in ROLES}
    with pytest.raises(ConfigError, match=r"models\.analyst: .* is a LoRA adapter .* --merge-lora"):
        load_team_file(out / "team.yaml")
    assert "export the run again with `--merge-lora`" in (out / "README.md").read_text()


def test_a_url_gets_every_roles_directory_and_the_team(per_role_run: Path, tmp_path: Path) -> None:
    from honing.trainer.remote import read_published

    url = f"file://{tmp_path}/remote/team"
    exported = export_run_to_url(per_role_run, url, merge_lora=True)
    files = read_published(url).files
    assert {"team.yaml", "README.md", "analyst/model.safetensors",
            "executor/model.safetensors"} <= set(files)  # fmt: skip
    assert {f.path.as_posix(): f.bytes for f in exported.files} == files


def test_per_role_quantisation_is_refused_and_a_missing_role_is_named(
    per_role_run: Path, tmp_path: Path
) -> None:
    with pytest.raises(ExportError, match=r"per-role adapters.*export without --quantize"):
        export_run(per_role_run, tmp_path / "int8", merge_lora=True, quantize="int8")
    assert not (tmp_path / "int8").exists()
    broken = tmp_path / "broken"
    shutil.copytree(per_role_run, broken)
    checkpoint = latest_checkpoint(broken)
    assert checkpoint is not None
    shutil.rmtree(checkpoint / "learner-analyst")
    with pytest.raises(
        CheckpointError, match=r"no learner for role 'analyst' \(learner-analyst/\)"
    ):
        export_run(broken, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


# -- shared adapters ----------------------------------------------------------------------------


def test_a_shared_team_exports_one_model_and_its_team(tiny_model_dir: Path, tmp_path: Path) -> None:
    run = team_run(tmp_path, tiny_model_dir, "shared")
    out = tmp_path / "export"
    result = export_run(run, out, merge_lora=True)
    assert not result.roles and result.team_file == out / "team.yaml"
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    loaded = load_team_file(out / "team.yaml")
    assert loaded.team == RunDir(run).config().team and loaded.models == {}
    assert "models" not in yaml.safe_load((out / "team.yaml").read_text())
    card = " ".join((out / "README.md").read_text().split())
    assert f"## As a team `honing eval --tasks TASKS --policy model:{out} --team" in card
