"""The scheduler: priority, backpressure, exactly-once delivery through retries, the retry budget,
the deadline guard, staleness, admission control, elastic pools and a clean shutdown.

The runners here are small scripted coroutines (the agent loop is tested on its own); what they
do with the gate is exactly what `run_episode` does: hold a slot around each call.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from honing.domains.math.task import MathTask
from honing.errors import EngineError
from honing.records import Ending, Group, Retry, Trajectory
from honing.rollout.agent import Gate, InfraFailure
from honing.rollout.elastic import Scaling
from honing.rollout.scheduler import (
    MetricsHooks,
    RunnerError,
    Scheduler,
    SchedulerClosed,
    SchedulerConfig,
)
from honing.rollout.slots import PrioritySlots
from honing.sandbox import ExecRequest, SandboxConfig, SandboxPool
from honing.tasks.load import AnyTask


def task(name: str) -> MathTask:
    return MathTask(id=name, prompt="What is 1 + 1?", answer="2")


def traj(t: AnyTask, version: int = 0, **kw: object) -> Trajectory:
    return Trajectory(task_id=t.id, domain=t.domain, policy_version=version, **kw)  # type: ignore[arg-type]


async def until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Wait for a condition (a bound for a hang, not a speed assertion)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


async def spin(turns: int = 20) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


def config(**kw: object) -> SchedulerConfig:
    values: dict[str, object] = {"n": 1, "backoff_s": 0.0, "tick_s": 0.01}
    values.update(kw)
    return SchedulerConfig.model_validate(values)


# -- priority ---------------------------------------------------------------------------------


async def test_slot_waiters_are_served_by_priority_then_age() -> None:
    order: list[str] = []
    release = asyncio.Event()

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        async with gate.engine():
            order.append(t.id)
            if t.id == "blocker":
                await release.wait()
        return traj(t)

    async with Scheduler(run, config(engine_slots=1)) as sched:
        await sched.submit(task("blocker"))
        await until(lambda: order == ["blocker"])
        for name, priority in [
            ("low-a", 0),
            ("high-a", 5),
            ("mid", 1),
            ("high-b", 5),
            ("low-b", 0),
        ]:
            await sched.submit(task(name), priority=priority)
        await until(lambda: sched.stats.engine_waiting == 5)
        release.set()
        sched.finish_submitting()
        groups = [g async for g in sched.results()]
    assert order == ["blocker", "high-a", "high-b", "mid", "low-a", "low-b"]
    assert len(groups) == 6


async def test_pending_groups_start_by_priority_then_age() -> None:
    started: list[str] = []
    release = asyncio.Event()

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        started.append(t.id)
        await release.wait()
        return traj(t)

    async with Scheduler(run, config(max_in_flight=1)) as sched:
        await sched.submit(task("first"))
        for name, priority in [("b", 0), ("a", 2), ("c", 0), ("d", 2)]:
            await sched.submit(task(name), priority=priority)
        assert sched.stats.pending_groups == 4
        release.set()
        sched.finish_submitting()
        assert len(await _collect(sched)) == 5
    assert started == ["first", "a", "d", "b", "c"]


def test_priority_slots_give_back_a_slot_handed_to_a_cancelled_waiter() -> None:
    async def main() -> None:
        slots = PrioritySlots("engine", 1)
        assert slots.try_acquire()
        waiter = asyncio.ensure_future(slots.wait(0, 1))
        other = asyncio.ensure_future(slots.wait(0, 2))
        await spin()
        slots.release()  # handed to `waiter`...
        waiter.cancel()  # ...which is cancelled before it resumes: the slot moves on to `other`
        await spin()
        assert other.done() and slots.in_use == 1 and slots.waiting == 0
        slots.release()
        assert slots.in_use == 0 and slots.try_acquire()
        slots.resize(0)  # shrinking below the holders: nobody new gets in until they leave
        late = asyncio.ensure_future(slots.wait(0, 3))
        slots.release()
        await spin()
        assert not late.done() and slots.in_use == 0
        slots.resize(1)
        await spin()
        assert late.done() and slots.in_use == 1

    asyncio.run(main())


# -- backpressure and admission ---------------------------------------------------------------


async def test_submit_awaits_while_the_pending_queue_is_full() -> None:
    release = asyncio.Event()

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        await release.wait()
        return traj(t)

    async with Scheduler(run, config(max_in_flight=1, max_pending_groups=2)) as sched:
        for i in range(3):  # one starts, two wait
            await sched.submit(task(f"t{i}"))
        blocked = asyncio.ensure_future(sched.submit(task("t3")))
        await spin()
        assert not blocked.done()
        assert sched.stats.pending_groups == 2
        release.set()
        await blocked
        sched.finish_submitting()
        groups = [g async for g in sched.results()]
    assert sorted(g.task_id for g in groups) == ["t0", "t1", "t2", "t3"]


async def test_no_new_group_starts_while_finished_groups_wait_unconsumed() -> None:
    calls: list[str] = []

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        calls.append(t.id)
        return traj(t)

    async with Scheduler(run, config(max_ready_groups=2)) as sched:
        for i in range(5):
            await sched.submit(task(f"t{i}"))
            await spin()
        assert sched.stats.ready_groups == 2
        assert calls == ["t0", "t1"]  # the consumer lags: generation stops
        sched.finish_submitting()
        got = [g.task_id async for g in sched.results()]
    assert got == ["t0", "t1", "t2", "t3", "t4"]
    assert sched.stats.admission_holds > 0


async def test_groups_start_no_further_ahead_of_the_trainer_than_the_staleness_bound() -> None:
    version = 0

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        return traj(t, version)

    cfg = config(max_staleness=1, groups_per_version=2)
    async with Scheduler(run, cfg, version=lambda: version) as sched:
        for i in range(10):
            await sched.submit(task(f"t{i}"))
        await until(lambda: sched.stats.groups_delivered == 4)
        await spin()
        assert sched.stats.groups_delivered == 4  # (0 + 1 + 1) * 2 groups at version 0
        version = 2  # the trainer moved on two updates: two more versions' worth may start
        await until(lambda: sched.stats.groups_delivered == 8)
        await spin()
        assert sched.stats.groups_delivered == 8
        assert sched.stats.pending_groups == 2


# -- retries ----------------------------------------------------------------------------------


async def test_every_trajectory_is_delivered_exactly_once_through_retries() -> None:
    rng = random.Random(7)
    fail_first = {(f"t{i}", s): rng.choice([0, 0, 1, 2]) for i in range(40) for s in range(4)}
    attempts: Counter[tuple[str, int]] = Counter()

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        key = (t.id, sample)
        attempts[key] += 1
        async with gate.engine():
            await asyncio.sleep(0)
        if attempts[key] <= fail_first[key]:
            if attempts[key] == 1:
                raise InfraFailure("generate", "EngineError: server closed the connection")
            raise EngineError("raw engine failure, not wrapped")  # counts as infrastructure too
        async with gate.env():
            await asyncio.sleep(0)
        return traj(t, detail=f"{t.id}/{sample}")

    tasks = [task(f"t{i}") for i in range(40)]
    async with Scheduler(run, config(n=4, engine_slots=3, env_slots=2, max_in_flight=24)) as sched:
        groups = await sched.run_all(tasks)
        stats = sched.stats
    assert [g.task_id for g in groups] == [t.id for t in tasks]
    seen = Counter(tr.detail for g in groups for tr in g.trajectories)
    assert seen == Counter(f"{k[0]}/{k[1]}" for k in fail_first)  # each exactly once
    for g in groups:
        assert [tr.sample for tr in g.trajectories] == [0, 1, 2, 3]
        assert {tr.group_id for tr in g.trajectories} == {g.group_id}
        for tr in g.trajectories:
            expected = fail_first[(g.task_id, tr.sample)]
            assert [r.attempt for r in tr.retries] == list(range(1, expected + 1))
            assert tr.ending is Ending.DONE
    assert stats.retries == sum(fail_first.values())
    assert stats.retries_by_cause["generate EngineError"] == sum(
        1 for v in fail_first.values() if v >= 1
    )
    assert stats.retries_by_cause["episode EngineError"] == sum(
        1 for v in fail_first.values() if v == 2
    )
    assert stats.episodes_finished == 160 and stats.in_flight == 0
    assert stats.episodes_started == 160 + stats.retries


async def test_a_spent_retry_budget_delivers_a_flagged_infra_error_with_every_cause() -> None:
    attempts = 0
    seen: list[Retry] = []

    class Hooks(MetricsHooks):
        def on_retry(self, task_id: str, retry: Retry) -> None:
            seen.append(retry)

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        nonlocal attempts
        attempts += 1
        raise InfraFailure("step", f"SandboxError: cell crashed (attempt {attempts})")

    async with Scheduler(run, config(retries=2, backoff_s=0.001), hooks=Hooks()) as sched:
        [group] = await sched.run_all([task("t")])
    [tr] = group.trajectories
    assert attempts == 3
    assert tr.ending is Ending.INFRA_ERROR and tr.infrastructure_failed
    assert tr.failure == "infra:step"
    assert "cell crashed (attempt 3)" in tr.detail and "budget of 2" in tr.detail
    assert [(r.attempt, r.stage) for r in tr.retries] == [(1, "step"), (2, "step")]
    assert [r.cause for r in tr.retries] == [
        "SandboxError: cell crashed (attempt 1)",
        "SandboxError: cell crashed (attempt 2)",
    ]
    assert tr.retries == seen
    assert sched.stats.infra_errors == 1


async def test_model_failures_are_delivered_as_they_are_and_never_retried() -> None:
    calls = 0

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        nonlocal calls
        calls += 1
        return traj(t, ending=Ending.STEP_LIMIT, failure="malformed_action", reward=0.0)

    async with Scheduler(run, config(n=3)) as sched:
        [group] = await sched.run_all([task("t")])
    assert calls == 3
    assert [tr.failure for tr in group.trajectories] == ["malformed_action"] * 3
    assert all(tr.retries == [] and tr.ending is Ending.STEP_LIMIT for tr in group.trajectories)
    assert sched.stats.retries == 0


async def test_a_runner_bug_is_raised_not_retried_or_else_delivered_flagged() -> None:
    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        raise KeyError("a bug")

    async with Scheduler(run, config()) as sched:
        with pytest.raises(RunnerError, match="KeyError") as info:
            await sched.run_all([task("t")])
        assert isinstance(info.value.__cause__, KeyError)
        with pytest.raises(SchedulerClosed):
            await sched.submit(task("u"))
    async with Scheduler(run, config(on_runner_error="deliver")) as sched:
        [group] = await sched.run_all([task("t")])
    [tr] = group.trajectories
    assert tr.ending is Ending.INFRA_ERROR and tr.failure == "infra:runner" and tr.retries == []


# -- the deadline guard -----------------------------------------------------------------------


async def test_the_guard_frees_the_slot_of_a_hung_runner_that_ignores_cancellation() -> None:
    forever = asyncio.Event()

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        async with gate.engine():
            if t.id == "hung":
                try:
                    await forever.wait()
                except asyncio.CancelledError:
                    await forever.wait()  # ignores the first cancellation, holds on
        return traj(t)

    cfg = config(engine_slots=1, episode_s=0.05, guard_grace_s=0.0, retries=0)
    async with Scheduler(run, cfg) as sched:
        await sched.submit(task("hung"))
        await until(lambda: sched.stats.guard_timeouts == 1)
        await sched.submit(task("next"))  # needs the only engine slot, which "hung" still holds
        sched.finish_submitting()
        groups = {g.task_id: g.trajectories[0] async for g in sched.results()}
        assert sched.stats.guard_timeouts == 1
    assert groups["hung"].ending is Ending.TIMEOUT
    assert groups["hung"].failure == "episode_deadline"
    assert "slots released" in groups["hung"].detail
    assert groups["next"].ending is Ending.DONE


# -- staleness --------------------------------------------------------------------------------


@dataclass
class Trainer:
    version: int = 0
    calls: Counter[int] = field(default_factory=Counter)


async def test_a_stale_trajectory_is_reissued_and_recorded() -> None:
    trainer = Trainer()

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        trainer.calls[sample] += 1
        started = trainer.version
        if sample == 0 and trainer.calls[sample] == 1:
            trainer.version += 3  # three updates land while this episode runs
        return traj(t, started)

    cfg = config(n=2, max_staleness=1)
    async with Scheduler(run, cfg, version=lambda: trainer.version) as sched:
        [group] = await sched.run_all([task("t")])
    first, second = group.trajectories
    assert trainer.calls == Counter({0: 2, 1: 1})
    assert [r.stage for r in first.retries] == ["stale"]
    assert "3 behind" in first.retries[0].cause
    assert first.policy_version == 3 and first.ending is Ending.DONE
    assert second.retries == []
    assert sched.stats.stale_drops == 1 and sched.stats.max_staleness_seen == 3


async def test_a_trajectory_still_stale_after_its_reissues_is_delivered_flagged() -> None:
    trainer = Trainer()

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        started = trainer.version
        trainer.version += 2
        return traj(t, started)

    cfg = config(max_staleness=0, stale_reissues=1)
    async with Scheduler(run, cfg, version=lambda: trainer.version) as sched:
        [group] = await sched.run_all([task("t")])
    [tr] = group.trajectories
    assert tr.ending is Ending.STALE and tr.failure == "stale"
    assert [r.stage for r in tr.retries] == ["stale"]
    assert sched.stats.stale_drops == 2


# -- elastic pools ----------------------------------------------------------------------------


class FakeWorkers:
    def __init__(self, size: int) -> None:
        self._size = size
        self.history: list[int] = []

    @property
    def size(self) -> int:
        return self._size

    async def resize(self, n: int) -> None:
        await asyncio.sleep(0)
        self.history.append(n)
        self._size = n


async def test_elastic_workers_grow_with_the_queue_and_shrink_when_idle() -> None:
    workers = FakeWorkers(1)
    release = asyncio.Event()
    holding = 0
    scaled: list[tuple[str, int, int]] = []

    class Hooks(MetricsHooks):
        def on_scale(self, pool: str, old: int, new: int) -> None:
            scaled.append((pool, old, new))

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        nonlocal holding
        async with gate.engine():
            holding += 1
            await release.wait()
        return traj(t)

    scaling = Scaling(min_workers=1, max_workers=4, slots_per_worker=2, cooldown_s=0.0)
    cfg = config(n=7, engine_scaling=scaling)
    async with Scheduler(run, cfg, engine_workers=workers, hooks=Hooks()) as sched:
        assert sched.stats.engine_slots == 2
        await sched.submit(task("t"))
        await until(lambda: holding == 7)  # 1 worker -> 4 (ceil(5 waiting / 2) more)
        assert workers.size == 4 and sched.stats.engine_slots == 8
        assert workers.history == [4]
        release.set()
        sched.finish_submitting()
        [group] = [g async for g in sched.results()]
        await until(lambda: workers.size == 1)  # idle: back down one worker at a time
        assert sched.stats.engine_slots == 2
    assert workers.history == [4, 3, 2, 1]
    assert scaled == [("engine", 1, 4), ("engine", 4, 3), ("engine", 3, 2), ("engine", 2, 1)]
    assert len(group.trajectories) == 7


async def test_elastic_workers_stay_within_their_bounds() -> None:
    workers = FakeWorkers(9)  # starts above max: clamped on entry
    release = asyncio.Event()

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        async with gate.env():
            await release.wait()
        return traj(t)

    scaling = Scaling(min_workers=2, max_workers=3, slots_per_worker=1, cooldown_s=0.0)
    async with Scheduler(run, config(n=10, env_scaling=scaling), env_workers=workers) as sched:
        assert workers.size == 3
        await sched.submit(task("t"))
        await until(lambda: sched.stats.env_waiting == 7)
        await spin(50)
        assert workers.size == 3 and sched.stats.env_slots == 3
        release.set()
        sched.finish_submitting()
        assert len(await _collect(sched)) == 1
        await until(lambda: sched.stats.in_flight == 0 and workers.size == 2)
        await spin(50)
        assert workers.size == 2


async def test_a_real_sandbox_pool_grows_and_shrinks_as_env_workers(
    make_config: Callable[..., SandboxConfig],
) -> None:
    release = asyncio.Event()
    holding = 0

    async with SandboxPool(make_config(pool_size=1)) as pool:

        async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
            nonlocal holding
            async with gate.env():
                holding += 1
                await release.wait()
                result = await pool.run(ExecRequest(code=f"print({sample} * 7)"))
            return traj(t, detail=result.stdout)

        scaling = Scaling(min_workers=1, max_workers=3, slots_per_worker=1, cooldown_s=0.0)
        async with Scheduler(run, config(n=4, env_scaling=scaling), env_workers=pool) as sched:
            await sched.submit(task("t"))
            await until(lambda: holding == 3)  # 3 cells, 3 slots; the fourth sample queues
            assert pool.size == 3 and len(pool._cells) == 3 and sched.stats.env_waiting == 1
            release.set()
            sched.finish_submitting()
            [group] = await _collect(sched)
            await until(lambda: pool.size == 1 and len(pool._cells) == 1)
            assert sched.stats.env_slots == 1
        assert [tr.detail for tr in group.trajectories] == ["0\n", "7\n", "14\n", "21\n"]
        assert (await pool.run(ExecRequest(code="print('ok')"))).stdout == "ok\n"


# -- shutdown ---------------------------------------------------------------------------------


async def test_leaving_the_context_cancels_and_awaits_everything() -> None:
    forever = asyncio.Event()
    entered = 0
    finished_cleanup = 0

    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        nonlocal entered, finished_cleanup
        entered += 1
        try:
            if t.id == "failing":
                raise InfraFailure("setup", "WorkerLost: actor died")
            if t.id == "stubborn":
                try:
                    await forever.wait()
                except asyncio.CancelledError:
                    await forever.wait()  # the second cancellation ends it
            async with gate.engine():
                await forever.wait()
            return traj(t)
        finally:
            finished_cleanup += 1

    before = asyncio.all_tasks()
    sched = Scheduler(run, config(n=4, engine_slots=2, backoff_s=60.0))
    async with sched:
        for name in ("hanging", "failing", "stubborn"):
            await sched.submit(task(name))
        await until(lambda: entered == 12 and sched.stats.engine_waiting == 2)
    assert asyncio.all_tasks() == before
    assert finished_cleanup == entered  # every runner reached its finally
    assert sched.stats.engine_slots == 2
    with pytest.raises(SchedulerClosed):
        await sched.submit(task("late"))


async def test_a_consumer_waiting_on_results_is_released_by_shutdown() -> None:
    async def run(t: AnyTask, sample: int, gate: Gate) -> Trajectory:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with Scheduler(run, config()) as sched:
        await sched.submit(task("t"))
        consumer = asyncio.ensure_future(_collect(sched))
        await spin()
        assert not consumer.done()
    assert await consumer == []


async def _collect(sched: Scheduler) -> list[Group]:
    return [g async for g in sched.results()]
