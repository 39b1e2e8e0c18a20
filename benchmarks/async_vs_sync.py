"""Asynchronous rollout (honing's scheduler) versus synchronous batched rollout, same workload.

    .venv/bin/python benchmarks/async_vs_sync.py [--mode real|simulated] [--episodes N] ...

Both modes play the same seeded episodes on both sides: each of 1-8 turns, and every turn the
model writes a set number of tokens and then the environment takes a step whose latency is
heavy-tailed (lognormal, sigma 1.2: the mean is 2x the median, p99 16x). Only the scheduling
differs between the sides.

**real** (the default): the hf engine (`HFEngine`, continuous batching, `--slots` sequences
decoded together) on `--model`: "tiny", a 2-layer random Llama with SmolLM2's tokenizer built in
memory, or "default" (SmolLM2-135M) or a model directory. 128 episodes (16 tasks x 8), 16-128
tokens a turn (`eos_ids=()`: exactly that many), env median 60 ms. An episode's prompt is its
chat-templated task; each turn appends the completion and a templated tool result, so later
turns hit the engine's prefix cache. A real step costs more with more sequences in the batch.

* **sync** (verl's synchronous rollout): the whole batch at once. Each turn every running
  episode submits its generation to the engine together and waits at a barrier for the last of
  them; then every env step runs (at most `--env-slots` at once) and waits at a barrier for the
  slowest; then the next turn.
* **honing**: `Scheduler` with `--slots` engine slots and `--env-slots` env slots, every episode
  admitted: each proceeds on its own, taking an engine slot per generation and an env slot per
  step.

Reported per side: wall time, trajectories/s, tokens/s, and the mean decode batch (tokens
generated per decode step, out of `--slots`). The last line names the mode and the model.

**simulated**: honing's agent loop (`agent.run_episode`, chat mode) on a `ScriptedEngine` whose
step costs `--per-token-ms` whatever the batch (a continuous-batching server's latency model,
`--slots` sequences), 512 episodes (64 tasks x 8), 16-256 tokens a turn, env median 15 ms. Its
sync side runs batches of B = `--slots` episodes in lockstep (generate together, then step
together, the next batch once this one is done), which flatters honing more than the real mode's
baseline does. Its last line says "simulated"; goal there: speedup >= 2.5x, engine busy >= 90%.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from honing.domains.math.task import MathTask
from honing.envs.base import Action, Observation, StepInfo, StepResult, ToolResult
from honing.records import Ending, Trajectory
from honing.rollout.agent import AgentConfig, Gate, run_episode
from honing.rollout.engines.base import Generation, Prompt, SamplingParams
from honing.rollout.engines.hf import HFEngine
from honing.rollout.engines.scripted import LatencyModel, ScriptedEngine
from honing.rollout.scheduler import Scheduler, SchedulerConfig
from honing.tasks.load import AnyTask

GROUP = 8
MAX_TURNS = 8
ENV_SIGMA = 1.2
SIM_TOKENS = (16, 256)
SIM_ENV_MEDIAN_S = 0.015
REAL_TOKENS = (16, 128)
REAL_ENV_MEDIAN_S = 0.060
WORK_TOOL = {
    "type": "function",
    "function": {
        "name": "work",
        "description": "Do one unit of work.",
        "parameters": {"type": "object", "properties": {"pad": {"type": "string"}}},
    },
}
EPISODE = re.compile(r"episode=(\d+)")


@dataclass(frozen=True)
class Plan:
    """One episode's script: the tokens the model writes each turn and each step's latency."""

    tokens: list[int]
    env_s: list[float]


def make_plans(
    episodes: int,
    seed: int,
    tokens: tuple[int, int] = SIM_TOKENS,
    env_median_s: float = SIM_ENV_MEDIAN_S,
) -> list[Plan]:
    rng = random.Random(seed)
    plans = []
    for _ in range(episodes):
        turns = rng.randint(1, MAX_TURNS)
        plans.append(
            Plan(
                tokens=[rng.randint(*tokens) for _ in range(turns)],
                env_s=[rng.lognormvariate(math.log(env_median_s), ENV_SIGMA) for _ in range(turns)],
            )
        )
    return plans


def completion(tokens: int) -> str:
    """A tool call of `tokens` simulated tokens (the scripted chat engine counts 4 chars each)."""
    head = '{"name": "work", "arguments": {"pad": "'
    tail = '"}}'
    return head + "x" * max(0, tokens * 4 - len(head) - len(tail)) + tail


def make_engine(plans: Sequence[Plan], slots: int, per_token_s: float) -> ScriptedEngine:
    def respond(prompt: Prompt, index: int) -> str:
        messages = prompt.messages or []
        user = next(str(m["content"]) for m in messages if m["role"] == "user")
        match = EPISODE.search(user)
        assert match is not None, user
        turn = sum(1 for m in messages if m["role"] == "assistant")
        return completion(plans[int(match.group(1))].tokens[turn])

    return ScriptedEngine(respond, latency=LatencyModel(slots=slots, per_token_s=per_token_s))


class SimEnv:
    """An environment whose steps take the plan's latencies; done after the plan's turns."""

    def __init__(self, episode: int, plan: Plan) -> None:
        self.episode = episode
        self.plan = plan
        self.turn = 0
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    async def reset(self, task: AnyTask) -> Observation:
        return Observation(text=f"{task.prompt} episode={self.episode}", tools=[WORK_TOOL])

    async def step(self, action: Action) -> StepResult:
        await asyncio.sleep(self.plan.env_s[self.turn])
        self.turn += 1
        self._done = self.turn >= len(self.plan.tokens)
        results = [ToolResult(call_id=c.id, name=c.name, content="ok", ok=True)
                   for c in action.tool_calls]  # fmt: skip
        reward = 1.0 if self._done else 0.0
        return StepResult(
            observation=Observation(text="continue", tool_results=results, tools=[WORK_TOOL]),
            reward=reward,
            components={"outcome": reward},
            done=self._done,
            info=StepInfo(step=self.turn, step_s=self.plan.env_s[self.turn - 1]),
        )

    async def reject(self, detail: str) -> StepResult:
        raise AssertionError(f"the scripted model wrote a malformed action: {detail}")

    async def close(self) -> None:
        return None


def agent_config() -> AgentConfig:
    return AgentConfig(
        sampling=SamplingParams(max_new_tokens=1024),
        max_turns=MAX_TURNS,
        max_total_tokens=1_000_000,
    )


def tasks_for(episodes: int) -> list[MathTask]:
    return [
        MathTask(id=f"task{i}", prompt=f"Task {i}.", answer="done")
        for i in range(episodes // GROUP)
    ]


# -- simulated mode: the synchronous baseline ------------------------------------------------------


class PhaseBarrier:
    """Every episode of the batch waits here until all still-running ones have arrived."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self._release: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def arrive(self) -> None:
        self.arrived += 1
        release = self._release
        if self.arrived >= self.parties:
            self._open()
        await release

    def leave(self) -> None:
        self.parties -= 1
        if self.parties and self.arrived >= self.parties:
            self._open()

    def _open(self) -> None:
        release, self._release = self._release, asyncio.get_running_loop().create_future()
        self.arrived = 0
        release.set_result(None)


class LockstepGate:
    """The sync rollout's gate: each engine call and each env call starts a phase that the whole
    batch enters together (generate together, then step together)."""

    def __init__(self, barrier: PhaseBarrier, env_slots: asyncio.Semaphore) -> None:
        self.barrier = barrier
        self.env_slots = env_slots

    @asynccontextmanager
    async def _engine(self) -> AsyncIterator[None]:
        await self.barrier.arrive()
        yield

    @asynccontextmanager
    async def _env(self) -> AsyncIterator[None]:
        await self.barrier.arrive()
        async with self.env_slots:
            yield

    def engine(self) -> AbstractAsyncContextManager[None]:
        return self._engine()

    def env(self) -> AbstractAsyncContextManager[None]:
        return self._env()


async def sync_rollout(
    plans: Sequence[Plan], slots: int, per_token_s: float
) -> tuple[list[Trajectory], float, float]:
    engine = make_engine(plans, slots, per_token_s)
    config = agent_config()
    tasks = tasks_for(len(plans))
    episodes = [(tasks[i // GROUP], i % GROUP, i) for i in range(len(plans))]
    env_slots = asyncio.Semaphore(slots)
    out: list[Trajectory] = []
    t0 = time.perf_counter()
    for start in range(0, len(episodes), slots):
        batch = episodes[start : start + slots]
        barrier = PhaseBarrier(len(batch))
        gate = LockstepGate(barrier, env_slots)

        async def one(task: MathTask, sample: int, episode: int, gate: Gate = gate,
                      barrier: PhaseBarrier = barrier) -> Trajectory:  # fmt: skip
            try:
                env = SimEnv(episode, plans[episode])
                return await run_episode(task, env, engine, config, gate=gate, sample=sample)
            finally:
                barrier.leave()

        out.extend(await asyncio.gather(*(one(*e) for e in batch)))
    seconds = time.perf_counter() - t0
    return out, seconds, engine.busy_fraction


# -- simulated mode: honing ------------------------------------------------------------------------


async def honing_rollout(
    plans: Sequence[Plan], slots: int, per_token_s: float
) -> tuple[list[Trajectory], float, float]:
    engine = make_engine(plans, slots, per_token_s)
    config = agent_config()
    tasks = tasks_for(len(plans))
    index = {t.id: i for i, t in enumerate(tasks)}

    async def run(task: AnyTask, sample: int, gate: Gate) -> Trajectory:
        episode = index[task.id] * GROUP + sample
        env = SimEnv(episode, plans[episode])
        return await run_episode(task, env, engine, config, gate=gate, sample=sample)

    cfg = SchedulerConfig(
        n=GROUP,
        engine_slots=slots,
        env_slots=slots,
        max_in_flight=len(plans),
        max_ready_groups=len(tasks),
    )
    async with Scheduler(run, cfg) as sched:
        engine.reset_stats()
        t0 = time.perf_counter()
        groups = await sched.run_all(tasks)
        seconds = time.perf_counter() - t0
        busy = engine.busy_fraction
    return [t for g in groups for t in g.trajectories], seconds, busy


def check(trajectories: list[Trajectory], plans: Sequence[Plan], side: str) -> None:
    """Both sides must have played every episode to its end, turn for turn."""
    assert len(trajectories) == len(plans), (side, len(trajectories))
    for tr in trajectories:
        assert tr.ending is Ending.DONE and tr.success, (side, tr.task_id, tr.ending, tr.detail)
    turns = sorted(tr.steps for tr in trajectories)
    assert turns == sorted(len(p.tokens) for p in plans), side


def simulated(args: argparse.Namespace) -> str:
    plans = make_plans(args.episodes or 512, args.seed)
    per_token_s = args.per_token_ms / 1000
    turns = sum(len(p.tokens) for p in plans)
    tokens = sum(sum(p.tokens) for p in plans)
    print(
        f"workload: {len(plans)} episodes, {turns} turns, {tokens} tokens, "
        f"env mean {sum(sum(p.env_s) for p in plans) / turns * 1000:.0f} ms/step; "
        f"{args.slots} engine slots, {args.slots} sandbox slots, {args.per_token_ms} ms/token"
    )
    sync, sync_s, sync_busy = asyncio.run(sync_rollout(plans, args.slots, per_token_s))
    check(sync, plans, "sync")
    print(f"sync: {sync_s:.1f} s, engine busy {sync_busy:.0%}")
    ours, ours_s, busy = asyncio.run(honing_rollout(plans, args.slots, per_token_s))
    check(ours, plans, "honing")
    print(f"honing: {ours_s:.1f} s, engine busy {busy:.0%}")
    sync_rate, ours_rate = len(plans) / sync_s, len(plans) / ours_s
    return (
        f"async_vs_sync (simulated: scripted engine): sync {sync_rate:.1f} traj/s; "
        f"honing {ours_rate:.1f} traj/s; speedup {ours_rate / sync_rate:.1f}x; "
        f"engine busy {busy:.0%}"
    )


# -- real mode: the hf engine's continuous batching --------------------------------------------


class BusyMeter:
    """The time during which at least one generation is in flight (the engine has work)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.in_flight = 0
        self.busy_s = 0.0
        self._since = 0.0

    @asynccontextmanager
    async def generating(self) -> AsyncIterator[None]:
        if self.in_flight == 0:
            self._since = self.clock()
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.busy_s += self.clock() - self._since


@dataclass
class Side:
    """What one side of the real mode did: its wall time, tokens, the engine's decode steps and
    the seconds during which the engine had work."""

    name: str
    seconds: float
    episodes: int
    tokens: int
    decode_steps: int
    busy_s: float

    @property
    def busy(self) -> float:
        return self.busy_s / self.seconds

    @property
    def rate(self) -> float:
        return self.episodes / self.seconds

    @property
    def mean_batch(self) -> float:
        """Tokens generated per decode step (each sequence's first token comes from its
        prefill, so this slightly overstates the batch of short completions)."""
        return self.tokens / max(1, self.decode_steps)

    def describe(self, slots: int) -> str:
        return (
            f"{self.name}: {self.seconds:.1f} s; {self.rate:.2f} traj/s; "
            f"{self.tokens / self.seconds:.0f} tok/s; engine busy {self.busy:.0%}; "
            f"mean decode batch {self.mean_batch:.1f} of {slots}"
        )


def real_last_line(model: str, sync: Side, ours: Side, slots: int) -> str:
    return (
        f"async_vs_sync (real: hf engine, {model}): sync {sync.rate:.2f} traj/s; "
        f"honing {ours.rate:.2f} traj/s; speedup {ours.rate / sync.rate:.1f}x; "
        f"engine busy {sync.busy:.0%} vs {ours.busy:.0%}; "
        f"mean decode batch {sync.mean_batch:.1f} vs {ours.mean_batch:.1f} of {slots}"
    )


def tiny_llama(tokenizer: Any, hidden: int = 64) -> Any:
    """A 2-layer random Llama for the tokenizer (as tests/conftest.py's `random_llama`)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)  # no dropout in Llama: train mode decodes the same


def make_hf_engine(model: str, slots: int, hidden: int) -> HFEngine:
    """The engine that serves both sides, one after the other: `slots` sequences decoded
    together, no stop token (every completion has exactly the plan's length), seeded."""
    from honing.rollout.models import load_tokenizer, resolve_model

    if model == "tiny":
        tokenizer = load_tokenizer(resolve_model("default"))
        return HFEngine(tiny_llama(tokenizer, hidden), tokenizer, max_batch=slots, eos_ids=(),
                        seed=0)  # fmt: skip
    return HFEngine(model, max_batch=slots, eos_ids=(), seed=0)


class Episodes:
    """The token-level episodes of the real mode: each turn generates the plan's tokens, then
    the env sleeps the plan's latency and answers with a templated tool result."""

    def __init__(self, plans: Sequence[Plan], tokenizer: Any) -> None:
        self.plans = plans
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": f"Task {i // GROUP}, sample {i % GROUP}: work."}],
                add_generation_prompt=True,
                tokenize=False,
            )
            for i in range(len(plans))
        ]
        self.prompts = [list(tokenizer.encode(t, add_special_tokens=False)) for t in texts]
        result = "<|im_end|>\n<|im_start|>user\nresult: ok<|im_end|>\n<|im_start|>assistant\n"
        self.observation: list[int] = list(tokenizer.encode(result, add_special_tokens=False))

    def sampling(self, episode: int, turn: int) -> SamplingParams:
        tokens = self.plans[episode].tokens[turn]
        return SamplingParams(max_new_tokens=tokens, seed=episode * MAX_TURNS + turn)

    def after(self, ids: list[int], generation: Generation, episode: int, turn: int) -> list[int]:
        want = self.plans[episode].tokens[turn]
        assert len(generation.token_ids) == want, (episode, turn, len(generation.token_ids))
        return ids + generation.token_ids + self.observation


async def real_sync(engine: HFEngine, eps: Episodes, env_slots: int) -> Side:
    """verl's synchronous rollout: the whole batch generates, then steps, each at a barrier."""
    env = asyncio.Semaphore(env_slots)
    ids = [list(p) for p in eps.prompts]
    meter = BusyMeter()

    async def generate(e: int, turn: int) -> None:
        async with meter.generating():
            [gen] = await engine.generate([Prompt(token_ids=ids[e])], eps.sampling(e, turn))
        ids[e] = eps.after(ids[e], gen, e, turn)

    async def step(e: int, turn: int) -> None:
        async with env:
            await asyncio.sleep(eps.plans[e].env_s[turn])

    steps0 = engine.stats.decode_steps
    t0 = time.perf_counter()
    running, turn = list(range(len(eps.plans))), 0
    while running:
        await asyncio.gather(*(generate(e, turn) for e in running))  # the generation barrier
        await asyncio.gather(*(step(e, turn) for e in running))  # the env barrier
        turn += 1
        running = [e for e in running if turn < len(eps.plans[e].tokens)]
    seconds = time.perf_counter() - t0
    tokens = sum(sum(p.tokens) for p in eps.plans)
    steps = engine.stats.decode_steps - steps0
    return Side("sync", seconds, len(eps.plans), tokens, steps, meter.busy_s)


async def real_honing(engine: HFEngine, eps: Episodes, slots: int, env_slots: int) -> Side:
    """honing's scheduler: every episode admitted, each on its own through the gate."""
    tasks = tasks_for(len(eps.plans))
    index = {t.id: i for i, t in enumerate(tasks)}
    meter = BusyMeter()

    async def run(task: AnyTask, sample: int, gate: Gate) -> Trajectory:
        e = index[task.id] * GROUP + sample
        ids = list(eps.prompts[e])
        for turn in range(len(eps.plans[e].tokens)):
            async with gate.engine(), meter.generating():
                [gen] = await engine.generate([Prompt(token_ids=ids)], eps.sampling(e, turn))
            ids = eps.after(ids, gen, e, turn)
            async with gate.env():
                await asyncio.sleep(eps.plans[e].env_s[turn])
        return Trajectory(task_id=task.id, domain=task.domain, policy_version=0)

    cfg = SchedulerConfig(
        n=GROUP,
        engine_slots=slots,
        env_slots=env_slots,
        max_in_flight=len(eps.plans),
        max_ready_groups=len(tasks),
    )
    async with Scheduler(run, cfg) as sched:
        steps0 = engine.stats.decode_steps
        t0 = time.perf_counter()
        groups = await sched.run_all(tasks)
        seconds = time.perf_counter() - t0
    delivered = sum(len(g.trajectories) for g in groups)
    assert delivered == len(eps.plans), delivered
    tokens = sum(sum(p.tokens) for p in eps.plans)
    steps = engine.stats.decode_steps - steps0
    return Side("honing", seconds, delivered, tokens, steps, meter.busy_s)


async def real_both(args: argparse.Namespace, plans: Sequence[Plan]) -> tuple[Side, Side]:
    async with make_hf_engine(args.model, args.slots, args.hidden) as engine:
        eps = Episodes(plans, engine.tokenizer)
        warm = Episodes(plans[: args.slots], engine.tokenizer)  # first calls: allocations
        await real_sync(engine, warm, args.env_slots)
        sync = await real_sync(engine, eps, args.env_slots)
        print(sync.describe(args.slots))
        ours = await real_honing(engine, eps, args.slots, args.env_slots)
        print(ours.describe(args.slots))
    return sync, ours


def real(args: argparse.Namespace) -> str:
    tokens_range = (args.min_tokens, args.max_tokens)
    plans = make_plans(args.episodes or 128, args.seed, tokens_range, args.env_median_ms / 1000)
    turns = sum(len(p.tokens) for p in plans)
    env = sorted(s for p in plans for s in p.env_s)
    print(
        f"workload: {len(plans)} episodes, {turns} turns, {sum(sum(p.tokens) for p in plans)} "
        f"tokens; env step median {env[len(env) // 2] * 1000:.0f} ms, mean "
        f"{sum(env) / len(env) * 1000:.0f} ms, max {env[-1] * 1000:.0f} ms; model {args.model}; "
        f"{args.slots} engine slots, {args.env_slots} env slots"
    )
    sync, ours = asyncio.run(real_both(args, plans))
    return real_last_line(args.model, sync, ours, args.slots)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    assert __doc__ is not None
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("real", "simulated"), default="real")
    parser.add_argument(
        "--episodes", type=int, default=None, help="default: 128 (real), 512 (simulated)"
    )
    parser.add_argument("--slots", type=int, default=16,
                        help="engine slots (sequences decoded together); simulated: also B and "
                        "the sandbox slots")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    real_mode = parser.add_argument_group("real mode")
    real_mode.add_argument("--model", default="tiny", help="tiny, default, or a model directory")
    real_mode.add_argument("--hidden", type=int, default=64, help="the tiny model's width")
    real_mode.add_argument("--env-slots", type=int, default=64)
    real_mode.add_argument("--min-tokens", type=int, default=REAL_TOKENS[0])
    real_mode.add_argument("--max-tokens", type=int, default=REAL_TOKENS[1])
    real_mode.add_argument("--env-median-ms", type=float, default=REAL_ENV_MEDIAN_S * 1000)
    simulated_mode = parser.add_argument_group("simulated mode")
    simulated_mode.add_argument("--per-token-ms", type=float, default=1.0)
    args = parser.parse_args(argv)
    if args.episodes is not None and (args.episodes < GROUP or args.episodes % GROUP):
        parser.error(f"--episodes must be a positive multiple of the group size, {GROUP}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(real(args) if args.mode == "real" else simulated(args))


if __name__ == "__main__":
    main()
