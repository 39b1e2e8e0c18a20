"""`honing.export.export_run` on real runs of the closed loop (tiny model, one update each): a
full fine-tune and a LoRA run with a warm start. The exports load with transformers unchanged
and compute what the learner's checkpoint computes; the adapter export equals the merged one;
dtype and int8 are what they claim; the card carries the run's evaluations; errors are clear and
never leave a half-written directory."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from honing.errors import ExportError
from honing.export import ExportResult, export_run
from honing.export import model as export_model
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_model, load_tokenizer
from honing.rollout.saved_agent import SavedAgent, load_agent
from honing.trainer.checkpoint import latest_checkpoint
from honing.trainer.learner import Learner
from honing.trainer.loop import train
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import RunDir

pytestmark = pytest.mark.dtype  # run again under each forced auto dtype (make test)

QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")
IDS = torch.tensor([[1, 504, 3458, 314, 253, 1345, 28, 2]])


def tasks_file(path: Path, start: int, count: int) -> Path:
    rows = []
    for i in range(start, start + count):
        a, b = 10 + 7 * i, 3 + i
        rows.append({"id": f"+{i}", "domain": "math", "prompt": f"What is {a} + {b}?",
                     "answer": str(a + b)})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_run(root: Path, model: Path, *, lora: bool) -> Path:
    """One update of the real loop with a scripted policy (right unless the seed is 0 mod 3)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    root.mkdir(parents=True)
    out = root / "run"
    raw: dict[str, Any] = {
        "model": str(model),
        "out": str(out),
        "seed": 3,
        "train": {"add": {"tasks": str(tasks_file(root / "train.jsonl", 0, 8))}},
        "heldout": {"add": {"tasks": str(tasks_file(root / "heldout.jsonl", 50, 3))}},
        "steps": 1,
        "groups_per_step": 2,
        "n": 2,
        "learner": {"lr": 1e-2, "micro_batch_tokens": 2048},
        "agent": {"max_turns": 2, "max_new_tokens": 32, "system_prompt": ""},
        "sandbox": {"pool_size": 2, "timeout_s": 20.0},
    }
    if lora:
        raw["learner"]["lora"] = {"r": 4, "alpha": 8}
        raw["warm_start"] = {
            "traces": {"tasks": str(tasks_file(root / "warm.jsonl", 20, 4))},
            "batch_size": 4,
            "lr": 1e-2,
        }
    config = TrainConfig.model_validate(raw)
    tokenizer = load_tokenizer(model)

    def respond(prompt: Prompt, seed: int) -> str:
        a, b = QUESTION.findall(tokenizer.decode(prompt.token_ids or []))[-1]
        value = int(a) + int(b) + (1 if seed % 3 == 0 else 0)
        return f'<tool_call>{{"name": "answer", "arguments": {{"value": "{value}"}}}}</tool_call>'

    engine = ScriptedEngine(respond, tokenizer=tokenizer, by_seed=True)
    result = asyncio.run(train(config, engine=engine))
    assert result.steps == 1
    return out


@pytest.fixture(scope="module")
def full_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("export") / "full", tiny_model_dir, lora=False)


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("export") / "lora", tiny_model_dir, lora=True)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exports")


@pytest.fixture(scope="module")
def lora_merged(lora_run: Path, exports: Path) -> ExportResult:
    return export_run(lora_run, exports / "lora-merged", merge_lora=True)


def logits(model: Any) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(input_ids=IDS).logits
    return out


def from_pretrained(directory: Path, **kwargs: Any) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(directory), **kwargs)


def learner_logits(run: Path, base: Path) -> torch.Tensor:
    """The logits of the run's latest checkpoint, loaded into a learner by hand."""
    config = RunDir(run).config()
    learner = Learner(str(base), config.learner)
    checkpoint = latest_checkpoint(run)
    assert checkpoint is not None
    learner.load(checkpoint / "learner")
    learner.model.eval()
    return logits(learner.model)


# -- full fine-tune ----------------------------------------------------------------------------


def test_full_fine_tune_exports_a_model_transformers_loads_with_the_trained_weights(
    full_run: Path, exports: Path, tiny_model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    out = exports / "full"
    result = export_run(full_run, out, merge_lora=True)
    assert result.layout == "model" and result.kind == "full" and result.step == 1
    assert result.base == tiny_model_dir
    assert any("full fine-tune" in n for n in result.notes)  # --merge-lora: a no-op, said so
    names = {f.path.as_posix() for f in result.files}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "chat_template.jinja", "README.md",
            "honing_agent.json"} <= names  # fmt: skip
    # the settings it was trained with travel with it: eval and serve play it the same way
    assert load_agent(out) == SavedAgent(
        system_prompt="", max_turns=2, max_new_tokens=32, max_total_tokens=2048
    )

    exported = logits(from_pretrained(out))
    torch.testing.assert_close(
        exported, learner_logits(full_run, tiny_model_dir), rtol=0, atol=1e-5
    )
    assert not torch.allclose(exported, logits(from_pretrained(tiny_model_dir)), atol=1e-4), (
        "the update changed nothing: this test would prove nothing"
    )

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert tokenizer.chat_template == load_tokenizer(tiny_model_dir).chat_template
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    generation = json.loads((out / "generation_config.json").read_text())
    eos = generation["eos_token_id"]
    assert end_of_turn in (eos if isinstance(eos, list) else [eos])
    assert generation["pad_token_id"] == tokenizer.pad_token_id
    config = json.loads((out / "config.json").read_text())
    assert config["use_cache"] is True
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"]  # transformers 4 too
    tokenizer_class = json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"]
    assert tokenizer_class == "PreTrainedTokenizerFast"


def test_dtype_bf16_saves_bf16_weights_and_says_so_in_config(full_run: Path, exports: Path) -> None:
    out = exports / "full-bf16"
    result = export_run(full_run, out, dtype="bf16")
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}  # noqa: SIM118
    assert dtypes == {"BF16"}
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert from_pretrained(out).dtype == torch.bfloat16
    full = exports / "full"
    if full.is_dir():  # half the bytes of the fp32 export
        fp32 = (full / "model.safetensors").stat().st_size
        assert result.weight_bytes < 0.6 * fp32


# -- LoRA on a warm start ----------------------------------------------------------------------


def test_lora_merged_export_is_the_adapter_on_the_warm_start_model(
    lora_run: Path, lora_merged: ExportResult, tiny_model_dir: Path
) -> None:
    warm = lora_run / "warm_start" / "model"
    assert lora_merged.base == warm and lora_merged.kind == "lora"
    exported = logits(from_pretrained(lora_merged.out))
    torch.testing.assert_close(exported, learner_logits(lora_run, warm), rtol=0, atol=1e-5)
    assert not torch.allclose(exported, logits(from_pretrained(warm)), atol=1e-4)  # the adapter
    assert not (lora_merged.out / "adapter_config.json").exists()


def test_lora_adapter_export_loads_as_peft_and_equals_the_merged_one(
    lora_run: Path, lora_merged: ExportResult, exports: Path
) -> None:
    from peft import PeftModel

    out = exports / "lora-adapter"
    result = export_run(lora_run, out)
    assert result.layout == "adapter"
    adapter_config = json.loads((out / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == str((out / "base").resolve())
    merged = logits(from_pretrained(lora_merged.out))
    torch.testing.assert_close(logits(from_pretrained(out)), merged, rtol=0, atol=1e-5)
    moved = exports / "moved-adapter"
    shutil.copytree(out, moved)  # after a move: base and adapter loaded explicitly
    peft_model = PeftModel.from_pretrained(from_pretrained(moved / "base"), str(moved))
    torch.testing.assert_close(logits(peft_model), merged, rtol=0, atol=1e-5)
    card = (out / "README.md").read_text()
    assert "library_name: peft" in card and "PeftModel.from_pretrained" in card
    assert snippets_parse(card) == 2


def test_card_has_front_matter_training_and_the_runs_eval_table(
    lora_run: Path, lora_merged: ExportResult
) -> None:
    card = (lora_merged.out / "README.md").read_text()
    front = card.split("---")[1]
    assert "library_name: transformers" in front and "- honing" in front and "- lora" in front
    evals = [json.loads(line) for line in (lora_run / "evals.jsonl").read_text().splitlines()]
    assert [e["phase"] for e in evals] == ["before", "warm start", "main"]
    assert "| held-out set | before training | after warm start | after RL (step 1) |" in card
    cells = [
        f"{100 * e['success']:.0f}% ({e['passed']}/{e['total']}; infra failures "
        f"{e['infra_failed']})"
        for e in evals
    ]
    assert f"| `add` | {cells[0]} | {cells[1]} | {cells[2]} |" in card
    assert "Warm start" in card and "LoRA r=4" in card and "GRPO" in card
    assert "| Precision | float32 for sampling and learning |" in card  # config.yaml, resolved
    assert re.search(
        r"Pooled over the sets: base \d+% → warm start \d+% → RL \d+% \(RL [+-]\d+ pts, 95% CI "
        r"[+-]\d+\.\.[+-]\d+; n=\d+; infra failures \d+\)",
        card,
    )
    assert f'from_pretrained("{lora_merged.out}")' in card
    assert snippets_parse(card) == 1


def test_int8_export_loads_quantised_is_smaller_and_the_card_compares_it(
    lora_run: Path, exports: Path
) -> None:
    out = exports / "int8"
    result = export_run(
        lora_run, out, merge_lora=True, quantize="int8", heldout_limit=2, measure_tokens=8
    )
    model = from_pretrained(out)
    assert type(model.model.layers[0].self_attn.q_proj.weight).__name__ == "Int8Tensor"
    assert "quantization_config" in json.loads((out / "config.json").read_text())
    assert torch.isfinite(logits(model)).all()
    c = result.comparison
    assert c is not None
    assert c.quantised.weight_bytes < c.reference.weight_bytes
    assert c.quantised.weight_bytes == result.weight_bytes
    assert c.quantised.tokens_per_s > 0 and c.reference.tokens_per_s > 0
    for m in (c.reference, c.quantised):
        assert [(s.set, s.total) for s in m.heldout] == [("add", 2)]
    dequantised = load_model(out, "float32", dequantise=True)  # what the held-out eval runs
    torch.testing.assert_close(logits(dequantised), logits(model), rtol=0, atol=1e-4)
    engine = HFEngine(out, max_batch=2)  # the engine runs the torchao model itself, too
    assert not engine.fast_path

    async def generate() -> list[int]:
        async with engine:
            [gen] = await engine.generate([Prompt(token_ids=[1, 504, 3458])], SamplingParams(
                temperature=0, max_new_tokens=4))  # fmt: skip
        return gen.token_ids

    assert len(asyncio.run(generate())) >= 1
    card = (out / "README.md").read_text()
    assert "## int8 quantisation" in card
    assert f"| Size on disk (weights) | {c.reference.weight_bytes / 1e6:.1f} MB | " in card
    assert "Held-out success `add`" in card and "- int8" in card
    assert "int8 vs fp32" in result.line()
    assert snippets_parse(card) == 1


# -- errors ------------------------------------------------------------------------------------


def snippets_parse(card: str) -> int:
    code = re.findall(r"```python\n(.*?)```", card, re.S)
    for snippet in code:
        ast.parse(snippet)
    return len(code)


def leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name or ".unquantised-" in p.name]


def test_errors_say_what_to_do_and_leave_nothing_behind(
    full_run: Path, lora_run: Path, tmp_path: Path
) -> None:
    with pytest.raises(ExportError, match="not a run directory"):
        export_run(tmp_path, tmp_path / "out")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(full_run / "config.yaml", fresh / "config.yaml")
    with pytest.raises(ExportError, match="the run has no checkpoint: train at least one update"):
        export_run(fresh, tmp_path / "out")
    with pytest.raises(ExportError, match="no checkpoint of step 7; it has 1"):
        export_run(full_run, tmp_path / "out", step=7)
    with pytest.raises(ExportError, match="--dtype 'int4': allowed: bf16, fp16, fp32"):
        export_run(full_run, tmp_path / "out", dtype="int4")
    with pytest.raises(ExportError, match="add --merge-lora"):
        export_run(lora_run, tmp_path / "out", quantize="int8")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep me")
    with pytest.raises(ExportError, match="exists and is not empty"):
        export_run(full_run, taken)
    assert [p.name for p in taken.iterdir()] == ["mine.txt"]
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_a_crash_mid_export_leaves_no_directory_under_out(
    full_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(export_model, "model_card", crash, raising=False)
    import honing.export.card

    monkeypatch.setattr(honing.export.card, "model_card", crash)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="disk full"):
        export_run(full_run, out)
    assert not out.exists() and leftovers(tmp_path) == []
    out.mkdir()  # an empty OUT is fine: replaced by the export
    monkeypatch.undo()
    export_run(full_run, out)
    assert (out / "model.safetensors").is_file()
