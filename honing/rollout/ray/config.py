"""Configuration of the Ray backend and joining a Ray cluster.

`RayConfig.address` says which cluster: none (start a local one in this process, as the tests
do), `"auto"` (join the cluster this machine belongs to, after `ray start`), or
`"ray://head:10001"` (Ray Client). Each worker set (engines, sandboxes) has its own
`WorkerSetConfig`: how many actors, and what each one asks of a node — CPUs, GPUs, custom
resources — which is how Ray decides where it runs (see docs/scaling.md).
"""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import Field

from honing.config import StrictModel
from honing.errors import ConfigError

log = logging.getLogger(__name__)


class WorkerSetConfig(StrictModel):
    """One kind of worker (engine or sandbox): its count and its resource request per actor."""

    count: int = Field(1, ge=0, description="Actors started at first; the scheduler may resize.")
    num_cpus: float = Field(1.0, ge=0, description="CPUs (Ray logical) each actor reserves.")
    num_gpus: float = Field(0.0, ge=0, description="GPUs each actor reserves (fractions share).")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources each actor needs, e.g. {'sandbox': 1} so sandbox "
        "actors only land on nodes started with `ray start --resources '{\"sandbox\": 8}'`.",
    )
    strategy: Literal["default", "spread"] = Field(
        "default",
        description="'default': Ray packs actors where resources are free; 'spread': one node "
        "after another, so a node loss costs the fewest workers.",
    )
    max_concurrency: int = Field(
        1000, ge=1, description="Calls one actor serves at once (engines batch across them)."
    )
    start_timeout_s: float = Field(
        300.0,
        gt=0,
        description="Limit for an actor to be placed and started; past it, the resource "
        "request cannot be met (see `ray status`) or the worker failed to start.",
    )

    def actor_options(self, name: str) -> dict[str, object]:
        """The `ActorClass.options(...)` for one actor of this set."""
        return {
            "num_cpus": self.num_cpus,
            "num_gpus": self.num_gpus,
            "resources": dict(self.resources),
            "scheduling_strategy": "SPREAD" if self.strategy == "spread" else "DEFAULT",
            "max_concurrency": self.max_concurrency,
            "max_restarts": 0,  # honing replaces dead actors itself, anywhere with room
            "name": name,
        }


class RayConfig(StrictModel):
    """`backend: ray`: which cluster, and the engine and sandbox worker sets."""

    address: str | None = Field(
        None,
        description="None: start a local Ray instance in this process; 'auto': join the "
        "cluster of this machine (`ray start --head` or `--address` first); 'ray://host:10001': "
        "connect through Ray Client.",
    )
    namespace: str = Field("honing", description="Ray namespace of honing's actors.")
    num_cpus: int | None = Field(
        None, ge=1, description="Local instance only: logical CPUs (default: the machine's)."
    )
    resources: dict[str, float] = Field(
        default_factory=dict, description="Local instance only: custom resources of the node."
    )
    engine: WorkerSetConfig = Field(
        default_factory=WorkerSetConfig, description="Engine workers (one engine per actor)."
    )
    env: WorkerSetConfig = Field(
        default_factory=WorkerSetConfig,
        description="Sandbox workers (one SandboxPool per actor, many environments each).",
    )


def connect(config: RayConfig) -> None:
    """Join (or start) the Ray cluster of `config`; a no-op when Ray is already initialised.

    Blocks for seconds while a local instance starts: call it before the event loop runs, or
    through `asyncio.to_thread`.
    """
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("backend ray needs Ray: pip install 'honing[ray]'") from exc

    if ray.is_initialized():
        return
    local = config.address is None
    if not local and (config.num_cpus is not None or config.resources):
        raise ConfigError(
            "ray.num_cpus and ray.resources describe a local instance; with ray.address set, "
            "give the node its resources with `ray start --num-cpus ... --resources ...`"
        )
    try:
        ray.init(
            address=config.address,
            namespace=config.namespace,
            num_cpus=config.num_cpus if local else None,
            resources=dict(config.resources) if local and config.resources else None,
            include_dashboard=False,
            log_to_driver=True,
        )
    except ConnectionError as exc:
        raise ConfigError(
            f"cannot reach the Ray cluster at ray.address={config.address!r}: {exc}; start it "
            "with `ray start --head` (or leave ray.address unset for a local instance)"
        ) from exc
    log.info("ray: connected (%s)", config.address or "local instance")
