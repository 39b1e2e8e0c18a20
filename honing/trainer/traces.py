"""Synthetic tool-use SFT data: each task's reference actions, played through the real environment.

    traces = await reference_traces(tasks, pool)              # played, each checked: outcome 1
    await write_traces(tasks, "runs/traces.jsonl", pool)      # the `honing sft` data format

A trace is the conversation the agent loop would have had, had the model written the reference
actions itself; it tokenises exactly like the agent's trajectory of the same actions. Every trace
is played in the sandbox and must end with outcome 1. `calculator_first` plays arithmetic math
tasks as a calculator call, then the answer; `risky_share` plays that share of the tasks that
have a `metadata.risky_reference` from it instead; `recovery_share` gives that share of the
tasks whose domain has a slip (`Domain.slip`: sql's query with a literal unquoted) a second
trace, beside their own, that begins with the slip and the error it gets, the slip kept as
context only (weight 0), then the reference: a recovery from a failed call (docs/training.md,
"The modules in detail").
`trace_budget(traces, tokenizer, max_new_tokens, max_turns)` says whether an agent's budget can
write them (a longer turn is cut mid-call: the policy would learn episodes it cannot finish).
Not covered: traces sampled from a model (use rollouts and the store), reasoning text before the
calls (the assistant messages are calls only, plus whatever content the reference action has).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from honing.envs.base import Action, EnvConfig, Environment
from honing.envs.registry import make_env
from honing.errors import ConfigError, HoningError
from honing.rollout.chat import Message, observation_messages, parse_action
from honing.sandbox import SandboxPool
from honing.tasks import domains
from honing.tasks.domains import TracePlan
from honing.tasks.load import AnyTask, TaskSet
from honing.trainer.sft import tool_call_text

MAX_LISTED = 20
OUTCOME = "outcome"
RISKY_REFERENCE = "risky_reference"  # the metadata key of a task's risky path


@dataclass(frozen=True)
class Trace:
    """One played reference episode, as an SFT example."""

    task_id: str
    messages: list[Message]
    tools: list[dict[str, Any]]
    outcome: float
    calculator: bool = False  # played calculator-first
    risky: bool = False  # played from the task's metadata.risky_reference
    slipped: bool = False  # begins with its domain's slip (weight 0) and its error: a recovery
    actions: list[str] = field(default_factory=list)  # the assistant texts, in order

    def to_json_dict(self) -> dict[str, Any]:
        """The `honing sft` row (a recovery trace's id ends in `/recovery`)."""
        name = f"{self.task_id}/recovery" if self.slipped else self.task_id
        return {"id": name, "messages": self.messages, "tools": self.tools}


class TraceError(HoningError):
    """Reference episodes that did not end with outcome 1 (or could not be played)."""


@dataclass(frozen=True)
class TraceBudget:
    """What reference traces ask of an agent's budget: a policy trained on them must write each
    assistant turn within `max_new_tokens` (and its end token) and the whole within `max_turns`,
    or the episodes it learned from are ones it can never finish."""

    traces: int
    longest: int  # tokens of the longest assistant turn, its end token included
    turns: int  # the most assistant turns of one trace
    too_long: list[str]  # ids of the traces with a turn over max_new_tokens
    too_many: list[str]  # ids of the traces with more turns than max_turns

    def warning(self, max_new_tokens: int, max_turns: int) -> str | None:
        """What to change, or None when every trace fits."""
        parts = []
        if self.too_long:
            parts.append(
                f"{len(self.too_long)} of {self.traces} reference traces have a turn longer than "
                f"agent.max_new_tokens ({max_new_tokens}; the longest needs {self.longest} "
                f"tokens with its end token, e.g. {', '.join(self.too_long[:3])}): raise "
                f"agent.max_new_tokens to at least {self.longest}"
            )
        if self.too_many:
            parts.append(
                f"{len(self.too_many)} of {self.traces} reference traces take more turns than "
                f"agent.max_turns ({max_turns}; up to {self.turns}, e.g. "
                f"{', '.join(self.too_many[:3])}): raise agent.max_turns to {self.turns}"
            )
        if not parts:
            return None
        return "; ".join(parts) + " (the policy is taught episodes it cannot finish)"


def turn_tokens(tokenizer: Any, text: str) -> int:
    """The tokens one assistant turn takes of `max_new_tokens`: `text` tokenised as the model
    writes it, plus its end token."""
    return len(tokenizer.encode(text, add_special_tokens=False)) + 1


def trace_budget(
    traces: Sequence[Trace], tokenizer: Any, max_new_tokens: int, max_turns: int
) -> TraceBudget:
    """The budget `traces` need (`TraceBudget`): each assistant turn's `turn_tokens`."""
    longest, turns = 0, 0
    too_long: list[str] = []
    too_many: list[str] = []
    for trace in traces:
        sizes = [turn_tokens(tokenizer, text) for text in trace.actions]
        longest, turns = max([longest, *sizes]), max(turns, len(sizes))
        if any(size > max_new_tokens for size in sizes):
            too_long.append(trace.task_id)
        if len(sizes) > max_turns:
            too_many.append(trace.task_id)
    return TraceBudget(len(traces), longest, turns, too_long, too_many)


def action_text(action: Action) -> str:
    """An action as the model would write it: its content, then its calls in the call format."""
    calls = tool_call_text([(c.name, c.arguments) for c in action.tool_calls])
    return "\n".join(part for part in (action.content, calls) if part)


# -- choosing the risky path -------------------------------------------------------------------
def risky_reference(task: AnyTask) -> str | None:
    """`task`'s risky path (`metadata.risky_reference`, in the form of its `reference`), or None."""
    value = task.metadata.get(RISKY_REFERENCE)
    return value if isinstance(value, str) and value else None


def risky_choice(tasks: Sequence[AnyTask], share: float) -> set[str]:
    """The ids of the tasks to play from their risky reference: `share` of those that have one
    (rounded half up), the ones whose id has the lowest SHA-256. The same ids every run and on
    every machine, and a larger share picks a superset. ConfigError when `share` > 0 and no task
    has a risky reference."""
    if not 0.0 <= share <= 1.0:
        raise ConfigError(f"risky_share must be within [0, 1], not {share}")
    if share == 0.0:
        return set()
    eligible = sorted({t.id for t in tasks if risky_reference(t) is not None},
                      key=lambda i: hashlib.sha256(i.encode()).hexdigest())  # fmt: skip
    if not eligible:
        raise ConfigError(
            f"risky_share is {share:g}, but none of the {len(tasks)} trace tasks has a "
            f"metadata.{RISKY_REFERENCE} to play: set it to 0, or make the traces from tasks "
            "that have one (synthetic-tools with tags: [records], tempting-tools)"
        )
    return set(eligible[: int(share * len(eligible) + 0.5)])


def recovery_choice(tasks: Sequence[AnyTask], share: float) -> set[str]:
    """The ids of the `share` of `tasks` whose domain has a slip (`Domain.slip`) to begin their
    trace with: the same tasks every run (by a hash of their id); ConfigError when `share` > 0
    and no task's domain has one."""
    if share <= 0:
        return set()
    eligible = sorted({t.id for t in tasks if domains.get(t.domain).slip is not None},
                      key=lambda i: hashlib.sha256(f"slip:{i}".encode()).hexdigest())  # fmt: skip
    if not eligible:
        with_slip = sorted(n for n, d in domains.registry().items() if d.slip is not None)
        raise ConfigError(
            f"recovery_share is {share:g}, but none of the {len(tasks)} trace tasks is of a "
            f"domain with a slip to recover from ({', '.join(with_slip) or 'none'}): set it to 0"
        )
    return set(eligible[: int(share * len(eligible) + 0.5)])


# -- playing -----------------------------------------------------------------------------------
def trace_plan(task: AnyTask, env_actions: list[Action], *, calculator_first: bool) -> TracePlan:
    """How to play `task`: its domain's plan (`Domain.trace_plan`: math's calculator first)
    when `calculator_first` and the domain has one for it, else the reference actions."""
    plan = domains.get(task.domain).trace_plan if calculator_first else None
    return (plan(task, env_actions) if plan is not None else None) or TracePlan(env_actions)


async def play_reference(
    task: AnyTask,
    pool: SandboxPool,
    *,
    calculator_first: bool = True,
    system_prompt: str | None = None,
    env_config: EnvConfig | None = None,
    restate: bool = True,
    risky: bool = False,
    slip: bool = False,
) -> Trace | None:
    """Play `task`'s reference through its real environment; the trace, with its outcome.
    `risky`: play its `metadata.risky_reference` instead, as it is (never calculator-first).
    `slip`: first its domain's slip (`Domain.slip`), kept with weight 0, and the error the
    environment answers it with; None (only with `slip`) when the task has no slip or the
    environment accepts it: there is nothing to recover from."""
    env = make_env(task.domain, pool, env_config)
    try:
        if risky:
            path = risky_reference(task)
            if path is None:
                raise TraceError(f"{task.id}: no metadata.{RISKY_REFERENCE} to play")
            references = env.reference_actions(task.model_copy(update={"reference": path}))
            plan = TracePlan(references)
        else:
            references = env.reference_actions(task)
            plan = trace_plan(task, references, calculator_first=calculator_first)
        actions, calculator = plan.actions, plan.actions is not references
        slip_of = domains.get(task.domain).slip if slip else None
        mistake = slip_of(task, references) if slip_of is not None else None
        if slip and mistake is None:
            return None
        observation = await env.reset(task)
        messages: list[Message] = []
        if system_prompt is not None:
            messages.append({"role": "system", "content": system_prompt})
        messages.append({"role": "user", "content": observation.text})
        outcome, texts = 0.0, list[str]()
        if mistake is not None:
            played = await _play_slip(env, task, mistake, restate)
            if played is None:
                return None
            texts.append(mistake_text := action_text(mistake))
            messages += [{"role": "assistant", "content": mistake_text, "weight": 0}, *played]
        for turn, planned in enumerate(actions):
            text = action_text(planned)
            action = parse_action(text, call_prefix=f"call_{turn}")  # exactly as the agent does
            result = await env.step(action)
            if result.info.infrastructure:
                raise TraceError(
                    f"{task.id}: infrastructure failure at step {turn + 1}: {result.info.detail}"
                )
            texts.append(text)
            messages.append({"role": "assistant", "content": text})
            messages += observation_messages(result.observation, tool_role=True,
                                             restate=restate)  # fmt: skip
            if turn == 0 and plan.check_first is not None:
                wrong = plan.check_first(result.observation.tool_results[0].content)
                if wrong is not None:
                    raise TraceError(f"{task.id}: {wrong}")
            outcome = max(outcome, result.components.get(OUTCOME, 0.0))
            if result.done:
                break
        return Trace(task.id, messages, list(observation.tools), outcome, calculator=calculator,
                     risky=risky, slipped=slip, actions=texts)  # fmt: skip
    finally:
        await env.close()


async def _play_slip(
    env: Environment, task: AnyTask, slip: Action, restate: bool
) -> list[Message] | None:
    """Play `slip` first: the messages that show its error, or None when the environment
    accepts it (no error, or the episode ends): a slip that is no mistake is no recovery."""
    result = await env.step(parse_action(action_text(slip), call_prefix="call_slip"))
    if result.info.infrastructure:
        raise TraceError(f"{task.id}: infrastructure failure at its slip: {result.info.detail}")
    if result.info.failure is None or result.done:
        return None
    return observation_messages(result.observation, tool_role=True, restate=restate)


async def reference_traces(
    tasks: TaskSet | Sequence[AnyTask],
    pool: SandboxPool,
    *,
    calculator_first: bool = True,
    system_prompt: str | None = None,
    env_config: EnvConfig | None = None,
    restate: bool = True,
    concurrency: int = 8,
    risky_share: float = 0.0,
    recovery_share: float = 0.0,
) -> list[Trace]:
    """Every task's reference trace, in task order, `risky_share` of those with a risky
    reference played from it (`risky_choice`), and after each of the `recovery_share` of those
    whose domain has a slip (`recovery_choice`) a second one begun with it (none when the
    environment accepts the slip); TraceError lists the tasks whose reference did not end with
    outcome 1 (or could not be played)."""
    items = list(tasks.tasks if isinstance(tasks, TaskSet) else tasks)
    risky = risky_choice(items, risky_share)
    slips = recovery_choice(items, recovery_share)
    gate = asyncio.Semaphore(concurrency)

    async def one(task: AnyTask) -> list[Trace] | str:
        out: list[Trace] = []
        for slip in (False, True) if task.id in slips else (False,):
            async with gate:
                try:
                    trace = await play_reference(
                        task,
                        pool,
                        calculator_first=calculator_first,
                        system_prompt=system_prompt,
                        env_config=env_config,
                        restate=restate,
                        risky=task.id in risky,
                        slip=slip,
                    )
                except HoningError as exc:
                    return f"{task.id}: {exc}"
            if trace is None:  # no slip to recover from
                continue
            if trace.outcome < 1.0:
                which = "risky reference" if trace.risky else "reference"
                after = " after its slip" if trace.slipped else ""
                return (
                    f"{task.id}: outcome {trace.outcome:g} (the {which} does not solve it{after})"
                )
            out.append(trace)
        return out

    played = await asyncio.gather(*(one(t) for t in items))
    raise_failed([p for p in played if isinstance(p, str)], len(items), "reference episodes")
    return [trace for p in played if not isinstance(p, str) for trace in p]


def raise_failed(failed: Sequence[str], total: int, what: str) -> None:
    """TraceError listing `failed` ("TASK: why" each, the first MAX_LISTED) of `total`, if any."""
    if failed:
        listed = "\n".join(f"  {f}" for f in failed[:MAX_LISTED])
        more = f"\n  ... and {len(failed) - MAX_LISTED} more" if len(failed) > MAX_LISTED else ""
        raise TraceError(
            f"{len(failed)} of {total} {what} did not succeed; fix or leave out these "
            f"tasks:\n{listed}{more}"
        )


def write_rows(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """`rows` as JSONL at `path`, all or nothing (written beside it, then renamed)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".tmp")
    with staging.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    staging.replace(target)


async def write_traces(
    tasks: TaskSet | Sequence[AnyTask],
    path: str | Path,
    pool: SandboxPool,
    *,
    calculator_first: bool = True,
    system_prompt: str | None = None,
    env_config: EnvConfig | None = None,
    restate: bool = True,
    risky_share: float = 0.0,
    recovery_share: float = 0.0,
) -> list[Trace]:
    """Play every reference (see `reference_traces`) and write them as SFT JSONL to `path`;
    nothing is written when one fails."""
    traces = await reference_traces(
        tasks,
        pool,
        calculator_first=calculator_first,
        system_prompt=system_prompt,
        env_config=env_config,
        restate=restate,
        risky_share=risky_share,
        recovery_share=recovery_share,
    )
    write_rows(path, (trace.to_json_dict() for trace in traces))
    return traces
