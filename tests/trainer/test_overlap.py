"""Overlapped generation and training (`async: {max_staleness: K}`, honing.trainer.overlap) on a
tiny model with a seeded scripted engine: K = 0 is today's loop bit for bit; K = 1 trains on
tokens one version old (never more), with the decoupled importance correction, and resumes."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from learner_helpers import PROMPTS, trajectory
from safetensors.torch import load_file

from honing.config import validate_model
from honing.errors import ConfigError
from honing.records import Group
from honing.rollout.engines.base import Prompt
from honing.rollout.engines.scripted import LatencyModel, ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.store import read_trajectories
from honing.trainer.checkpoint import latest_checkpoint
from honing.trainer.config import LearnerConfig
from honing.trainer.learner import Learner
from honing.trainer.loop import train
from honing.trainer.run_config import TrainConfig

QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def settings(tmp_path: Path, model: Path, out: str, **extra: Any) -> dict[str, Any]:
    rows = [{"id": f"a{i}", "domain": "math", "prompt": f"What is {10 + 7 * i} + {3 + i}?",
             "answer": str(13 + 8 * i)} for i in range(12)]  # fmt: skip
    tasks = tmp_path / "add.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base: dict[str, Any] = {
        "model": str(model),
        "out": str(tmp_path / out),
        "seed": 3,
        "train": {"add": {"tasks": str(tasks)}},
        "steps": 3,
        "groups_per_step": 2,
        "n": 2,
        "learner": {"lr": 1e-3, "micro_batch_tokens": 2048},
        "agent": {"max_turns": 2, "max_new_tokens": 32, "system_prompt": ""},
        "eval": {"before": False},
        "checkpoint": {"every": 2, "keep": 3},
        "sandbox": {"pool_size": 2, "timeout_s": 20.0},
        "observe": {"tensorboard": False},
    }
    base.update(extra)
    return base


def scripted(model: Path, per_token_s: float = 0.0) -> ScriptedEngine:
    """Answers through the answer tool, wrong for one seed in three (a group's samples differ)."""
    tokenizer = load_tokenizer(model)

    def respond(prompt: Prompt, seed: int) -> str:
        a, b = QUESTION.findall(tokenizer.decode(prompt.token_ids or []))[-1]
        value = int(a) + int(b) + (1 if seed % 3 == 0 else 0)
        return f'<tool_call>{{"name": "answer", "arguments": {{"value": "{value}"}}}}</tool_call>'

    latency = LatencyModel(per_token_s=per_token_s)
    return ScriptedEngine(respond, tokenizer=tokenizer, by_seed=True, latency=latency)


def run(cfg: dict[str, Any], model: Path, *, resume: bool = False, **kw: Any) -> Path:
    config = validate_model(TrainConfig, cfg)
    asyncio.run(train(config, resume=resume, engine=scripted(model, **kw)))
    return config.out


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _untimed(value: Any) -> Any:
    """A record without its wall-clock figures (the only thing two identical runs differ in)."""
    if isinstance(value, dict):
        return {
            k: _untimed(v)
            for k, v in value.items()
            if not (k.endswith(("_s", "seconds")) or k == "time" or k.startswith("time/"))
        }
    return value


def test_the_async_key_is_validated_and_saved_as_written(tmp_path: Path) -> None:
    cfg = {"out": str(tmp_path / "r"), "steps": 1, "train": {"a": {"tasks": "synthetic-math"}}}
    config = validate_model(TrainConfig, {**cfg, "async": {"max_staleness": 2}})
    assert config.ahead == 2 and config.model_dump(mode="json")["async"] == {"max_staleness": 2}
    assert validate_model(TrainConfig, cfg).ahead == 0
    with pytest.raises(ConfigError, match=r"'async.k' \(allowed: max_staleness\)"):
        validate_model(TrainConfig, {**cfg, "async": {"k": 1}})
    with pytest.raises(ConfigError, match="bit-reproducible"):
        validate_model(TrainConfig, {**cfg, "deterministic": True, "async": {"max_staleness": 1}})


def test_k0_is_todays_loop_bit_for_bit(tmp_path: Path, tiny_model_dir: Path) -> None:
    plain = run(settings(tmp_path, tiny_model_dir, "plain", deterministic=True), tiny_model_dir)
    zero = settings(tmp_path, tiny_model_dir, "zero", deterministic=True)
    zero["async"] = {"max_staleness": 0}
    k0 = run(zero, tiny_model_dir)
    assert [_untimed(r) for r in records(k0)] == [_untimed(r) for r in records(plain)]
    assert len(records(k0)) == 3

    def trajectories(run_dir: Path) -> list[tuple[Any, ...]]:
        return [(t.task_id, t.sample, t.token_ids, t.logprobs, t.versions, t.reward)
                for t in read_trajectories(run_dir)]  # fmt: skip

    assert trajectories(k0) == trajectories(plain)
    weights = [load_file(latest_checkpoint(r) / "learner" / "model.safetensors")  # type: ignore[operator]
               for r in (plain, k0)]  # fmt: skip
    assert all((weights[0][n] == weights[1][n]).all() for n in weights[0])


def test_k1_trains_on_tokens_one_version_old_with_the_correction(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    cfg = settings(tmp_path, tiny_model_dir, "k1", steps=4)
    cfg["async"] = {"max_staleness": 1}
    out = run(cfg, tiny_model_dir, per_token_s=0.002)  # generations long enough to span syncs
    got = records(out)
    assert [r["step"] for r in got] == [1, 2, 3, 4]
    assert len(read_trajectories(out)) == 4 * 2 * 2
    lags = [int(lag) for r in got for lag in r["staleness"]]
    assert max(lags) == 1  # some update trained on the previous version's tokens, none older
    assert got[0]["staleness"] == {"0": 4}  # the first batch is played before any update
    stale = [r for r in got if "1" in r["staleness"]]
    for r in stale:  # the decoupled correction was computed on them, and no token was dropped
        assert r["learner"]["stale_tokens"] == 0
        assert r["learner"]["is_weight_mean"] > 0 and r["learner"]["tokens"] > 0
    for t in read_trajectories(out):  # per-token versions: never newer than the trajectory's
        model = [v for v, m in zip(t.versions, t.loss_mask, strict=True) if m]
        assert model and min(model) == t.policy_version and max(model) <= 4


def test_k1_resumes_and_replays_the_batches_in_flight(tmp_path: Path, tiny_model_dir: Path) -> None:
    cfg = settings(tmp_path, tiny_model_dir, "resumed", steps=4)
    cfg["async"] = {"max_staleness": 1}
    config = validate_model(TrainConfig, cfg)

    def crash(record: Any) -> None:
        if record.step == 3:  # after update 3: checkpoint at 2, batch 4 in flight
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(train(config, engine=scripted(tiny_model_dir), on_step=crash))
    drawn_before = records(config.out)[2]["sources"]
    tasks_before = sorted(t.task_id for t in read_trajectories(config.out)[8:12])
    asyncio.run(train(config, resume=True, engine=scripted(tiny_model_dir)))
    got = records(config.out)
    assert [r["step"] for r in got] == [1, 2, 3, 4]
    assert got[2]["sources"] == drawn_before
    trajectories = read_trajectories(config.out)
    assert len(trajectories) == 4 * 2 * 2
    # update 3's batch (drawn before the checkpoint's cursors were saved) is drawn again
    assert sorted(t.task_id for t in trajectories[8:12]) == tasks_before


def test_tokens_a_version_old_get_the_importance_weight(tiny_model_dir: Path) -> None:
    """What an overlapped update does with a batch sampled before the previous update: the
    weight is exp(proximal - behaviour), the learner now (v1) against the sampler then (v0)."""
    learner = Learner(tiny_model_dir, LearnerConfig(lr=1e-2, max_importance_weight=10.0))
    gen = torch.Generator().manual_seed(0)
    ids = [torch.randint(10, 4000, (6,), generator=gen).tolist() for _ in range(4)]
    trajs = [trajectory(PROMPTS[i % 3], ids[i], float(i % 2)) for i in range(4)]
    stale, fresh = trajs[:2], trajs[2:]
    for t, lp in zip(stale, learner.logprobs(stale), strict=True):  # sampled at v0
        t.logprobs = lp
    assert learner.update([Group("t", "g0", fresh)]).stepped and learner.version == 1
    now = learner.logprobs(stale)  # the proximal policy of the next update
    expected = [math.exp(a - b) for t, lp in zip(stale, now, strict=True)
                for a, b, m in zip(lp, t.logprobs, t.loss_mask, strict=True) if m]  # fmt: skip
    stats = learner.update([Group("t", "g1", stale)])
    assert stats.is_weight_mean == pytest.approx(sum(expected) / len(expected), rel=1e-3)
    assert abs(stats.is_weight_mean - 1.0) > 1e-3  # the correction did something
    assert stats.stale_tokens == 0
