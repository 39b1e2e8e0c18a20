"""`honing train` under torchrun: rank 0 runs the loop and leads a sharded learner; others follow.

    launched() follower()             WORLD_SIZE > 1 (torchrun started us); and RANK > 0
    await run_ranks(config, body)     rank 0: `body()` (the loop) as the leader; others: `follow`
    make_learner(model, config)       the loop's learner: a `Leader` when leading, else a Learner
    Leader                            a DistributedLearner that broadcasts each collective call
    follow(learner, channel)          a follower: the leader's calls, in order, until Stop

Each collective call of the leader (update, weights, save, load, logprobs) first sends its
`Command` on a gloo group of its own, where followers wait through rollouts and evaluations
(`IDLE_TIMEOUT`); the call itself runs on the default group. Rank 0 always sends Stop, from a
finally. A follower's error ends its process, which fails rank 0's pending collective (gloo) or
makes torchrun stop the job (nccl; else the default group's timeout). Not covered (refused,
`refuse_unsupported`): per-role team learners, advantages gae and distill, async overlap, a
server engine.
"""

from __future__ import annotations

import contextvars
import logging
import os
import pickle
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from honing.errors import ConfigError, HoningError
from honing.records import Group, Trajectory
from honing.trainer.config import LearnerConfig
from honing.trainer.distributed import DistributedLearner, Placement, init_from_env
from honing.trainer.learner import Learner, LearnerStats
from honing.trainer.result import TrainResult
from honing.trainer.run_config import TrainConfig

log = logging.getLogger(__name__)

IDLE_TIMEOUT = timedelta(hours=24)
"""How long a follower waits for rank 0's next command (rollouts and evaluations run meanwhile)."""
STOP_TIMEOUT = timedelta(seconds=60)
"""How long rank 0 waits to hand Stop over (a follower stuck in a collective never takes it)."""


# -- the commands ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """Build the learner: after the warm start, rank 0's model path and learner config."""

    model: str
    config: LearnerConfig
    seed: int


@dataclass(frozen=True, slots=True)
class Update:
    groups: list[Group]
    risk_weight: float


@dataclass(frozen=True, slots=True)
class Weights:
    """Gather the full weights on rank 0 (a weight sync)."""


@dataclass(frozen=True, slots=True)
class Save:
    directory: Path


@dataclass(frozen=True, slots=True)
class Load:
    directory: Path


@dataclass(frozen=True, slots=True)
class Logprobs:
    """Score trajectories (the start-up check)."""

    trajectories: list[Trajectory]


@dataclass(frozen=True, slots=True)
class Stop:
    """The loop ended: its result, or rank 0's error."""

    result: TrainResult | None
    error: str | None


Command = Start | Update | Weights | Save | Load | Logprobs | Stop


class FollowerStopped(HoningError):
    """Rank 0 failed; this follower stops with it (the message names rank 0's error)."""


class Channel:
    """Rank 0's commands to the other ranks, pickled, on a gloo group of their own (created
    collectively; the ranks of one job trust each other)."""

    def __init__(self) -> None:
        self.group = dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT)

    def send(self, command: Command, timeout: timedelta | None = None) -> None:
        payload = torch.frombuffer(bytearray(pickle.dumps(command)), dtype=torch.uint8)
        for tensor in (torch.tensor([payload.numel()], dtype=torch.long), payload):
            work = dist.broadcast(tensor, src=0, group=self.group, async_op=True)
            assert work is not None
            if timeout is None:
                work.wait()
            else:
                work.wait(timeout)

    def receive(self) -> Command:
        size = torch.zeros(1, dtype=torch.long)
        dist.broadcast(size, src=0, group=self.group)
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
        dist.broadcast(payload, src=0, group=self.group)
        command: Command = pickle.loads(payload.numpy().tobytes())
        return command

    def stop(self, stop: Stop) -> None:
        """Send Stop, waiting at most STOP_TIMEOUT: a follower that died, or is stuck in a
        collective, cannot take it, and rank 0 must not hang on it."""
        try:
            self.send(stop, STOP_TIMEOUT)
        except Exception as e:  # gloo raises its own types for a peer that is gone
            log.warning("sharded learner: the other ranks did not take Stop (%s)", e)


# -- rank 0 ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Lead:
    placement: Placement
    channel: Channel


_LEADING: contextvars.ContextVar[_Lead | None] = contextvars.ContextVar("leading", default=None)


def launched() -> bool:
    """Whether this process is one of several ranks (torchrun sets WORLD_SIZE)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def follower() -> bool:
    """Whether this process is a rank > 0 of several (it follows rank 0's learner)."""
    return launched() and int(os.environ.get("RANK", "0")) > 0


def leading() -> bool:
    """Whether rank 0's loop is running in this context (inside `run_ranks`)."""
    return _LEADING.get() is not None


def refuse_unsupported(config: TrainConfig) -> None:
    """ConfigError for what a sharded learner does not run yet (every rank checks, before any
    collective, so all refuse alike)."""
    refused = []
    if config.team is not None and config.team.adapters == "per_role":
        refused.append("team.adapters: per_role (a learner per role): use team.adapters: shared")
    if config.learner.advantage == "gae":
        refused.append("learner.advantage: gae (the critic is not sharded): use grpo, rloo, ...")
    if config.learner.advantage == "distill":
        refused.append("learner.advantage: distill (honing distill): run it in one process")
    if config.ahead:
        refused.append(f"async.max_staleness: {config.ahead}: use 0 (on-policy)")
    if config.engine.url is not None:
        refused.append(
            f"engine.url ({config.engine.url}): a server's weight sync saves the unsharded model; "
            "drop engine.url (the in-process hf engine syncs a state dict)"
        )
    if refused:
        raise ConfigError(
            "a sharded learner (WORLD_SIZE > 1, started by torchrun) does not run "
            + "; ".join(refused)
            + ". Or run in one process, without torchrun (docs/scaling.md, 'A sharded learner')"
        )


async def run_ranks(config: TrainConfig, body: Callable[[], Awaitable[TrainResult]]) -> TrainResult:
    """Join torchrun's process group; rank 0 runs `body()` (the loop) leading the learner, and
    sends Stop however it ends; every other rank follows and returns rank 0's result."""
    refuse_unsupported(config)
    created = not dist.is_initialized()
    placement = init_from_env()
    try:
        channel = Channel()
        if placement.rank > 0:
            return _follow_run(config, placement, channel)
        token = _LEADING.set(_Lead(placement, channel))
        stop = Stop(None, "rank 0 stopped before the end of its loop")
        try:
            result = await body()
            stop = Stop(result, None)
            return result
        except BaseException as e:
            stop = Stop(None, f"{type(e).__name__}: {e}")
            raise
        finally:
            _LEADING.reset(token)
            channel.stop(stop)
    finally:
        if created:
            dist.destroy_process_group()


def make_learner(model: str, config: LearnerConfig, seed: int) -> Learner:
    """The loop's learner on `model`: under `run_ranks`, a Leader (the followers build their
    ranks of it now); otherwise a one-process Learner."""
    lead = _LEADING.get()
    if lead is None:
        return Learner(model, config)
    lead.channel.send(Start(model, config, seed))
    torch.manual_seed(seed)
    return Leader(model, config, channel=lead.channel, device=lead.placement.device)


class Leader(DistributedLearner):
    """Rank 0's DistributedLearner: each collective call is first sent to the followers."""

    def __init__(
        self, model: str, config: LearnerConfig, *, channel: Channel, device: torch.device
    ) -> None:
        self.channel = channel
        super().__init__(model, config, device=device)

    def update(self, groups: Sequence[Group], *, risk_weight: float = 0.0) -> LearnerStats:
        self.channel.send(Update(list(groups), risk_weight))
        return super().update(groups, risk_weight=risk_weight)

    def weights(self) -> dict[str, torch.Tensor]:
        self.channel.send(Weights())
        return super().weights()

    def save(self, directory: Path) -> None:
        self.channel.send(Save(directory))
        super().save(directory)

    def load(self, directory: Path) -> None:
        self.channel.send(Load(directory))
        super().load(directory)

    def logprobs(self, trajectories: Sequence[Trajectory]) -> list[list[float]]:
        self.channel.send(Logprobs(list(trajectories)))
        return super().logprobs(trajectories)


# -- ranks > 0 ---------------------------------------------------------------------------------


def _follow_run(config: TrainConfig, placement: Placement, channel: Channel) -> TrainResult:
    if config.deterministic:
        torch.use_deterministic_algorithms(True)
    log.info("rank %d of %d: following rank 0's learner", placement.rank, placement.world_size)
    command = channel.receive()
    if isinstance(command, Start):
        torch.manual_seed(command.seed)
        learner = DistributedLearner(command.model, command.config, device=placement.device)
        command = follow(learner, channel)
    if not isinstance(command, Stop):
        raise RuntimeError(f"rank {placement.rank}: expected Start or Stop, got {command!r}")
    if command.result is None:
        raise FollowerStopped(f"rank 0 failed ({command.error}); rank {placement.rank} stops")
    return command.result


def follow(learner: DistributedLearner, channel: Channel) -> Stop:
    """Run rank 0's commands on this rank's `learner` until Stop (returned). An error here
    propagates: the process ends, and rank 0's collective with it fails."""
    while True:
        command = channel.receive()
        if isinstance(command, Stop):
            return command
        if isinstance(command, Update):
            learner.update(command.groups, risk_weight=command.risk_weight)
        elif isinstance(command, Weights):
            learner.weights()
        elif isinstance(command, Save):
            learner.save(command.directory)
        elif isinstance(command, Load):
            learner.load(command.directory)
        elif isinstance(command, Logprobs):
            learner.logprobs(command.trajectories)
        else:
            raise RuntimeError(f"sharded learner: unexpected command {command!r}")
