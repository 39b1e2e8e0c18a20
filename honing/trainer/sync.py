"""Weight sync from the learner to an engine: in process, or to a server through files. Timed.

    sync_weights(learner, engine)                         in process: a state dict
    sync_weights(learner, server, staging=Path("/shared/weights"))
                                                          a server: files + a reload request
    SyncReport                                            version, mode, path, tensors, bytes, time
    await serve_model(server, "runs/x/warm_start/model")  a server starts serving a model (v0)
    run_engine(config, model)                             a run's engine: its server, or hf
    await open_engine(config, model)                      the same, or engine actors (backend ray)

Covered: the three modes (`state_dict`, `files`, `adapter`), atomic staging and pruning, and the
version sent (docs/training.md, "The modules in detail"). The learner must not step while a sync
is in progress (full fine-tune tensors are live views). Not covered: NCCL/RDMA broadcast to GPU
servers (files need a filesystem both sides see), cast to bf16 before writing, a sharded (FSDP)
learner, unloading old adapters on the server (vLLM evicts least-recently-used ones).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from honing.errors import EngineError
from honing.rollout.engines.base import Engine, WeightUpdate
from honing.trainer.learner import Learner

if TYPE_CHECKING:
    from honing.trainer.run_config import TrainConfig

log = logging.getLogger(__name__)

SyncMode = Literal["auto", "state_dict", "files", "adapter"]
_STAGED = re.compile(r"v(\d{6,})")


@dataclass(frozen=True, slots=True)
class SyncReport:
    """One sync. `bytes`: of the tensors sent (state_dict) or of the files written (files,
    adapter); `path`: the staged directory (None in process); `write_seconds`: part of `seconds`
    spent writing files."""

    version: int
    tensors: int
    bytes: int
    seconds: float
    mode: Literal["state_dict", "files", "adapter"] = "state_dict"
    path: Path | None = None
    write_seconds: float = 0.0


def serves_from_files(engine: Engine) -> bool:
    """Whether the engine loads weights from files only (a server), not from a state dict."""
    return not getattr(engine, "accepts_state_dict", True)


async def serve_model(engine: Engine, model: str) -> None:
    """Load a model directory (or built-in name) into a server engine as version 0, so that it
    serves what the learner starts from, whatever it served before."""
    from honing.rollout.models import resolve_model

    path = resolve_model(model).resolve()
    log.info("engine: loading %s into the server", path)
    await engine.update_weights(WeightUpdate(version=0, path=str(path)))


async def sync_weights(
    learner: Learner,
    engine: Engine,
    *,
    staging: Path | None = None,
    mode: SyncMode = "auto",
    keep: int = 2,
) -> SyncReport:
    """Send the learner's weights to `engine` as policy version `learner.version`; logged.
    `staging`: where files go for a server (a directory the server can read); `keep`: staged
    versions kept (>= 1). See the module docstring."""
    if keep < 1:
        raise ValueError(f"keep={keep}: keep at least the version just loaded (1)")
    chosen = _choose_mode(learner, engine, mode)
    start = time.perf_counter()
    if chosen == "state_dict":
        weights = learner.weights()
        await engine.update_weights(WeightUpdate(version=learner.version, state_dict=weights))
        report = SyncReport(
            version=learner.version,
            tensors=len(weights),
            bytes=sum(t.numel() * t.element_size() for t in weights.values()),
            seconds=time.perf_counter() - start,
        )
    else:
        report = await _sync_files(learner, engine, chosen, staging, keep, start)
    log.info(
        "weight sync v%d (%s): %d tensors, %.1f MB in %.3f s%s",
        report.version,
        report.mode,
        report.tensors,
        report.bytes / 1e6,
        report.seconds,
        f" (write {report.write_seconds:.3f} s) -> {report.path}" if report.path else "",
    )
    return report


def _choose_mode(
    learner: Learner, engine: Engine, mode: SyncMode
) -> Literal["state_dict", "files", "adapter"]:
    lora = learner.config.lora is not None
    if mode == "auto":
        if not serves_from_files(engine):
            return "state_dict"
        return "adapter" if lora and getattr(engine, "lora_adapters", False) else "files"
    if mode == "adapter" and not lora:
        raise ValueError(
            "mode='adapter' needs a LoRA learner (learner.config.lora); a full fine-tune syncs "
            "with mode='files'"
        )
    return mode


async def _sync_files(
    learner: Learner,
    engine: Engine,
    mode: Literal["files", "adapter"],
    staging: Path | None,
    keep: int,
    start: float,
) -> SyncReport:
    if staging is None:
        raise ValueError(
            f"engine {engine.name!r} loads weights from files: pass staging=<a directory the "
            "server can read> (a shared filesystem when the server runs on another machine)"
        )
    staging = Path(staging).resolve()
    staging.mkdir(parents=True, exist_ok=True)
    version = learner.version
    target = staging / f"v{version:06d}"
    tokenizer = learner.tokenizer if learner.tokenizer is not None else engine.tokenizer
    if mode == "files" and tokenizer is None:
        log.warning(
            "weight sync v%d: no tokenizer on the learner or the engine, so %s gets none; the "
            "server must bring its own (vLLM --tokenizer)",
            version,
            target,
        )
    # the write is seconds of CPU and disk for a real model: off the event loop, so rollouts
    # on this loop keep going
    tensors = await asyncio.to_thread(_stage, learner, target, mode, tokenizer)
    written = time.perf_counter()
    update = WeightUpdate(version=version, path=str(target), adapter=mode == "adapter")
    try:
        await engine.update_weights(update)
    except EngineError as exc:
        raise EngineError(
            f"weight sync v{version}: the server did not load {target}: {exc}. The staged "
            "files stay there: fix the server and sync again (or point it at them by hand)"
        ) from exc
    _prune(staging, version, keep)
    return SyncReport(
        version=version,
        tensors=tensors,
        bytes=sum(f.stat().st_size for f in target.iterdir() if f.is_file()),
        seconds=time.perf_counter() - start,
        mode=mode,
        path=target,
        write_seconds=written - start,
    )


def _stage(learner: Learner, target: Path, mode: str, tokenizer: Any) -> int:
    """Write the weights into `target` atomically (a temporary sibling, then a rename); returns
    the number of tensors written."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        if mode == "adapter":
            learner.model.save_pretrained(tmp)  # the peft model: its adapter only
        else:
            model, state = _full_state(learner)
            model.save_pretrained(tmp, state_dict=state)
            _serve_with_cache(tmp / "config.json")
            if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
                tokenizer.save_pretrained(tmp)
        tensors = _count_tensors(tmp)
        if not tensors:
            raise RuntimeError(f"weight sync: no safetensors files were written to {tmp}")
        _publish(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tensors


def _full_state(learner: Learner) -> tuple[Any, dict[str, Any] | None]:
    """The transformers model to save and the state dict to save for it under the base names:
    None (its own) for a full fine-tune; for LoRA the base weights with the adapted modules
    merged."""
    if learner.config.lora is None:
        return learner.model, None
    base = learner.model.get_base_model()
    state = {
        name.replace(".base_layer.", "."): tensor
        for name, tensor in base.state_dict().items()
        if ".lora_" not in name
    }
    state.update(learner.weights())
    return base, state


def _serve_with_cache(config_json: Path) -> None:
    """The learner turns the KV cache off for training; the saved model is for generation."""
    config = json.loads(config_json.read_text())
    if config.get("use_cache") is False:
        config["use_cache"] = True
        config_json.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _count_tensors(directory: Path) -> int:
    from safetensors import safe_open

    count = 0
    for file in directory.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            count += len(list(f.keys()))
    return count


def _publish(tmp: Path, target: Path) -> None:
    """Rename `tmp` to `target`; an existing `target` (the same version synced again) is
    replaced, moved aside first so the name never points at a partial directory."""
    if not target.exists():
        os.rename(tmp, target)
        return
    aside = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(target, aside)
    os.rename(tmp, target)
    shutil.rmtree(aside, ignore_errors=True)


def _prune(staging: Path, version: int, keep: int) -> None:
    """Delete staged versions below `version` except the newest `keep - 1` of them."""
    older = sorted(
        (int(m.group(1)), entry)
        for entry in staging.iterdir()
        if (m := _STAGED.fullmatch(entry.name)) and entry.is_dir() and int(m.group(1)) < version
    )
    for _, entry in older[: max(0, len(older) - (keep - 1))]:
        shutil.rmtree(entry, ignore_errors=True)


async def open_engine(config: TrainConfig, model: str) -> Engine:
    """The run's engine over `model`, ready to generate: `run_engine`'s in this process, or with
    `backend: ray` the same engine built in each of `ray.engine.count` supervised Ray actors
    (honing.rollout.ray.RayEngine; weights reach them through Ray's object store). A model
    directory is passed to the actors as an absolute path: on a cluster it must exist at that
    path on every engine node (a shared filesystem), as must a warm start's model."""
    if config.backend != "ray":
        return run_engine(config, model)
    import functools

    from honing.rollout.ray import EngineSpec, RayEngine, connect

    if Path(model).exists():
        model = str(Path(model).resolve())
    await asyncio.to_thread(connect, config.ray)
    spec = EngineSpec.from_factory(functools.partial(run_engine, config, model), "hf")
    engine = RayEngine(spec, config.ray.engine)
    await engine.start()
    return engine


def run_engine(config: TrainConfig, model: str) -> Engine:
    """A training run's engine over `model`: the server at `engine.url` (token mode), else hf
    (one decoding slot and no prefix cache when the run is deterministic)."""
    from honing.rollout.engines import make_engine

    if config.engine.url is not None:
        return make_engine(f"openai:{config.engine.url}", tokens_of=model,
                           lora_adapters=config.engine.lora_adapters)  # fmt: skip
    return make_engine(
        model,
        dtype=config.engine.dtype,
        max_batch=1 if config.deterministic else config.engine.slots,
        prefix_cache=config.engine.prefix_cache and not config.deterministic,
        seed=config.seed,
        speculative=config.engine.speculative,
    )
