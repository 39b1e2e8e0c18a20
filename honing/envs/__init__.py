"""Environments: the async contract (`base`), the registry of each domain's environment
(`registry`), the version of each domain's scoring code (`verifiers`, for re-scores) and the tools
several domains share (`kits`: the calculator, the stated answer, the DuckDB runner, the risk of
SQL statements). Each domain's own environment is in its package (`honing.domains.<name>.env`).
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

__all__ = [
    "Action",
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
