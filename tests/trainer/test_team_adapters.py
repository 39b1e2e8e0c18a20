"""Per-role LoRA adapters (`team.adapters: per_role`): each role trains its own adapter on the
same base in the same run, is served by an engine of its own, is checkpointed apart and resumes.

The `coin` domain (tests/coin_domain.py) judges a reply by its length's parity, so that the tiny
random model's samples differ in reward and every role's group carries a signal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from coin_domain import coin_domain
from safetensors.torch import load_file

from honing.rollout.team import RoleEngines
from honing.store import read_trajectories
from honing.tasks.domains import Domain
from honing.trainer.checkpoint import latest_checkpoint
from honing.trainer.loop import train
from honing.trainer.run_config import TrainConfig
from honing.trainer.sync import run_engine


@pytest.fixture
def coin() -> Iterator[Domain]:
    with coin_domain() as domain:
        yield domain


def config(tmp_path: Path, model: Path, steps: int) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": str(model),
        "out": str(tmp_path / "run"),
        "seed": 5,
        "train": {"coin": {"tasks": "synthetic-coin", "count": 8, "seed": 1}},
        "steps": steps,
        "groups_per_step": 2,
        "n": 4,
        "learner": {"lr": 1e-2, "micro_batch_tokens": 2048, "lora": {"r": 4}},
        "agent": {"max_turns": 1, "max_new_tokens": 12, "system_prompt": ""},
        "team": {"roles": [{"kind": "analyst"}, {"kind": "executor"}], "adapters": "per_role"},
        "eval": {"before": False},
        "checkpoint": {"every": 1},
        "sandbox": {"pool_size": 1, "timeout_s": 20.0},
    })  # fmt: skip


def adapter(checkpoint: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(str(checkpoint / name / "adapter_model.safetensors"))


def test_each_role_trains_and_serves_its_own_adapter_and_resumes(
    coin: Domain, tmp_path: Path, tiny_model_dir: Path
) -> None:
    first = config(tmp_path, tiny_model_dir, steps=1)
    engines = RoleEngines({role: run_engine(first, str(tiny_model_dir))
                           for role in ("executor", "analyst")}, "executor")  # fmt: skip
    try:
        asyncio.run(train(first, engine=engines))
        one = latest_checkpoint(tmp_path / "run")
        assert one is not None
        executor, analyst = adapter(one, "learner"), adapter(one, "learner-analyst")
        assert executor.keys() == analyst.keys()
        lora_b = [k for k in executor if "lora_B" in k]
        assert lora_b and any(executor[k].abs().sum() > 0 for k in lora_b)  # trained (B starts 0)
        assert any(not torch.equal(executor[k], analyst[k]) for k in executor)  # apart
        # Each engine serves its own role's weights.
        served = {role: dict(e.model.named_parameters())  # type: ignore[attr-defined]
                  for role, e in engines.engines.items()}  # fmt: skip
        differ = [n for n, p in served["executor"].items()
                  if not torch.equal(p, served["analyst"][n])]  # fmt: skip
        assert differ and all(".self_attn." in n or ".mlp." in n for n in differ)
        assert engines.for_role("analyst").version == engines.for_role("executor").version == 1

        # Resumed for a second update, on engines of its own (one per role, from the
        # checkpoint's adapters): both adapters come back and train on.
        asyncio.run(train(config(tmp_path, tiny_model_dir, steps=2), resume=True))
        two = latest_checkpoint(tmp_path / "run")
        assert two is not None and two != one
        again = adapter(two, "learner-analyst")
        assert any(not torch.equal(again[k], analyst[k]) for k in again)
    finally:
        asyncio.run(engines.close())
    stored = read_trajectories(tmp_path / "run")
    assert {t.role for t in stored} == {"analyst", "executor"}


def test_per_role_adapters_need_lora(tmp_path: Path, tiny_model_dir: Path) -> None:
    raw = config(tmp_path, tiny_model_dir, steps=1).model_dump(mode="json")
    raw["learner"].pop("lora")
    with pytest.raises(ValueError, match=r"set learner\.lora"):
        TrainConfig.model_validate(raw)
