"""Judging code tasks: the tests as counted units, the sandbox run that judges a solution, and
its verdict. The code environment scores the model with it, and the quality filter checks
references with it: one judge for the domain.

    run = judged_run(task, run_files(task, {"solution.py": source}))
    verdict = run.verdict(await pool.run(run.request))   # None: the run ended without one

The tests run in the judge's process (`honing.domains.code.codejudge`), the solution in another, so
its verdict cannot be forged; tampering sets the outcome to 0 (docs/tasks.md, "The modules in
detail"). Not covered: a solution that special-cases the inputs of tests it was shown; tests
that read files the solution's own process can rewrite.
"""

from __future__ import annotations

import ast
import base64
import functools
import hashlib
import json
import marshal
import re
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from honing.domains.code.task import CODE_SOLUTION, CodeTask
from honing.sandbox import ExecRequest, ExecResult, ExecStatus, SandboxPool
from honing.tasks.schema import ReferenceVerdict

RUN_TIMEOUT_S = 10.0
JUDGE = Path(__file__).with_name("codejudge.py").read_text()


@functools.cache
def judge_program() -> str:
    """The judge as the sandbox runs it: compiled here once and marshalled, since the cell runs
    honing's own interpreter (`honing.sandbox.launch`), so that neither the cell nor the
    solution's process compiles it again; its source where the interpreter is another."""
    code = compile(JUDGE, "codejudge.py", "exec", dont_inherit=True)
    marshalled = base64.b64encode(marshal.dumps(code)).decode()
    source = f"compile({JUDGE!r}, 'codejudge.py', 'exec', dont_inherit=True)"
    return ("import binascii, marshal, sys\n"
            f"if sys.hexversion == {sys.hexversion}:\n"
            f"    exec(marshal.loads(binascii.a2b_base64({marshalled!r})))\n"
            f"else:\n    exec({source})\n")  # fmt: skip


FORGED = re.compile(r"(?m)^[0-9a-f]{32} \{")  # a verdict line with some nonce


def units(task: CodeTask) -> list[str]:
    """The tests as separately counted units: top-level statements, or one `check` call."""
    if "def check(" in task.tests:
        return [f"{task.tests}\ncheck({task.entry_point})"]
    try:
        tree = ast.parse(task.tests)
    except SyntaxError:
        return [task.tests]  # reported by the run as a failing unit
    lines = task.tests.splitlines(keepends=True)
    setup: list[str] = []
    counted: list[str] = []
    for node in tree.body:
        src = "".join(lines[node.lineno - 1 : node.end_lineno])
        if isinstance(node, ast.Assert | ast.Expr):
            counted.append(src)
        else:
            setup.append(src)  # imports, helpers: run before every counted statement
    prefix = "".join(setup)
    return [prefix + u for u in counted] or [task.tests]


def run_files(task: CodeTask, written: Mapping[str, str | bytes]) -> dict[str, str | bytes]:
    """The files a test run sees: the Python files of `written` (the model's workspace), then
    the task's own files as shipped (its solution.py aside, which is the model's to change)."""
    files = {path: content for path, content in written.items() if path.endswith(".py")}
    files.update({path: c for path, c in task.files.items() if path != CODE_SOLUTION})
    return files


@dataclass(frozen=True)
class CodeVerdict:
    """The judge's word on one solution: the tests passed (of `total`), the first five errors,
    and what tampering it detected."""

    compiled: bool
    passed: int
    total: int
    errors: list[str] = field(default_factory=list)
    tampering: list[str] = field(default_factory=list)

    @property
    def passed_all(self) -> bool:
        return not self.tampering and self.compiled and self.passed == self.total > 0

    @property
    def share(self) -> float:
        """The share of tests passed; 0 when tampering was detected."""
        return 0.0 if self.tampering else self.passed / max(self.total, 1)

    def render(self) -> str:
        lines = [f"{self.passed}/{self.total} tests passed", *self.errors]
        if self.tampering:
            lines.insert(0, "tampering detected: " + "; ".join(self.tampering))
        return "\n".join(lines)


@dataclass(frozen=True)
class JudgedRun:
    """One sandbox run of the judge, and the nonce its verdict line carries."""

    request: ExecRequest
    nonce: str

    def verdict(self, result: ExecResult) -> CodeVerdict | None:
        """The verdict, or None when the run ended without the judge's word (see its status)."""
        found: Any = None
        for line in reversed(result.stdout.splitlines()):
            if line.startswith(self.nonce + " "):
                try:
                    found = json.loads(line[len(self.nonce) + 1 :])
                except json.JSONDecodeError:
                    return None
                break
        if not _is_verdict(found):
            return None
        tampering = [str(t) for t in found["tampering"]]
        if FORGED.search(result.stderr):
            tampering.append("the solution printed a line shaped like the judge's verdict")
        return CodeVerdict(found["compiled"], found["passed"], found["total"],
                           [str(e) for e in found["errors"]][:5], tampering)  # fmt: skip


def _is_verdict(found: Any) -> bool:
    return (isinstance(found, dict)
            and isinstance(found.get("compiled"), bool)
            and all(type(found.get(k)) is int for k in ("passed", "total"))
            and all(isinstance(found.get(k), list) for k in ("errors", "tampering")))  # fmt: skip


def judged_run(
    task: CodeTask, files: dict[str, str | bytes], timeout_s: float = RUN_TIMEOUT_S
) -> JudgedRun:
    """The run that judges the solution.py of `files` (`run_files`) against the task's tests."""
    nonce = secrets.token_hex(16)
    shipped = {path: c for path, c in files.items() if path in task.files and path != CODE_SOLUTION}
    spec = {
        "nonce": nonce,
        "units": units(task),
        "prompt": None if task.repair else task.prompt,
        "entry_point": task.entry_point,
        "files": {path: _sha256(c) for path, c in shipped.items()},
    }
    request = ExecRequest(code=judge_program(), stdin=json.dumps(spec), files=files,
                          timeout_s=timeout_s, filename="codejudge.py")  # fmt: skip
    return JudgedRun(request, nonce)


def _sha256(content: str | bytes) -> str:
    data = content.encode() if isinstance(content, str) else content
    return hashlib.sha256(data).hexdigest()


CODE_TIMEOUT_S = 10.0


def code_program(task: CodeTask, solution: str) -> str:
    """`solution`, the tests and `check(entry_point)` as one program (HumanEval's layout: the
    sandbox benchmark's load). Not a judge: a program that exits early passes it."""
    program = f"{solution}\n\n{task.tests}\n"
    if "def check(" in task.tests:
        program += f"\ncheck({task.entry_point})\n"
    return program


def _code_run(task: CodeTask, solution: str) -> JudgedRun:
    return judged_run(task, run_files(task, {CODE_SOLUTION: solution}), CODE_TIMEOUT_S)


def _verdict(reason: str | None) -> ReferenceVerdict:
    return ReferenceVerdict("passed") if reason is None else ReferenceVerdict("failed", reason)


async def check_code(tasks: Sequence[CodeTask], pool: SandboxPool) -> dict[str, ReferenceVerdict]:
    """Code: the reference judged as the environment judges the model; a repair task's starting
    solution.py must fail its tests (checked with or without a reference)."""
    code = [t for t in tasks if t.reference is not None]
    starters = [t for t in tasks if t.repair]
    runs = [
        *(_code_run(t, t.reference or "") for t in code),
        *(_code_run(t, t.files[CODE_SOLUTION]) for t in starters),
    ]
    results = await pool.run_many([r.request for r in runs])
    judged = [_judged(run, result) for run, result in zip(runs, results, strict=True)]
    by_id = dict(zip([t.id for t in code], judged[: len(code)], strict=True))
    starter_by_id = dict(zip([t.id for t in starters], judged[len(code) :], strict=True))
    out: dict[str, ReferenceVerdict] = {}
    for task in tasks:
        starter = starter_by_id.get(task.id)
        if starter is not None and starter[1] is None:
            passes = f"the starting {CODE_SOLUTION} already passes its tests: nothing to fix"
            out[task.id] = ReferenceVerdict("failed", passes)
        elif task.id in by_id:
            reference, reason = by_id[task.id]
            broken = [r for r in (reference, starter and starter[0])
                      if r is not None and r.status is ExecStatus.SANDBOX_ERROR]  # fmt: skip
            if broken:
                out[task.id] = ReferenceVerdict("unverified", f"sandbox error: {broken[0].error}")
            else:
                out[task.id] = _verdict(reason)
    return out


def _judged(run: JudgedRun, result: ExecResult) -> tuple[ExecResult, str | None]:
    """(the run, None) when the solution passed every test, else (the run, why not)."""
    if result.status is not ExecStatus.OK:
        last = (result.stderr.strip().splitlines() or [""])[-1]
        why = f"reference fails its tests ({result.status.value}): {last or result.error}"
        return result, why[:500]
    verdict = run.verdict(result)
    if verdict is None:
        return result, "reference fails its tests: the judge gave no verdict"
    if verdict.passed_all:
        return result, None
    why = "; ".join(verdict.tampering) if verdict.tampering else "; ".join(verdict.errors[:2])
    said = f"{verdict.passed}/{verdict.total} passed; " + ("tampering: " if verdict.tampering
                                                           else "first error: ")  # fmt: skip
    return result, f"reference fails its tests ({said}{why})"[:500]
