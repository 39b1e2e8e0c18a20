"""Environments: the async contract (`base`) and one file per domain.

Covered so far: the contract (actions, observations, named rewards, failure taxonomy, task
state, limits, checkpoint/rollback) and the `code` domain. Not covered yet: the sql, tools and
math domains and their synthetic generators.
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
