"""Environments: the async contract (`base`), the tools several domains share (`kits`), and the
environments of the domains not yet in a package of their own.

Covered: the contract (actions, observations, named rewards, failure taxonomy, task state, limits,
checkpoint/rollback) and the `code` environment (the other domains' are in
`honing.domains.<name>.env`); `registry` maps a domain to its environment; `verifiers` versions each
domain's scoring code (for re-scores). Not covered here: the agent loop that turns a model's text
into actions (the rollout layer).
"""

from honing.envs.base import (
    Action,
    EnvConfig,
    Environment,
    FailureReason,
    MalformedAction,
    Observation,
    StepInfo,
    StepResult,
    TaskState,
    ToolCall,
    ToolResult,
)
from honing.envs.code import CodeEnv

__all__ = [
    "Action",
    "CodeEnv",
    "EnvConfig",
    "Environment",
    "FailureReason",
    "MalformedAction",
    "Observation",
    "StepInfo",
    "StepResult",
    "TaskState",
    "ToolCall",
    "ToolResult",
]
