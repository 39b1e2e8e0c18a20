"""Past one machine, by simulation: the real scheduler and agent loop over a simulated cluster.

    .venv/bin/python benchmarks/cluster_sim.py [--episodes 100000] [--engines 64] [--cells 1000]
        [--death-rate 6] [--seed 0] [--gc-threshold N] [--profile 30]

**Real**, unchanged: `Scheduler` (groups of 8, slots, retries with backoff, guards) and
`run_episode` (chat mode: messages, tool-call parsing, trajectory records), on a
`simclock.VirtualClockLoop`, so simulated latencies cost no wall time. **Simulated**: engines
that batch up to 64 sequences, one decode step costing 15 ms + 0.25 ms x batch (a fluid model: a
sequence joining mid-step shares that step); sandbox workers of 8 cells with lognormal latencies
(step median 0.3 s, sigma 1.2; reset 0.1 s, sigma 1.0; close 10 ms); both worker sets route like
`ray/actors.ActorSet` (least loaded; an env stays on its worker) and are the scheduler's fixed-size
`ElasticWorkers`. A worker dies at `--death-rate` per simulated minute: its calls raise
`WorkerLost`, the scheduler retries the episodes, a replacement serves 60 s (engine) or 5 s
(sandbox) later. Episodes: 1-8 turns of 16-256 tokens (seeded), each a tool call.
Not covered: the driver's CPU taking simulated time (C says when that assumption breaks), Ray's
own messaging cost, weight updates, prompt lengths (no prefill cost).

**Scheduler cost** C: the process CPU outside the simulated components (metered with
`process_time`, the meter's own cost charged to them; the cyclic GC charged to the driver), as
% of one core at 1,000 episodes/s: C = 100 x (cpu_s / sim_s) x 1000 / (episodes / sim_s) =
1e5 x cpu_s / episodes, so C = 1 is 10 us of driver CPU per episode. Goal: C <= 5, and lost 0
(lost = submitted - distinct episodes delivered played to their end).
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextvars
import cProfile
import gc
import heapq
import itertools
import math
import pstats
import random
import re
import resource
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from honing.domains.math.task import MathTask
from honing.envs.base import Action, Observation, StepInfo, StepResult, ToolResult
from honing.errors import WorkerLost
from honing.records import Ending, Trajectory
from honing.rollout import simclock
from honing.rollout.agent import AgentConfig, Gate, run_episode
from honing.rollout.elastic import Scaling
from honing.rollout.engines.base import (
    FinishReason,
    Generation,
    Prompt,
    SamplingParams,
    WeightUpdate,
)
from honing.rollout.scheduler import Scheduler, SchedulerConfig
from honing.tasks.load import AnyTask

GROUP = 8
MAX_TURNS = 8
TOKENS = (16, 256)
MAX_BATCH = 64  # sequences one engine decodes at once; also its scheduler slots
STEP_BASE_S = 0.015  # one decode step: STEP_BASE_S + STEP_PER_SEQ_S * batch
STEP_PER_SEQ_S = 0.00025
CELLS_PER_WORKER = 8
RESET_S, STEP_S, CLOSE_S = (0.1, 1.0), (0.3, 1.2), 0.01  # (median, sigma) of lognormals
ENGINE_START_S, SANDBOX_START_S = 60.0, 5.0  # a replacement worker serves after this
WORK_TOOL = {
    "type": "function",
    "function": {
        "name": "work",
        "description": "Do one unit of work.",
        "parameters": {"type": "object", "properties": {"pad": {"type": "string"}}},
    },
}
LAST_LINE = re.compile(
    r"cluster_sim: (\d+) episodes; ([\d.]+) episodes/s simulated; engines busy ([\d.]+)%; "
    r"scheduler ([\d.]+)% of one core per 1000 episodes/s; lost (\d+)"
)


# -- metering the simulation's own CPU ---------------------------------------------------------


class Meter:
    """Process CPU spent in the simulated components (`with meter:` around their code). A
    cyclic-GC pass that happens inside a block is not counted: the driver's objects are most of
    what it traverses, so all of the GC is charged to the driver (`gc_s`)."""

    __slots__ = ("_gc_t", "_inside", "_t", "blocks", "cpu_s", "gc_s")

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.blocks = 0
        self.gc_s = 0.0  # all cyclic-GC passes, while attached
        self._t = 0.0
        self._gc_t = 0.0
        self._inside = False

    def __enter__(self) -> None:
        self._inside = True
        self._t = time.process_time()

    def __exit__(self, *exc: object) -> None:
        self.cpu_s += time.process_time() - self._t
        self.blocks += 1
        self._inside = False

    def attach_gc(self) -> None:
        gc.callbacks.append(self._on_gc)

    def detach_gc(self) -> None:
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = time.process_time()
        if phase == "start":
            self._gc_t = now
            return
        self.gc_s += now - self._gc_t
        if self._inside:
            self.cpu_s -= now - self._gc_t


def meter_leak_s(blocks: int = 200_000) -> float:
    """CPU per metered block that the meter itself costs outside what it measures."""
    meter = Meter()
    t0 = time.process_time()
    for _ in range(blocks):
        with meter:
            pass
    return max(0.0, (time.process_time() - t0 - meter.cpu_s) / blocks)


# -- the workload ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """Every episode's turns and tokens per turn (seeded), in flat arrays."""

    turns: array.array[int]  # episode -> turns
    tokens: array.array[int]  # episode * MAX_TURNS + turn -> tokens of that turn

    @classmethod
    def make(cls, episodes: int, seed: int) -> Workload:
        rng = random.Random(seed)
        turns = array.array("B", (rng.randint(1, MAX_TURNS) for _ in range(episodes)))
        tokens = array.array("H", (rng.randint(*TOKENS) for _ in range(episodes * MAX_TURNS)))
        return cls(turns, tokens)

    def total_tokens(self) -> int:
        return sum(
            sum(self.tokens[e * MAX_TURNS : e * MAX_TURNS + t]) for e, t in enumerate(self.turns)
        )


def completion(tokens: int) -> tuple[str, dict[str, Any]]:
    """A tool call of `tokens` tokens (4 characters each): its text and its OpenAI shape."""
    head, tail = '{"name": "work", "arguments": {"pad": "', '"}}'
    pad = "x" * max(0, tokens * 4 - len(head) - len(tail))
    call = {"id": "call_0", "type": "function",
            "function": {"name": "work", "arguments": f'{{"pad": "{pad}"}}'}}  # fmt: skip
    return head + pad + tail, call


# -- supervised worker sets (ActorSet's routing and replacement, in simulated time) ---------------


class Worker(Protocol):
    id: str
    load: int  # in-flight prompts (engines) or open episodes (sandboxes)

    def fail(self, exc: WorkerLost) -> None:
        """Die: every call in flight raises `exc`."""


W = TypeVar("W", bound=Worker)


class WorkerSet(Generic[W]):
    """`size` workers; a dead one is replaced by a new one that serves `start_s` later.
    `acquire` gives the least loaded serving worker (waiting while none serves)."""

    def __init__(self, kind: str, size: int, start_s: float, meter: Meter) -> None:
        self.kind = kind
        self.start_s = start_s
        self.meter = meter
        self.ready: list[W] = []
        self.deaths = 0
        self._target = size
        self._starting = 0
        self._ids = itertools.count()
        self._waiters: list[asyncio.Future[None]] = []

    def spawn(self) -> W:
        raise NotImplementedError

    def start(self) -> None:
        self.ready = [self.spawn() for _ in range(self._target)]

    @property
    def size(self) -> int:
        return self._target

    async def resize(self, n: int) -> None:
        """Fixed-size sets only (the simulation's Scaling has min = max)."""
        if n != self._target:
            raise NotImplementedError("the simulated worker sets do not resize")

    def next_id(self) -> str:
        return f"{self.kind}-{next(self._ids)}"

    async def acquire(self) -> W:
        while not self.ready:
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut
        with self.meter:
            worker = min(self.ready, key=_load)
            worker.load += 1
        return worker

    def kill(self, worker: W) -> None:
        self.ready.remove(worker)
        self.deaths += 1
        worker.fail(WorkerLost(f"{self.kind} worker {worker.id} died (injected)"))
        self._starting += 1
        asyncio.get_running_loop().call_later(self.start_s, self._replaced)

    def _replaced(self) -> None:
        with self.meter:
            self._starting -= 1
            self.ready.append(self.spawn())
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)


def _load(worker: Worker) -> int:
    return worker.load


# -- engines -----------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Seq:
    tokens: int
    future: asyncio.Future[None]
    finish: float = 0.0  # the engine's step count at which its last token is out
    live: bool = True

    def __lt__(self, other: _Seq) -> bool:
        return self.finish < other.finish


class SimEngine:
    """One inference server: continuous batching of up to MAX_BATCH sequences, a decode step of
    STEP_BASE_S + STEP_PER_SEQ_S x batch. Fluid: steps are counted as a real number, so the
    batch may change mid-step; exact for a batch that does not change."""

    def __init__(self, worker_id: str, meter: Meter) -> None:
        self.id = worker_id
        self.load = 0
        self.meter = meter
        self.busy_seq_s = 0.0  # integral of the batch size over time
        self.tokens = 0
        self._loop = asyncio.get_running_loop()
        self._t = self._loop.time()
        self._steps = 0.0  # decode steps done as of self._t
        self._active = 0
        self._heap: list[_Seq] = []  # active sequences by finish (withdrawn ones lazily)
        self._queue: deque[_Seq] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._dead: WorkerLost | None = None

    async def decode(self, tokens: int) -> None:
        """Returns once `tokens` tokens of one sequence are decoded."""
        with self.meter:
            if self._dead is not None:
                raise self._dead
            seq = _Seq(tokens, self._loop.create_future())
            self._sync()
            if self._active < MAX_BATCH:
                self._activate(seq)
            else:
                self._queue.append(seq)
            self._reschedule()
        try:
            await seq.future
        except asyncio.CancelledError:
            with self.meter:
                self._withdraw(seq)
            raise
        self.tokens += tokens

    def fail(self, exc: WorkerLost) -> None:
        self._sync()
        self._dead = exc
        for seq in [*self._heap, *self._queue]:
            if seq.live and not seq.future.done():
                seq.future.set_exception(exc)
            seq.live = False
        self._heap.clear()
        self._queue.clear()
        self._active = 0
        if self._timer is not None:
            self._timer.cancel()

    def close(self) -> None:
        self._sync()
        if self._timer is not None:
            self._timer.cancel()

    def _sync(self) -> None:
        now = self._loop.time()
        if self._active:
            dt = now - self._t
            self._steps += dt / (STEP_BASE_S + STEP_PER_SEQ_S * self._active)
            self.busy_seq_s += self._active * dt
        self._t = now

    def _activate(self, seq: _Seq) -> None:
        seq.finish = self._steps + seq.tokens
        heapq.heappush(self._heap, seq)
        self._active += 1

    def _withdraw(self, seq: _Seq) -> None:
        if not seq.live:
            return
        seq.live = False
        if seq in self._queue:
            self._queue.remove(seq)
            return
        self._sync()
        self._active -= 1
        self._admit()
        self._reschedule()

    def _admit(self) -> None:
        while self._queue and self._active < MAX_BATCH:
            self._activate(self._queue.popleft())

    def _reschedule(self) -> None:
        heap = self._heap
        while heap and not heap[0].live:
            heapq.heappop(heap)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if heap:
            step_s = STEP_BASE_S + STEP_PER_SEQ_S * self._active
            at = self._t + max(0.0, heap[0].finish - self._steps) * step_s
            self._timer = self._loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        with self.meter:
            self._timer = None
            self._sync()
            heap = self._heap
            while heap and (not heap[0].live or heap[0].finish <= self._steps + 1e-6):
                seq = heapq.heappop(heap)
                if seq.live:
                    seq.live = False
                    self._active -= 1
                    seq.future.set_result(None)
            self._admit()
            self._reschedule()


class SimEngines(WorkerSet[SimEngine]):
    """The scheduler's Engine (chat mode, like a remote server's) and its engine worker set."""

    name = "sim"
    accepts_tokens = False

    def __init__(self, size: int, meter: Meter) -> None:
        super().__init__("engine", size, ENGINE_START_S, meter)
        self.retired_busy_seq_s = 0.0  # of dead engines
        self.retired_tokens = 0
        self._completions: dict[int, tuple[str, dict[str, Any]]] = {}

    def spawn(self) -> SimEngine:
        return SimEngine(self.next_id(), self.meter)

    def kill(self, worker: SimEngine) -> None:
        super().kill(worker)
        self.retired_busy_seq_s += worker.busy_seq_s
        self.retired_tokens += worker.tokens

    @property
    def version(self) -> int:
        return 0

    @property
    def tokenizer(self) -> None:
        return None

    async def generate(
        self, prompts: Sequence[Prompt], sampling: SamplingParams
    ) -> list[Generation]:
        if len(prompts) != 1:
            raise ValueError("the simulated engines take one prompt per call (as the agent does)")
        with self.meter:
            env = CURRENT.get()
            tokens = env.workload.tokens[env.episode * MAX_TURNS + env.turn]
            done = self._completions.get(tokens)
            if done is None:
                done = self._completions[tokens] = completion(tokens)
        worker = await self.acquire()
        try:
            await worker.decode(tokens)
        finally:
            worker.load -= 1
        with self.meter:
            text, call = done
            calls = [{**call, "function": {**call["function"]}}]  # a copy per generation
            stop = FinishReason.STOP
            return [Generation([], text, [], stop, versions=[], tool_calls=calls)]

    async def update_weights(self, update: WeightUpdate) -> None:
        raise NotImplementedError("the simulation does not train")

    async def close(self) -> None:
        for engine in self.ready:
            engine.close()

    def busy_seq_s(self) -> float:
        return self.retired_busy_seq_s + sum(e.busy_seq_s for e in self.ready)

    def tokens(self) -> int:
        return self.retired_tokens + sum(e.tokens for e in self.ready)


# -- sandboxes and environments ----------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Job:
    seconds: float
    future: asyncio.Future[None]
    timer: asyncio.TimerHandle | None = None


class SimSandbox:
    """One sandbox worker: CELLS_PER_WORKER cells; calls beyond them queue here."""

    def __init__(self, worker_id: str, meter: Meter) -> None:
        self.id = worker_id
        self.load = 0
        self.meter = meter
        self.dead: WorkerLost | None = None
        self._loop = asyncio.get_running_loop()
        self._running: dict[_Job, None] = {}  # a dict: ordered, so a run is reproducible
        self._queue: deque[_Job] = deque()

    async def call(self, seconds: float) -> None:
        with self.meter:
            if self.dead is not None:
                raise self.dead
            job = _Job(seconds, self._loop.create_future())
            if len(self._running) < CELLS_PER_WORKER:
                self._run(job)
            else:
                self._queue.append(job)
        try:
            await job.future
        except asyncio.CancelledError:
            with self.meter:
                if job in self._running:
                    self._finished(job)
                elif job in self._queue:
                    self._queue.remove(job)
            raise

    def fail(self, exc: WorkerLost) -> None:
        self.dead = exc
        for job in [*self._running, *self._queue]:
            if job.timer is not None:
                job.timer.cancel()
            if not job.future.done():
                job.future.set_exception(exc)
        self._running.clear()
        self._queue.clear()

    def _run(self, job: _Job) -> None:
        self._running[job] = None
        job.timer = self._loop.call_later(job.seconds, self._done, job)

    def _done(self, job: _Job) -> None:
        with self.meter:
            job.future.set_result(None)
            self._finished(job)

    def _finished(self, job: _Job) -> None:
        if job.timer is not None:
            job.timer.cancel()
        self._running.pop(job, None)
        if self._queue:
            self._run(self._queue.popleft())


class SimSandboxes(WorkerSet[SimSandbox]):
    def __init__(self, size: int, meter: Meter, rng: random.Random) -> None:
        super().__init__("sandbox", size, SANDBOX_START_S, meter)
        self.rng = rng

    def spawn(self) -> SimSandbox:
        return SimSandbox(self.next_id(), self.meter)

    def latency(self, median_sigma: tuple[float, float]) -> float:
        return self.rng.lognormvariate(math.log(median_sigma[0]), median_sigma[1])


class SimEnv:
    """One episode's environment on a sandbox worker (RemoteEnv's semantics: placed at reset;
    once its worker died every call raises WorkerLost; close after a death is a no-op)."""

    def __init__(self, episode: int, workload: Workload, sandboxes: SimSandboxes) -> None:
        self.episode = episode
        self.workload = workload
        self.turn = 0
        self._sandboxes = sandboxes
        self._worker: SimSandbox | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    async def reset(self, task: AnyTask) -> Observation:
        self._worker = await self._sandboxes.acquire()
        await self._call(self._sandboxes.latency(RESET_S))
        with self._sandboxes.meter:
            return Observation(text=f"{task.prompt} Episode {self.episode}.", tools=[WORK_TOOL])

    async def step(self, action: Action) -> StepResult:
        await self._call(self._sandboxes.latency(STEP_S))
        with self._sandboxes.meter:
            self.turn += 1
            self._done = self.turn >= self.workload.turns[self.episode]
            reward = 1.0 if self._done else 0.0
            results = [ToolResult(call_id=c.id, name=c.name, content="ok", ok=True)
                       for c in action.tool_calls]  # fmt: skip
            return StepResult(
                observation=Observation(text="continue", tool_results=results, tools=[WORK_TOOL]),
                reward=reward,
                components={"outcome": reward},
                done=self._done,
                info=StepInfo(step=self.turn),
            )

    async def reject(self, detail: str) -> StepResult:
        raise AssertionError(f"the scripted model wrote a malformed action: {detail}")

    async def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        try:
            if worker.dead is None:
                await worker.call(CLOSE_S)
        except WorkerLost:
            pass  # the episode died with its worker
        finally:
            worker.load -= 1

    async def _call(self, seconds: float) -> None:
        assert self._worker is not None, "call reset(task) first"
        await self._worker.call(seconds)


CURRENT: contextvars.ContextVar[SimEnv] = contextvars.ContextVar("cluster_sim_env")
"""The episode the running attempt plays: the engines read its next turn's length from it."""


# -- deaths ------------------------------------------------------------------------------------


async def inject_deaths(
    per_minute: float, rng: random.Random, engines: SimEngines, sandboxes: SimSandboxes
) -> None:
    """Kill a uniformly chosen serving worker at Poisson times, `per_minute` on average."""
    while True:
        await asyncio.sleep(rng.expovariate(per_minute / 60.0))
        with engines.meter:
            pick = rng.randrange(len(engines.ready) + len(sandboxes.ready) or 1)
            if pick < len(engines.ready):
                engines.kill(engines.ready[pick])
            elif sandboxes.ready:
                sandboxes.kill(sandboxes.ready[pick - len(engines.ready)])


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Result:
    """What one simulated run did."""

    submitted: int
    finished: int  # distinct (group, sample) delivered DONE, played to their last turn
    duplicates: int
    wrong: list[str]  # delivered, but not played to the end (ending, detail)
    sim_s: float
    wall_s: float
    cpu_s: float  # process CPU over the run
    sim_cpu_s: float  # of which the simulated components (meter + its calibrated cost)
    gc_s: float  # of which the cyclic GC (charged to the driver)
    engines_busy: float  # time-weighted batch occupancy / (engines x MAX_BATCH)
    tokens: int
    engine_deaths: int
    sandbox_deaths: int
    retries: int
    retries_by_cause: dict[str, int] = field(default_factory=dict)
    infra_errors: int = 0
    peak_in_flight: int = 0
    jumps: int = 0

    @property
    def lost(self) -> int:
        return self.submitted - self.finished

    @property
    def rate(self) -> float:
        """Episodes per simulated second."""
        return self.finished / self.sim_s if self.sim_s > 0 else 0.0

    @property
    def driver_cpu_s(self) -> float:
        return max(0.0, self.cpu_s - self.sim_cpu_s)

    @property
    def scheduler_pct(self) -> float:
        """% of one core per 1,000 episodes/s: 100 x (cpu/sim_s) x 1000 / (episodes/sim_s)."""
        return 1e5 * self.driver_cpu_s / max(1, self.submitted)


async def simulate(
    episodes: int, engines_n: int, cells: int, death_rate: float, seed: int, *, leak: float = 0.0
) -> Result:
    """Run `episodes` episodes (groups of GROUP) on the simulated cluster; see the module doc.
    `leak`: the meter's own CPU per block (`meter_leak_s()`), charged to the simulation."""
    if cells % CELLS_PER_WORKER:
        raise ValueError(f"--cells must be a multiple of {CELLS_PER_WORKER}, got {cells}")
    loop = asyncio.get_running_loop()
    workload = Workload.make(episodes, seed)
    meter = Meter()
    rng = random.Random(seed + 1)
    engines = SimEngines(engines_n, meter)
    sandboxes = SimSandboxes(cells // CELLS_PER_WORKER, meter, rng)
    engines.start()
    sandboxes.start()
    tasks = [MathTask(id=f"task{i}", prompt=f"Task {i}.", answer="done")
             for i in range(-(-episodes // GROUP))]  # fmt: skip
    index = {t.id: i for i, t in enumerate(tasks)}
    agent = AgentConfig(sampling=SamplingParams(max_new_tokens=1024), max_turns=MAX_TURNS,
                        max_total_tokens=1_000_000)  # fmt: skip

    async def run(task: AnyTask, sample: int, gate: Gate) -> Trajectory:
        env = SimEnv(index[task.id] * GROUP + sample, workload, sandboxes)
        CURRENT.set(env)
        return await run_episode(task, env, engines, agent, gate=gate, sample=sample)

    engine_slots = engines_n * MAX_BATCH
    config = SchedulerConfig(
        n=GROUP,
        max_in_flight=engine_slots + cells,
        engine_scaling=Scaling(min_workers=engines_n, max_workers=engines_n,
                               slots_per_worker=MAX_BATCH),
        env_scaling=Scaling(min_workers=sandboxes.size, max_workers=sandboxes.size,
                            slots_per_worker=CELLS_PER_WORKER),
    )  # fmt: skip
    seen: Counter[int] = Counter()  # by episode index: ints, which the cyclic GC never visits
    played: set[int] = set()
    wrong: list[str] = []
    gc.collect()
    scheduler = Scheduler(run, config, engine_workers=engines, env_workers=sandboxes)
    async with scheduler:
        t0, cpu0, wall0 = loop.time(), time.process_time(), time.perf_counter()
        cpu_before, blocks_before = meter.cpu_s, meter.blocks
        meter.attach_gc()
        deaths = (loop.create_task(inject_deaths(death_rate, rng, engines, sandboxes))
                  if death_rate > 0 else None)  # fmt: skip

        async def feed() -> None:
            left = episodes
            for task in tasks:
                await scheduler.submit(task, n=min(GROUP, left))
                left -= GROUP
            scheduler.finish_submitting()

        feeder = loop.create_task(feed())
        async for group in scheduler.results():
            first = index[group.task_id] * GROUP
            for tr in group.trajectories:
                key = first + tr.sample
                seen[key] += 1
                if tr.ending is Ending.DONE and tr.success and tr.steps == workload.turns[key]:
                    played.add(key)
                else:
                    wrong.append(f"{tr.ending.value}: {tr.detail}")
        sim_s = loop.time() - t0
        cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
        sim_cpu_s = meter.cpu_s - cpu_before + (meter.blocks - blocks_before) * leak
        meter.detach_gc()
        await feeder
        if deaths is not None:
            deaths.cancel()
        stats = scheduler.stats
    await engines.close()
    busy = engines.busy_seq_s() / (engines_n * MAX_BATCH * sim_s) if sim_s > 0 else 0.0
    assert isinstance(loop, simclock.VirtualClockLoop)
    return Result(
        submitted=episodes,
        finished=len(played),
        duplicates=sum(c - 1 for c in seen.values()),
        wrong=wrong,
        sim_s=sim_s,
        wall_s=wall_s,
        cpu_s=cpu_s,
        sim_cpu_s=sim_cpu_s,
        gc_s=meter.gc_s,
        engines_busy=busy,
        tokens=engines.tokens(),
        engine_deaths=engines.deaths,
        sandbox_deaths=sandboxes.deaths,
        retries=stats.retries,
        retries_by_cause=dict(stats.retries_by_cause),
        infra_errors=stats.infra_errors,
        peak_in_flight=stats.peak_in_flight,
        jumps=loop.jumps,
    )


def last_line(r: Result) -> str:
    return (
        f"cluster_sim: {r.submitted} episodes; {r.rate:.1f} episodes/s simulated; "
        f"engines busy {100 * r.engines_busy:.1f}%; scheduler {r.scheduler_pct:.1f}% of one "
        f"core per 1000 episodes/s; lost {r.lost}"
    )


def report(r: Result) -> list[str]:
    """The figures behind the last line, then the last line."""
    causes = ", ".join(f"{k} {v}" for k, v in sorted(r.retries_by_cause.items())) or "none"
    per_episode_us = 1e6 / max(1, r.submitted)
    return [
        f"simulated: {r.sim_s:.1f} s; {r.tokens / r.sim_s:,.0f} tokens/s; peak in flight "
        f"{r.peak_in_flight}; clock jumps {r.jumps:,}",
        f"deaths: {r.engine_deaths} engine, {r.sandbox_deaths} sandbox workers; retries "
        f"{r.retries} ({causes}); delivered as infra errors {r.infra_errors}",
        f"delivered: {r.finished} played to the end, {len(r.wrong)} not, {r.duplicates} twice",
        f"wall {r.wall_s:.1f} s; process CPU {r.cpu_s:.1f} s ({r.cpu_s * per_episode_us:.0f} "
        f"us/episode), of which simulated components {r.sim_cpu_s:.1f} s",
        f"driver (scheduler, agent loop, event loop, GC): {r.driver_cpu_s:.1f} s CPU = "
        f"{r.driver_cpu_s * per_episode_us:.0f} us/episode (cyclic GC {r.gc_s:.1f} s of it); "
        f"{100 * r.driver_cpu_s / r.sim_s:.0f}% of one core at the simulated rate",
        f"all process CPU, simulation included: {1e5 * r.cpu_s / max(1, r.submitted):.1f}% of "
        f"one core per 1000 episodes/s",
        last_line(r),
    ]


PARTS = (  # (part, path fragments of its functions), first match wins
    ("simulation", ("cluster_sim.py", "process_time", "lognormvariate", "random.py")),
    ("scheduler", ("rollout/scheduler.py", "rollout/slots.py", "rollout/elastic.py")),
    ("agent loop", ("rollout/agent.py", "rollout/chat.py", "json/")),
    ("records", ("pydantic", "envs/base.py", "honing/records.py", "uuid.py", "dataclasses.py")),
    (
        "event loop",
        (
            "asyncio/",
            "_asyncio",
            "selectors.py",
            "simclock.py",
            "epoll",
            "heapq",
            "contextvars.Context",
            "method 'run'",
        ),
    ),
)


def profile_shares(stats: pstats.Stats) -> str:
    """Own time (tottime) of the profiled run, by part of the process."""
    own: Counter[str] = Counter()
    for (path, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{path}:{name}"
        part = next((p for p, keys in PARTS if any(k in where for k in keys)), "other")
        own[part] += row[2]
    total = sum(own.values()) or 1.0
    return "own time by part: " + ", ".join(
        f"{part} {100 * t / total:.0f}%" for part, t in own.most_common()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--engines", type=int, default=64)
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument(
        "--death-rate", type=float, default=6.0, help="worker deaths per simulated minute, all told"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--gc-threshold", type=int, default=0, metavar="N",
        help="the cyclic GC's generation-0 threshold (0: Python's, 700)",
    )  # fmt: skip
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N",
        help="profile the run (cProfile) and print its N costliest functions",
    )  # fmt: skip
    args = parser.parse_args()
    print(
        f"cluster: {args.engines} engines x {MAX_BATCH} sequences "
        f"({STEP_BASE_S * 1e3:g} ms + {STEP_PER_SEQ_S * 1e3:g} ms x batch per step), "
        f"{args.cells} sandbox cells on {args.cells // CELLS_PER_WORKER} workers, "
        f"{args.death_rate:g} deaths/min; {args.episodes} episodes in groups of {GROUP}"
    )
    if args.gc_threshold:
        gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
    leak = meter_leak_s()
    profiler = cProfile.Profile() if args.profile else None
    coro = simulate(args.episodes, args.engines, args.cells, args.death_rate, args.seed, leak=leak)
    if profiler is not None:
        profiler.enable()
    result = simclock.run(coro)
    if profiler is not None:
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(args.profile)
        print(profile_shares(stats))
        print("(under the profiler: the CPU figures below are inflated)")
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss_mb:.0f} MB")
    for line in result.wrong[:5]:
        print(f"not played to the end: {line}")
    print("\n".join(report(result)))


if __name__ == "__main__":
    main()
