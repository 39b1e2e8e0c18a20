"""The code domain's task: a function to write (or the `solution.py` to fix), its entry point and
the tests that judge it."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

from pydantic import Field, field_validator

from honing.tasks.schema import TaskBase

CODE_SOLUTION = "solution.py"  # where a code task's solution lives in the workspace


class CodeTask(TaskBase):
    domain: Literal["code"] = "code"
    entry_point: str = Field(min_length=1, description="The function the solution must define.")
    tests: str = Field(min_length=1, description="Python that raises when the solution is wrong.")
    files: dict[str, str] = Field(
        default_factory=dict,
        description="Workspace files at the start of an episode: relative path → text. A "
        "`solution.py` among them is the code to fix (else solution.py starts as the prompt).",
    )

    @field_validator("files")
    @classmethod
    def _files_stay_in_the_workspace(cls, value: dict[str, str]) -> dict[str, str]:
        for path in value:
            parts = PurePosixPath(path).parts
            if not path.strip() or path.startswith("/") or "\\" in path or ".." in parts:
                raise ValueError(
                    f"file path {path!r} must be relative to the workspace (no leading '/', "
                    "no '..', no backslash)"
                )
        return value

    @property
    def repair(self) -> bool:
        """The task ships the solution to fix (`files` holds solution.py)."""
        return CODE_SOLUTION in self.files
