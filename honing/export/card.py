"""The model card (`README.md`) of an exported run: what the model is, how it was trained, the
run's held-out evaluation, the int8 comparison when quantised, and how to load it.

    text = model_card(run, out, layout="model", dtype="fp32", comparison=None)
    text = team_card(run, out, roles, layout="model", dtype="fp32")   # per-role adapters: OUT's

YAML front matter as the Hugging Face hub reads it (`base_model` when the run started from a
model with a hub id — the embedded default is SmolLM2-135M-Instruct — `library_name`, `tags`,
`pipeline_tag`), then Markdown. The evaluation table comes from `RUN/evals.jsonl`: per held-out
set, success before training, after the warm start, and at the last evaluation at or before the
exported step. A team run's cards say how to evaluate it as a team (`team_eval`); a team with
per-role adapters gets `team_card` at the top and a model card in each role's directory.

Not covered: fields the run cannot know (license, intended use, data provenance beyond the task
sources' names): the card says where to add them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from honing.trainer.gains import account
from honing.trainer.run_dir import BEFORE, WARM_START, EvalPoint

if TYPE_CHECKING:
    from honing.export.model import ExportDtype, TrainedRun
    from honing.export.quantize import Comparison, Measurement
    from honing.trainer.run_config import TaskSource, TrainConfig

DEFAULT_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
ALGORITHMS = {
    "grpo": "GRPO",
    "dr_grpo": "Dr. GRPO",
    "rloo": "RLOO",
    "reinforce_pp": "REINFORCE++",
    "passk": "pass@k (Chen et al. 2025)",
    "gae": "PPO (GAE)",
    "distill": "on-policy distillation",
}


def model_card(
    run: TrainedRun,
    out: Path,
    *,
    layout: Literal["model", "adapter"],
    dtype: ExportDtype,
    comparison: Comparison | None,
) -> str:
    """The whole README.md (of one role's directory, for a team with per-role adapters)."""
    parts = [
        _front_matter(run, layout, comparison),
        _intro(run, layout, dtype, comparison),
        _training(run),
        _evaluation(run),
    ]
    if comparison is not None:
        parts.append(_quantisation(comparison))
    parts.append(_usage(str(out), layout, comparison))
    if run.config.team is not None:
        top = out.parent if run.role is not None else out
        parts.append(f"## As a team\n\n{team_eval(run, top, layout)}\n")
    parts.append(
        "## Limitations\n\nA small model post-trained on a narrow set of verifiable tasks: "
        "expect the gains above on those tasks, not in general. Add the license and the "
        "intended use of your release here.\n"
    )
    return "\n".join(parts)


def team_card(
    run: TrainedRun, out: Path, roles: Sequence[str], layout: Literal["model", "adapter"],
    dtype: ExportDtype,
) -> str:  # fmt: skip
    """The README.md of a team with per-role adapters: its roles' directories, the run's
    evaluation and how to evaluate the team."""
    team = run.config.team
    assert team is not None
    kinds = {r.role: r.kind for r in team.roles}
    what = {"model": "a Hugging Face model directory with the role's adapter merged in",
            "adapter": "a peft LoRA adapter with its base in `base/`"}[layout]  # fmt: skip
    rows = "\n".join(f"| {role} | {kinds[role]} | `{role}/` |" for role in roles)
    return "\n".join([
        _front_matter(run, layout, None),
        f"# {run.config.name}: a team of {len(roles)} roles\n\n{_base_name(run)} post-trained "
        "with reinforcement learning by honing as a team, each role with a LoRA adapter of its "
        f"own on the same base (`team.adapters: per_role`). One directory per role, each {what} "
        f"({dtype} weights) and its own card; exported from checkpoint step {run.step} of the run "
        f"`{run.run_dir.name}`. `team.yaml` holds the team (roles, rounds, rewards) as the run "
        "was configured and names each role's directory (`models:`).\n\n"
        f"| role | kind | directory |\n|---|---|---|\n{rows}\n",
        _training(run),
        _evaluation(run),
        f"## How to evaluate it\n\n{team_eval(run, out, layout)}\n",
    ])  # fmt: skip


def team_eval_command(run: TrainedRun, out: Path) -> str:
    """The `honing eval` command that evaluates the team exported (as models) to `out`."""
    team = run.config.team
    assert team is not None
    executor = team.role("executor")
    assert executor is not None
    policy = out / executor.role if team.adapters == "per_role" else out
    return f"honing eval --tasks TASKS --policy model:{policy} --team {out / 'team.yaml'}"


def team_eval(run: TrainedRun, out: Path, layout: Literal["model", "adapter"]) -> str:
    """How to evaluate the team exported to `out` (its team.yaml there) with `honing eval`."""
    team = run.config.team
    assert team is not None
    if layout == "adapter":
        return (
            "`honing eval` plays model directories, and this export holds LoRA adapters: export "
            "the run again with `--merge-lora` to OUT, then "
            f"`{team_eval_command(run, Path('OUT'))}`."
        )
    said = (
        "each role plays its own model (team.yaml's `models:`; `--role-model ROLE=DIR` "
        "replaces one), and the executor's model plays alone"
        if team.adapters == "per_role" else "every role plays this model, which also plays alone"
    )  # fmt: skip
    return (
        f"`{team_eval_command(run, out)}`: {said}, on the same tasks; the output sets the team's "
        "success beside the model's alone and gives each role's figures."
    )


def _hub_id(run: TrainedRun) -> str | None:
    from honing.rollout.models import DEFAULT_NAMES

    return DEFAULT_HUB_ID if run.config.model.lower() in DEFAULT_NAMES else None


def _front_matter(
    run: TrainedRun, layout: Literal["model", "adapter"], comparison: Comparison | None
) -> str:
    tags = ["honing", "rl", run.config.learner.advantage.replace("_", "-")]
    tags.append("lora" if run.kind == "lora" else "full-fine-tune")
    if run.warm_started:
        tags.append("sft")
    if run.config.team is not None:
        tags.append("team")
    if comparison is not None:
        tags += ["torchao", "int8"]
    lines = ["---"]
    hub = _hub_id(run)
    if hub is not None:
        lines.append(f"base_model: {hub}")
    lines.append(f"library_name: {'peft' if layout == 'adapter' else 'transformers'}")
    lines.append("pipeline_tag: text-generation")
    lines.append("tags:")
    lines += [f"- {t}" for t in tags]
    lines.append("---\n")
    return "\n".join(lines)


def _base_name(run: TrainedRun) -> str:
    hub = _hub_id(run)
    if hub is not None:
        return f"{hub} (honing's embedded copy, dequantised from its Q4_1 GGUF)"
    return f"`{run.config.model}`"


def _intro(
    run: TrainedRun,
    layout: Literal["model", "adapter"],
    dtype: ExportDtype,
    comparison: Comparison | None,
) -> str:
    cfg = run.config
    algorithm = ALGORITHMS.get(cfg.learner.advantage, cfg.learner.advantage)
    domains = _domains(run)
    what = {
        "model": "a Hugging Face model directory",
        "adapter": "a peft LoRA adapter, with the exact model it applies to in `base/`",
    }[layout]
    weights = "int8 (torchao, weight-only)" if comparison is not None else dtype
    role = ""
    if run.role is not None:
        role = (
            f" This is the `{run.role}` role of a team that trained one LoRA adapter per role: "
            "`../README.md` has the team, `../team.yaml` names every role's directory."
        )
    return (
        f"# {cfg.name}{'' if run.role is None else f': the {run.role} role'}\n\n"
        f"{_base_name(run)} post-trained with reinforcement learning ({algorithm}) by honing "
        f"in verifiable environments ({', '.join(domains)}): the "
        "model acts through tools, a sandbox executes the actions, and the environments' rewards "
        f"drive the updates. This is {what}; weights: {weights}; exported from checkpoint step "
        f"{run.step} of the run `{run.run_dir.name}`.{role}\n"
    )


def _source(source: TaskSource) -> str:
    extra = [f"{source.count} tasks" if source.count else "", f"seed {source.seed}"
             if source.seed is not None else "", f"tags {source.tags}" if source.tags else "",
             f"first {source.limit}" if source.limit else ""]  # fmt: skip
    details = ", ".join(e for e in extra if e)
    return f"`{source.tasks}`" + (f" ({details})" if details else "")


def _domains(run: TrainedRun) -> list[str]:
    """The environments the training tasks ran in (the source names when they cannot be read)."""
    from honing.errors import HoningError
    from honing.trainer.sources import load_source

    found: set[str] = set()
    for name, source in run.config.train.items():
        try:
            found.update(t.domain for t in load_source(name, source).tasks)
        except (HoningError, OSError):
            found.add(name)
    return sorted(found)


def _training(run: TrainedRun) -> str:
    cfg, learner = run.config, run.config.learner
    rows = [("Base model", _base_name(run))]
    if cfg.warm_start is not None:
        ws = cfg.warm_start
        if ws.traces is None:
            data = f"`{ws.data}`"
        elif cfg.team is not None:
            roles = ", ".join(r.role for r in cfg.team.roles)
            data = f"a scripted team's reference episodes ({roles}) of {_source(ws.traces)}"
        else:
            data = f"reference tool-use traces of {_source(ws.traces)}"
        if ws.traces is not None and ws.extra_traces:
            data += " and of " + ", ".join(_source(s) for s in ws.extra_traces)
        rows.append(
            (
                "Warm start",
                f"supervised fine-tuning on {data}: {ws.epochs} epoch(s) at lr {ws.lr:g}, "
                "merged into the base before RL",
            )
        )
    if learner.lora is not None:
        lora = learner.lora
        layers = f", top {lora.top_layers} layers" if lora.top_layers else ""
        method = (
            f"LoRA r={lora.r}, alpha={lora.alpha:g} on {', '.join(lora.target_modules)}{layers}"
        )
    else:
        method = "full fine-tune (every weight)"
    algorithm = (
        f"{ALGORITHMS.get(learner.advantage, learner.advantage)} advantages, decoupled "
        f"{learner.policy_loss.upper()} loss "
        f"(clip {1 - learner.eps_low:g}..{1 + learner.eps_high:g}), {learner.aggregation}-level "
        f"aggregation, KL coefficient {learner.kl_coef:g}"
    )
    if learner.process_weight:
        algorithm += f", process rewards weight {learner.process_weight:g}"
    agent = cfg.agent
    rows += [
        ("Method", method),
        ("Algorithm", algorithm),
        (
            "Updates",
            f"{run.step} of {cfg.total_steps} ({cfg.groups_per_step} tasks x {cfg.n} samples per "
            f"update), AdamW lr {learner.lr:g}, {learner.schedule} schedule",
        ),
        (
            "Sampling",
            f"temperature {agent.temperature:g}, {agent.max_turns} turn(s) of at most "
            f"{agent.max_new_tokens} tokens",
        ),
        ("Precision", _precision(cfg)),
        ("Training tasks", ", ".join(f"`{n}`: {_source(s)}" for n, s in cfg.train.items())),
        (
            "Action format",
            'tool calls as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the '
            "base's chat template, as honing's agent loop prompts and parses them",
        ),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return f"## Training\n\n| | |\n|---|---|\n{table}\n"


def _precision(cfg: TrainConfig) -> str:
    """The dtypes the run sampled and learned in (config.yaml records them resolved)."""
    engine, learner = cfg.engine.dtype, cfg.learner.dtype
    if learner == "auto" or (engine == "auto" and cfg.engine.url is None):
        return "not recorded (a run from before honing recorded its dtypes)"
    if cfg.engine.url is not None:
        return f"sampled by a server in its own dtype, learned in {learner}"
    if engine == learner:
        return f"{learner} for sampling and learning"
    return f"mixed: sampled in {engine}, learned in {learner}"


def eval_columns(points: Sequence[EvalPoint], step: int) -> dict[str, dict[str, EvalPoint | None]]:
    """Per held-out set: its `before`, `warm start` and `after` (the last evaluation at or
    before `step` that is neither) points."""
    table: dict[str, dict[str, EvalPoint | None]] = {}
    for p in points:
        row = table.setdefault(p.set, {"before": None, "warm start": None, "after": None})
        if p.phase == BEFORE:
            row["before"] = p
        elif p.phase == WARM_START:
            row["warm start"] = p
        elif p.step <= step:
            after = row["after"]
            if after is None or p.step >= after.step:
                row["after"] = p
    return table


def _cell(p: EvalPoint | None) -> str:
    if p is None:
        return "—"
    return _score(p.success, p.passed, p.total, p.infra_failed)


def _score(success: float | None, passed: int, total: int, infra: int) -> str:
    """`X% (passed/judged; infra failures N)`: the infra failures are left out of the rate."""
    rate = "n/a" if success is None else f"{100 * success:.0f}%"
    return f"{rate} ({passed}/{total}; infra failures {infra})"


def _evaluation(run: TrainedRun) -> str:
    table = eval_columns(run.evals, run.step)
    if not table:
        return "## Evaluation\n\nThe run evaluated no held-out set.\n"
    warm = run.config.warm_start is not None
    steps = {r["after"].step for r in table.values() if r["after"] is not None}
    after = f"after RL (step {max(steps)})" if steps else "after RL"
    head = ["held-out set", "before training"] + (["after warm start"] if warm else []) + [after]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in table.items():
        cells = [f"`{name}`", _cell(row["before"])]
        if warm:
            cells.append(_cell(row["warm start"]))
        cells.append(_cell(row["after"]))
        lines.append("| " + " | ".join(cells) + " |")
    e = run.config.eval
    sets = "; ".join(f"`{n}`: {_source(s)}" for n, s in run.config.heldout.items())
    note = (
        f"End-to-end success on held-out tasks never trained on ({sets}), {e.k} episode(s) per "
        f"task at temperature {e.temperature:g}, measured during the run (`evals.jsonl`): "
        "passed of the judged episodes; the infra failures (episodes the infrastructure failed: "
        "the sandbox, the engine, or a checker that could not run) are left out of the rate."
    )
    figures = account([p for p in run.evals if p.step <= run.step]).figures()
    if figures is not None:
        note += (
            f" Pooled over the sets: {figures}. The RL gain is measured from the warm start "
            "(from the base model without one), with a 95% interval over the same episodes."
        )
    if steps and max(steps) != run.step:
        note += (
            f" The exported checkpoint is step {run.step}; the last evaluation at or before it "
            f"was at step {max(steps)}."
        )
    return "## Evaluation\n\n" + "\n".join(lines) + "\n\n" + note + "\n"


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _success(m: Measurement, name: str) -> str:
    for score in m.heldout:
        if score.set == name:
            return _score(score.success, score.passed, score.total, score.infra_failed)
    return "—"


def _quantisation(c: Comparison) -> str:
    r, q = c.reference, c.quantised
    rows = [
        ("Size on disk (weights)", _mb(r.weight_bytes), _mb(q.weight_bytes),
         f"{q.weight_bytes / r.weight_bytes:.2f}x"),
        (f"CPU decode, tokens/s (greedy, batch 1, {c.new_tokens} tokens, {c.threads} threads, "
         "best of 3)",
         f"{r.tokens_per_s:.1f}", f"{q.tokens_per_s:.1f}",
         f"{q.tokens_per_s / r.tokens_per_s:.2f}x"),
    ]  # fmt: skip
    for score in r.heldout:
        rows.append(
            (f"Held-out success `{score.set}`", _success(r, score.set), _success(q, score.set), "")
        )
    lines = [f"| | {r.label} | int8 | int8 / {r.label} |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c_} | {d} |" for a, b, c_, d in rows]
    limit = (
        f" (the first {c.heldout_limit} tasks of each set)" if c.heldout_limit is not None else ""
    )
    return (
        "## int8 quantisation\n\n"
        "Every linear layer's weight is int8 with one scale per output row (torchao "
        "`Int8WeightOnlyConfig`); the embedding (and the LM head tied to it) is not quantised. "
        f"Measured at export time against the unquantised {r.label} model, on the same CPU:\n\n"
        + "\n".join(lines)
        + f"\n\nHeld-out success{limit}: the run's held-out sets played exactly as during "
        "training (same tasks, temperature, seed, turns), through honing's hf engine; the int8 "
        "weights are dequantised once for it (their exact values, so the same function up to "
        "float rounding order). CPU decode: `model.generate` on this directory as loaded by "
        "transformers; in eager PyTorch, torchao's int8 weight-only CPU kernel converts each "
        "weight to float at every call, so int8 saves memory and disk here rather than time "
        "(torch.compile or a GPU kernel fuses the conversion).\n"
    )


def _usage(where: str, layout: Literal["model", "adapter"], comparison: Comparison | None) -> str:
    if layout == "adapter":
        load = (
            "```python\n"
            "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            'model = AutoModelForCausalLM.from_pretrained("THIS_DIR")  # base + adapter (peft)\n'
            'tokenizer = AutoTokenizer.from_pretrained("THIS_DIR")\n'
            "```\n\n"
            "`adapter_config.json` names the absolute path of `base/` at export time. After moving "
            "the directory, load the two explicitly:\n\n"
            "```python\n"
            "from peft import PeftModel\n"
            'base = AutoModelForCausalLM.from_pretrained("NEW_DIR/base")\n'
            'model = PeftModel.from_pretrained(base, "NEW_DIR")  # .merge_and_unload() to merge\n'
            "```\n\n"
            "Serve: `honing serve THIS_DIR/base` and load the adapter into it, or vLLM: "
            "`vllm serve THIS_DIR/base --enable-lora --lora-modules policy=THIS_DIR`.\n"
        )
    else:
        needs = "  # int8 weights: needs torchao" if comparison is not None else ""
        load = (
            "```python\n"
            "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            f'model = AutoModelForCausalLM.from_pretrained("THIS_DIR"){needs}\n'
            'tokenizer = AutoTokenizer.from_pretrained("THIS_DIR")\n'
            'messages = [{"role": "user", "content": "What is 17 * 23?"}]\n'
            "inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True,\n"
            '                                       return_tensors="pt", return_dict=True)\n'
            "print(tokenizer.decode(model.generate(**inputs, max_new_tokens=64)[0]))\n"
            "```\n\n"
            "Serve it with an OpenAI-compatible API: `honing serve THIS_DIR`, or `vllm serve "
            "THIS_DIR` / SGLang (they read the same directory"
            + ("; torchao int8 needs their torchao support" if comparison is not None else "")
            + "). The chat template and `generation_config.json` stop at the end of the "
            "assistant's turn.\n"
        )
    return "## How to use\n\n" + load.replace("THIS_DIR", where)
