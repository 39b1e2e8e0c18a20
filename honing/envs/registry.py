"""Which environment runs which domain: `make_env(task.domain, pool, config)`.

Each domain registers its environment class with its `honing.tasks.domains.Domain`; a domain
without one is an error that lists the registered domains.
"""

from __future__ import annotations

from honing.envs.base import EnvConfig, Environment
from honing.sandbox import SandboxPool
from honing.tasks import domains


def environments() -> dict[str, type[Environment]]:
    """The environment class of every registered domain, by domain."""
    return {name: d.env for name, d in domains.registry().items()}  # type: ignore[misc]


def make_env(domain: str, pool: SandboxPool, config: EnvConfig | None = None) -> Environment:
    env: Environment = domains.get(domain).env(pool, config)
    return env
