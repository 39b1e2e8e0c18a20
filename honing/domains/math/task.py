"""The math domain's task: a problem and the final answer the math judge compares with."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from honing.tasks.schema import TaskBase


class MathTask(TaskBase):
    domain: Literal["math"] = "math"
    answer: str = Field(min_length=1, description="The final answer (a number or expression).")
