"""Scheduler overhead at scale: 10,000 concurrent episodes with an instant engine and env.

    .venv/bin/python benchmarks/scheduler_scale.py [--episodes 10000] [--steps 8]

What runs (at the default size): 1,250 groups of 8 samples (10,000 trajectories), all in flight
at once (`max_in_flight=10000`). Each episode takes `--steps` steps; one **step** is

    async with gate.engine():                       # the scheduler's priority-aware engine slot
        await engine.generate([prompt], sampling)   # ScriptedEngine, no latency: answers at once
    async with gate.env():                          # the scheduler's env slot
        await env_step()                            # an instant env step: one yield to the loop

and each episode ends by returning a `Trajectory` that the scheduler delivers into its group
(staleness check, group assembly, results queue). The yield in the env step is what makes the
10,000 episodes actually interleave (every real env call yields); with 512 engine slots and 256
env slots, episodes queue for env slots, so the slow path (the priority heap) is exercised, not
only the free-slot fast path. The agent loop itself (chat templates, parsing) is not included:
this measures the scheduler and its gate, not the agent.

Side by side, the same episodes run as a bare `asyncio.gather` with plain `asyncio.Semaphore`s
(no groups, retries, guard or priorities): the floor any asyncio scheduler sits on.

Reported: microseconds per step = the process's CPU time over the run / total steps (setup
excluded), and the process's peak RSS. CPU time, because nothing here waits on anything but the
CPU: on an idle machine it equals wall time, while on a shared one the wall clock also counts other
people's work (the wall time is printed on the line before). The peak RSS after the bare run
is printed too: what the scheduler adds is the difference. The last line is the figure; goal at
`--episodes 100000`: <= 20 us/step, <= 2 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import time
from contextlib import AbstractAsyncContextManager

from honing.domains.math.task import MathTask
from honing.records import Trajectory
from honing.rollout.agent import Gate
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.scheduler import EpisodeRunner, Scheduler, SchedulerConfig
from honing.tasks.load import AnyTask

GROUP = 8
ENGINE_SLOTS = 512
ENV_SLOTS = 256


async def env_step() -> None:
    await asyncio.sleep(0)


def make_runner(engine: ScriptedEngine, steps: int) -> EpisodeRunner:
    prompt = Prompt(messages=[{"role": "user", "content": "go"}])
    sampling = SamplingParams(max_new_tokens=16)

    async def run(task: AnyTask, sample: int, gate: Gate) -> Trajectory:
        for _ in range(steps):
            async with gate.engine():
                await engine.generate([prompt], sampling)
            async with gate.env():
                await env_step()
        return Trajectory(task_id=task.id, domain=task.domain, policy_version=0)

    return run


class _SemaphoreGate:
    def __init__(self) -> None:
        self._engine = asyncio.Semaphore(ENGINE_SLOTS)
        self._env = asyncio.Semaphore(ENV_SLOTS)

    def engine(self) -> AbstractAsyncContextManager[None]:
        return self._engine

    def env(self) -> AbstractAsyncContextManager[None]:
        return self._env


async def bare(tasks: list[MathTask], steps: int) -> float:
    engine = ScriptedEngine(['{"name": "answer", "arguments": {"text": "2"}}'])
    run = make_runner(engine, steps)
    gate = _SemaphoreGate()
    t0 = time.process_time()
    await asyncio.gather(*(run(t, s, gate) for t in tasks for s in range(GROUP)))
    return time.process_time() - t0


async def honing(tasks: list[MathTask], steps: int) -> tuple[float, int]:
    engine = ScriptedEngine(['{"name": "answer", "arguments": {"text": "2"}}'])
    cfg = SchedulerConfig(
        n=GROUP,
        max_in_flight=len(tasks) * GROUP,
        max_pending_groups=len(tasks),
        max_ready_groups=len(tasks),
        engine_slots=ENGINE_SLOTS,
        env_slots=ENV_SLOTS,
    )
    async with Scheduler(make_runner(engine, steps), cfg) as sched:
        t0, w0 = time.process_time(), time.perf_counter()
        groups = await sched.run_all(tasks)
        seconds, wall = time.process_time() - t0, time.perf_counter() - w0
        stats = sched.stats
    delivered = sum(len(g.trajectories) for g in groups)
    assert delivered == len(tasks) * GROUP, delivered
    print(
        f"honing: peak in flight {stats.peak_in_flight}; {stats.episodes_finished} delivered; "
        f"groups {stats.groups_delivered}; wall {wall:.2f} s, CPU {seconds:.2f} s"
    )
    return seconds, stats.peak_in_flight


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)
    tasks = [
        MathTask(id=f"t{i}", prompt="What is 1 + 1?", answer="2")
        for i in range(args.episodes // GROUP)
    ]
    episodes = len(tasks) * GROUP
    steps = episodes * args.steps
    gc.collect()
    bare_s = asyncio.run(bare(tasks, args.steps))
    bare_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"bare asyncio.gather + Semaphores: {bare_s * 1e6 / steps:.1f} us/step; "
        f"peak RSS so far {bare_mb:.0f} MB"
    )
    gc.collect()
    honing_s, _ = asyncio.run(honing(tasks, args.steps))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"scheduler overhead over bare asyncio: {honing_s / bare_s:.2f}x")
    print(
        f"scheduler_scale: {episodes} episodes; {steps} steps; "
        f"{honing_s * 1e6 / steps:.1f} us/step; peak RSS {rss_mb:.0f} MB"
    )


if __name__ == "__main__":
    main()
