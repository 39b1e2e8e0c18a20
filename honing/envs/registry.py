"""Which environment runs which domain: `make_env(task.domain, pool, config)`.

Each domain module registers its class here; a domain without one is an error that lists the
domains that have one.
"""

from __future__ import annotations

from honing.envs.base import EnvConfig, Environment
from honing.envs.code import CodeEnv
from honing.envs.math import MathEnv
from honing.envs.sql import SqlEnv
from honing.envs.tools import ToolsEnv
from honing.errors import ConfigError
from honing.sandbox import SandboxPool

ENVIRONMENTS: dict[str, type[Environment]] = {
    "code": CodeEnv,
    "math": MathEnv,
    "sql": SqlEnv,
    "tools": ToolsEnv,
}


def make_env(domain: str, pool: SandboxPool, config: EnvConfig | None = None) -> Environment:
    try:
        cls = ENVIRONMENTS[domain]
    except KeyError:
        known = ", ".join(sorted(ENVIRONMENTS))
        raise ConfigError(f"no environment for domain {domain!r}; available: {known}") from None
    return cls(pool, config)
