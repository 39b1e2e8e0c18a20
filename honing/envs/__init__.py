"""Environments: the async contract (`base`) and one file per domain.

Covered: the contract (actions, observations, named rewards, failure taxonomy, task state,
limits, checkpoint/rollback) and the `code`, `math`, `tools` and `sql` domains; `registry` maps a
domain to its environment; `verifiers` versions each domain's scoring code (for re-scores).
Not covered here: the agent loop that turns a model's text into actions (the rollout layer).
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
