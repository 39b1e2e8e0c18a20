"""Team warm-start data: each trace task played by a scripted team, every role's turns an SFT row.

    rows = await team_traces(tasks, pool, team, agent, tokenizer, reject_share=0.5)
    await write_team_traces(tasks, "runs/team.jsonl", pool, team, agent, tokenizer)

A team's roles need examples of their own before RL can sharpen them: the executor must act with
a plan in its context, the validator must answer ACCEPT or REJECT, the analyst must plan. Each
task is played through `run_team_episode` in the real environment, each role answered from a
script of its own:
  - the analyst writes `reference_plan`: the reference's steps as tool names (never the answer);
  - the executor plays the task's reference actions, as `honing.trainer.traces` does;
  - the validator answers each submission with the verifier's verdict on it: ACCEPT on the
    reference, REJECT: why on a wrong one (`validator_reply`, with the domain's description of the
    submission: `describe_submission`).
`reject_share` of the tasks (the ones whose id has the lowest SHA-256) first submit a wrong
solution (`wrong_submissions`: the domain's own, as code's are, else for a numeric answer one
off); the validator rejects it and the executor then submits the reference. The wrong
submission stays in the executor's row as context only (weight 0), so the row teaches
recovering from a rejection, never the mistake. With `team.verdicts` K
the validator gives each submission its verdict K times. Every episode must end with outcome 1,
every review must agree with the verifier and every scripted reply must fit its role's turn
(`max_new_tokens`: a cut verdict is no verdict), else `TraceError` names the task and what to
raise.
The rows are `honing sft` rows: rendered by `honing.trainer.sft`, each gives exactly the tokens of
its role's trajectory.

Not covered: plans or verdicts written by a model (the scripts are templates), wrong submissions
for domains that declare none and have no numeric answer (their tasks play accept-only
episodes), and validator tool checks (the scripted validator calls no tools).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from honing.envs.base import Action, EnvConfig, ToolCall
from honing.envs.registry import make_env
from honing.errors import ConfigError, HoningError
from honing.rollout.agent import AgentConfig
from honing.rollout.chat import Message
from honing.rollout.engines.base import Engine
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.team import Conversation, Review, RoleEngines, TeamConfig, run_team_episode
from honing.sandbox import SandboxPool
from honing.tasks import domains
from honing.tasks.load import AnyTask, TaskSet
from honing.trainer.traces import (
    TraceError,
    action_text,
    raise_failed,
    turn_tokens,
    write_rows,
)

TRIES = 4  # wrong submissions tried per task before one the verifier rejects is found


@dataclass
class TeamTrace:
    """One task played by the scripted team: each role's row, and how it went."""

    task_id: str
    rows: list[dict[str, Any]]  # `honing sft` rows, one per role
    rejected: bool  # a wrong submission was made first (and rejected)
    reviews: list[Review] = field(default_factory=list)

    @property
    def roles(self) -> list[str]:
        return [str(r["id"]).rsplit("/", 1)[1] for r in self.rows]


# -- the scripts -------------------------------------------------------------------------------
def reference_plan(actions: Sequence[Action], submits: Sequence[str]) -> str:
    """A numbered plan of `actions`: the tools each step calls (and the paths they name), or
    what kind of reply it is; never an argument that holds the answer."""
    steps = []
    for action in actions:
        if action.tool_calls:
            parts = []
            for call in action.tool_calls:
                path = call.arguments.get("path")
                shown = isinstance(path, str) and call.name not in submits and len(path) <= 60
                parts.append(f"{call.name} on {path}" if shown else call.name)
            steps.append("Call " + " and ".join(parts) + ".")
        elif action.content.lstrip().startswith("```"):
            steps.append("Reply with the whole fixed file in a ```python block; it is tested.")
        else:
            steps.append("Reply with the answer.")
    return "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1))


def wrong_submissions(task: AnyTask, submission: Action) -> list[Action]:
    """Plausible wrong versions of the reference's submission, most plausible first: the
    domain's own (`Domain.wrong_submissions`: code's are the file as the task handed it over and
    one-token changes of the reference), else, for an `answer` call with a number, that number
    one off. [] when there is none."""
    own = domains.get(task.domain).wrong_submissions
    if own is not None:
        return list(own(task, submission))
    for call in submission.tool_calls:
        value = call.arguments.get("value", call.arguments.get("answer"))
        try:
            number = float(str(value).replace(",", ""))
        except ValueError:
            continue
        key = "value" if "value" in call.arguments else "answer"
        off = str(int(number) + 1) if number.is_integer() else f"{number + 1:g}"
        wrong = ToolCall(id=call.id, name=call.name, arguments={**call.arguments, key: off})
        calls = [wrong if c is call else c for c in submission.tool_calls]
        return [Action(content=submission.content, tool_calls=calls)]
    return []


def describe_submission(task: AnyTask, action: Action) -> str:
    """One sentence on what `action` submits, the reason in the scripted validator's verdict: the
    domain's own (`Domain.describe_submission`: code's names the line it changes), else "It
    submits the result shown."."""
    own = domains.get(task.domain).describe_submission
    return own(task, action) if own is not None else "It submits the result shown."


def validator_reply(change: str, good: bool) -> str:
    """The scripted validator's answer to a submission whose change is described by `change`."""
    if good:
        return f"{change}\nACCEPT"
    if "unchanged" in change:
        return f"{change}\nREJECT: the bug is still there; the failing test fails the same way"
    return f"{change}\nREJECT: this does not fix what the failing test shows"


# -- playing -----------------------------------------------------------------------------------
def reject_choice(tasks: Sequence[AnyTask], share: float) -> set[str]:
    """The ids of the tasks that submit a wrong solution first: `share` of them (rounded half
    up), those whose id has the lowest SHA-256 (the same every run; more share, a superset)."""
    if not 0.0 <= share <= 1.0:
        raise ConfigError(f"reject_share must be within [0, 1], not {share}")
    ids = sorted({t.id for t in tasks}, key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    return set(ids[: int(share * len(ids) + 0.5)])


async def play_team_reference(
    task: AnyTask,
    pool: SandboxPool,
    team: TeamConfig,
    agent: AgentConfig,
    tokenizer: Any,
    *,
    reject: bool = False,
    env_config: EnvConfig | None = None,
) -> TeamTrace:
    """Play `task` with the scripted team (module docstring); `reject`: submit a wrong
    solution first when the domain has one. TraceError when it does not end with outcome 1 or a
    review disagrees with the verifier."""
    submits = team.submits(task.domain)
    probe = make_env(task.domain, pool, env_config)
    try:
        references = probe.reference_actions(task)
    finally:
        await probe.close()
    if not references:
        raise TraceError(f"{task.id}: no reference actions to play")
    *before, submission = references
    wrongs = wrong_submissions(task, submission) if reject else []
    if wrongs and len(references) + 1 > agent.max_turns:
        raise ConfigError(
            f"{task.id}: a rejected submission and the reference take {len(references) + 1} "
            f"executor turns, but agent.max_turns is {agent.max_turns}: raise it, or set "
            "warm_start.reject_share: 0"
        )
    last: TraceError | None = None
    for wrong in [*wrongs[:TRIES], None] if wrongs else [None]:
        try:
            return await _play(task, pool, team, agent, tokenizer, before, submission, wrong,
                               submits, env_config)  # fmt: skip
        except TraceError as exc:
            last = exc
            if wrong is None:
                break  # even the reference alone fails: say so
    assert last is not None
    raise last


async def _play(
    task: AnyTask,
    pool: SandboxPool,
    team: TeamConfig,
    agent: AgentConfig,
    tokenizer: Any,
    before: list[Action],
    submission: Action,
    wrong: Action | None,
    submits: tuple[str, ...],
    env_config: EnvConfig | None,
) -> TeamTrace:
    executor = [*before, *([wrong] if wrong is not None else []), submission]
    verdicts = []
    if wrong is not None:
        verdicts.append(validator_reply(describe_submission(task, wrong), False))
    verdicts.append(validator_reply(describe_submission(task, submission), True))
    scripts = {
        "executor": [action_text(a) for a in executor],
        # each review asks `team.verdicts` verdicts on the same submission, one after another
        "validator": [v for v in verdicts for _ in range(team.verdicts)],
        "analyst": [reference_plan([*before, submission], submits)],
    }
    too_long = _over_budget(scripts, team, agent, tokenizer)
    if too_long:
        raise TraceError(f"{task.id}: {too_long}")
    engines: dict[str, Engine] = {
        role.role: ScriptedEngine(scripts[role.kind], tokenizer=tokenizer) for role in team.roles
    }
    executor_role = next(r.role for r in team.roles if r.kind == "executor")
    reviews: list[Review] = []
    conversations: dict[str, Conversation] = {}
    env = make_env(task.domain, pool, env_config)
    lead = await run_team_episode(
        task, env, RoleEngines(engines, executor_role), team, agent,
        on_review=reviews.append, conversations=conversations,
    )  # fmt: skip
    if lead.infrastructure_failed:
        raise TraceError(f"{task.id}: infrastructure failure: {lead.detail}")
    if not lead.success:
        why = lead.detail or lead.failure or "outcome below 1"
        raise TraceError(f"{task.id}: the scripted team did not solve it ({why})")
    wrong_reviews = [r for r in reviews if not r.correct]
    if wrong_reviews or (team.role("validator") is not None and len(reviews) != len(verdicts)):
        raise TraceError(
            f"{task.id}: the verifier disagrees with the script on {len(wrong_reviews)} of "
            f"{len(reviews)} reviews (expected {len(verdicts)}); is every submission a call of "
            "team.submit_tools, or a reply the environment acts on?"
        )
    rows = []
    for conversation in conversations.values():
        messages: list[Message] = conversation.messages
        if conversation.kind == "executor" and wrong is not None:
            messages = _weigh(messages, skip=len(before))
        rows.append({"id": f"{task.id}/{conversation.role}", "messages": messages,
                     "tools": conversation.tools})  # fmt: skip
    return TeamTrace(task.id, rows, rejected=wrong is not None, reviews=reviews)


def _over_budget(
    scripts: dict[str, list[str]], team: TeamConfig, agent: AgentConfig, tokenizer: Any
) -> str | None:
    """What is wrong when a scripted reply (and its end token) is longer than its role's turn
    (`max_new_tokens`: the role's, else the agent's): the engine would cut it, and a validator's
    verdict, which comes last, with it. None when every reply fits."""
    for index, role in enumerate(team.roles):
        budget = role.max_new_tokens or agent.sampling.max_new_tokens
        longest = max((turn_tokens(tokenizer, text) for text in scripts.get(role.kind, [])),
                      default=0)  # fmt: skip
        if longest > budget:
            where = (f"team.roles[{index}].max_new_tokens" if role.max_new_tokens
                     else "agent.max_new_tokens")  # fmt: skip
            return (f"the scripted {role.kind}'s reply takes {longest} tokens, more than its turn "
                    f"({where}: {budget}); raise it to at least {longest}")  # fmt: skip
    return None


def _weigh(messages: list[Message], skip: int) -> list[Message]:
    """The messages with the assistant message after the first `skip` ones at weight 0."""
    out, seen = [], 0
    for m in messages:
        if m["role"] == "assistant":
            if seen == skip:
                m = {**m, "weight": 0}
            seen += 1
        out.append(m)
    return out


async def team_traces(
    tasks: TaskSet | Sequence[AnyTask],
    pool: SandboxPool,
    team: TeamConfig,
    agent: AgentConfig,
    tokenizer: Any,
    *,
    reject_share: float = 0.5,
    env_config: EnvConfig | None = None,
    concurrency: int = 8,
) -> list[TeamTrace]:
    """Every task played by the scripted team, in task order (module docstring); TraceError
    lists the tasks that could not be played."""
    items = list(tasks.tasks if isinstance(tasks, TaskSet) else tasks)
    rejecting = reject_choice(items, reject_share)
    gate = asyncio.Semaphore(concurrency)

    async def one(task: AnyTask) -> TeamTrace | str:
        async with gate:
            try:
                return await play_team_reference(task, pool, team, agent, tokenizer,
                                                 reject=task.id in rejecting,
                                                 env_config=env_config)  # fmt: skip
            except HoningError as exc:
                return str(exc) if str(exc).startswith(task.id) else f"{task.id}: {exc}"

    played = await asyncio.gather(*(one(t) for t in items))
    raise_failed([p for p in played if isinstance(p, str)], len(items), "team reference episodes")
    return [p for p in played if isinstance(p, TeamTrace)]


async def write_team_traces(
    tasks: TaskSet | Sequence[AnyTask],
    path: str | Path,
    pool: SandboxPool,
    team: TeamConfig,
    agent: AgentConfig,
    tokenizer: Any,
    *,
    reject_share: float = 0.5,
    env_config: EnvConfig | None = None,
) -> list[TeamTrace]:
    """Play every task (see `team_traces`) and write every role's row as SFT JSONL to `path`;
    nothing is written when one fails."""
    traces = await team_traces(tasks, pool, team, agent, tokenizer, reject_share=reject_share,
                               env_config=env_config)  # fmt: skip
    write_rows(path, (row for trace in traces for row in trace.rows))
    return traces
