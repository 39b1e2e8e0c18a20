"""What a domain module uses to declare itself: `play_references`, the default reference check,
which plays the environment's own reference actions in the sandbox.

    register(Domain(name="count", task=CountTask, env=CountEnv, check=play_references(CountEnv)))

A task passes when its reference actions end the episode with outcome 1; a sandbox failure
leaves it unverified (the task is not at fault); anything else fails it with the environment's
reason. Not covered: domains whose judge is cheaper run in a batch (code, math, sql register
their own checks from `honing.tasks.quality`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from honing.envs.base import EnvConfig, Environment, StepResult
from honing.errors import SandboxError
from honing.sandbox import SandboxPool
from honing.tasks.domains import ReferenceCheck, ReferenceVerdict

OUTCOME = "outcome"


def play_references(
    env: Callable[[SandboxPool, EnvConfig], Environment], config: EnvConfig | None = None
) -> ReferenceCheck:
    """A reference check that plays each task's `env.reference_actions(task)` in a fresh
    environment of `env` (with `config`, default limits otherwise)."""

    async def one(task: Any, pool: SandboxPool) -> ReferenceVerdict:
        environment = env(pool, config or EnvConfig())
        last: StepResult | None = None
        try:
            await environment.reset(task)
            for action in environment.reference_actions(task):
                if environment.done:
                    break
                last = await environment.step(action)
        except SandboxError as exc:
            return ReferenceVerdict("unverified", f"sandbox error: {exc}")
        finally:
            await environment.close()
        if last is None or not last.done:
            return ReferenceVerdict("failed", "the reference actions do not end the episode")
        if last.info.infrastructure:
            return ReferenceVerdict("unverified", f"{last.info.failure}: {last.info.detail}")
        if last.components.get(OUTCOME, 0.0) < 1.0:
            why = f"{last.info.failure}: {last.info.detail}" if last.info.failure else ""
            return ReferenceVerdict(
                "failed", f"the reference does not solve the task ({why or last.components})"
            )
        return ReferenceVerdict("passed")

    async def check(tasks: Sequence[Any], pool: SandboxPool) -> dict[str, ReferenceVerdict]:
        judged = [t for t in tasks if t.reference is not None]
        # A step's time limit counts its wait for a cell: started all at once, hundreds of
        # episodes would queue past it and a good reference would fail. Two episodes a cell
        # keep every cell busy.
        slots = asyncio.Semaphore(2 * max(1, pool.size))

        async def bounded(task: Any) -> ReferenceVerdict:
            async with slots:
                return await one(task, pool)

        verdicts = await asyncio.gather(*(bounded(t) for t in judged))
        return {t.id: v for t, v in zip(judged, verdicts, strict=True)}

    return check
