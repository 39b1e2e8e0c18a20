"""The code domain's submissions, for a team's scripted traces: the code an action submits (its
```python block, or what it writes to solution.py), plausible wrong versions of the reference's
(`wrong_submissions`: the file as the task handed it over, then one-token changes of the
reference), and one sentence on what a submission changes (`describe_submission`). Not covered:
the team's scripts themselves (`honing.trainer.team_traces`).
"""

from __future__ import annotations

import difflib
import hashlib

from honing.domains.code.repair import mutations
from honing.domains.code.task import CODE_SOLUTION, CodeTask
from honing.envs.base import Action, ToolCall
from honing.tasks.load import AnyTask

CODE_BLOCK_OPEN = "```python\n"


def submitted_code(action: Action) -> str | None:
    """The code an action submits: its ```python block, or what it writes to solution.py."""
    content = action.content
    if CODE_BLOCK_OPEN in content:
        body = content.split(CODE_BLOCK_OPEN, 1)[1]
        return body.rsplit("```", 1)[0]
    for call in action.tool_calls:
        if call.name == "write_file" and call.arguments.get("path") == CODE_SOLUTION:
            value = call.arguments.get("content")
            return value if isinstance(value, str) else None
    return None


def with_code(action: Action, code: str) -> Action:
    """`action` submitting `code` instead (its ```python block or its write_file content)."""
    if CODE_BLOCK_OPEN in action.content:
        return Action(content=f"{CODE_BLOCK_OPEN}{code}```")
    calls = [
        ToolCall(id=c.id, name=c.name, arguments={**c.arguments, "content": code})
        if c.name == "write_file"
        else c
        for c in action.tool_calls
    ]
    return Action(content=action.content, tool_calls=calls)


def wrong_submissions(task: AnyTask, submission: Action) -> list[Action]:
    """Plausible wrong versions of the reference's submission, most plausible first: the file
    as the task handed it over (a repair submitted unchanged), then one-token changes of the
    reference (`repair.mutations`); [] when `submission` submits no code."""
    code = submitted_code(submission)
    if code is None:
        return []
    given = getattr(task, "files", {}).get(CODE_SOLUTION)
    found = [given] if isinstance(given, str) and given.strip() != code.strip() else []
    for mutation in mutations(code, first_line=2):
        changed = mutation.apply(code)
        if changed not in found and changed.strip() != code.strip():
            found.append(changed)
    digest = hashlib.sha256(task.id.encode()).digest()
    if len(found) > 1 and digest[0] % 2:  # half the tasks: a changed token first
        found = [found[1 + digest[1] % (len(found) - 1)], *found]
    return [with_code(submission, c) for c in found]


def describe_submission(task: AnyTask, action: Action) -> str:
    """What `action` submits against the file the task started from."""
    start = task.files.get(CODE_SOLUTION) if isinstance(task, CodeTask) else None
    return describe_change(start, submitted_code(action))


def describe_change(before: str | None, after: str | None) -> str:
    """One sentence on what a code submission changes against the file it started from."""
    if before is None or after is None:
        return "It submits the result shown."
    old, new = before.strip().splitlines(), after.strip().splitlines()
    if old == new:
        return f"It submits {CODE_SOLUTION} unchanged."
    for i, (a, b) in enumerate(zip(old, new, strict=False), 1):
        if a != b:
            was, now = changed_span(a.strip(), b.strip())
            return f"It changes line {i} from `{was}` to `{now}`."
    extra = difflib.unified_diff(old, new, lineterm="", n=0)
    return "It changes " + " ".join(list(extra)[2:4]) + "."


def changed_span(a: str, b: str, context: int = 8, whole: int = 40) -> tuple[str, str]:
    """Two versions of a line, each cut to where they differ with at least `context`
    characters around it, widened to the spaces around that ("…" marks a cut), when either is
    longer than `whole`; else both whole. A long line would make the validator's reply longer
    than its turn, and its verdict comes last.

    >>> changed_span("return [x for x in values if x > limit and x % 2 == 0 or x is None]",
    ...              "return [x for x in values if x >= limit and x % 2 == 0 or x is None]")
    ('…values if x > limit and…', '…values if x >= limit and…')
    """
    if max(len(a), len(b)) <= whole:
        return a, b
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    start = a.rfind(" ", 0, max(0, prefix - context)) + 1  # 0 when there is no space before

    def cut(line: str) -> str:
        end = line.find(" ", min(len(line), len(line) - suffix + context))
        end = len(line) if end < 0 else end
        return ("…" if start else "") + line[start:end] + ("…" if end < len(line) else "")

    return cut(a), cut(b)
