"""The agent loop: one episode of a model acting in an environment, recorded token for token.

    trajectory = await run_episode(task, env, engine, AgentConfig(sampling=SamplingParams()))

    reset (setup deadline) → loop: render → generate (engine slot, generate deadline) → parse the
    tool calls → env.step, or env.reject for a malformed output (env slot, step deadline) → append
    the observation → until the environment is done, `max_turns`, or `max_total_tokens`
    → close the environment (scoring deadline), always.

Covered: token engines (token-faithful) and chat engines (the tools' images as content parts
when `AgentConfig.images`; each observation turn keeps its images for the store); a malformed
output is the model's failure (rejected by the environment, never retried); infrastructure
failures raise `InfraFailure` for the scheduler; nested deadlines (docs/rollout.md, "The modules
in detail"). Not covered: scheduling many episodes, retries, staleness (`honing.rollout.scheduler`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, TypeVar

from honing.config import StrictModel
from honing.envs.base import (
    Action,
    FailureReason,
    MalformedAction,
    Observation,
    StepResult,
)
from honing.errors import (
    ConfigError,
    DeadlineExceeded,
    EngineError,
    HoningError,
    SandboxError,
    WorkerLost,
)
from honing.records import Ending, Trajectory, Turn
from honing.rollout.chat import (
    ChatFormat,
    Message,
    Transcript,
    first_messages,
    message_text,
    observation_messages,
    openai_tool_calls,
    parse_action,
)
from honing.rollout.engines.base import Engine, FinishReason, Generation, Prompt, SamplingParams
from honing.tasks.load import AnyTask

T = TypeVar("T")
INFRASTRUCTURE = (EngineError, WorkerLost, SandboxError, DeadlineExceeded)


class Gate(Protocol):
    """The scheduler's slots, held only around each call (not while waiting on anything else)."""

    def engine(self) -> AbstractAsyncContextManager[None]:
        """Around each engine.generate call."""
        ...

    def env(self) -> AbstractAsyncContextManager[None]:
        """Around each env.reset / env.step / env.reject / env.close."""
        ...


class _OpenGate:
    @asynccontextmanager
    async def _free(self) -> AsyncIterator[None]:
        yield

    def engine(self) -> AbstractAsyncContextManager[None]:
        return self._free()

    def env(self) -> AbstractAsyncContextManager[None]:
        return self._free()


OPEN_GATE: Gate = _OpenGate()  # no limits


class EnvLike(Protocol):
    """What the agent needs of an environment (a honing Environment, or a remote proxy)."""

    async def reset(self, task: AnyTask) -> Observation: ...

    async def step(self, action: Action) -> StepResult: ...

    async def reject(self, detail: str) -> StepResult: ...

    async def close(self) -> None: ...

    @property
    def done(self) -> bool: ...


class Deadlines(StrictModel):
    """Nested, always enforced. The generate and step deadlines are outer guards beyond the
    environment's and engine's own limits; slot waits count only against the episode."""

    setup_s: float = 120.0  # env.reset
    generate_s: float = 600.0  # one engine.generate call
    step_s: float = 300.0  # one env.step
    scoring_s: float = 120.0  # env.close and final scoring
    episode_s: float = 3600.0  # the whole episode, waits included


class AgentConfig(StrictModel):
    """How the agent plays an episode."""

    sampling: SamplingParams
    max_turns: int = 8
    max_total_tokens: int = 4096  # prompt + all turns; beyond it: Ending.CONTEXT_LIMIT
    system_prompt: str | None = None  # None: honing's default tool-use system prompt
    restate: bool = True  # each observation shows the whole task state; False: what changed
    # Show the tools' images (the structure domain's renders) to the model as image content
    # parts: for a vision model behind a chat engine (openai without tokens_of). Off, and always
    # for token engines, the model sees text only; the store keeps the images either way.
    images: bool = False
    deadlines: Deadlines = Deadlines()


class InfraFailure(HoningError):
    """An episode failed for an infrastructure reason; the scheduler may retry it.

    `stage` is setup | generate | step | scoring; `cause` the exception type and message;
    `trajectory` the episode as far as it got (for a record when retries run out)."""

    def __init__(self, stage: str, cause: str, trajectory: Trajectory | None = None) -> None:
        super().__init__(f"{stage}: {cause}")
        self.stage = stage
        self.cause = cause
        self.trajectory = trajectory

    def __reduce__(self) -> tuple[type[InfraFailure], tuple[str, str, Trajectory | None]]:
        return type(self), (self.stage, self.cause, self.trajectory)  # picklable (Ray)


async def run_episode(
    task: AnyTask,
    env: EnvLike,
    engine: Engine,
    config: AgentConfig,
    *,
    gate: Gate = OPEN_GATE,
    sample: int = 0,
    group_id: str = "",
    on_step: Callable[[Observation, Action, StepResult], None] | None = None,
) -> Trajectory:
    """Play one episode of `task` (see the module docstring); always closes `env`."""
    return await _Episode(task, env, engine, config, gate, on_step, sample, group_id).run()


async def guarded(
    play: Callable[[], Awaitable[None]],
    deadline_s: float,
    end: Callable[[Ending, str | None, str], None],
    close: Callable[[], Awaitable[None]],
    finish: Callable[[], Trajectory],
) -> Trajectory:
    """An episode's frame: `play` within the episode deadline (past it, `end` ends the episode as
    TIMEOUT), then `close`, always; the `finish`ed trajectory, or the InfraFailure raised with
    it (for the scheduler's record when retries run out)."""
    try:
        try:
            async with asyncio.timeout(deadline_s) as deadline:
                await play()
        except TimeoutError:
            if not deadline.expired():
                raise
            end(Ending.TIMEOUT, "episode_deadline",
                f"the episode deadline of {deadline_s:g}s passed")  # fmt: skip
    except BaseException as exc:
        if isinstance(exc, InfraFailure) and exc.trajectory is None:
            exc.trajectory = finish()
        with contextlib.suppress(Exception):  # the episode's own failure is what counts
            await close()
        raise
    try:
        await close()
    except InfraFailure as exc:
        exc.trajectory = finish()
        raise
    return finish()


class _Episode:
    def __init__(self, task: AnyTask, env: EnvLike, engine: Engine, config: AgentConfig,
                 gate: Gate, on_step: Callable[[Observation, Action, StepResult], None] | None,
                 sample: int, group_id: str) -> None:  # fmt: skip
        self.task, self.env, self.engine, self.config = task, env, engine, config
        self.gate, self.on_step = gate, on_step
        # Which context this is among several of one episode (a team's roles, a validator's K
        # verdicts): part of each turn's seed, so that seeded contexts do not sample alike.
        self.seat = ""
        dataset = task.metadata.get("dataset")
        self.traj = Trajectory(
            task_id=task.id, domain=task.domain, sample=sample, group_id=group_id,
            id=uuid.uuid4().hex, tags=list(task.tags),
            dataset=dataset if isinstance(dataset, str) else "", started_at=time.time(),
            temperature=config.sampling.temperature,
        )  # fmt: skip
        self.tokens = engine.accepts_tokens
        if config.images and self.tokens:
            raise ConfigError(
                f"agent images: true needs a chat engine serving a vision model, but engine "
                f"{engine.name} takes token ids (a text-only transcript); turn images off, or use "
                "an openai engine without tokens_of"
            )
        self.transcript: Transcript | None = None
        self.messages: list[Message] = []  # chat engines
        self.tools: list[dict[str, object]] = []
        self.chat_used = 0  # chat engines: prompt + completion tokens of the latest generation
        self.call_s = 0.0  # seconds of the latest call (its slot wait not counted)

    async def run(self) -> Trajectory:
        started = time.monotonic()
        return await guarded(self._play, self.config.deadlines.episode_s, self._end, self._close,
                             lambda: self._finish(started))  # fmt: skip

    def _finish(self, started: float) -> Trajectory:
        traj = self.traj
        versions = [t.version for t in traj.turns if t.role == "assistant" and t.version >= 0]
        traj.policy_version = min(versions, default=-1)
        traj.total_s = time.monotonic() - started
        return traj

    # -- the loop -----------------------------------------------------------------------------

    async def _play(self) -> None:
        setup_s = self.config.deadlines.setup_s
        observation = await self._call("setup", setup_s, self.gate.env,
                                       lambda: self.env.reset(self.task))  # fmt: skip
        self._start(observation)
        for turn in range(self.config.max_turns):
            sampling = self._budget()
            if sampling is None:
                return self._end(Ending.CONTEXT_LIMIT, "context_limit",
                                 f"{self.config.max_total_tokens} tokens used up")  # fmt: skip
            action, malformed = self._act(await self._generate(sampling), turn)
            result = await self._step(action, malformed)
            if result.info.infrastructure:
                assert result.info.failure is not None
                raise InfraFailure("step", f"{result.info.failure.value}: {result.info.detail}")
            if self.on_step is not None:
                self.on_step(observation, action, result)
            fits = self._observe(result)
            observation = result.observation
            if result.done:
                return self._end_by(result)
            if not fits:
                return self._end(Ending.CONTEXT_LIMIT, "context_limit",
                                 "the observation does not fit in max_total_tokens")  # fmt: skip
        self._end(Ending.STEP_LIMIT, "max_turns", f"{self.config.max_turns} turns played")

    async def _step(self, action: Action, malformed: str | None) -> StepResult:
        seconds = self.config.deadlines.step_s
        if malformed is not None:
            return await self._call("step", seconds, self.gate.env,
                                    lambda: self.env.reject(malformed))  # fmt: skip
        return await self._call("step", seconds, self.gate.env, lambda: self.env.step(action))

    def _start(self, observation: Observation) -> None:
        if self.tokens:
            tokenizer = self.engine.tokenizer
            if tokenizer is None:
                raise HoningError(f"engine {self.engine.name} takes token ids but has no tokenizer")
            self.transcript = ChatFormat.of(tokenizer).start(observation,
                                                             self.config.system_prompt)  # fmt: skip
            ids = self.transcript.prompt_ids
            self._append(ids, None)
            self.traj.prompt_len = len(ids)
        else:
            self.messages = first_messages(observation, self.config.system_prompt,
                                           describe_tools=False)  # fmt: skip
        self.traj.turns.append(Turn("user", observation.text, 0, len(self.traj.token_ids)))
        self.tools = list(observation.tools)

    def _budget(self) -> SamplingParams | None:
        """This turn's sampling, its max_new_tokens capped by the tokens left; None if none."""
        used = len(self.traj.token_ids) if self.tokens else self.chat_used
        left = self.config.max_total_tokens - used
        if left < 1:
            return None
        sampling = self.config.sampling
        update: dict[str, object] = {}
        if sampling.max_new_tokens > left:
            update["max_new_tokens"] = left
        if sampling.seed is not None:
            # One seed per (task, sample, seat, turn): reproducible, yet the samples of a group
            # (and a team's contexts) differ.
            seat = f"{self.seat}/" if self.seat else ""
            key = f"{sampling.seed}/{self.task.id}/{self.traj.sample}/{seat}{len(self.traj.turns)}"
            update["seed"] = int.from_bytes(hashlib.sha256(key.encode()).digest()[:7], "big")
        return sampling.model_copy(update=update) if update else sampling

    async def _generate(self, sampling: SamplingParams) -> tuple[Generation, int, float]:
        if self.transcript is not None:
            prompt = Prompt(token_ids=list(self.traj.token_ids))
        else:
            prompt = Prompt(messages=list(self.messages), tools=self.tools or None)
        version = self.engine.version
        [gen] = await self._call("generate", self.config.deadlines.generate_s, self.gate.engine,
                                 lambda: self.engine.generate([prompt], sampling))  # fmt: skip
        if gen.finish_reason is FinishReason.ABORT:
            raise InfraFailure("generate", "EngineError: the engine aborted the generation")
        if self.tokens and not (len(gen.token_ids) == len(gen.logprobs) == len(gen.versions)):
            counts = f"{len(gen.token_ids)}/{len(gen.logprobs)}/{len(gen.versions)}"
            raise InfraFailure("generate", f"EngineError: tokens/logprobs/versions {counts}")
        return gen, version, self.call_s

    def _act(self, generated: tuple[Generation, int, float], turn: int
             ) -> tuple[Action, str | None]:  # fmt: skip
        """Record the assistant turn; the action it makes, or what is malformed about it."""
        gen, version_before, seconds = generated
        start = len(self.traj.token_ids)
        if self.transcript is not None:
            text = self.transcript.add_assistant(gen.token_ids)
            self._append(gen.token_ids, gen)
        else:
            text = gen.text
            self.chat_used = gen.prompt_tokens + max(len(gen.token_ids), len(gen.versions))
        action, malformed = Action(content=text), None
        try:
            if gen.tool_calls:
                action = Action.from_openai({"content": text, "tool_calls": gen.tool_calls})
            else:
                action = parse_action(text, call_prefix=f"call_{turn}")
        except MalformedAction as exc:
            malformed = str(exc)
        if self.transcript is None:
            message: Message = {"role": "assistant", "content": text}
            if gen.tool_calls and malformed is None:
                message["tool_calls"] = gen.tool_calls
            self.messages.append(message)
        version = gen.version if gen.versions else version_before
        calls = openai_tool_calls(action) if malformed is None else []
        self.traj.turns.append(Turn(
            "assistant", text, start, len(self.traj.token_ids), version=version, tool_calls=calls,
            finish_reason=gen.finish_reason.value, generation_s=seconds,
        ))  # fmt: skip
        return action, malformed

    def _observe(self, result: StepResult) -> bool:
        """Record the step and append its observation; False if its tokens do not fit."""
        info = result.info
        self.traj.reward += result.reward
        self.traj.risk += result.risk
        self.traj.components.update(result.components)
        if result.components.get("outcome", 0.0) >= 1.0:
            self.traj.success = True
        start = len(self.traj.token_ids)
        fits = True
        if self.transcript is not None:
            new = observation_messages(result.observation, restate=self.config.restate,
                                       tool_role=self.transcript.fmt.traits.tool_role)  # fmt: skip
            delta = self.transcript.add_observation(new)
            fits = start + len(delta.token_ids) <= self.config.max_total_tokens
            if fits:
                self._append(delta.token_ids, None)
        else:  # a server answers structured calls with tool messages, and only those
            structured = "tool_calls" in self.messages[-1]
            new = observation_messages(result.observation, tool_role=structured,
                                       restate=self.config.restate,
                                       images=self.config.images)  # fmt: skip
            self.messages.extend(new)
        drawn = [png for r in result.observation.tool_results for png in r.images]
        self.traj.turns.append(Turn(
            "tool", "\n\n".join(message_text(m) for m in new), start, len(self.traj.token_ids),
            reward=result.reward, components=dict(result.components),
            failure=info.failure.value if info.failure else None, detail=info.detail,
            step_s=info.step_s, tool_s=dict(info.tool_s), image_data=drawn, risk=result.risk,
            risks=list(info.risks),
        ))  # fmt: skip
        return fits

    def tell(self, text: str) -> bool:
        """Append a user message that is not an observation of the environment (another team
        role speaking); False if its tokens do not fit in max_total_tokens (then left out)."""
        start = len(self.traj.token_ids)
        message: Message = {"role": "user", "content": text}
        if self.transcript is not None:
            delta = self.transcript.add_observation([message])
            if start + len(delta.token_ids) > self.config.max_total_tokens:
                return False
            self._append(delta.token_ids, None)
        else:
            self.messages.append(message)
        self.traj.turns.append(Turn("user", text, start, len(self.traj.token_ids)))
        return True

    def _append(self, ids: list[int], gen: Generation | None) -> None:
        traj = self.traj
        traj.token_ids.extend(ids)
        if gen is None:
            traj.loss_mask.extend([0] * len(ids))
            traj.logprobs.extend([0.0] * len(ids))
            traj.versions.extend([-1] * len(ids))
        else:
            traj.loss_mask.extend([1] * len(ids))
            traj.logprobs.extend(gen.logprobs)
            traj.versions.extend(gen.versions)

    def _end_by(self, result: StepResult) -> None:
        failure = result.info.failure
        if failure is FailureReason.STEP_LIMIT or result.info.step_limit:
            # The step's own failure (a malformed last action…) stays the failure named.
            self._end(Ending.STEP_LIMIT, failure.value if failure else None, result.info.detail)
        elif failure is FailureReason.EPISODE_TIMEOUT:
            self._end(Ending.TIMEOUT, failure.value, result.info.detail)
        else:
            self._end(Ending.DONE, failure.value if failure else None, result.info.detail)

    def _end(self, ending: Ending, failure: str | None, detail: str) -> None:
        self.traj.ending, self.traj.failure, self.traj.detail = ending, failure, detail
        # Ended by the policy (turns, context, deadline, no answer) before the environment judged
        # the outcome: the task was not done, a real 0. Infrastructure failures never get here
        # (they raise InfraFailure), so this never turns a crash into a reward.
        self.traj.components.setdefault("outcome", 0.0)

    # -- calls under slots and deadlines ------------------------------------------------------

    async def _call(self, stage: str, seconds: float,
                    slot: Callable[[], AbstractAsyncContextManager[None]],
                    fn: Callable[[], Awaitable[T]]) -> T:  # fmt: skip
        """`fn()` holding a slot, within its deadline (the wait for the slot not counted);
        infrastructure failures become InfraFailure(stage)."""
        waiting = time.monotonic()
        async with slot():
            began = time.monotonic()
            self.traj.queue_s += began - waiting
            try:
                async with asyncio.timeout(seconds) as guard:
                    return await fn()
            except TimeoutError as exc:
                cause = (f"DeadlineExceeded: {DeadlineExceeded(stage, seconds)}"
                         if guard.expired() else f"TimeoutError: {exc}")  # fmt: skip
                raise InfraFailure(stage, cause) from exc
            except INFRASTRUCTURE as exc:
                raise InfraFailure(stage, f"{type(exc).__name__}: {exc}") from exc
            finally:
                self.call_s = time.monotonic() - began
                if stage == "generate":
                    self.traj.generation_s += self.call_s
                else:
                    self.traj.env_s += self.call_s

    async def _close(self) -> None:
        await self._call("scoring", self.config.deadlines.scoring_s, self.gate.env, self.env.close)
