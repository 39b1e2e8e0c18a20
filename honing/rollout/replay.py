"""Replaying a stored trajectory's actions through the current environment: no model, new scores.

    row = await replay(trajectory, task, env, verifier="math:…")   # -> Rescore (a row)

The environment is reset for the task and fed each stored assistant turn's action, parsed from its
text as the agent parsed it (`stored_action`: same parser and call ids, a chat engine's own tool
calls, malformed outputs rejected again); rewards are recorded as the agent loop records them. A
replay that takes another course is `diverged` (with the model turn), one that cannot be scored
`infra_error` (docs/rollout.md, "The store in detail", gives the rules).

Not covered: a chat engine's malformed tool calls (not stored; the text is replayed instead) and
the agent's clock (an action it cut off, with no observation after it, is not replayed).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from honing.envs.base import Action, FailureReason, MalformedAction, StepResult
from honing.records import Ending, Trajectory, Turn
from honing.rollout.agent import Deadlines, EnvLike
from honing.rollout.chat import openai_tool_calls, parse_action
from honing.store.rescore import Rescore, RescoreStatus
from honing.tasks.load import AnyTask

T = TypeVar("T")
NO_VERDICT = (Ending.INFRA_ERROR, Ending.STALE)
TIMEOUTS = (FailureReason.STEP_TIMEOUT, FailureReason.EPISODE_TIMEOUT)


def stored_action(turn: Turn, index: int) -> tuple[Action, str | None]:
    """The action the agent made of assistant turn `index` (0-based) and, for an output that was
    no action, the parser's reason (the environment rejected it)."""
    try:
        parsed: Action | None = parse_action(turn.text, call_prefix=f"call_{index}")
        reason = None
    except MalformedAction as exc:
        parsed, reason = None, str(exc)
    if turn.tool_calls and (parsed is None or openai_tool_calls(parsed) != turn.tool_calls):
        # A chat engine returned structured tool calls: the agent used those, with the text.
        return Action.from_openai({"content": turn.text, "tool_calls": turn.tool_calls}), None
    if parsed is None:
        return Action(content=turn.text), reason
    return parsed, None


def describe(action: Action, width: int = 120) -> str:
    """An action on one line: its calls as `name({arguments})`, else its text."""
    if action.tool_calls:
        text = "; ".join(
            f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})" for c in action.tool_calls
        )
    else:
        text = " ".join(action.content.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def ended_by_env(trajectory: Trajectory) -> bool:
    """Whether the environment ended the stored episode (rather than the agent's turn limit,
    context budget or clock)."""
    if trajectory.ending is Ending.DONE:
        return True
    return trajectory.ending is Ending.STEP_LIMIT and trajectory.failure != "max_turns"


def ending_of(result: StepResult) -> Ending:
    """How the agent ends an episode the environment ended with `result` (its `_end_by`)."""
    failure = result.info.failure
    if failure is FailureReason.STEP_LIMIT or result.info.step_limit:
        return Ending.STEP_LIMIT
    if failure is FailureReason.EPISODE_TIMEOUT:
        return Ending.TIMEOUT
    return Ending.DONE


class _Infra(Exception):
    def __init__(self, turn: int, detail: str) -> None:
        super().__init__(detail)
        self.turn, self.detail = turn, detail


@dataclass
class _Replay:
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    success: bool = False
    ending: Ending | None = None
    step_rewards: list[float] = field(default_factory=list)
    step_components: list[dict[str, float]] = field(default_factory=list)
    diverged: tuple[int, str] | None = None  # the first: (model turn, what differs)
    last_action: str = ""

    def diverge(self, turn: int, detail: str) -> None:
        if self.diverged is None:
            self.diverged = (turn, detail)


async def replay(
    trajectory: Trajectory,
    task: AnyTask,
    env: EnvLike,
    *,
    verifier: str = "",
    deadlines: Deadlines | None = None,
) -> Rescore:
    """Replay `trajectory`'s actions on `task` in `env` (a fresh environment of its domain, closed
    afterwards) and compare; `verifier` is recorded as the row's verifier version."""
    row = Rescore(
        id=trajectory.id, task_id=trajectory.task_id, domain=trajectory.domain,
        status=RescoreStatus.SKIPPED, verifier_version=verifier, sample=trajectory.sample,
        group_id=trajectory.group_id, old_reward=trajectory.reward,
        old_components=dict(trajectory.components), old_success=trajectory.success,
        old_ending=trajectory.ending.value,
        old_step_rewards=[t.reward for t in trajectory.turns if t.role == "tool"],
    )  # fmt: skip
    if trajectory.ending in NO_VERDICT:
        row.detail = (
            f"the stored episode ended as {trajectory.ending.value}: no verdict to re-score"
        )
        return row
    deadlines = deadlines or Deadlines()
    played = _Replay()
    try:
        if task.domain != trajectory.domain:
            played.diverge(0, f"task {task.id!r} is now a {task.domain} task, not "
                           f"{trajectory.domain}")  # fmt: skip
        else:
            await _play(trajectory, task, env, deadlines, played)
    except _Infra as exc:
        row.status, row.turn, row.detail = RescoreStatus.INFRA_ERROR, exc.turn, exc.detail
        return row
    finally:
        closed = await _close(env, deadlines)
    if played.ending is not None:  # ended before the outcome was judged: a real 0, as the agent
        played.components.setdefault("outcome", 0.0)
    row.new_reward, row.new_components = played.reward, played.components
    row.new_success = played.success
    row.new_ending = played.ending.value if played.ending is not None else None
    row.new_step_rewards, row.new_step_components = played.step_rewards, played.step_components
    row.last_action = played.last_action
    if played.diverged is not None:
        row.status = RescoreStatus.DIVERGED
        row.turn, row.detail = played.diverged
    elif played.success != trajectory.success:
        row.status = RescoreStatus.CHANGED
        row.detail = f"reward {trajectory.reward:g} → {played.reward:g}"
    else:
        row.status = RescoreStatus.SAME
        if abs(played.reward - trajectory.reward) > 1e-9:
            row.detail = f"reward {trajectory.reward:g} → {played.reward:g} (same verdict)"
    if closed:  # the scores stand; the environment's cleanup is reported beside them
        row.detail = "; ".join(part for part in (row.detail, closed) if part)
    return row


async def _play(trajectory: Trajectory, task: AnyTask, env: EnvLike, deadlines: Deadlines,
                out: _Replay) -> None:  # fmt: skip
    """Reset, then each stored action in turn, recording into `out`."""
    await _call(0, "setup", deadlines.setup_s, functools.partial(env.reset, task))
    turns = trajectory.turns
    if not turns or task.prompt not in turns[0].text:
        asks = " ".join(task.prompt.split())
        asks = asks if len(asks) <= 60 else asks[:59] + "…"
        out.diverge(0, f"the task's prompt is not what the model was shown (the task changed; it "
                    f"now asks {asks!r})")  # fmt: skip
    # The actions the environment stepped: an assistant turn without an observation after it
    # never got a result (the agent's clock ran out during its step), so it is not replayed.
    assistant = [
        i for i, t in enumerate(turns[:-1]) if t.role == "assistant" and turns[i + 1].role == "tool"
    ]
    last = len(assistant)
    for n, at in enumerate(assistant):
        turn = n + 1
        if env.done:
            out.diverge(n, f"the environment now ends the episode after model turn {n}; the "
                        f"stored episode went on to turn {last}")  # fmt: skip
            return
        action, malformed = stored_action(turns[at], n)
        out.last_action = describe(action) if malformed is None else f"malformed: {malformed}"
        step = (functools.partial(env.step, action) if malformed is None
                else functools.partial(env.reject, malformed))  # fmt: skip
        result = await _call(turn, "step", deadlines.step_s, step)
        stored = turns[at + 1]
        failure = result.info.failure
        if failure is not None and failure.infrastructure:
            raise _Infra(turn, f"model turn {turn}: {failure.value}: {result.info.detail}")
        if failure in TIMEOUTS and stored.failure != failure:
            raise _Infra(turn, f"model turn {turn} timed out in the replay "
                         f"({result.info.detail}), not in the run: a loaded machine? "
                         "re-score again")  # fmt: skip
        out.reward += result.reward
        out.components.update(result.components)
        out.step_rewards.append(result.reward)
        out.step_components.append(dict(result.components))
        if result.components.get("outcome", 0.0) >= 1.0:
            out.success = True
        if turn < last:  # the last step's observation is the verdict: it may change
            differs = _differs(result, stored)
            if differs:
                out.diverge(turn, differs)
        if result.done:
            out.ending = ending_of(result)
    if env.done and out.ending is not trajectory.ending:
        out.diverge(last, f"the environment now ends the episode as "
                    f"{out.ending.value if out.ending else '?'} after model turn {last}; it "
                    f"ended as {trajectory.ending.value}")  # fmt: skip
    elif not env.done and ended_by_env(trajectory):
        out.diverge(last, f"the environment no longer ends the episode after model turn {last} "
                    f"(it ended as {trajectory.ending.value}): the episode would need more model "
                    "turns")  # fmt: skip
    elif not env.done:
        out.ending = trajectory.ending  # the agent ended it (turns, context, clock): still so


async def _close(env: EnvLike, deadlines: Deadlines) -> str:
    """Close the environment; what went wrong, or ''."""
    try:
        await _call(0, "scoring", deadlines.scoring_s, env.close)
    except _Infra as exc:
        return f"closing the environment failed ({exc.detail})"
    return ""


def _differs(result: StepResult, stored: Turn) -> str:
    """What the model was shown then that this step does not show now; '' when nothing."""
    failure = result.info.failure.value if result.info.failure else None
    if failure != stored.failure:
        return (f"the step now fails as {failure or 'nothing'}; it failed as "
                f"{stored.failure or 'nothing'} then")  # fmt: skip
    at = 0
    for r in result.observation.tool_results:
        found = stored.text.find(r.content, at)
        if found < 0:
            shown = r.content.strip().splitlines()[0][:80] if r.content.strip() else "''"
            return f"tool {r.name} now returns {shown!r}, which the model was not shown"
        at = found + len(r.content)
    return ""


async def _call(turn: int, stage: str, seconds: float,
                fn: Callable[[], Awaitable[T]]) -> T:  # fmt: skip
    """`fn()` within its deadline; any failure of the machinery becomes `_Infra`."""
    where = "the reset" if turn == 0 else f"model turn {turn}"
    try:
        async with asyncio.timeout(seconds):
            return await fn()
    except TimeoutError as exc:
        raise _Infra(turn, f"{where}: the {stage} deadline of {seconds:g}s passed") from exc
    except Exception as exc:  # the environment or its checker broke: not the model's doing
        raise _Infra(turn, f"{where}: {type(exc).__name__}: {exc}") from exc
