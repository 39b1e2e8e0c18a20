"""What acts in an evaluated episode: the `Policy` protocol and the built-in scripted policies.

    class MyPolicy:
        name = "mine"
        async def act(self, context: Context) -> Action | None: ...

A policy is called once per step with the episode so far (`Context`) and answers the next
`Action`, or None to stop acting (an episode stopped before it is over is a failure). Policies
are shared by concurrent episodes, so an episode's state is in its context, never the policy.
Built in, for testing the evaluation and the environments: `reference` plays
`env.reference_actions(task)` in order, then stops; `noop` answers with no tool call.
The evaluator plays a policy through `runner.PolicyPlayer`; a model plays whole episodes
through the agent loop instead (`model.EnginePlayer`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from honing.envs.base import Action, Environment, Observation
from honing.errors import ConfigError
from honing.eval.metrics import Step
from honing.tasks.load import AnyTask


@dataclass(frozen=True)
class Context:
    """An episode so far, as a policy sees it."""

    task: AnyTask
    env: Environment
    observation: Observation  # the latest one, to act on
    steps: Sequence[Step]  # what happened before it


class Policy(Protocol):
    """Chooses the next action of an episode."""

    name: str

    async def act(self, context: Context) -> Action | None:
        """The next action, or None to stop acting."""
        ...


class ReferencePolicy:
    """Submits the task's reference through the environment's tools, then stops."""

    name = "reference"

    async def act(self, context: Context) -> Action | None:
        actions = context.env.reference_actions(context.task)
        done = len(context.steps)
        return actions[done] if done < len(actions) else None


class NoopPolicy:
    """Answers with a message that calls no tool and contains no solution."""

    name = "noop"
    MESSAGE = "I don't know."

    async def act(self, context: Context) -> Action | None:
        return Action(content=self.MESSAGE)


POLICIES: dict[str, Callable[[], Policy]] = {"reference": ReferencePolicy, "noop": NoopPolicy}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        allowed = ", ".join(POLICIES)
        raise ConfigError(f"unknown policy {name!r}; allowed: {allowed}") from None
