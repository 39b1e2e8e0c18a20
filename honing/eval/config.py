"""The settings behind `honing eval`, one per flag.

    config = EvalConfig(tasks="humaneval", policy="reference", k=4)
    config.model_policy         # False: a scripted policy (`make_policy(config.policy)`)

A policy is a built-in scripted one (`POLICIES`), `model:PATH` or `openai:URL[#MODEL]`. The
sampling settings of a model policy are None when not given: the model's saved agent settings
(`honing.rollout.saved_agent`) or the defaults fill them in, and `SamplingParams` validates them.
The weights' dtype is `honing.precision.Dtype`; the shard is `honing.rollout.config.Shard`.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from honing.config import SandboxConfig, StrictModel
from honing.eval.policies import POLICIES
from honing.precision import Dtype
from honing.rollout.config import Shard

MODEL_POLICIES = ("model:", "openai:")  # the prefixes of a policy an engine plays


class EvalConfig(StrictModel):
    """What `honing eval` evaluates, with which policy, how often and how."""

    tasks: str = Field(description="Task set: built-in name (humaneval), path or fsspec URL.")
    policy: str = Field(description="A built-in policy, model:PATH or openai:URL[#MODEL].")
    k: int = Field(1, ge=1, description="Episodes (samples) per task; pass@k up to k.")
    max_steps: int | None = Field(None, ge=1, description="Steps after which an episode ends.")
    shard: Shard | None = Field(None, description="Only shard I/N of the tasks.")
    concurrency: int | None = Field(None, ge=1, description="Episodes at once.")
    max_new_tokens: int | None = Field(None, description="Model policies: tokens per turn.")
    system_prompt: str | None = Field(None, description="Model policies: the system prompt.")
    temperature: float | None = Field(None, description="Model policies: sampling temperature.")
    seed: int | None = Field(None, description="Model policies: sampling seed.")
    dtype: Dtype = Field("auto", description="model:PATH: the weights' dtype.")
    images: bool = Field(False, description="Model policies: show the tools' images.")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)  # isolation

    @field_validator("policy")
    @classmethod
    def _known(cls, policy: str) -> str:
        if policy in POLICIES or policy.startswith(MODEL_POLICIES):
            return policy
        raise ValueError(f"unknown; allowed: {', '.join(POLICIES)}, model:PATH, openai:URL")

    @property
    def model_policy(self) -> bool:
        """Whether an engine plays (model:PATH, openai:URL), not a scripted policy."""
        return self.policy.startswith(MODEL_POLICIES)
