"""Asynchronous rollout (honing's scheduler) versus synchronous batched rollout, same workload.

    .venv/bin/python benchmarks/async_vs_sync.py [--episodes 512] [--slots 16] [--per-token-ms 1]

**Workload** (seeded): 512 episodes (64 tasks x 8 samples), each of 1-8 turns; every turn the
model writes 16-256 tokens (a tool call) and the environment takes a step whose latency is
heavy-tailed: lognormal with a median of 15 ms and sigma 1.2 (mean ~31 ms, p99 ~245 ms). The
default scale (1 ms per decode step, 16 slots) makes the whole benchmark take about 2 minutes.

**Both sides run honing's real agent loop** (`agent.run_episode`, chat mode) against the same
`ScriptedEngine` latency model (a continuous-batching server: `--slots` sequences decode together,
one decode step = `--per-token-ms` for every active sequence) and a simulated environment whose
`step` sleeps the sampled latency. Only the scheduling differs:

* **sync** (verl's default shape): batches of B = `--slots` episodes. Each turn the whole batch
  generates together, then all its env steps run, then the next turn: the gate the agent loop is
  given is a barrier, so every phase waits for the slowest episode of the batch, and the next
  batch starts only when every episode of this one is done. Env steps are limited to
  `--slots` sandbox slots.
* **honing**: `Scheduler` with the same engine slots and the same sandbox slots, all 512
  episodes admitted (max_in_flight 512): each episode proceeds on its own, taking an engine slot
  for each generation and an env slot for each step, in (priority, age) order.

Reported: trajectories per second on each side (wall clock, the whole run), the speedup, and
the engine busy fraction during honing's run (the scripted engine's time-weighted slot occupancy,
drain at the end included). The last line is the figure; goal: speedup >= 2.5x, busy >= 90%.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import re
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from honing.envs.base import Action, Observation, StepInfo, StepResult, ToolResult
from honing.records import Ending, Trajectory
from honing.rollout.agent import AgentConfig, Gate, run_episode
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.scripted import LatencyModel, ScriptedEngine
from honing.rollout.scheduler import Scheduler, SchedulerConfig
from honing.tasks.load import AnyTask
from honing.tasks.schema import MathTask

GROUP = 8
MAX_TURNS = 8
TOKENS = (16, 256)
ENV_MEDIAN_S = 0.015
ENV_SIGMA = 1.2
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


def make_plans(episodes: int, seed: int) -> list[Plan]:
    rng = random.Random(seed)
    plans = []
    for _ in range(episodes):
        turns = rng.randint(1, MAX_TURNS)
        plans.append(
            Plan(
                tokens=[rng.randint(*TOKENS) for _ in range(turns)],
                env_s=[rng.lognormvariate(math.log(ENV_MEDIAN_S), ENV_SIGMA) for _ in range(turns)],
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


# -- the synchronous baseline -----------------------------------------------------------------


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


# -- honing -----------------------------------------------------------------------------------


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--slots", type=int, default=16, help="engine slots = sandbox slots = B")
    parser.add_argument("--per-token-ms", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    plans = make_plans(args.episodes, args.seed)
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
    print(
        f"async_vs_sync: sync {sync_rate:.1f} traj/s; honing {ours_rate:.1f} traj/s; "
        f"speedup {ours_rate / sync_rate:.1f}x; engine busy {busy:.0%}"
    )


if __name__ == "__main__":
    main()
