"""The environment contract: async, gym-like, with typed actions, observations and rewards.

    env = make_env(task.domain, pool, EnvConfig())   # honing.envs.registry
    obs = await env.reset(task)                 # Observation: text for the model + tool schemas
    result = await env.step(Action(...))        # StepResult: observation, reward, done, info
    token = await env.checkpoint(); ...; await env.rollback(token)

Covered: actions in OpenAI's function-calling shape, named reward components, failures from one
taxonomy (`FailureReason`; infrastructure failures flagged, never a reward of 0), the compact
task state an observation renders, and the limits (docs/envs.md, "The contract").
Not covered here: the domains (one file each beside this one) and how a model's text becomes an
`Action` (the agent loop of the rollout layer).
"""

from __future__ import annotations

import abc
import asyncio
import enum
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from honing.config import StrictModel
from honing.errors import HoningError
from honing.risk import RiskEvent, risk_cost
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask


class MalformedAction(HoningError):
    """An assistant message that is not a valid action; the message says what is wrong."""


def untrusted_json(text: str) -> Any:
    """`json.loads` for text a model (or a client) wrote; ValueError, with a one-line reason, when
    it is not JSON.

    json.loads fails on such text in three ways, not only JSONDecodeError: a plain ValueError for
    an integer of over 4,300 digits (Python's int_max_str_digits) and RecursionError for brackets
    nested about 1,000 deep. All three are the writer's malformed output, never a crash.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at character {exc.pos}") from exc
    except ValueError as exc:  # the digit limit; what follows ";" is advice for a Python user
        raise ValueError(str(exc).partition(";")[0]) from exc
    except RecursionError as exc:
        raise ValueError(f"nested too deep ({exc})") from exc


def argument_text(value: object) -> str | None:
    """A text argument as text: a string, or a number given for one (JSON has no other kind of
    scalar a model would mean as text); None for anything else, and for an int too long to
    write out (Python's int_max_str_digits: JSON never carries one, a hand-built action may)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return str(value)
    except ValueError:
        return None


class FailureReason(enum.StrEnum):
    MALFORMED_ACTION = "malformed_action"  # unparsable tool call, bad arguments
    UNKNOWN_TOOL = "unknown_tool"
    TOOL_ERROR = "tool_error"  # the tool ran and reported an error (the model's doing)
    SANDBOX_TIMEOUT = "sandbox_timeout"  # the model's program ran past its limit
    MEMORY_LIMIT = "memory_limit"
    STEP_TIMEOUT = "step_timeout"
    STEP_LIMIT = "step_limit"
    EPISODE_TIMEOUT = "episode_timeout"
    CHECKER_REJECTED = "checker_rejected"  # the answer checker failed on the model's answer
    TAMPERING = "tampering"  # the action tried to forge its verdict (outcome 0: docs/envs.md)
    VALIDATOR_REJECTED = "validator_rejected"  # a team's validator sent the submission back
    VALIDATOR_STOPPED = "validator_stopped"  # a team's validator said stop (honing.rollout.team)
    SANDBOX_ERROR = "sandbox_error"  # infrastructure: the sandbox failed
    VERIFIER_CRASH = "verifier_crash"  # infrastructure: the checker could not run or finish

    @property
    def infrastructure(self) -> bool:
        return self in (FailureReason.SANDBOX_ERROR, FailureReason.VERIFIER_CRASH)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCall(_Record):
    id: str
    name: str
    arguments: dict[str, Any]


class Action(_Record):
    """One assistant message: text and the tool calls it makes."""

    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)

    @classmethod
    def from_openai(cls, message: dict[str, Any]) -> Action:
        """Parse an OpenAI chat message; MalformedAction says which call and what is wrong (or
        that the message is no object, its calls no list, its content no text)."""
        if not isinstance(message, dict):
            raise MalformedAction(f"a message must be an object, not {type(message).__name__}")
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise MalformedAction(f"tool_calls must be a list, not {type(raw_calls).__name__}")
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts: their text
            texts = [
                p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"
            ]
            content = "\n".join(t for t in texts if isinstance(t, str))
        if not isinstance(content, str):
            raise MalformedAction(f"content must be text, not {type(content).__name__}")
        calls = []
        for i, raw in enumerate(raw_calls):
            function = raw.get("function") if isinstance(raw, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise MalformedAction(f"tool call {i}: needs function.name")
            arguments = function.get("arguments", "{}")
            if isinstance(arguments, str):
                try:
                    arguments = untrusted_json(arguments or "{}")
                except ValueError as exc:
                    raise MalformedAction(
                        f"tool call {i} ({function['name']}): arguments are not JSON: {exc}"
                    ) from exc
            if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
                raise MalformedAction(
                    f"tool call {i} ({function['name']}): arguments must be a JSON object"
                )
            call_id = argument_text(raw.get("id")) or f"call_{i}"
            calls.append(ToolCall(id=call_id, name=function["name"],
                                  arguments=arguments))  # fmt: skip
        return cls(content=content, tool_calls=calls)


class TaskState(BaseModel):
    """What an episode is about and where it stands, kept compact."""

    model_config = ConfigDict(extra="forbid")

    goal: str
    constraints: list[str] = Field(default_factory=list)
    actions: list[str] = Field(default_factory=list)  # one line per action taken
    latest_errors: list[str] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list)

    MAX_ACTIONS_SHOWN: ClassVar[int] = 8

    def render_update(self, shown_next_steps: list[str], shown: Sequence[str] = ()) -> str:
        """What changed for the model since an observation that showed `shown_next_steps`: the
        latest errors (less those a text in `shown`, the step's tool results, already contains),
        and the next steps if they changed (the goal, the constraints and the actions are
        already in its transcript); '' when nothing did."""
        parts = []
        errors = [e for e in self.latest_errors if not any(e in text for text in shown)]
        if errors:
            parts.append("Latest errors:\n" + "\n".join(f"- {e}" for e in errors))
        if self.next_steps and self.next_steps != shown_next_steps:
            parts.append("Next steps:\n" + "\n".join(f"- {s}" for s in self.next_steps))
        return "\n\n".join(parts)

    def render(self) -> str:
        """The whole state. The goal comes last: what the episodes of a domain share (its
        constraints, the first next steps) comes first, so the prompts of a batch share their
        longest prefix (the engine and the learner compute a shared prefix once), and the
        question sits next to where the model answers it."""
        parts = []
        if self.constraints:
            parts.append("Constraints:\n" + "\n".join(f"- {c}" for c in self.constraints))
        if self.actions:
            shown = self.actions[-self.MAX_ACTIONS_SHOWN :]
            skipped = len(self.actions) - len(shown)
            lines = ([f"- ({skipped} earlier actions)"] if skipped else []) + [
                f"- {a}" for a in shown
            ]
            parts.append("Done so far:\n" + "\n".join(lines))
        if self.latest_errors:
            parts.append("Latest errors:\n" + "\n".join(f"- {e}" for e in self.latest_errors))
        if self.next_steps:
            parts.append("Next steps:\n" + "\n".join(f"- {s}" for s in self.next_steps))
        parts.append(f"Goal: {self.goal}")
        return "\n\n".join(parts)


class ToolResult(_Record):
    """One tool call's result: `content` is the text the model is shown; `images` (PNG bytes)
    what the tool drew, shown to a vision model only (`AgentConfig.images`) and kept in the
    trajectory store. JSON carries the images as base64."""

    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_bytes="base64",
                              val_json_bytes="base64")  # fmt: skip

    call_id: str
    name: str
    content: str  # what the model is shown
    ok: bool
    images: list[bytes] = Field(default_factory=list, repr=False)  # PNG files' bytes


class Observation(_Record):
    """What the model sees next: the rendered state and the results of its last tool calls.
    `update` is the short form of `text` for an agent that does not restate the whole state
    each turn (`AgentConfig.restate`): only what changed since the previous observation."""

    text: str
    update: str | None = None  # None: no short form (the first observation; `text` is shown)
    tool_results: list[ToolResult] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)  # OpenAI tool schemas


class StepInfo(_Record):
    failure: FailureReason | None = None
    detail: str = ""
    step: int = 0
    step_s: float = 0.0
    tool_s: dict[str, float] = Field(default_factory=dict)  # seconds per tool this step
    logs: list[str] = Field(default_factory=list)  # raw tool output, for the trajectory
    step_limit: bool = False  # this step was the last one allowed and ended the episode
    risks: list[RiskEvent] = Field(default_factory=list)  # the risky actions detected this step

    @property
    def infrastructure(self) -> bool:
        return self.failure is not None and self.failure.infrastructure


class StepResult(_Record):
    observation: Observation
    reward: float
    components: dict[str, float]  # unweighted, by name
    done: bool
    info: StepInfo
    risk: float = 0.0  # the cost of `info.risks` (honing.risk), never part of `reward`


@dataclass
class CallOutcome:
    """What one tool call did: shown to the model as `text` (and `images`, PNG bytes, to a
    vision model), scored by `components`."""

    ok: bool
    text: str
    failure: FailureReason | None = None
    components: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    log: str = ""
    images: list[bytes] = field(default_factory=list, repr=False)
    risks: list[RiskEvent] = field(default_factory=list)  # what the call did that is risky


StepOutput = tuple[dict[str, float], list[ToolResult], StepInfo]
MALFORMING = (FailureReason.MALFORMED_ACTION, FailureReason.UNKNOWN_TOOL)


def malformed(detail: str) -> StepOutput:
    """The step output of an action that did nothing usable: a format penalty, a clear reason."""
    return {"well_formed": 0.0}, [], StepInfo(failure=FailureReason.MALFORMED_ACTION, detail=detail)


class EnvConfig(StrictModel):
    """Limits and reward weights of an environment."""

    max_steps: int = Field(8, ge=1, description="Steps after which the episode ends.")
    step_timeout_s: float = Field(30.0, gt=0, description="Limit of one step, tools included.")
    episode_timeout_s: float = Field(
        300.0,
        gt=0,
        description="Seconds the environment's steps (tools, sandboxes, judges) may take in one "
        "episode, all together. The model's turns are not counted: how long they take depends "
        "on how many episodes share the engine and the host, not on the policy "
        "(agent.generate_timeout_s bounds a turn, as an infrastructure failure).",
    )
    reward_weights: dict[str, float] = Field(
        default_factory=dict,
        description="Weight per reward component; a component not named here weighs 1 if it is "
        "the outcome and 0 otherwise (process rewards are opt-in).",
    )


def tool_schema(name: str, description: str, properties: dict[str, Any],
                required: list[str]) -> dict[str, Any]:  # fmt: skip
    """An OpenAI function-tool schema."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }}  # fmt: skip


class Environment(abc.ABC):
    """Base of every domain environment; subclasses implement `_reset`, `_step`, rollback."""

    domain: str = ""
    OUTCOME = "outcome"

    def __init__(self, pool: SandboxPool, config: EnvConfig | None = None) -> None:
        self.pool = pool  # every domain executes something: programs, queries, calculators
        self.config = config or EnvConfig()
        self.task: AnyTask | None = None
        self.state: TaskState | None = None
        self.steps = 0
        self.done = False
        self._spent = 0.0  # seconds this episode's steps have taken (env.episode_timeout_s)
        self._checkpoints: dict[str, tuple[TaskState, int, bool, list[str], Any]] = {}
        self._shown_next_steps: list[str] = []  # as the last observation showed them

    @property
    @abc.abstractmethod
    def tools(self) -> list[dict[str, Any]]:
        """The OpenAI tool schemas this environment offers."""

    async def reset(self, task: AnyTask) -> Observation:
        if task.domain != self.domain:
            raise HoningError(f"{type(self).__name__} runs {self.domain} tasks, not {task.domain}")
        self.task, self.steps, self.done = task, 0, False
        self._checkpoints.clear()
        self._spent = 0.0
        self.state = TaskState(goal=task.prompt)
        await self._reset(task)
        self._shown_next_steps = list(self.state.next_steps)
        return Observation(text=self.state.render(), tools=self.tools)

    async def step(self, action: Action) -> StepResult:
        return await self._advance(lambda: self._step(action))

    async def reject(self, detail: str) -> StepResult:
        """A model output that is no action at all (an unparsable tool call…): it counts as a
        step, with step()'s limits and bookkeeping, failure MALFORMED_ACTION and a format penalty
        (`well_formed` 0); `detail` says what is wrong and is shown in the task state."""

        async def rejected() -> StepOutput:
            assert self.state is not None
            self.state.actions.append(f"malformed output: {detail[:80]}")
            return malformed(detail)

        return await self._advance(rejected)

    async def _advance(self, run: Callable[[], Awaitable[StepOutput]]) -> StepResult:
        """One step: run the domain's part within the limits, then count and record it."""
        if self.task is None or self.state is None:
            raise HoningError("call reset(task) before step()")
        if self.done:
            raise HoningError("the episode is over; call reset(task) for a new one")
        self.steps += 1
        started = time.monotonic()
        left = self.config.episode_timeout_s - self._spent
        timeout = min(self.config.step_timeout_s, max(left, 0.0))
        try:
            async with asyncio.timeout(timeout):
                components, results, info = await run()
        except TimeoutError:
            episode = left <= self.config.step_timeout_s
            reason = FailureReason.EPISODE_TIMEOUT if episode else FailureReason.STEP_TIMEOUT
            components, results = {}, []
            if episode:
                detail = (f"the episode's {self.config.episode_timeout_s:g} s of steps ran out "
                          "(env.episode_timeout_s; "
                          f"{max(left, 0.0):.1f} s were left for this step)")  # fmt: skip
            else:
                detail = f"no result within the step's {timeout:.1f} s (env.step_timeout_s)"
            info = StepInfo(failure=reason, detail=detail)
            self.done = self.done or episode
        if not self.done and self.steps >= self.config.max_steps:
            self.done = True
            limit: dict[str, Any] = {"step_limit": True}
            if info.failure is None:
                limit["failure"] = FailureReason.STEP_LIMIT
                limit["detail"] = f"the episode's {self.config.max_steps} steps are spent"
            info = info.model_copy(update=limit)
        step_s = time.monotonic() - started
        self._spent += step_s
        info = info.model_copy(update={"step": self.steps, "step_s": step_s})
        if info.failure is None:
            self.state.latest_errors = []
        elif not info.infrastructure and info.detail:
            self.state.latest_errors = [info.detail[:300]]
        update = self.state.render_update(self._shown_next_steps, [r.content for r in results])
        self._shown_next_steps = list(self.state.next_steps)
        observation = Observation(text=self.state.render(), update=update, tool_results=results,
                                  tools=self.tools)  # fmt: skip
        return StepResult(observation=observation, reward=self.weighted(components),
                          components=components, done=self.done, info=info,
                          risk=risk_cost(info.risks))  # fmt: skip

    def weighted(self, components: dict[str, float]) -> float:
        weights = self.config.reward_weights
        return sum(
            value * weights.get(name, 1.0 if name == self.OUTCOME else 0.0)
            for name, value in components.items()
        )

    async def close(self) -> None:  # noqa: B027 - optional hook: most domains hold nothing
        """Release what the episode holds (workspaces…); the environment may be reset again."""

    async def run_calls(
        self, calls: list[ToolCall], run: Callable[[ToolCall], Awaitable[CallOutcome]]
    ) -> StepOutput:
        """Run a step's calls in order, merging their outcomes: components (well_formed drops
        to 0 on a malformed or unknown call), results, the step's failure (an infrastructure
        failure wins and stops the step), time per tool and raw logs. Stops once `done`."""
        components: dict[str, float] = {"well_formed": 1.0}
        results: list[ToolResult] = []
        failure: FailureReason | None = None
        detail = ""
        logs: list[str] = []
        tool_s: dict[str, float] = {}
        risks: list[RiskEvent] = []
        for call in calls:
            out = await run(call)
            risks.extend(out.risks)
            results.append(ToolResult(call_id=call.id, name=call.name, content=out.text, ok=out.ok,
                                      images=list(out.images)))  # fmt: skip
            components.update(out.components)
            tool_s[call.name] = tool_s.get(call.name, 0.0) + out.seconds
            if out.log:
                logs.append(out.log)
            if out.failure in MALFORMING:
                components["well_formed"] = 0.0
            if out.failure is not None and (failure is None or out.failure.infrastructure):
                failure, detail = out.failure, out.text
            if self.done or (out.failure is not None and out.failure.infrastructure):
                break
        return components, results, StepInfo(failure=failure, detail=detail, tool_s=tool_s,
                                             logs=logs, risks=risks)  # fmt: skip

    @abc.abstractmethod
    async def _reset(self, task: AnyTask) -> None: ...

    @abc.abstractmethod
    async def _step(self, action: Action) -> tuple[dict[str, float], list[ToolResult], StepInfo]:
        """Run one action: reward components, tool results, info. May set `self.done`."""

    @abc.abstractmethod
    def reference_actions(self, task: AnyTask) -> list[Action]:
        """The actions that submit `task.reference` through the normal tools (for the
        `reference` policy of the evaluation, and to test that the environment can be solved)."""

    async def checkpoint(self) -> str:
        """A token for the episode as it is now: its task state, step count, whether it is over,
        the next steps its last observation showed, and whatever the domain keeps besides
        (`_save`: files, counters)."""
        if self.state is None:
            raise HoningError("call reset(task) first")
        token = f"checkpoint-{len(self._checkpoints)}"
        self._checkpoints[token] = (
            self.state.model_copy(deep=True),
            self.steps,
            self.done,
            list(self._shown_next_steps),
            await self._save(),
        )
        return token

    async def rollback(self, token: str) -> None:
        """Return to the episode as it was when `token` was taken."""
        saved = self._checkpoints.get(token)
        if saved is None:
            raise HoningError(f"no checkpoint {token!r} in this episode")
        state, steps, done, shown_next_steps, extra = saved
        await self._restore(extra)
        self.state, self.steps, self.done = state.model_copy(deep=True), steps, done
        self._shown_next_steps = list(shown_next_steps)

    def reopen(self) -> None:
        """Let an ended episode take more steps: a team's checks of a submission that ended it
        run on the state it left (honing.rollout.team), always after a `checkpoint`, whose
        `rollback` ends it again."""
        self.done = False

    async def _save(self) -> Any:
        """What the domain keeps besides the task state, for `checkpoint` (default: nothing)."""
        return None

    async def _restore(self, saved: Any) -> None:  # noqa: B027 - optional hook
        """Put back what `_save` returned."""
