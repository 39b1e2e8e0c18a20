"""Weight sync to a server: files staged atomically, a reload (or LoRA hot-load) request to a real
local HTTP server that answers like vLLM, versions, pruning, and a refused reload."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from honing.errors import EngineError
from honing.records import Group, Trajectory
from honing.rollout.engines.openai import OpenAIConfig, OpenAIEngine
from honing.rollout.engines.scripted import ScriptedEngine
from honing.trainer import Learner, LearnerConfig, LoraSettings, sync_weights

pytestmark = pytest.mark.dtype  # run again under each forced auto dtype (make test)


def _fake_server_module() -> Any:
    """tests/rollout/fake_openai_server.py, shared with the rollout tests (not a package)."""
    name = "fake_openai_server"
    if name not in sys.modules:
        path = Path(__file__).parents[1] / "rollout" / "fake_openai_server.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


FakeOpenAIServer = _fake_server_module().FakeOpenAIServer
LORA = LoraSettings(r=4, alpha=8)


@pytest.fixture
def server() -> Iterator[Any]:
    with FakeOpenAIServer() as srv:
        yield srv


def make_engine(server: Any, **settings: Any) -> OpenAIEngine:
    config = OpenAIConfig(base_url=server.url, model="tiny", retries=0, backoff_s=0, **settings)
    return OpenAIEngine(config)


@pytest.fixture
async def engine(server: Any) -> AsyncIterator[OpenAIEngine]:
    eng = make_engine(server)
    yield eng
    await eng.close()


def step(learner: Learner, seed: int) -> None:
    """One optimiser step on two groups of random on-policy sequences with unequal rewards."""
    gen = torch.Generator().manual_seed(seed)
    trajs = []
    for i in range(4):
        prompt = [1, 504, 3032]
        ids = torch.randint(10, 4000, (6,), generator=gen).tolist()
        trajs.append(
            Trajectory(
                task_id="t",
                domain="math",
                token_ids=prompt + ids,
                loss_mask=[0] * len(prompt) + [1] * len(ids),
                logprobs=[0.0] * (len(prompt) + len(ids)),
                versions=[-1] * len(prompt) + [learner.version] * len(ids),
                prompt_len=len(prompt),
                components={"outcome": float(i % 2)},
                reward=float(i % 2),
            )
        )
    for t, lp in zip(trajs, learner.logprobs(trajs), strict=True):
        t.logprobs = lp
    stats = learner.update([Group("t0", "g0", trajs[:2]), Group("t1", "g1", trajs[2:])])
    assert stats.stepped


def reloads(server: Any, path: str) -> list[dict[str, Any]]:
    return [seen.body for seen in server.state.seen if seen.path == path]


async def test_full_sync_writes_a_model_directory_and_asks_the_server_to_reload_it(
    tiny_model_dir: Path, tmp_path: Path, server: Any, engine: OpenAIEngine
) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig(lr=1e-3))
    step(learner, seed=0)
    report = await sync_weights(learner, engine, staging=tmp_path)

    assert report.mode == "files" and report.version == learner.version == 1
    assert report.path == tmp_path / "v000001"
    assert engine.version == 1
    assert reloads(server, "/reload_weights") == [{"path": str(report.path), "version": 1}]
    # only the published directory: the temporary one was renamed, not copied
    assert [p.name for p in tmp_path.iterdir()] == ["v000001"]
    files = list(report.path.iterdir())
    assert report.bytes == sum(f.stat().st_size for f in files) > 0
    assert report.tensors > 0 and report.seconds >= report.write_seconds > 0

    loaded = AutoModelForCausalLM.from_pretrained(report.path, dtype=torch.float32)
    assert loaded.config.use_cache  # the learner trains without a KV cache; the server should not
    served = loaded.state_dict()
    weights = learner.weights()
    assert weights.keys() <= served.keys()
    for name, tensor in weights.items():
        assert torch.equal(served[name], tensor), name
    # the update moved them: a server reloading this directory gets new weights
    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    assert any(not torch.equal(fresh[n], t) for n, t in weights.items())
    tokenizer = AutoTokenizer.from_pretrained(report.path)
    text = "Hello, honing!"
    assert tokenizer.encode(text) == learner.tokenizer.encode(text)
    assert tokenizer.chat_template == learner.tokenizer.chat_template


@pytest.mark.parametrize("keep", [1, 2])
async def test_versions_increment_and_only_the_last_k_stay_staged(
    tiny_model_dir: Path, tmp_path: Path, server: Any, engine: OpenAIEngine, keep: int
) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig(lr=1e-3))
    versions = []
    for k in range(3):
        step(learner, seed=k)
        report = await sync_weights(learner, engine, staging=tmp_path, keep=keep)
        versions.append(report.version)
        assert report.path is not None and report.path.is_dir()
    assert versions == [1, 2, 3] and engine.version == 3
    assert [body["version"] for body in reloads(server, "/reload_weights")] == [1, 2, 3]
    expected = ["v000002", "v000003"][-keep:]
    assert sorted(p.name for p in tmp_path.iterdir()) == expected


async def test_lora_adapter_sync_writes_a_peft_adapter_and_hot_loads_it(
    tiny_model_dir: Path, tmp_path: Path, server: Any
) -> None:
    from peft import PeftModel

    learner = Learner(tiny_model_dir, LearnerConfig(lr=1e-2, lora=LORA))
    step(learner, seed=0)
    engine = make_engine(server, lora_adapters=True)
    try:
        report = await sync_weights(learner, engine, staging=tmp_path)
    finally:
        await engine.close()

    assert report.mode == "adapter" and report.path == tmp_path / "v000001"
    names = {p.name for p in report.path.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= names
    assert "model.safetensors" not in names  # the adapter only, not the model
    loads = reloads(server, "/v1/load_lora_adapter")
    assert loads == [{"lora_name": "honing-v1", "lora_path": str(report.path)}]
    assert not reloads(server, "/reload_weights")
    assert engine.model == "honing-v1" and engine.version == 1

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, report.path).merge_and_unload().state_dict()
    weights = learner.weights()
    assert weights
    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    for name, tensor in weights.items():
        torch.testing.assert_close(merged[name], tensor, atol=0, rtol=0)
        assert not torch.equal(fresh[name], tensor), name  # the adapter is not a no-op


async def test_lora_without_adapter_support_sends_the_merged_model(
    tiny_model_dir: Path, tmp_path: Path, server: Any, engine: OpenAIEngine
) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig(lr=1e-2, lora=LORA))
    step(learner, seed=0)
    report = await sync_weights(learner, engine, staging=tmp_path)

    assert report.mode == "files" and report.path is not None
    assert reloads(server, "/reload_weights") == [{"path": str(report.path), "version": 1}]
    served = AutoModelForCausalLM.from_pretrained(report.path, dtype=torch.float32).state_dict()
    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    assert served.keys() == fresh.keys()  # base names, no lora_A/lora_B
    merged = learner.weights()
    for name, tensor in served.items():
        expected = merged.get(name, fresh[name])  # adapted modules merged, the rest the base's
        assert torch.equal(tensor, expected), name


async def test_a_refused_reload_names_the_server_and_keeps_the_files(
    tiny_model_dir: Path, tmp_path: Path, server: Any, engine: OpenAIEngine
) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig(lr=1e-3))
    step(learner, seed=0)
    server.state.plan["/reload_weights"] = ["500"]
    with pytest.raises(EngineError) as failed:
        await sync_weights(learner, engine, staging=tmp_path)
    staged = tmp_path / "v000001"
    message = str(failed.value)
    assert server.url.removesuffix("/v1") + "/reload_weights" in message
    assert str(staged) in message and "500" in message
    assert (staged / "config.json").is_file() and list(staged.glob("*.safetensors"))
    assert engine.version == 0  # the server still serves the old weights

    # syncing the same version again replaces the staged directory and succeeds
    report = await sync_weights(learner, engine, staging=tmp_path)
    assert report.path == staged and engine.version == 1
    assert [p.name for p in tmp_path.iterdir()] == ["v000001"]


async def test_in_process_engines_still_take_a_state_dict(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig(lr=1e-3))
    step(learner, seed=0)
    engine = ScriptedEngine(["ok"])
    report = await sync_weights(learner, engine, staging=tmp_path)
    assert report.mode == "state_dict" and report.path is None
    assert report.tensors == len(learner.weights()) and engine.version == 1
    assert not list(tmp_path.iterdir())  # nothing written


async def test_misuse_is_an_error_that_says_what_to_do(
    tiny_model_dir: Path, engine: OpenAIEngine, tmp_path: Path
) -> None:
    learner = Learner(tiny_model_dir, LearnerConfig())
    with pytest.raises(ValueError, match="staging="):
        await sync_weights(learner, engine)
    with pytest.raises(ValueError, match="LoRA learner"):
        await sync_weights(learner, engine, staging=tmp_path, mode="adapter")
    with pytest.raises(ValueError, match="keep"):
        await sync_weights(learner, engine, staging=tmp_path, keep=0)
