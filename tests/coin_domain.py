"""A toy domain for tests that train (imported as `coin_domain`: tests/ is on sys.path beside the
root conftest): `coin` judges a one-step reply by its length's parity, so that a tiny random
model's samples differ in reward and every group carries a signal."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from honing.domains import play_references
from honing.envs.base import Action, Environment, StepInfo, StepOutput
from honing.tasks import domains
from honing.tasks.domains import Domain
from honing.tasks.load import AnyTask
from honing.tasks.schema import TaskBase


class CoinTask(TaskBase):
    domain: Literal["coin"] = "coin"


class CoinEnv(Environment):
    domain = "coin"

    @property
    def tools(self) -> list[dict[str, Any]]:
        return []

    async def _reset(self, task: AnyTask) -> None:
        pass

    async def _step(self, action: Action) -> StepOutput:
        self.done = True
        return {self.OUTCOME: float(len(action.content) % 2)}, [], StepInfo()

    def reference_actions(self, task: AnyTask) -> list[Action]:
        return [Action(content="a")]


def generate(n: int, seed: int, phrasings: str) -> list[CoinTask]:
    """`synthetic-coin`: n tasks of seed `seed` (phrasings do not apply)."""
    return [CoinTask(id=f"coin/{seed}/{i}", prompt=f"Say something about {seed * 10 + i}.",
                     reference="a") for i in range(n)]  # fmt: skip


@contextmanager
def coin_domain() -> Iterator[Domain]:
    """The coin domain registered (tasks `synthetic-coin`) for the block's duration."""
    domain = domains.register(Domain(name="coin", task=CoinTask, env=CoinEnv,
                                     check=play_references(CoinEnv),
                                     generators={"coin": generate}))  # fmt: skip
    try:
        yield domain
    finally:
        domains.unregister("coin")
