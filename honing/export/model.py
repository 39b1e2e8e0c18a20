"""`honing export`: a training run's checkpoint as a Hugging Face model directory.

    result = export_run(Path("runs/quickstart"), Path("exports/quickstart"), merge_lora=True)
    model = AutoModelForCausalLM.from_pretrained("exports/quickstart")    # unchanged loaders

What a run trained is found from its directory: `config.yaml`, the checkpoint (the latest; with
`checkpoint.keep_best`, the one best on validation; or `step=N`) and the model the learner
started from (the warm start's, else the run's `model`).
OUT is a **model** layout (a full fine-tune, or LoRA with `merge_lora=True`; always with
`quantize`) or an **adapter** layout (a peft adapter plus its exact base in `OUT/base/`), with a
model card; `quantize="int8"` goes through honing.export.quantize. Atomic (written in a hidden
temporary directory renamed to OUT last), and an export never overwrites. `export_run_to_url`
writes it to an fsspec URL instead (s3://...): exported locally, then uploaded, its commit record
last (honing.trainer.remote). A team run (`team:`) also gets `OUT/team.yaml` (the team, for
`honing eval --team`); with per-role adapters, OUT holds one directory per role (`OUT/ROLE/`, each
a layout as above: the executor's from the run's learner, the others' from `learner-ROLE/`) and
team.yaml names them. docs/export.md has the layouts, the options and the errors.

Not covered: sharding beyond transformers' default shard size, GGUF, pushing to a hub, exporting
a model that no run trained (a base model directory is already a transformers directory).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import torch

from honing.errors import CheckpointError, ConfigError, ExportError
from honing.eval.config import write_team_file
from honing.export.card import model_card, team_card, team_eval_command
from honing.store.files import fsync_tree, pid_alive
from honing.trainer.gains import best_by_validation
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import CONFIG_FILE, DONE_FILE, WARM_DIR, EvalPoint, RunDir, read_yaml

if TYPE_CHECKING:
    from honing.export.quantize import Comparison

log = logging.getLogger(__name__)

ExportDtype = Literal["bf16", "fp16", "fp32"]
Quantize = Literal["int8"]
TORCH_DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}
QUANTIZE = ("int8",)
BASE_DIR = "base"  # the adapter layout's copy of the model the adapter is relative to
TEAM_FILE = "team.yaml"  # a team run's team (honing.eval.config.load_team_file reads it)
LEARNER_DIR = "learner"  # in a checkpoint: the run's learner (a team's executor)


# -- records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainedRun:
    """What a run directory says was trained, and from what."""

    run_dir: Path
    config: TrainConfig
    checkpoint: Path  # RUN/checkpoints/step-N
    step: int  # updates done at that checkpoint
    kind: Literal["full", "lora"]
    base: Path  # the model directory the learner started from
    warm_started: bool  # base is the run's warm-start (SFT) model
    evals: tuple[EvalPoint, ...]  # RUN/evals.jsonl, in order
    sharded: bool = False  # the learner was sharded (torchrun): a torch.distributed checkpoint
    learner: str = LEARNER_DIR  # the checkpoint's learner directory: a role's `learner-ROLE`
    role: str | None = None  # the team role whose model this is (per-role adapters)

    @property
    def learner_dir(self) -> Path:
        return self.checkpoint / self.learner

    @property
    def per_role(self) -> bool:
        """Whether the run is a team that trained one adapter per role."""
        team = self.config.team
        return team is not None and team.adapters == "per_role"

    def roles(self) -> dict[str, TrainedRun]:
        """A per-role team's model of each role, in the team's order: the executor's is the run's
        learner, each other's is `learner-ROLE/` (a CheckpointError when it is missing)."""
        team = self.config.team
        assert team is not None and self.per_role
        out = {}
        for role in team.roles:
            if role.kind == "executor":
                out[role.role] = replace(self, role=role.role)
                continue
            learner = f"{LEARNER_DIR}-{role.role}"
            if not (self.checkpoint / learner).is_dir():
                raise CheckpointError(
                    f"{self.checkpoint} holds no learner for role {role.role!r} ({learner}/), "
                    "though the run's config says team.adapters: per_role: the checkpoint is "
                    "incomplete; export another one with --step"
                )
            kind, sharded = _learner_kind(self.checkpoint / learner)
            out[role.role] = replace(self, learner=learner, role=role.role, kind=kind,
                                     sharded=sharded)  # fmt: skip
        return out


@dataclass(frozen=True)
class ExportedFile:
    path: Path  # relative to the export directory
    bytes: int


@dataclass(frozen=True)
class ExportResult:
    """What `export_run` wrote."""

    out: Path
    run_dir: Path
    step: int
    kind: Literal["full", "lora"]  # what the run trained
    layout: Literal["model", "adapter"]  # see the module docstring
    dtype: ExportDtype
    quantize: Quantize | None
    base: Path  # the model the learner started from
    files: tuple[ExportedFile, ...]
    notes: tuple[str, ...] = ()  # e.g. --merge-lora on a full fine-tune
    comparison: Comparison | None = None  # when quantised: int8 against the unquantised model
    seconds: float = 0.0
    url: str | None = None  # `export_run_to_url`: where it was published (`out` is gone then)
    team_file: Path | None = None  # a team run's OUT/team.yaml
    roles: Mapping[str, Path] = field(default_factory=dict)  # per-role adapters: OUT/ROLE

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weight files (safetensors), the adapter layout's base included."""
        return sum(f.bytes for f in self.files if f.path.suffix == ".safetensors")

    def line(self) -> str:
        """One line for the terminal."""
        what = {"model": "model", "adapter": "LoRA adapter + base"}[self.layout]
        if self.roles:
            what = f"team of {len(self.roles)} roles ({', '.join(self.roles)}), each a {what}"
        weights = f"{self.quantize} weights, rest {self.dtype}" if self.quantize else self.dtype
        text = (
            f"exported step {self.step} of {self.run_dir} as a {what} ({weights}, "
            f"{_mb(self.weight_bytes)}) to {self.url or self.out} in {self.seconds:.0f} s"
        )
        if self.comparison is not None:
            text += "\n" + self.comparison.line()
        return text


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


# -- finding what a run trained ----------------------------------------------------------------


def find_run(run_dir: Path, step: int | None = None) -> TrainedRun:
    """The run at `run_dir` and its checkpoint `step` (default: the latest)."""
    if not (run_dir / CONFIG_FILE).is_file():
        if not run_dir.is_dir():
            raise ExportError(f"{run_dir}: no such directory; give the run directory (its out=)")
        raise ExportError(
            f"{run_dir} is not a run directory (no {CONFIG_FILE}): give the directory `honing "
            "train` wrote, its out="
        )
    run = RunDir(run_dir)
    config = run.config()
    base, warm = _base_model(run, config)
    checkpoint = _checkpoint(run, step, base, config.checkpoint.keep_best)
    kind, sharded = _learner_kind(checkpoint / LEARNER_DIR)
    try:
        saved_step = int(json.loads((checkpoint / "meta.json").read_text())["step"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise _corrupt(checkpoint, e) from e
    return TrainedRun(
        run_dir=run_dir,
        config=config,
        checkpoint=checkpoint,
        step=saved_step,
        kind=kind,
        base=base,
        warm_started=warm,
        evals=tuple(_evals(run)),
        sharded=sharded,
    )


def _learner_kind(learner: Path) -> tuple[Literal["full", "lora"], bool]:
    """What the checkpoint's learner directory `learner` holds (`learner.json`): full or LoRA,
    and whether sharded."""
    manifest_path = learner / "learner.json"
    try:
        manifest = json.loads(manifest_path.read_text())
        kind = manifest["kind"]
        sharded = kind == "sharded"  # honing.trainer.distributed: full or LoRA, by its config
        if sharded:
            kind = "full" if (manifest.get("config") or {}).get("lora") is None else "lora"
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise _corrupt(learner.parent, e) from e
    if kind not in ("full", "lora"):
        raise CheckpointError(f"{manifest_path}: unknown learner kind {kind!r}")
    return kind, sharded


def _corrupt(checkpoint: Path, e: Exception) -> CheckpointError:
    return CheckpointError(
        f"{checkpoint} is incomplete or corrupt ({type(e).__name__}: {e}): export another "
        "checkpoint with --step, or delete this one"
    )


def _base_model(run: RunDir, config: TrainConfig) -> tuple[Path, bool]:
    """The model the RL learner started from (`honing.trainer.loop.train`): the warm start's
    merged SFT model when the run had one, else the run's `model`."""
    run_dir = run.path
    if config.warm_start is not None:
        model = run.warm_model()
        if model is None or not (model / "config.json").is_file():
            raise ExportError(
                f"{run_dir}: the warm start did not finish ({run / WARM_DIR / DONE_FILE} or its "
                "model is missing), so the run has no trained model yet: continue it with "
                f"`honing train --resume {run_dir}`"
            )
        return model, True
    from honing.rollout.models import resolve_model

    try:
        return resolve_model(config.model), False
    except ConfigError as e:
        raise ExportError(
            f"{run_dir}: the model the run started from is not here any more ({e}). Run the "
            "export from the directory the run was started in, or restore that model"
        ) from e


def _checkpoint(run: RunDir, step: int | None, base: Path, keep_best: bool = False) -> Path:
    """The checkpoint of `step`; by default the latest, or with checkpoint.keep_best the one
    the latest's loop state names best on validation."""
    run_dir = run.path
    if step is None:
        found = run.latest_checkpoint()
        if found is None:
            raise ExportError(
                f"{run_dir}: the run has no checkpoint: train at least one update (a checkpoint "
                "is written every checkpoint.every updates and at the end), or use the model it "
                f"started from as is: {base} is already a transformers directory"
            )
        if not keep_best:
            return found
        best = _best_step(found)
        if best is None:
            return found
        step = best
        log.info("%s: exporting update %d, the best on validation (checkpoint.keep_best; "
                 "--step N exports another)", run_dir, step)  # fmt: skip
    path = run_dir / "checkpoints" / f"step-{step:08d}"
    if not (path / "meta.json").is_file():
        root = run_dir / "checkpoints"
        steps = sorted(
            int(p.name.removeprefix("step-"))
            for p in (root.iterdir() if root.is_dir() else [])
            if p.name.startswith("step-") and (p / "meta.json").is_file()
        )
        raise ExportError(
            f"{run_dir} has no checkpoint of step {step}; it has "
            + (", ".join(map(str, steps)) if steps else "none")
            + " (older ones are deleted: checkpoint.keep)"
        )
    return path


def _best_step(checkpoint: Path) -> int | None:
    """The update best on validation by the checkpoint's loop state (its `validation` points);
    None when it holds none."""
    try:
        state = json.loads((checkpoint / "state.json").read_text())
        points = [EvalPoint.model_validate(p) for p in state.get("validation") or []]
    except (OSError, json.JSONDecodeError, AttributeError, ValueError) as e:
        raise _corrupt(checkpoint, e) from e
    best = best_by_validation(points)
    return None if best is None else best[0]


def _evals(run: RunDir) -> list[EvalPoint]:
    """The run's evals.jsonl; a damaged line is an ExportError naming it."""
    try:
        return run.evals()
    except ConfigError as e:
        raise ExportError(str(e)) from e


# -- building the trained model ----------------------------------------------------------------


def load_trained(run: TrainedRun, *, merge: bool) -> Any:
    """The trained model in float32: the base with the checkpoint's weights, or (LoRA) with its
    adapter — a `PeftModel`, or, with `merge`, the plain model with the adapter merged in."""
    from honing.rollout.models import load_model

    if run.sharded:
        return _load_sharded(run, merge=merge)
    model = load_model(run.base, "float32")
    if run.kind == "full":
        _load_full(model, run.learner_dir / "model.safetensors")
        return model
    from peft import PeftModel, get_peft_model_state_dict
    from safetensors.torch import load_file

    adapter = run.learner_dir / "adapter_model.safetensors"
    peft_model = PeftModel.from_pretrained(model, str(run.learner_dir))
    saved = load_file(str(adapter))
    loaded = get_peft_model_state_dict(peft_model)
    differing = [n for n in saved if n not in loaded or not torch.equal(loaded[n], saved[n])]
    if differing or len(saved) != len(loaded):
        raise CheckpointError(
            f"{adapter} does not fit {run.base}: {len(differing)} of {len(saved)} adapter tensors "
            f"did not load (first: {differing[:1]}). Was the run started from another model?"
        )
    peft_model.eval()
    return peft_model.merge_and_unload() if merge else peft_model


def _load_sharded(run: TrainedRun, *, merge: bool) -> Any:
    """A sharded (torchrun) checkpoint, gathered into one process: a one-process learner on the
    run's base and learner config reads it (`load_sharded`, any world size), and its model is
    the trained one."""
    from honing.trainer.distributed import load_sharded
    from honing.trainer.learner import Learner

    learner = Learner(run.base, run.config.learner_config)
    load_sharded(learner, run.learner_dir)
    model = learner.model
    model.config.use_cache = True  # the learner turns it off for training
    model.eval()
    if run.kind == "lora" and merge:
        return model.merge_and_unload()
    return model


def _load_full(model: Any, path: Path) -> None:
    """The checkpoint's tensors, saved under the model's own parameter names (`Learner.save`)."""
    from safetensors.torch import load_file

    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint is incomplete")
    saved = load_file(str(path))
    params = dict(model.named_parameters())
    if saved.keys() != params.keys():
        missing, extra = sorted(params.keys() - saved.keys()), sorted(saved.keys() - params.keys())
        raise CheckpointError(
            f"{path} does not fit the run's base model: missing {missing[:2]}, unknown "
            f"{extra[:2]}. Was the run started from another model?"
        )
    with torch.no_grad():
        for name, param in params.items():
            if saved[name].shape != param.shape:
                raise CheckpointError(
                    f"{path}: {name} is {tuple(saved[name].shape)}, the base model's "
                    f"{tuple(param.shape)}"
                )
            param.copy_(saved[name])


# -- writing -----------------------------------------------------------------------------------


def generation_config(base: Path, tokenizer: Any) -> Any:
    """The base's generation config, stopping on the chat template's end of turn and the
    tokenizer's eos, padding with the tokenizer's pad (else the first stop id)."""
    from transformers import GenerationConfig

    from honing.rollout.chat import ChatFormat

    try:
        config = GenerationConfig.from_pretrained(str(base))
    except OSError:  # the base has none
        config = GenerationConfig()  # type: ignore[no-untyped-call]
    stops = set(ChatFormat(tokenizer).traits.stop_ids)
    existing = config.eos_token_id
    if isinstance(existing, int):
        stops.add(existing)
    elif isinstance(existing, (list, tuple)):
        stops.update(int(i) for i in existing)
    if not stops:
        raise ExportError(
            f"{base}: neither the chat template nor the tokenizer names an end-of-turn or eos "
            "token, so generation would never stop: give the tokenizer an eos_token"
        )
    ordered = sorted(stops)
    config.eos_token_id = ordered[0] if len(ordered) == 1 else ordered
    pad = tokenizer.pad_token_id
    config.pad_token_id = pad if isinstance(pad, int) else ordered[0]
    if tokenizer.bos_token_id is not None:
        config.bos_token_id = tokenizer.bos_token_id
    return config


def write_model(
    model: Any, tokenizer: Any, gen_config: Any, dest: Path, dtype: ExportDtype
) -> None:
    """A plain transformers model directory: weights in `dtype`, config, generation config,
    tokenizer and chat template."""
    model = model.to(TORCH_DTYPES[dtype])
    model.config.use_cache = True  # the learner turns it off for training
    model.config.dtype = TORCH_DTYPES[dtype]
    model.generation_config = gen_config
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(dest))
    tokenizer.save_pretrained(str(dest))
    for_older_readers(dest)


def for_older_readers(dest: Path) -> None:
    """Two keys that transformers 4 readers (vLLM or SGLang pinned to it) need and transformers 5
    reads the same: `rope_theta` beside `rope_parameters` (else they silently fall back to the
    default theta), and the tokenizer class by its v4 name, `PreTrainedTokenizerFast` (in v5 an
    alias of `TokenizersBackend`)."""
    config_path = dest / "config.json"
    if config_path.is_file():  # an adapter directory has none
        config = json.loads(config_path.read_text())
        rope = config.get("rope_parameters")
        if isinstance(rope, dict) and "rope_theta" in rope and "rope_theta" not in config:
            config["rope_theta"] = rope["rope_theta"]
            config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer_path = dest / "tokenizer_config.json"
    if tokenizer_path.is_file():
        tok = json.loads(tokenizer_path.read_text())
        if tok.get("tokenizer_class") == "TokenizersBackend":
            tok["tokenizer_class"] = "PreTrainedTokenizerFast"
            tokenizer_path.write_text(json.dumps(tok, indent=2) + "\n")


def write_adapter(
    peft_model: Any, tokenizer: Any, gen_config: Any, dest: Path, final: Path, dtype: ExportDtype
) -> None:
    """The adapter layout: the adapter in `dest` naming `final/base`, the base in `dest/base`."""
    adapter_config = peft_model.peft_config["default"]
    adapter_config.base_model_name_or_path = str(final.resolve() / BASE_DIR)
    adapter_config.inference_mode = True
    peft_model.to(TORCH_DTYPES[dtype])
    dest.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(dest), save_embedding_layers=False)
    tokenizer.save_pretrained(str(dest))
    gen_config.save_pretrained(str(dest))
    for_older_readers(dest)
    base = peft_model.unload()  # the adapter layers taken out, never merged: the base as it was
    write_model(base, tokenizer, gen_config, dest / BASE_DIR, dtype)


def _check_out(out: Path) -> None:
    if out.exists():
        if not out.is_dir():
            raise ExportError(f"--out {out} is a file: give a new directory")
        if any(out.iterdir()):
            raise ExportError(
                f"--out {out} exists and is not empty: an export never overwrites; give a new "
                "directory or remove this one"
            )


def _remove_leftovers(out: Path) -> None:
    """What a killed export to `out` left (`.OUT.tmp-PID`, `.OUT.unquantised-PID` of a dead
    PID, or of this process)."""
    for kind in ("tmp", "unquantised"):
        for path in out.parent.glob(f".{out.name}.{kind}-*"):
            pid = path.name.rsplit("-", 1)[1]
            if pid.isdigit() and (int(pid) == os.getpid() or not pid_alive(int(pid))):
                log.info("export: removing %s, left by an interrupted export", path)
                shutil.rmtree(path, ignore_errors=True)


def _publish_tree(directory: Path) -> None:
    """Readable as the umask allows (some writers create 0600 files: a server running as
    another user could not read them), and fsynced."""
    umask = os.umask(0)
    os.umask(umask)
    for dirpath, _dirs, files in os.walk(directory):
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o666 & ~umask)
    fsync_tree(directory)


def _files(directory: Path) -> tuple[ExportedFile, ...]:
    return tuple(
        ExportedFile(p.relative_to(directory), p.stat().st_size)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    )


# -- the entry point ---------------------------------------------------------------------------


def export_run(
    run_dir: Path,
    out: Path,
    *,
    merge_lora: bool = False,
    dtype: str = "fp32",
    quantize: str | None = None,
    step: int | None = None,
    heldout_limit: int | None = None,
    measure_tokens: int = 64,
) -> ExportResult:
    """Export checkpoint `step` (default: the latest) of the run at `run_dir` into `out` (see the
    module docstring). `quantize="int8"` also measures the int8 model against the unquantised
    one: `heldout_limit` evaluates only the first N tasks of each held-out set (default: all),
    `measure_tokens` greedy tokens are timed for the CPU decode speed."""
    started = time.monotonic()
    if dtype not in TORCH_DTYPES:
        raise ExportError(f"--dtype {dtype!r}: allowed: {', '.join(TORCH_DTYPES)}")
    if quantize is not None and quantize not in QUANTIZE:
        raise ExportError(f"--quantize {quantize!r}: allowed: {', '.join(QUANTIZE)}")
    dtype_ = cast(ExportDtype, dtype)
    quantize_ = cast(Quantize | None, quantize)
    if heldout_limit is not None and heldout_limit < 1:
        raise ExportError(f"heldout_limit {heldout_limit}: must be at least 1 (or None: all)")
    _check_out(out)
    run = find_run(run_dir, step)
    notes: list[str] = []
    if run.kind == "full" and merge_lora:
        notes.append("--merge-lora: the run is a full fine-tune (no adapter); nothing to merge")
    if run.per_role and quantize is not None:
        raise ExportError(
            f"--quantize {quantize}: {run_dir} is a team with per-role adapters, and the int8 "
            "export measures one model on the held-out sets, which such a team is not: export "
            "without --quantize (one directory per role; --merge-lora for plain models)"
        )
    if run.kind == "lora" and quantize is not None and not merge_lora:
        raise ExportError(
            f"--quantize {quantize} quantises a plain model, and this run trained a LoRA adapter: "
            "add --merge-lora (the adapter is merged into the base, then quantised)"
        )
    layout: Literal["model", "adapter"] = (
        "adapter" if run.kind == "lora" and not merge_lora else "model"
    )
    roles = run.roles() if run.per_role else {}
    from honing.rollout.models import load_tokenizer

    tokenizer = load_tokenizer(run.base)
    gen_config = generation_config(run.base, tokenizer)
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(out)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    scratch = out.parent / f".{out.name}.unquantised-{os.getpid()}"
    comparison = None
    log.info("export: %s step %d (%s, base %s) -> %s", run_dir, run.step, run.kind, run.base, out)
    try:
        for role, trained in roles.items():
            log.info("export: role %s from %s", role, trained.learner_dir)
            _write_one(trained, tmp / role, out / role, layout=layout, tokenizer=tokenizer,
                       gen_config=gen_config, dtype=dtype_)  # fmt: skip
        if roles:
            (tmp / "README.md").write_text(team_card(run, out, list(roles), layout, dtype_))
        else:
            comparison = _write_one(run, tmp, out, layout=layout, tokenizer=tokenizer,
                                    gen_config=gen_config, dtype=dtype_, quantize=quantize_,
                                    scratch=scratch, heldout_limit=heldout_limit,
                                    measure_tokens=measure_tokens)  # fmt: skip
        if run.config.team is not None:
            _write_team(run, tmp / TEAM_FILE, out, list(roles), layout)
        _publish_tree(tmp)
        _check_out(out)  # still free (another process may have written it meanwhile)
        if out.exists():
            out.rmdir()  # empty: replaced by the rename
        os.rename(tmp, out)
        from honing.store.files import sync_dir

        sync_dir(out.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    result = ExportResult(
        out=out,
        run_dir=run_dir,
        step=run.step,
        kind=run.kind,
        layout=layout,
        dtype=dtype_,
        quantize=quantize_,
        base=run.base,
        files=_files(out),
        notes=tuple(notes),
        comparison=comparison,
        seconds=time.monotonic() - started,
        team_file=out / TEAM_FILE if run.config.team is not None else None,
        roles={role: out / role for role in roles},
    )
    for note in notes:
        log.info("export: %s", note)
    log.info("export: %s", result.line())
    return result


def _write_one(
    run: TrainedRun,
    dest: Path,
    final: Path,
    *,
    layout: Literal["model", "adapter"],
    tokenizer: Any,
    gen_config: Any,
    dtype: ExportDtype,
    quantize: Quantize | None = None,
    scratch: Path | None = None,
    heldout_limit: int | None = None,
    measure_tokens: int = 64,
) -> Comparison | None:
    """One model of `run` (its learner, `run.learner_dir`) written into `dest` in `layout`, to be
    renamed to `final`: the weights, the agent settings and the card; quantised (in `scratch`
    first) and measured when `quantize` is set: the comparison."""
    from honing.rollout.saved_agent import save_agent

    comparison = None
    model = load_trained(run, merge=layout == "model")
    if layout == "adapter":
        write_adapter(model, tokenizer, gen_config, dest, final, dtype)
    elif quantize is None:
        write_model(model, tokenizer, gen_config, dest, dtype)
    else:
        from honing.export.quantize import compare, quantize_int8

        assert scratch is not None
        shutil.rmtree(scratch, ignore_errors=True)
        write_model(model, tokenizer, gen_config, scratch, dtype)
        del model
        quantize_int8(scratch, dest, dtype)
        comparison = compare(run.config, scratch, dest, dtype=dtype, heldout_limit=heldout_limit,
                             new_tokens=measure_tokens)  # fmt: skip
    save_agent(dest, run.config.agent.saved())
    card = model_card(run, final, layout=layout, dtype=dtype, comparison=comparison)
    (dest / "README.md").write_text(card)
    return comparison


def _write_team(
    run: TrainedRun, path: Path, out: Path, roles: list[str], layout: Literal["model", "adapter"]
) -> None:
    """The run's team at `path` (OUT/team.yaml), its `team:` block as the run's config.yaml has
    it; with per-role models, `models:` names each role's directory (relative to the file)."""
    saved = read_yaml(run.run_dir / CONFIG_FILE) or {}
    team = saved.get("team")
    if not isinstance(team, dict):  # config.yaml is the resolved TrainConfig: it has one
        raise ExportError(f"{run.run_dir / CONFIG_FILE}: no team: block, though the run has one")
    kind = "with one model directory per role (models:)" if roles else "(every role: this model)"
    comment = (
        f"The team of the run {run.run_dir.name} (step {run.step}), exported by honing {kind}."
    )
    if layout == "model":
        comment += f"\nEvaluate it as a team:\n  {team_eval_command(run, out)}"
    else:
        comment += "\nhoning eval plays model directories: export the run with --merge-lora."
    write_team_file(path, team, {role: role for role in roles}, comment)


def export_run_to_url(
    run_dir: Path,
    url: str,
    *,
    merge_lora: bool = False,
    dtype: str = "fp32",
    quantize: str | None = None,
    step: int | None = None,
    heldout_limit: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> ExportResult:
    """`export_run` into a local temporary directory, then published to `url` as one commit
    (honing.trainer.remote.publish_dir: the files, then `_COMMIT.json`). The URL must be empty.
    `storage_options`: the fsspec options (default: the run's `remote.storage_options`)."""
    import tempfile

    from honing.trainer.remote import Location, publish_dir

    started = time.monotonic()
    if storage_options is None:
        remote = RunDir.existing(run_dir).config().remote if run_dir.is_dir() else None
        storage_options = remote.storage_options if remote is not None else {}
    if Location(url, storage_options).files():  # before the export's work
        raise ExportError(f"--out {url} is not empty: an export never overwrites; give a new URL")
    with tempfile.TemporaryDirectory(prefix="honing-export-") as tmp:
        local = Path(tmp) / (url.rstrip("/").rsplit("/", 1)[-1] or "export")
        result = export_run(run_dir, local, merge_lora=merge_lora, dtype=dtype,
                            quantize=quantize, step=step,
                            heldout_limit=heldout_limit)  # fmt: skip
        published = publish_dir(local, url, storage_options)
    result = replace(result, url=published, seconds=time.monotonic() - started)
    log.info("export: %s", result.line())
    return result


__all__ = [
    "ExportDtype",
    "ExportResult",
    "ExportedFile",
    "TrainedRun",
    "export_run",
    "export_run_to_url",
    "find_run",
    "load_trained",
]
