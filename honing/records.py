"""The trajectory records: what one episode produced, token for token, and a group of them.

    Trajectory   one episode: the exact token ids (prompt, model turns, observations), a loss mask
                 over the model's tokens, the engine's logprobs and policy version per token, the
                 turns with their actions, rewards, failures and timings, and how the episode ended
    Turn         one assistant message or one observation, with its span in the token ids
    Retry        one retried attempt of an episode and its cause
    Group        the n trajectories of one task (what GRPO-style advantages are computed over)
    by_role      team groups split into one group per role (`team_of`: a stored row's episode)
    ROLE_CREDIT  the component a team role is trained on (its credit; `outcome` otherwise)

Token-faithful: `token_ids[turn.start:turn.end]` is exactly what the engine produced for an
assistant turn and exactly what was appended for an observation turn; nothing is re-tokenized.
For a chat engine that returns no token ids, the spans are empty and only the text is kept.

At the bottom of the layers (it imports only `honing.risk`), so every layer can use them.
Not covered here: storing them (`honing.store`) and producing them (`honing.rollout`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from honing.risk import RiskEvent

# A team role's episode-level credit (honing.rollout.team): the team's outcome times the role's
# weight plus its own named reward. The learner trains a role on it instead of `outcome`.
ROLE_CREDIT = "role_credit"


class Ending(enum.StrEnum):
    """How an episode ended."""

    DONE = "done"  # the environment ended it (solved, or submitted and judged)
    STEP_LIMIT = "step_limit"  # max steps reached
    CONTEXT_LIMIT = "context_limit"  # the model's context or the token budget ran out
    STOPPED = "stopped"  # the policy stopped acting (no action)
    TIMEOUT = "timeout"  # a deadline (step or episode) passed; `Trajectory.failure` says which
    INFRA_ERROR = "infra_error"  # retries exhausted on infrastructure failures
    STALE = "stale"  # dropped: too many policy versions behind


@dataclass(slots=True)
class Turn:
    """An assistant message (`role="assistant"`) or the observation after it (`role="tool"`;
    `role="user"` for the first prompt). Step fields are set on observation turns."""

    role: str
    text: str
    start: int = 0  # span in Trajectory.token_ids, end exclusive
    end: int = 0
    version: int = -1  # assistant: the oldest policy version among its tokens
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # assistant, OpenAI shape
    finish_reason: str = ""  # assistant: stop | length | abort
    generation_s: float = 0.0
    reward: float = 0.0  # observation: the step's weighted reward
    components: dict[str, float] = field(default_factory=dict)
    failure: str | None = None  # observation: the step's FailureReason value
    detail: str = ""
    step_s: float = 0.0
    tool_s: dict[str, float] = field(default_factory=dict)
    risk: float = 0.0  # observation: the step's risk cost (honing.risk.risk_cost of `risks`)
    risks: list[RiskEvent] = field(default_factory=list)  # observation: what was detected
    # observation: the images its tool results drew, as PNG files relative to the store's
    # directory (set by the store's writer); `image_data` holds their bytes until then and is
    # never stored, compared or printed.
    images: list[str] = field(default_factory=list)
    image_data: list[bytes] = field(default_factory=list, compare=False, repr=False)


@dataclass(slots=True)
class Retry:
    """One attempt that failed for an infrastructure reason and was started again."""

    attempt: int
    stage: str  # setup | generate | step | scoring | episode; "stale": re-issued for staleness
    cause: str  # the exception type and message
    at_s: float  # seconds since the episode was first started


@dataclass(slots=True)
class Trajectory:
    task_id: str
    domain: str
    sample: int = 0  # index within its group
    group_id: str = ""
    id: str = ""
    tags: list[str] = field(default_factory=list)
    dataset: str = ""
    dataset_version: str = ""
    turns: list[Turn] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)  # 1 on tokens the model generated
    logprobs: list[float] = field(default_factory=list)  # the engine's; 0.0 where mask is 0
    versions: list[int] = field(default_factory=list)  # policy version per token; -1 where mask 0
    prompt_len: int = 0  # tokens of the first prompt
    reward: float = 0.0  # sum of the steps' weighted rewards
    components: dict[str, float] = field(default_factory=dict)  # last value of each component
    success: bool = False  # the outcome component reached 1
    risk: float = 0.0  # sum of the steps' risk costs (honing.risk), apart from the reward
    ending: Ending = Ending.DONE
    failure: str | None = None  # FailureReason value (or deadline stage) that ended it, if any
    detail: str = ""
    retries: list[Retry] = field(default_factory=list)
    generation_s: float = 0.0
    env_s: float = 0.0
    queue_s: float = 0.0  # waiting for engine and sandbox slots
    total_s: float = 0.0
    started_at: float = 0.0  # unix time
    policy_version: int = -1  # oldest version among its model tokens (-1: none generated)
    temperature: float | None = None  # its turns' sampling temperature (None: not recorded)
    role: str = ""  # the team role that played it (honing.rollout.team); "" for a single agent
    # A team partner's group within its role (the verdicts sampled on one submission share one;
    # "": the role's group is the task's); `by_role` folds it into `group_id`, so never stored.
    subgroup: str = field(default="", compare=False, repr=False)
    # A team episode's other roles, carried by the executor's trajectory until `by_role` splits
    # them into groups of their own; never stored (each is stored as a row of its own).
    partners: list[Trajectory] = field(default_factory=list, compare=False, repr=False)

    @property
    def steps(self) -> int:
        return sum(1 for t in self.turns if t.role == "tool")

    @property
    def risks(self) -> list[RiskEvent]:
        """The risk events of all its steps, in order."""
        return [e for t in self.turns for e in t.risks]

    @property
    def model_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def infrastructure_failed(self) -> bool:
        return self.ending is Ending.INFRA_ERROR


@dataclass(slots=True)
class Group:
    """The n trajectories sampled for one task."""

    task_id: str
    group_id: str
    trajectories: list[Trajectory]

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]


def team_of(trajectory: Trajectory) -> tuple[str, int]:
    """The team episode a role's stored trajectory belongs to, as `by_role` named it: the group
    id before `:<role>` and the executor's sample (a verdict sampled on one submission carries it
    in its group id, `<group>:<role>:<sample>.<subgroup>`)."""
    suffix = f":{trajectory.role}"
    head, sep, tail = trajectory.group_id.rpartition(suffix + ":")
    sample, dot, _ = tail.partition(".")
    if sep and dot and sample.isdigit():
        return head, int(sample)
    return trajectory.group_id.removesuffix(suffix), trajectory.sample


def by_role(groups: list[Group]) -> list[Group]:
    """Team groups split into one group per (task, role), so that each role's advantages are
    computed among its own samples; a group without partners is returned as it is. Each role's
    trajectory takes its sample index and its group id (`<group>:<role>`) from the executor's
    (the scheduler sets those on the executor only). A partner with a `subgroup` (the verdicts
    sampled on one submission) is grouped with those of its executor episode's that share it
    (`<group>:<role>:<executor's sample>.<subgroup>`), keeping its own sample index."""
    out: list[Group] = []
    for group in groups:
        if not any(t.partners for t in group.trajectories):
            out.append(group)
            continue
        split: dict[str, list[Trajectory]] = {}
        lead_role = next(t.role for t in group.trajectories if t.partners)
        for lead in group.trajectories:
            lead.role = lead.role or lead_role  # one the scheduler flagged (no team ran)
            for t in [lead, *lead.partners]:
                key = t.role
                if t is not lead:
                    t.started_at = lead.started_at
                    if t.subgroup:
                        key = f"{t.role}:{lead.sample}.{t.subgroup}"
                        t.id = f"{lead.id}:{t.role}:{t.subgroup}.{t.sample}"
                    else:
                        t.sample, t.id = lead.sample, f"{lead.id}:{t.role}"
                    if lead.ending in (Ending.INFRA_ERROR, Ending.STALE):  # not a judged episode
                        t.ending, t.failure, t.detail = lead.ending, lead.failure, lead.detail
                t.group_id = f"{group.group_id}:{key}"
                t.subgroup = ""
                split.setdefault(key, []).append(t)
            lead.partners = []
        out += [Group(group.task_id, f"{group.group_id}:{key}", trajs)
                for key, trajs in split.items()]  # fmt: skip
    return out
