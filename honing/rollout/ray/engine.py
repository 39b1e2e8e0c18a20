"""Engine workers on Ray: each actor hosts one engine; `RayEngine` is the Engine the driver uses.

    spec = EngineSpec.hf("/models/qwen3-1.7b")       # or .scripted(...), .named("openai:URL")
    async with RayEngine(spec, WorkerSetConfig(count=2, num_cpus=1)) as engine:
        [gen] = await engine.generate([Prompt(token_ids=ids)], SamplingParams())
        await engine.update_weights(WeightUpdate(version=1, path=...))

Covered: picklable engine recipes built on the worker, least-loaded routing, weight updates to
every actor (one policy version), tokenizers sent once, and `WorkerLost` for a dead actor
(docs/scaling.md, "The modules in detail"). Not covered: the engines (`honing.rollout.engines`)
and placement beyond per-actor resource requests (one engine that spans GPUs is a vLLM/SGLang
server behind the `openai` engine; see docs/scaling.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from honing.errors import HoningError, WorkerLost
from honing.rollout.engines.base import Engine, Generation, Prompt, SamplingParams, WeightUpdate
from honing.rollout.ray.actors import ActorSet, Worker
from honing.rollout.ray.config import WorkerSetConfig

if TYPE_CHECKING:
    from honing.rollout.engines import Dtype
    from honing.rollout.engines.scripted import LatencyModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineSpec:
    """How an engine actor builds its engine. `build` must be picklable (Ray uses cloudpickle:
    functions, lambdas and `functools.partial` all are); it runs in the actor, not here."""

    build: Callable[[], Engine]
    label: str = ""

    @classmethod
    def scripted(
        cls,
        respond: Callable[[Prompt, int], str] | Sequence[str],
        *,
        tokenizer: str | Path | None = None,
        latency: LatencyModel | None = None,
        version: int = 0,
    ) -> EngineSpec:
        """A ScriptedEngine; with `tokenizer` (a model directory) it is a token engine."""
        responses = respond if callable(respond) else list(respond)
        tokenizer_dir = str(tokenizer) if tokenizer is not None else None

        def build() -> Engine:
            from honing.rollout.engines.scripted import ScriptedEngine
            from honing.rollout.models import load_tokenizer

            tok = load_tokenizer(Path(tokenizer_dir)) if tokenizer_dir else None
            return ScriptedEngine(responses, tokenizer=tok, latency=latency, version=version)

        return cls(build=build, label="scripted")

    @classmethod
    def named(cls, spec: str, *, dtype: Dtype = "auto", max_batch: int = 32) -> EngineSpec:
        """What `make_engine(spec)` builds, in the actor: "default", "model:PATH" (hf, on the
        actor's device — give the worker set `num_gpus` for a GPU), "openai:URL[#MODEL]"."""

        def build() -> Engine:
            from honing.rollout.engines import make_engine

            return make_engine(spec, dtype=dtype, max_batch=max_batch)

        return cls(build=build, label="openai" if spec.startswith("openai:") else "hf")

    @classmethod
    def hf(cls, model: str | Path, *, dtype: Dtype = "auto", max_batch: int = 32) -> EngineSpec:
        """The hf engine on a model directory (or built-in name) as seen from the actor's node."""
        return cls.named(f"model:{model}", dtype=dtype, max_batch=max_batch)

    @classmethod
    def from_factory(cls, build: Callable[[], Engine], label: str = "") -> EngineSpec:
        """Any engine: e.g. `functools.partial(HfEngine, model_dir, ...)`."""
        return cls(build=build, label=label)


@dataclass(frozen=True)
class EngineInfo:
    """What an engine actor reports once started."""

    name: str
    accepts_tokens: bool
    version: int
    tokenizer: Any | None  # sent once, for token engines


class EngineHost:
    """The actor: one engine, many concurrent calls (the engine batches across them)."""

    def __init__(self, spec: EngineSpec) -> None:
        self._spec = spec
        self._engine: Engine | None = None
        self._forever = asyncio.Event()
        self._in_flight = 0

    async def start(self) -> EngineInfo:
        engine = self._spec.build()
        self._engine = engine
        tokenizer = engine.tokenizer if engine.accepts_tokens else None
        return EngineInfo(engine.name, engine.accepts_tokens, engine.version, tokenizer)

    async def generate(self, prompts: list[Prompt], sampling: SamplingParams) -> list[Generation]:
        engine = self._require()
        self._in_flight += 1
        try:
            return await engine.generate(prompts, sampling)
        finally:
            self._in_flight -= 1

    async def in_flight(self) -> int:
        """`generate` calls running here (a cancelled call on the driver stops here too)."""
        return self._in_flight

    async def update_weights(self, update: WeightUpdate) -> int:
        engine = self._require()
        await engine.update_weights(update)
        return engine.version

    async def version(self) -> int:
        return self._require().version

    async def watch(self) -> None:
        await self._forever.wait()  # never set: returns only by the actor's death

    async def stop(self) -> None:
        if self._engine is not None:
            await self._engine.close()
            self._engine = None

    def _require(self) -> Engine:
        if self._engine is None:
            raise HoningError("engine actor not started (call start first)")
        return self._engine


class RayEngine:
    """An Engine whose calls run on a supervised, elastic set of engine actors; see the module
    docstring. Use as `async with RayEngine(spec, config) as engine:` (Ray must be connected:
    `honing.rollout.ray.connect`)."""

    def __init__(self, spec: EngineSpec, config: WorkerSetConfig | None = None) -> None:
        self.spec = spec
        self.workers = ActorSet(
            "engine", EngineHost, (spec,), config or WorkerSetConfig(), on_ready=self._catch_up
        )
        self.name = f"ray:{spec.label or 'engine'}"
        self.accepts_tokens = False
        self._tokenizer: Any | None = None
        self._version = 0
        self._latest: Any = None  # ObjectRef of the last WeightUpdate, for actors started later
        self._weights = asyncio.Lock()
        self._described = False

    async def __aenter__(self) -> RayEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        await self.workers.start()

    # -- Engine ------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version

    @property
    def tokenizer(self) -> Any | None:
        return self._tokenizer

    async def generate(
        self, prompts: Sequence[Prompt], sampling: SamplingParams
    ) -> list[Generation]:
        batch = list(prompts)
        worker = await self.workers.acquire(load=len(batch))
        try:
            result: list[Generation] = await self.workers.call(worker, "generate", batch, sampling)
            return result
        finally:
            self.workers.release(worker, load=len(batch))

    async def update_weights(self, update: WeightUpdate) -> None:
        """Every live actor loads `update`; actors that die meanwhile are replaced and get it."""
        ref = await asyncio.to_thread(ray.put, update)  # one copy, however many actors
        async with self._weights:
            self._latest = ref
            workers = self.workers.ready_workers()
            results = await asyncio.gather(
                *(self.workers.call(w, "update_weights", ref) for w in workers),
                return_exceptions=True,
            )
            for worker, result in zip(workers, results, strict=True):
                if isinstance(result, WorkerLost):
                    log.warning("engine worker %s lost during a weight update", worker.id)
                elif isinstance(result, BaseException):
                    raise result
            self._version = update.version

    async def close(self) -> None:
        await self.workers.close()

    # -- the ElasticWorkers protocol -------------------------------------------------------
    @property
    def size(self) -> int:
        return self.workers.size

    async def resize(self, n: int) -> None:
        await self.workers.resize(n)

    # -- supervision hook --------------------------------------------------------------------
    async def _catch_up(self, worker: Worker) -> None:
        info: EngineInfo = worker.info
        if not self._described:
            self._described = True
            self.name = f"ray:{info.name}"
            self.accepts_tokens = info.accepts_tokens
            self._tokenizer = info.tokenizer
            self._version = info.version
        async with self._weights:
            if self._latest is not None:
                await worker.handle.update_weights.remote(self._latest)
