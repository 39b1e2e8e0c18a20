"""Teams: one episode played by several roles of the policy, analyst → executor ↔ validator.

    lead = await run_team_episode(task, env, engine, team, agent, gate=gate, sample=0)
    groups = by_role(groups_of_leads)        # honing.records: one group per (task, role)

The protocol (`TeamConfig`, docs/rollout.md "Teams"):
  1. the analyst (optional) reads the task and writes a plan;
  2. the executor sees the task and the plan and acts in the environment, as a single agent
     does; it is the only role whose actions the environment keeps;
  3. with a validator, every executor action is tried under a checkpoint; one that submits
     (calls one of the domain's submit tools, is a reply without calls that the environment
     acted on, or ends the episode) is reviewed **on the state after it**: the validator is shown
     the work so far and the submission (never the environment's answer to it, which may carry
     the judge's verdict), its configured checks (`RoleConfig.checks`, e.g. run_tests) are run
     there and their results shown with it, and its own tools (`RoleConfig.tools`) run on that
     state too: its evidence. The episode is reopened for them if the submission ended it.
     It answers ACCEPT, REJECT (with a reason) or STOP. Accepted, the tried step stands;
     rejected, the environment is rolled back to before it and the executor is told why (with
     `show_tried`, also what the environment answered the tried step, unless it ended the
     episode: what the agent alone would have seen); after `max_rounds` rejections the episode
     ends unsubmitted (`validator_rejected`). STOP ends the episode too; an executor that still
     calls a tool after it raises `acted_after_stop` (the call is not run).
  Roles with tools (the validator's independent checks) act under a checkpoint that is rolled
  back after them: they never change what the environment judges.
  With `verdicts: K` > 1 each review samples K verdicts on the same submission, each in a fresh
  context of its own (the task, the work, the submission, the checks' results: run once); the
  first one's verdict is the team's, and the K form the validator's group for that submission
  (`subgroup`, split by `honing.records.by_role`), so its advantages compare like with like.

Each role plays in its own context (its system prompt, the task, what the other roles told it)
and is recorded token for token as a `Trajectory` with its `role`; the executor's trajectory
carries the others in `partners` through the scheduler. Rewards: every role gets the team's
reward (the executor's, from the environment) times `rewards.outcome` (the validator's:
`rewards.validator_outcome` when set), plus its own named
component: the validator `verdict_value` (its verdicts priced by what they cost the team,
`verdict_value`: a right one +1, a wrong submission let through -`false_accept`, a right one sent
back -`false_reject`, or -1 when that rejection ends the episode), with `verdict_correct` (the
share of its verdicts that the verifier's verdict on the tried submission agrees with) beside it;
the analyst `plan_followed` (the share of its plan's terms that the executor's turns used,
`plan_followed`). Every role's `success` is the team's.
The learner trains each role on its credit (`ROLE_CREDIT`): the team's outcome (not its process
rewards) times the role's weight, plus the role's own weighted component.

By default all roles share one engine (one policy, told apart by their prompts); with
`adapters: per_role` a `RoleEngines` gives each role its own (docs/training.md, "Teams").
Not covered: scheduling and retries (`honing.rollout.scheduler`), advantages
(`honing.records.by_role` then the learner, per group).
"""

from __future__ import annotations

import asyncio
import enum
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from honing.config import StrictModel
from honing.envs.base import (
    Action,
    FailureReason,
    Observation,
    StepInfo,
    StepResult,
    ToolCall,
    ToolResult,
)
from honing.errors import ConfigError
from honing.records import ROLE_CREDIT, Ending, Trajectory
from honing.risk import event, risk_cost
from honing.rollout.agent import (
    OPEN_GATE,
    AgentConfig,
    EnvLike,
    Gate,
    InfraFailure,
    _Episode,
    guarded,
)
from honing.rollout.chat import Message
from honing.rollout.engines.base import Engine, Generation, Prompt, SamplingParams, WeightUpdate
from honing.tasks import domains
from honing.tasks.load import AnyTask

PROMPTS = {
    "analyst": (
        "You are the analyst of a team. Read the task and write a short numbered plan for the "
        "executor: the steps, the tools to call and what to check. Do not solve it yourself."
    ),
    "executor": None,  # honing's default tool-use prompt
    "validator": (
        "You are the validator of a team. The executor wants to submit the work shown. Check it "
        "against the task. End your reply with one line: ACCEPT if it is right, REJECT: <what "
        "is wrong> if it is not, or STOP: <why> if the team must not go on."
    ),
}


class Verdict(enum.StrEnum):
    ACCEPT = "accept"
    REJECT = "reject"
    STOP = "stop"


class CheckCall(StrictModel):
    """A tool call run for the validator on the submitted state before it speaks."""

    name: str = Field(min_length=1, description="One of the environment's tools, not a submit one.")
    arguments: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value


class RoleConfig(StrictModel):
    """One role of a team."""

    kind: Literal["analyst", "executor", "validator"]
    name: str | None = Field(None, description="Its name in the store and metrics; its kind.")
    system_prompt: str | None = Field(None, description="None: the kind's default prompt.")
    tools: list[str] | None = Field(
        None,
        description="The environment's tools it may call. None: all of them for the executor, "
        "none for the analyst and the validator (whose calls run under a rolled-back checkpoint).",
    )
    max_turns: int = Field(
        3, ge=1, description="Analyst and validator: model turns per consultation at most."
    )
    max_new_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens per reply of this role (None: the agent's).",
    )
    checks: list[CheckCall] = Field(
        default_factory=list,
        description="Validator: tool calls run for it on the submitted state before it speaks "
        "(e.g. [run_tests]), their results shown with the submission: evidence it gets without "
        "having to call a tool. A name alone is a call without arguments.",
    )

    @model_validator(mode="after")
    def _checks_are_the_validators(self) -> RoleConfig:
        if self.checks and self.kind != "validator":
            raise ValueError(f"checks: only a validator runs checks, not the {self.kind}")
        return self

    @property
    def role(self) -> str:
        return self.name or self.kind


class TeamRewards(StrictModel):
    """Each role's reward: the team's reward times `outcome`, plus its own component's weight."""

    outcome: float = Field(1.0, description="Weight of the team's reward, for every role.")
    verdict: float = Field(0.5, description="Weight of the validator's verdict_value.")
    plan: float = Field(0.2, description="Weight of the analyst's plan_followed.")
    validator_outcome: float | None = Field(
        None,
        description="The validator's weight of the team's reward (None: `outcome`). 0 trains "
        "the validator on its verdicts alone: a right fix sent back then costs it what a wrong "
        "fix let through does, where the team's reward makes a rejection cheap (the executor "
        "gets another round and may still succeed).",
    )
    false_accept: float = Field(
        1.0,
        ge=0.0,
        description="What a wrong submission the validator accepted costs it (in verdict_value, "
        "where a right verdict is +1): the team's outcome, lost.",
    )
    false_reject: float = Field(
        0.5,
        ge=0.0,
        description="What a right submission sent back costs the validator while rounds remain "
        "(the team spends a turn and may lose the fix); one sent back on the last round ends the "
        "episode unsubmitted and costs 1, as the outcome it throws away.",
    )

    def outcome_weight(self, kind: str) -> float:
        """The weight of the team's reward in role `kind`'s reward."""
        if kind == "validator" and self.validator_outcome is not None:
            return self.validator_outcome
        return self.outcome


class TeamConfig(StrictModel):
    """Roles and protocol of a team episode (module docstring)."""

    roles: list[RoleConfig] = Field(min_length=1)
    max_rounds: int = Field(3, ge=1, description="Validator rejections before the team gives up.")
    verdicts: int = Field(
        1,
        ge=1,
        le=16,
        description="Verdicts sampled per review, each in a fresh context on the same submission "
        "and evidence: the first is the team's, and the K are the validator's group for that "
        "submission (GRPO compares like with like). 1: one validator context for the episode.",
    )
    show_tried: bool = Field(
        False,
        description="When a submission the validator sent back did not end the episode, the "
        "executor is also shown what the environment answered when it was tried (a fix's test "
        "results): what the agent alone sees after the same step. Never when it ended the "
        "episode (that answer may carry the judge's verdict, and alone there is no next turn).",
    )
    submit_tools: list[str] | None = Field(
        None,
        description="Tools whose calls are submissions; None: the domain's (Domain.submit_tools).",
    )
    rewards: TeamRewards = TeamRewards()
    adapters: Literal["shared", "per_role"] = Field(
        "shared",
        description="shared: every role is the same policy (told apart by its prompt). per_role: "
        "each role trains its own LoRA adapter on the same base (learner.lora), served by an "
        "engine of its own (honing train).",
    )

    @model_validator(mode="after")
    def _check(self) -> TeamConfig:
        kinds = [r.kind for r in self.roles]
        if kinds.count("executor") != 1:
            raise ValueError(
                f"a team has exactly one executor role (the one that acts in the environment); "
                f"these roles have {kinds.count('executor')}: {kinds}"
            )
        for kind in ("analyst", "validator"):
            if kinds.count(kind) > 1:
                raise ValueError(f"a team has at most one {kind}; these roles have {kinds}")
        names = [r.role for r in self.roles]
        if len(set(names)) != len(names) or "" in names:
            raise ValueError(f"role names must be distinct and not empty: {names}")
        return self

    def role(self, kind: str) -> RoleConfig | None:
        return next((r for r in self.roles if r.kind == kind), None)

    def submits(self, domain: str) -> tuple[str, ...]:
        """The tools whose calls submit: the team's own, else the domain's (`Domain.submit_tools`;
        none for a domain the registry does not know)."""
        if self.submit_tools is not None:
            return tuple(self.submit_tools)
        known = domains.registry().get(domain)
        return known.submit_tools if known is not None else ()


class RoleEngines:
    """One engine per role (a team with per-role adapters), usable wherever one engine is: as an
    `Engine` it is the executor's (its version, tokenizer, generate), and `run_team_episode` asks
    it for each role's own with `for_role`. A role it does not name plays on the executor's."""

    def __init__(self, engines: dict[str, Engine], primary: str) -> None:
        if primary not in engines:
            raise ConfigError(f"RoleEngines: no engine for the primary role {primary!r}")
        self.engines, self.primary = dict(engines), engines[primary]
        self.name = self.primary.name
        self.accepts_tokens = self.primary.accepts_tokens

    def for_role(self, role: str) -> Engine:
        return self.engines.get(role, self.primary)

    @property
    def version(self) -> int:
        return self.primary.version

    @property
    def tokenizer(self) -> Any | None:
        return self.primary.tokenizer

    async def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams
                       ) -> list[Generation]:  # fmt: skip
        return await self.primary.generate(prompts, sampling)

    async def update_weights(self, update: WeightUpdate) -> None:
        await self.primary.update_weights(update)

    async def close(self) -> None:
        """Close every engine (each once)."""
        seen: set[int] = set()
        for engine in self.engines.values():
            if id(engine) not in seen:
                seen.add(id(engine))
                await engine.close()


def parse_verdict(text: str) -> tuple[Verdict | None, str]:
    """The validator's verdict, from the last line of its reply that starts with ACCEPT, REJECT
    or STOP (case and markdown emphasis ignored), and the reason after it; None when no line does.
    """
    for line in reversed(text.strip().splitlines()):
        m = VERDICT_LINE.match(line)
        if m:
            return Verdict(m.group(1).lower()), m.group(2).strip(" :-.")
    return None, ""


VERDICT_LINE = re.compile(r"^[\s*#>`_-]*(ACCEPT|REJECT|STOP)\b[*_`]*\s*[:.\-]?\s*(.*)$", re.I)
TERM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
COMMON = frozenset({
    "about", "above", "after", "again", "also", "analyst", "because", "before", "being", "below",
    "between", "both", "call", "calls", "check", "could", "does", "doing", "done", "each", "else",
    "every", "executor", "finally", "first", "from", "have", "here", "into", "just", "last",
    "like", "make", "more", "most", "much", "must", "need", "next", "only", "other", "over",
    "plan", "result", "results", "return", "same", "second", "should", "some", "step", "steps",
    "such", "task", "than", "that", "their", "them", "then", "there", "these", "they", "third",
    "this", "those", "through", "tool", "tools", "under", "until", "using", "validator", "value",
    "values", "very", "were", "what", "when", "where", "which", "while", "will", "with", "would",
    "write", "your",
})  # fmt: skip


def plan_terms(plan: str) -> set[str]:
    """The plan's terms: its distinct words of four or more characters (lowercased) that are not
    common English or the team's own vocabulary."""
    return {w.lower() for w in TERM.findall(plan) if len(w) >= 4 and w.lower() not in COMMON}


def plan_followed(plan: str, executed: str) -> float:
    """The share of the plan's terms that appear among the executor's words (0 for a plan with
    no terms): a cheap, checkable proxy for "the executor followed the plan"."""
    terms = plan_terms(plan)
    if not terms:
        return 0.0
    used = {w.lower() for w in TERM.findall(executed)}
    return len(terms & used) / len(terms)


@dataclass
class Review:
    """One validator review of a tried submission."""

    verdict: Verdict | None  # None: the validator gave none (counted as a wrong verdict)
    reason: str
    good: bool  # the verifier's verdict on the tried submission (its outcome reached 1)
    last: bool = False  # a rejection here ends the episode (its last round)

    @property
    def correct(self) -> bool:
        if self.verdict is None:
            return False
        return (self.verdict is Verdict.ACCEPT) == self.good


def verdict_value(review: Review, rewards: TeamRewards) -> float:
    """One verdict priced by what it costs the team: +1 when it is right (a good submission
    accepted, a bad one sent back or stopped); -`false_accept` for a bad submission accepted; for
    a good one not accepted (rejected, stopped, or no verdict), -1 when that ends the episode (STOP,
    or the last round: the team loses the right answer) and -`false_reject` while rounds remain."""
    if review.correct:
        return 1.0
    if review.verdict is Verdict.ACCEPT:
        return -rewards.false_accept
    if review.last or review.verdict is Verdict.STOP:
        return -1.0
    return -rewards.false_reject


async def run_team_episode(
    task: AnyTask,
    env: EnvLike,
    engine: Engine,
    team: TeamConfig,
    agent: AgentConfig,
    *,
    gate: Gate = OPEN_GATE,
    sample: int = 0,
    group_id: str = "",
    on_step: Callable[[Observation, Action, StepResult], None] | None = None,
    on_review: Callable[[Review], None] | None = None,
    conversations: dict[str, Conversation] | None = None,
) -> Trajectory:
    """Play one team episode of `task` (module docstring); returns the executor's trajectory with
    the other roles' in `partners`. Always closes `env`. `on_step` sees the executor's steps
    that stand (as `run_episode`'s does); `on_review` each validator review; `conversations`,
    when given, is filled with each role's `Conversation` (by role name) once the episode ends."""
    team_ = _Team(task, env, engine, team, agent, gate, sample, group_id, on_step, on_review)
    lead = await team_.run()
    if conversations is not None:
        for kind, seat in team_.seats.items():
            if kind == "validator" and team.verdicts > 1:  # its first sampled context, if any
                if not team_.samples:
                    continue
                seat = team_.samples[0][0]
            conversations[team_.roles[kind].role] = _conversation(seat, kind)
    return lead


@dataclass
class Conversation:
    """What one role saw and said in a team episode, as a chat example (`honing sft`'s format):
    its system prompt as configured (none when it is None), the first message it was shown,
    then every later message, and the tools it was offered apart (the chat template describes
    them). Rendered by `honing.trainer.sft`, it gives the tokens the role's trajectory holds."""

    role: str
    kind: str
    messages: list[Message]
    tools: list[dict[str, Any]]


def _conversation(seat: _Episode, kind: str) -> Conversation:
    said = seat.transcript.messages if seat.transcript is not None else seat.messages
    first = next((i for i, m in enumerate(said) if m.get("role") == "user"), len(said))
    prompt = seat.config.system_prompt
    head: list[Message] = [] if prompt is None else [{"role": "system", "content": prompt}]
    shown = seat.traj.turns[0].text if seat.traj.turns else ""
    messages = [*head, {"role": "user", "content": shown}, *(dict(m) for m in said[first + 1 :])]
    return Conversation(seat.traj.role, kind, messages, list(seat.tools))


class _Team:
    def __init__(self, task: AnyTask, env: EnvLike, engine: Engine, team: TeamConfig,
                 agent: AgentConfig, gate: Gate, sample: int, group_id: str,
                 on_step: Callable[[Observation, Action, StepResult], None] | None,
                 on_review: Callable[[Review], None] | None) -> None:  # fmt: skip
        if not (hasattr(env, "checkpoint") and hasattr(env, "rollback") and hasattr(env, "reopen")):
            raise ConfigError(
                f"a team needs an environment that can checkpoint and roll back (a honing "
                f"Environment); {type(env).__name__} cannot"
            )
        self.task, self.env, self.team, self.agent = task, env, team, agent
        self.on_step, self.on_review = on_step, on_review
        self.submits = team.submits(task.domain)
        self.gate, self.sample, self.group_id = gate, sample, group_id
        self.seats: dict[str, _Episode] = {}
        self.roles: dict[str, RoleConfig] = {}
        self.plays: dict[str, tuple[Engine, AgentConfig]] = {}
        for role in team.roles:
            prompt = role.system_prompt
            if prompt is None:  # the executor plays as a single agent would, by default
                prompt = agent.system_prompt if role.kind == "executor" else PROMPTS[role.kind]
            config = agent.model_copy(update={"system_prompt": prompt})
            if role.kind != "executor":
                config = config.model_copy(update={"max_turns": role.max_turns})
            if role.max_new_tokens is not None:
                config = config.model_copy(update={"sampling": config.sampling.model_copy(
                    update={"max_new_tokens": role.max_new_tokens})})  # fmt: skip
            plays = engine.for_role(role.role) if isinstance(engine, RoleEngines) else engine
            self.roles[role.kind] = role
            self.plays[role.kind] = (plays, config)
            self.seats[role.kind] = self._fresh_seat(role.kind)
        self.executor = self.seats["executor"]
        offered = {_tool_name(t) for t in getattr(env, "tools", [])}
        validator = self.roles.get("validator")
        for check in validator.checks if validator is not None else []:
            assert validator is not None
            if check.name not in offered or check.name in self.submits:
                why = "submits" if check.name in self.submits else "is not one of its tools"
                raise ConfigError(
                    f"team.roles ({validator.role}).checks: {check.name!r} {why} in the "
                    f"{task.domain} environment; a check is one of "
                    f"{', '.join(sorted(offered - set(self.submits))) or 'no tools'}"
                )
        self.reviews: list[Review] = []
        # verdicts > 1: each review's K seats and their K verdicts (the first is in `reviews`)
        self.samples: list[list[_Episode]] = []
        self.sampled: list[list[Review]] = []
        self.plan = ""

    def _fresh_seat(self, kind: str, name: str = "") -> _Episode:
        """A new context for role `kind`: its own trajectory, nothing said yet. `name` tells
        it from the role's other contexts (one of K verdicts) in its sampling seeds."""
        plays, config = self.plays[kind]
        seat = _Episode(self.task, self.env, plays, config, self.gate, None, self.sample,
                        self.group_id)  # fmt: skip
        seat.traj.role = self.roles[kind].role
        seat.seat = "/".join(p for p in ("" if kind == "executor" else kind, name) if p)
        return seat

    async def run(self) -> Trajectory:
        ex = self.executor
        self.started = time.monotonic()
        return await guarded(self._play, self.agent.deadlines.episode_s, ex._end, ex._close,
                             self._finish)  # fmt: skip

    # -- the protocol ---------------------------------------------------------------------------

    async def _play(self) -> None:
        ex = self.executor
        first = await ex._call("setup", self.agent.deadlines.setup_s, ex.gate.env,
                               lambda: self.env.reset(self.task))  # fmt: skip
        self.task_text = first.text
        if "analyst" in self.seats:
            self.plan = await self._consult("analyst", None)
        shown = first
        if self.plan:
            shown = first.model_copy(update={"text": f"{first.text}\n\nThe analyst's plan:\n"
                                                     f"{self.plan}"})  # fmt: skip
        ex._start(self._visible(shown, "executor"))
        observation, rejections = shown, 0
        for turn in range(self.agent.max_turns):
            sampling = ex._budget()
            if sampling is None:
                return ex._end(Ending.CONTEXT_LIMIT, "context_limit",
                               f"{self.agent.max_total_tokens} tokens used up")  # fmt: skip
            action, malformed = ex._act(await ex._generate(sampling), turn)
            refused = self._refused(action, "executor")
            if malformed is None and refused:
                malformed = refused
            result, review = await self._executor_step(action, malformed, rejections)
            if result.info.infrastructure:
                assert result.info.failure is not None
                raise InfraFailure("step", f"{result.info.failure.value}: {result.info.detail}")
            if self.on_step is not None and (review is None or review.verdict is Verdict.ACCEPT):
                self.on_step(observation, action, result)  # a step that stands
            fits = ex._observe(result)
            observation = result.observation
            if review is not None and review.verdict is Verdict.STOP:
                return await self._after_stop(review)
            if review is not None and review.verdict is not Verdict.ACCEPT:
                rejections += 1
                if rejections >= self.team.max_rounds:
                    return ex._end(Ending.DONE, FailureReason.VALIDATOR_REJECTED.value,
                                   f"the validator rejected {rejections} submission(s): "
                                   f"{review.reason}")  # fmt: skip
            if result.done:
                return ex._end_by(result)
            if not fits:
                return ex._end(Ending.CONTEXT_LIMIT, "context_limit",
                               "the observation does not fit in max_total_tokens")  # fmt: skip
        ex._end(Ending.STEP_LIMIT, "max_turns", f"{self.agent.max_turns} turns played")

    async def _executor_step(self, action: Action, malformed: str | None, rejections: int
                             ) -> tuple[StepResult, Review | None]:  # fmt: skip
        """The executor's step; a submission is tried (for the verifier's verdict), reviewed on
        the state after it (the evidence: what the environment answered, and the validator's own
        checks there), then kept (accepted) or rolled back to before it."""
        ex = self.executor
        if malformed is not None or "validator" not in self.seats:
            return await ex._step(action, malformed), None
        before = await self.env.checkpoint()  # every action: one that ends the episode submits
        tried = await ex._step(action, None)
        if tried.info.infrastructure or not self._submitted(action, tried):
            return tried, None
        review = await self._review(action, tried, last=rejections + 1 >= self.team.max_rounds)
        if review.verdict is Verdict.ACCEPT:
            return tried, review  # the tried step stands (the checks rolled back to it)
        await self.env.rollback(before)
        return self._sent_back(action, tried, review), review

    def _submitted(self, action: Action, result: StepResult) -> bool:
        """Whether the tried action is a submission: it called a submit tool, it is a reply
        without calls that the environment acted on (a ```python block written and tested, a
        \\boxed{} answer), or it ended the episode (not by the step limit)."""
        if any(c.name in self.submits for c in action.tool_calls):
            return True
        if not action.tool_calls and result.observation.tool_results:
            return True
        return result.done and not result.info.step_limit

    async def _review(self, action: Action, tried: StepResult, *, last: bool) -> Review:
        """The validator's review of the tried submission, on the state after it; with
        `verdicts` > 1, that many sampled in fresh contexts (module docstring), the first the
        team's."""
        good = tried.components.get("outcome", 0.0) >= 1.0
        calls = "\n".join(f"- {c.name}({_short(str(c.arguments), 1500)})"
                          for c in action.tool_calls) or "(a reply without tool calls)"  # fmt: skip
        checks = self._tools("validator")
        where = ("The submission is in place: your tools "
                 f"({', '.join(_tool_name(t) for t in checks)}) run on the work as submitted.\n"
                 if checks else "")  # fmt: skip
        request = (
            f"The executor's work so far:\n{self._work()}\n\nIt now submits:\n{calls}\n"
            f"{_short(action.content, 1500)}\n\n{await self._checks()}{where}"
            "Review it and end with ACCEPT, REJECT: <why> or STOP: <why>."
        )
        if self.team.verdicts == 1:
            replies = [await self._consult("validator", request)]
        else:
            seats = [self._fresh_seat("validator", f"review{len(self.samples)}/{k}")
                     for k in range(self.team.verdicts)]  # fmt: skip
            # With tools the checks share the environment: one at a time. Without, together
            # (the engine batches them).
            if checks:
                replies = [await self._consult("validator", request, seat) for seat in seats]
            else:
                replies = list(await asyncio.gather(
                    *(self._consult("validator", request, seat) for seat in seats)))  # fmt: skip
        reviews = [self._verdict(reply, good, last) for reply in replies]
        if self.team.verdicts > 1:  # recorded once all K are in (an episode cut short drops them)
            self.samples.append(seats)
            self.sampled.append(reviews)
        review = reviews[0]
        self.reviews.append(review)
        if self.on_review is not None:
            self.on_review(review)
        return review

    async def _checks(self) -> str:
        """The validator's configured checks (`RoleConfig.checks`) run on the submitted state
        under a checkpoint rolled back after them (the episode reopened if the submission ended
        it), as the text shown with the submission; "" without checks."""
        role = self.roles["validator"]
        if not role.checks:
            return ""
        token = await self.env.checkpoint()
        self._reopen()
        lines = []
        try:
            for i, check in enumerate(role.checks):
                call = ToolCall(id=f"check-{i}", name=check.name, arguments=dict(check.arguments))
                result = await self.env.step(Action(tool_calls=[call]))
                if result.info.infrastructure:
                    assert result.info.failure is not None
                    raise InfraFailure("step", f"{result.info.failure.value}: "
                                               f"{result.info.detail}")  # fmt: skip
                said = "\n".join(r.content for r in result.observation.tool_results)
                args = ", ".join(f"{k}={v!r}" for k, v in check.arguments.items())
                lines.append(f"- {check.name}({args}):\n{_short(said or '(no output)', 1500)}")
                if self.env.done:
                    break
        finally:
            await self.env.rollback(token)
        return "Checks run on the work as submitted:\n" + "\n".join(lines) + "\n\n"

    def _reopen(self) -> None:
        """After a checkpoint: an episode the submission ended takes the checks' steps (the
        rollback to that checkpoint ends it again)."""
        if self.env.done:
            self.env.reopen()

    @staticmethod
    def _verdict(reply: str, good: bool, last: bool) -> Review:
        verdict, reason = parse_verdict(reply)
        if verdict is None:
            reason = "the validator gave no verdict (ACCEPT, REJECT or STOP)"
        return Review(verdict, reason or "no reason given", good, last)

    def _sent_back(self, action: Action, tried: StepResult, review: Review) -> StepResult:
        """What the executor sees of a submission the validator did not accept: the environment
        as before it (rolled back), each call answered with the verdict; the tried step's risk
        stays (what it ran, ran)."""
        stopped = review.verdict is Verdict.STOP
        said = (f"The validator said STOP: {review.reason}. Do not call any more tools."
                if stopped else
                f"Not submitted: the validator rejected it: {review.reason}")  # fmt: skip
        answered = _answered(tried) if self.team.show_tried and not (stopped or tried.done) else ""
        if answered:
            said += f"\nWhen it was tried, the environment answered:\n{answered}"
        results = [ToolResult(call_id=c.id, name=c.name, content=said, ok=False)
                   for c in action.tool_calls]  # fmt: skip
        state = getattr(self.env, "state", None)
        text = state.render() if state is not None else ""
        if not results:
            text = f"{said}\n\n{text}" if text else said
        failure = FailureReason.VALIDATOR_STOPPED if stopped else FailureReason.VALIDATOR_REJECTED
        info = StepInfo(failure=failure, detail=said, step=tried.info.step,
                        step_s=tried.info.step_s, tool_s=dict(tried.info.tool_s),
                        risks=list(tried.info.risks))  # fmt: skip
        observation = Observation(text=text, update="" if results else text, tool_results=results,
                                  tools=self._tools("executor"))  # fmt: skip
        return StepResult(observation=observation, reward=0.0, components={}, done=False,
                          info=info, risk=tried.risk)  # fmt: skip

    async def _after_stop(self, review: Review) -> None:
        """The executor's one turn after a STOP: a tool call there is `acted_after_stop` (not
        run); then the episode ends."""
        ex = self.executor
        detail = f"the validator said stop: {review.reason}"
        sampling = ex._budget()
        if sampling is not None:
            action, _ = ex._act(await ex._generate(sampling), self.agent.max_turns)
            if action.tool_calls:
                names = ", ".join(c.name for c in action.tool_calls)
                risks = [event("acted_after_stop", f"called {names} after the validator's STOP")]
                said = "Not run: the validator said stop."
                observation = Observation(text=said, update=said, tool_results=[
                    ToolResult(call_id=c.id, name=c.name, content=said, ok=False)
                    for c in action.tool_calls])  # fmt: skip
                ex._observe(StepResult(
                    observation=observation, reward=0.0, components={}, done=True,
                    info=StepInfo(failure=FailureReason.VALIDATOR_STOPPED, detail=said,
                                  risks=risks),
                    risk=risk_cost(risks),
                ))  # fmt: skip
        ex._end(Ending.DONE, FailureReason.VALIDATOR_STOPPED.value, detail)

    async def _consult(self, kind: str, request: str | None, seat: _Episode | None = None) -> str:
        """One turn of `kind` (analyst or validator) in `seat` (its own by default): its reply's
        text. Its first consultation starts its context with the task (and `request`); later ones
        add `request` as a message. Tool calls it is allowed run on the executor's state under a
        checkpoint rolled back afterwards (an episode the submission ended is reopened for them),
        at most `max_turns` model turns in all."""
        seat = self.seats[kind] if seat is None else seat
        role = self.roles[kind]
        if seat.transcript is None and not seat.messages:
            text = self.task_text if request is None else f"{self.task_text}\n\n{request}"
            seat._start(self._visible(Observation(text=text), kind))
        elif request is not None and not seat.tell(request):
            return ""
        allowed = self._tools(kind)
        token = await self.env.checkpoint() if allowed else None
        if token is not None:
            self._reopen()
        reply = ""
        try:
            for turn in range(role.max_turns):
                sampling = seat._budget()
                if sampling is None:
                    break
                action, malformed = seat._act(await seat._generate(sampling), turn)
                reply = action.content
                if not action.tool_calls or malformed is not None or not allowed:
                    break
                refused = self._refused(action, kind)
                if refused is not None or self.env.done:
                    result = _refusal(action, refused or "the episode is over", allowed)
                else:
                    result = await seat._step(action, None)
                    if result.info.infrastructure:
                        assert result.info.failure is not None
                        raise InfraFailure("step", f"{result.info.failure.value}: "
                                                   f"{result.info.detail}")  # fmt: skip
                # Its checks are not the team's outcome: only their risk counts, as its own.
                if not seat._observe(result.model_copy(update={
                    "reward": 0.0, "components": {}, "done": False,
                })):  # fmt: skip
                    break
        finally:
            if token is not None:
                await self.env.rollback(token)
        return reply

    def _tools(self, kind: str) -> list[dict[str, Any]]:
        role = self.roles[kind]
        offered = list(getattr(self.env, "tools", []))
        if role.tools is None:
            return offered if kind == "executor" else []
        names = set(role.tools)
        if kind != "executor":
            names -= set(self.submits)
        return [t for t in offered if _tool_name(t) in names]

    def _visible(self, observation: Observation, kind: str) -> Observation:
        return observation.model_copy(update={"tools": self._tools(kind)})

    def _refused(self, action: Action, kind: str) -> str | None:
        """Why the action is not allowed for the role (a tool it may not call), or None."""
        role = self.roles[kind]
        if role.tools is None and kind == "executor":
            return None
        allowed = {_tool_name(t) for t in self._tools(kind)}
        banned = [c.name for c in action.tool_calls if c.name not in allowed]
        if not banned:
            return None
        return (f"the {role.role} role may not call {', '.join(banned)}; its tools: "
                f"{', '.join(sorted(str(n) for n in allowed)) or 'none'}")  # fmt: skip

    def _work(self) -> str:
        """The executor's turns so far, as the validator is shown them (each cut short)."""
        lines = []
        for t in self.executor.traj.turns[1:]:
            who = "executor" if t.role == "assistant" else "result"
            lines.append(f"[{who}] {_short(t.text, 1200)}")
        return "\n".join(lines[-12:]) or "(nothing yet)"

    # -- credit ---------------------------------------------------------------------------------

    def _finish(self) -> Trajectory:
        lead = self.executor._finish(self.started)
        rewards = self.team.rewards
        team_reward, success = lead.reward, lead.success
        lead.reward = rewards.outcome * team_reward
        outcome = lead.components.get("outcome", 0.0)
        lead.components[ROLE_CREDIT] = rewards.outcome_weight("executor") * outcome
        lead.components["team_rounds"] = float(len(self.reviews))  # validator reviews
        lead.components["team_accepted"] = float(
            bool(self.reviews) and self.reviews[-1].verdict is Verdict.ACCEPT
        )
        partners: list[tuple[str, _Episode, list[Review], str, int]] = []  # kind, seat, reviews…
        for kind, seat in self.seats.items():
            if kind == "validator" and self.team.verdicts > 1:
                continue  # its contexts are the sampled ones, below
            if kind != "executor":
                partners.append((kind, seat, self.reviews, "", 0))
        for r, (seats, reviews) in enumerate(zip(self.samples, self.sampled, strict=True)):
            for k, (seat, review) in enumerate(zip(seats, reviews, strict=True)):
                partners.append(("validator", seat, [review], f"review{r}", k))
        for kind, seat, reviews, subgroup, k in partners:
            traj = seat._finish(self.started)
            traj.success = success
            traj.ending, traj.failure, traj.detail = lead.ending, lead.failure, lead.detail
            traj.components["outcome"] = lead.components.get("outcome", 0.0)
            traj.reward = rewards.outcome_weight(kind) * team_reward
            if subgroup:  # one of K verdicts on one submission: its own index in that group
                traj.subgroup, traj.sample = subgroup, k
            own = 0.0  # the role's named reward, weighted
            if kind == "validator" and reviews:
                value = sum(verdict_value(r, rewards) for r in reviews) / len(reviews)
                traj.components.update(_review_counts(reviews))
                traj.components["verdict_correct"] = sum(r.correct for r in reviews) / len(reviews)
                traj.components["verdict_value"] = value
                own = rewards.verdict * value
            if kind == "analyst":
                executed = "\n".join(t.text for t in lead.turns if t.role == "assistant")
                followed = plan_followed(self.plan, executed)
                traj.components["plan_followed"] = followed
                own = rewards.plan * followed
            traj.reward += own
            traj.components[ROLE_CREDIT] = rewards.outcome_weight(kind) * outcome + own
            lead.partners.append(traj)
        return lead


def _review_counts(reviews: list[Review]) -> dict[str, float]:
    """The validator's confusion counts against the verifier (for precision and recall: a
    "positive" is an accepted submission)."""
    return {
        "reviews": float(len(reviews)),
        "accepted_good": float(sum(r.verdict is Verdict.ACCEPT and r.good for r in reviews)),
        "accepted_bad": float(sum(r.verdict is Verdict.ACCEPT and not r.good for r in reviews)),
        "rejected_good": float(sum(r.verdict is not Verdict.ACCEPT and r.good for r in reviews)),
        "rejected_bad": float(sum(r.verdict is not Verdict.ACCEPT and not r.good for r in reviews)),
    }


def _refusal(action: Action, why: str, tools: list[dict[str, Any]]) -> StepResult:
    results = [ToolResult(call_id=c.id, name=c.name, content=f"not run: {why}", ok=False)
               for c in action.tool_calls]  # fmt: skip
    return StepResult(observation=Observation(text="", update="", tool_results=results,
                                              tools=tools),
                      reward=0.0, components={}, done=False,
                      info=StepInfo(failure=FailureReason.UNKNOWN_TOOL, detail=why))  # fmt: skip


def _tool_name(schema: dict[str, Any]) -> str:
    function = schema.get("function", schema)
    return str(function.get("name", "")) if isinstance(function, dict) else ""


def _answered(tried: StepResult) -> str:
    """What the environment answered a tried step: its tool results, or its text without them."""
    results = [r.content for r in tried.observation.tool_results]
    said = "\n".join(results) if results else (tried.observation.update or tried.observation.text)
    return _short(said.strip(), 1500)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]} …"


__all__ = [
    "CheckCall",
    "Conversation",
    "Review",
    "RoleConfig",
    "RoleEngines",
    "TeamConfig",
    "TeamRewards",
    "Verdict",
    "parse_verdict",
    "plan_followed",
    "plan_terms",
    "run_team_episode",
    "verdict_value",
]
