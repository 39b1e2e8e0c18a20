"""The code domain: write or fix a Python function until its tests pass, in a sandbox workspace.

Covered: the tools (`write_file`, `read_file`, `run_tests`, `run_python`, `rollback` to the best
state so far), `solution.py` seeded with the prompt or the code to fix, a reply with a ```python
block read as "write and test this", the reward components (outcome, compiles, tests_passed,
well_formed), and judging by `honing.domains.code.judge`, whose detected tampering is failure
`tampering`, outcome 0 (docs/envs.md, "Domains", "Reward hacking"); risk events: the sandbox's
of `run_python` and of the judged run (it runs the solution), and `test_tamper` when a
`write_file` or a `run_python` program deletes or changes a test file the task put in the
workspace (read on the host after the call). Not covered: the judge itself
(`honing.domains.code.judge`, `honing.domains.code.codejudge`).
"""

from __future__ import annotations

import errno
import re
from pathlib import PurePosixPath
from typing import Any

from honing.domains.code.judge import judged_run, run_files
from honing.domains.code.task import CODE_SOLUTION, CodeTask
from honing.envs.base import (
    Action,
    CallOutcome,
    EnvConfig,
    Environment,
    FailureReason,
    StepOutput,
    ToolCall,
    malformed,
    tool_schema,
)
from honing.errors import HoningError
from honing.risk import RiskEvent, event
from honing.sandbox import ExecRequest, ExecResult, ExecStatus, SandboxPool, Workspace
from honing.tasks.load import AnyTask

SOLUTION = CODE_SOLUTION
CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)
RUN_TIMEOUT_S = 10.0
TEST_NAME = re.compile(r"test_.*\.py|.*_test\.py|conftest\.py")
# What a written path (or what the model's programs made of the workspace) can make a write fail
# with; any other error is the host's.
PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.EEXIST,
                         errno.ELOOP, errno.EACCES, errno.EPERM})  # fmt: skip

TOOLS = [
    tool_schema("write_file", "Write a file in the workspace (replaces it).",
                {"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]),
    tool_schema("read_file", "Read a file of the workspace.", {"path": {"type": "string"}},
                ["path"]),
    tool_schema("run_tests", "Run the task's tests against solution.py.", {}, []),
    tool_schema("run_python", "Run a Python program in the workspace; see its output.",
                {"code": {"type": "string"}}, ["code"]),
    tool_schema("rollback", "Return the workspace to its best state so far.", {}, []),
]  # fmt: skip


class CodeEnv(Environment):
    domain = "code"

    def __init__(self, pool: SandboxPool, config: EnvConfig | None = None) -> None:
        super().__init__(pool, config)
        self.workspace: Workspace | None = None
        self.best: tuple[float, str] = (-1.0, "")
        self.tests: dict[str, bytes] = {}  # the test files the task put in the workspace

    @property
    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    async def close(self) -> None:
        if self.workspace is not None:
            self.pool.drop_workspace(self.workspace.id)
            self.workspace = None

    async def _reset(self, task: AnyTask) -> None:
        assert isinstance(task, CodeTask)
        await self.close()  # the last episode's workspace
        self.workspace = self.pool.workspace()
        if not task.repair:
            self.workspace.write(SOLUTION, task.prompt)
        for path, content in task.files.items():
            self.workspace.write(path, content)
        self.tests = {p: c.encode() for p, c in task.files.items() if is_test_path(p)}
        self.best = (-1.0, self.workspace.snapshot())
        assert self.state is not None
        self.state.constraints = [
            f"Define `{task.entry_point}` in {SOLUTION}.",
            "Only the workspace is writable; there is no network.",
        ]
        self.state.next_steps = (
            [f"read_file {SOLUTION} and run_tests to see what fails", f"fix {SOLUTION}"]
            if task.repair
            else [f"write_file {SOLUTION} with your implementation", "run_tests"]
        )

    def reference_actions(self, task: AnyTask) -> list[Action]:
        assert isinstance(task, CodeTask)
        if task.reference is None:
            raise HoningError(f"task {task.id} has no reference")
        test = ToolCall(id="ref-test", name="run_tests", arguments={})
        if task.repair:  # look, then write the fix as a ```python block (written, then tested)
            read = ToolCall(id="ref-read", name="read_file", arguments={"path": SOLUTION})
            fixed = task.reference if task.reference.endswith("\n") else task.reference + "\n"
            return [Action(tool_calls=[read, test]), Action(content=f"```python\n{fixed}```")]
        write = ToolCall(id="ref-write", name="write_file",
                         arguments={"path": SOLUTION, "content": task.reference})  # fmt: skip
        return [Action(tool_calls=[write, test])]

    async def _save(self) -> str:
        return self._ws().snapshot()

    async def _restore(self, saved: Any) -> None:
        self._ws().restore(saved)

    def _ws(self) -> Workspace:
        if self.workspace is None:
            raise HoningError("call reset(task) first")
        return self.workspace

    async def _step(self, action: Action) -> StepOutput:
        calls = list(action.tool_calls)
        if not calls:
            block = CODE_BLOCK.search(action.content)
            if block is None:
                return malformed("no tool call and no ```python block: call a tool, e.g. run_tests")
            calls = [
                ToolCall(
                    id="inline",
                    name="write_file",
                    arguments={"path": SOLUTION, "content": block.group(1)},
                ),
                ToolCall(id="inline-tests", name="run_tests", arguments={}),
            ]
        components, results, info = await self.run_calls(calls, self._call)
        assert self.state is not None
        self.state.actions.append(
            ", ".join(f"{c.name}" for c in calls)
            + (
                f" -> tests {components['tests_passed']:.0%}"
                if "tests_passed" in components
                else ""
            )
        )
        if components.get("outcome") == 1.0:
            self.done = True
        elif "tests_passed" in components:
            self.state.next_steps = [
                f"fix {SOLUTION} using the errors above",
                "run_tests",
                "rollback if a change made things worse",
            ]
        return components, results, info

    async def _call(self, call: ToolCall) -> CallOutcome:
        if call.name not in ("write_file", "run_python") or not self.tests:
            return await self._dispatch(call)
        before = self._test_files()
        outcome = await self._dispatch(call)
        outcome.risks += self._tampered(before)
        return outcome

    def _test_files(self) -> dict[str, bytes | None]:
        """The task's test files as the workspace holds them now (None: gone, or no longer a
        regular file)."""
        found: dict[str, bytes | None] = {}
        for path in self.tests:
            try:
                found[path] = self._ws().read(path)
            except (OSError, ValueError):
                found[path] = None
        return found

    def _tampered(self, before: dict[str, bytes | None]) -> list[RiskEvent]:
        """A test_tamper event per test file the call deleted or changed (putting one back as
        the task shipped it is no tampering)."""
        events = []
        for path, now in self._test_files().items():
            if now != before[path] and now != self.tests[path]:
                what = "deleted" if now is None else "changed"
                events.append(event("test_tamper", f"{what} {path}"))
        return events

    async def _dispatch(self, call: ToolCall) -> CallOutcome:
        ws = self._ws()
        args = call.arguments
        try:
            if call.name == "write_file":
                path, content = _str_arg(args, "path"), _str_arg(args, "content")
                try:
                    ws.write(path, content)
                except OSError as exc:
                    return _write_failed(path, exc)
                return CallOutcome(True, f"wrote {path} ({len(content)} characters)")
            if call.name == "read_file":
                path = _str_arg(args, "path")
                try:
                    text = ws.read(path).decode("utf-8", errors="replace")
                except FileNotFoundError as exc:
                    return CallOutcome(False, str(exc), failure=FailureReason.TOOL_ERROR)
                return CallOutcome(True, text[:20_000])
            if call.name == "run_tests":
                return await self._run_tests()
            if call.name == "run_python":
                result = await self.pool.run(
                    ExecRequest(
                        code=_str_arg(args, "code"), workspace=ws.id, timeout_s=RUN_TIMEOUT_S
                    )
                )
                return _from_run(result)
            if call.name == "rollback":
                ws.restore(self.best[1])
                return CallOutcome(True, "workspace restored to its best state so far")
        except ValueError as exc:  # a bad argument: a path outside the workspace, a wrong type
            return CallOutcome(False, str(exc), failure=FailureReason.MALFORMED_ACTION)
        known = ", ".join(t["function"]["name"] for t in TOOLS)
        return CallOutcome(
            False,
            f"unknown tool {call.name!r}; available: {known}",
            failure=FailureReason.UNKNOWN_TOOL,
        )

    async def _run_tests(self) -> CallOutcome:
        assert isinstance(self.task, CodeTask)
        ws = self._ws()
        run = judged_run(self.task, run_files(self.task, ws.files()), RUN_TIMEOUT_S)
        result = await self.pool.run(run.request)
        if result.status is not ExecStatus.OK:
            outcome = _from_run(result)
            if outcome.failure is None or not outcome.failure.infrastructure:
                outcome.components = {"outcome": 0.0, "compiles": 0.0, "tests_passed": 0.0}
            return outcome
        verdict = run.verdict(result)
        if verdict is None:  # the judge was ended before it could say anything: count nothing
            return CallOutcome(
                False,
                "the tests did not report a result (the judge's process was ended)",
                failure=FailureReason.TOOL_ERROR,
                components={"outcome": 0.0, "compiles": 0.0, "tests_passed": 0.0},
                risks=result.risks,
            )
        kept = ""
        if verdict.share > self.best[0]:
            try:
                self.best = (verdict.share, ws.snapshot())
            except OSError as exc:  # a tree nested past what a path can name (or a full disk)
                kept = f"\n(not kept as the best state: it cannot be copied: {exc.strerror})"
        failure = None
        if verdict.tampering:
            failure = FailureReason.TAMPERING
        elif not verdict.passed_all:
            failure = FailureReason.TOOL_ERROR
        components = {
            "outcome": 1.0 if verdict.passed_all else 0.0,
            "compiles": 1.0 if verdict.compiled else 0.0,
            "tests_passed": verdict.share,
        }
        return CallOutcome(
            verdict.passed_all,
            verdict.render() + kept,
            failure=failure,
            components=components,
            seconds=result.wall_s,
            log=result.stderr[-4000:],
            risks=result.risks,  # the judged run runs the model's solution
        )


def is_test_path(path: str) -> bool:
    """A path of tests or their data: test_*.py, *_test.py, conftest.py, or under a tests/
    folder."""
    parts = PurePosixPath(path).parts
    return bool(parts) and ("tests" in parts[:-1] or TEST_NAME.fullmatch(parts[-1]) is not None)


def _write_failed(path: str, exc: OSError) -> CallOutcome:
    """A write the path refused (too long, below a file, over a directory, a loop or a mode
    the model's programs made) is the model's; any other is the host's (a full disk, I/O)."""
    if exc.errno not in PATH_ERRNOS:
        return CallOutcome(False, f"the workspace could not be written: {exc.strerror}",
                           failure=FailureReason.SANDBOX_ERROR)  # fmt: skip
    shown = path if len(path) <= 100 else path[:100] + "…"
    return CallOutcome(False, f"cannot write {shown!r}: {exc.strerror}",
                       failure=FailureReason.TOOL_ERROR)  # fmt: skip


def _str_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise ValueError(f"argument {name!r} must be a string")
    return value


_STATUS_FAILURE = {
    ExecStatus.TIMEOUT: FailureReason.SANDBOX_TIMEOUT,
    ExecStatus.MEMORY_LIMIT: FailureReason.MEMORY_LIMIT,
    ExecStatus.OUTPUT_LIMIT: FailureReason.TOOL_ERROR,
    ExecStatus.KILLED: FailureReason.TOOL_ERROR,
    ExecStatus.ERROR: FailureReason.TOOL_ERROR,
    ExecStatus.SANDBOX_ERROR: FailureReason.SANDBOX_ERROR,
}


def _from_run(result: ExecResult) -> CallOutcome:
    text = (result.stdout[-4000:] + result.stderr[-4000:]).strip() or "(no output)"
    if result.status is not ExecStatus.OK:
        text = f"[{result.status.value}] {result.error}\n{text}".strip()
    return CallOutcome(
        result.status is ExecStatus.OK,
        text,
        failure=_STATUS_FAILURE.get(result.status),
        seconds=result.wall_s,
        log=text,
        risks=result.risks,
    )
