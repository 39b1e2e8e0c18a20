"""The math domain: a final-answer problem, with a calculator the model may use.

Covered: `calculator(expression)` (exact arithmetic, run in the sandbox so that `9**9**9` costs
the program its limits, not the host), `answer(value)`, a reply stating a boxed value or an
`Answer:` line read as the answer, and the reward components outcome (math-verify, in the
sandbox), tool_ok and well_formed (docs/envs.md, "Domains", "Verdicts"); a calculator run's
risk events are what the sandbox saw it do (the answer's check is the verifier's, not the
model's). Not covered: the checker itself (`honing.tasks.mathcheck`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from honing.envs.base import (
    Action,
    CallOutcome,
    Environment,
    FailureReason,
    StepOutput,
    ToolCall,
    argument_text,
    malformed,
    tool_schema,
)
from honing.sandbox import ExecRequest, ExecStatus, SandboxPool
from honing.tasks.load import AnyTask
from honing.tasks.mathcheck import Problem, math_equal
from honing.tasks.schema import MathTask

BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
ANSWER_LINE = re.compile(r"^\s*(?:final\s+)?answer\s*[:=]\s*(.+?)\s*$", re.I | re.M)
CALC_TIMEOUT_S = 5.0

TOOLS = [
    tool_schema("calculator", "Evaluate an arithmetic expression exactly, e.g. 123*45 or "
                "sqrt(2)/3.", {"expression": {"type": "string"}}, ["expression"]),
    tool_schema("answer", "Submit the final answer; ends the episode.",
                {"value": {"type": "string"}}, ["value"]),
]  # fmt: skip

CALCULATOR = """\
import ast, json, math, sys
from fractions import Fraction
FUNCS = {n: getattr(math, n) for n in ("sqrt", "log", "log2", "log10", "exp", "sin", "cos",
         "tan", "floor", "ceil", "factorial", "gcd", "comb", "perm", "fabs")}
FUNCS["abs"] = abs
NAMES = {"pi": math.pi, "e": math.e}
OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
       ast.Div: lambda a, b: Fraction(a) / Fraction(b) if isinstance(a, int | Fraction)
       and isinstance(b, int | Fraction) else a / b, ast.FloorDiv: lambda a, b: a // b,
       ast.Mod: lambda a, b: a % b, ast.Pow: lambda a, b: a ** b}
def ev(node):
    if isinstance(node, ast.Expression):
        return ev(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        return OPS[type(node.op)](ev(node.left), ev(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = ev(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Name) and node.id in NAMES:
        return NAMES[node.id]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCS
            and not node.keywords):
        return FUNCS[node.func.id](*[ev(a) for a in node.args])
    raise ValueError("not allowed: " + ast.unparse(node)[:60])
try:
    value = ev(ast.parse(sys.stdin.read().replace("^", "**"), mode="eval"))
except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError) as e:
    print(json.dumps({"error": type(e).__name__ + ": " + str(e)}))
else:
    if isinstance(value, Fraction) and value.denominator == 1:
        value = value.numerator
    text = str(value) if not isinstance(value, Fraction) else f"{value} (= {float(value):.12g})"
    print(json.dumps({"value": text}))
"""


def stated_answer(content: str) -> str | None:
    """The answer a plain reply states: its last \\boxed{...}, else a last `Answer: ...` line.
    A reply that boxes several different values states them all (as `\\boxed{a}\\boxed{b}`,
    which no checker takes for one value)."""
    boxed = list(dict.fromkeys(str(b).strip() for b in BOXED.findall(content)))
    if len(boxed) > 1:
        return "".join(f"\\boxed{{{b}}}" for b in boxed)
    if boxed:
        return boxed[0]
    lines = ANSWER_LINE.findall(content)
    return str(lines[-1]) if lines else None


class MathEnv(Environment):
    domain = "math"

    @property
    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    async def _reset(self, task: AnyTask) -> None:
        assert self.state is not None
        self.state.constraints = ["Give the final answer with the answer tool (or \\boxed{...}).",
                                  "The calculator is exact; use it for arithmetic."]  # fmt: skip
        self.state.next_steps = ["work it out, using calculator for arithmetic", "answer"]

    def reference_actions(self, task: AnyTask) -> list[Action]:
        assert isinstance(task, MathTask)
        value = task.reference if task.reference is not None else task.answer
        return [Action(tool_calls=[ToolCall(id="ref-answer", name="answer",
                                            arguments={"value": value})])]  # fmt: skip

    async def _step(self, action: Action) -> StepOutput:
        calls = list(action.tool_calls)
        if not calls:
            stated = stated_answer(action.content)
            if stated is None:
                return malformed(
                    "no tool call and no \\boxed{...} answer: use calculator or answer"
                )
            calls = [ToolCall(id="inline", name="answer", arguments={"value": stated})]
        components, results, info = await self.run_calls(calls, self._call)
        assert self.state is not None
        self.state.actions.append(
            "; ".join(f"{r.name}: {r.content.splitlines()[0][:60]}" for r in results)
        )
        return components, results, info

    async def _call(self, call: ToolCall) -> CallOutcome:
        if call.name == "calculator":
            return await calculate(self.pool, call.arguments.get("expression"))
        if call.name != "answer":
            return CallOutcome(False, f"unknown tool {call.name!r}; available: calculator, answer",
                               FailureReason.UNKNOWN_TOOL)  # fmt: skip
        value = argument_text(call.arguments.get("value"))
        if value is None:
            return CallOutcome(False, "argument 'value' must be a string",
                               FailureReason.MALFORMED_ACTION)  # fmt: skip
        assert isinstance(self.task, MathTask)
        self.done = True
        verdict = await math_equal(self.pool, self.task.answer, value)
        if verdict.problem is not None:
            reason = (FailureReason.SANDBOX_ERROR if verdict.problem is Problem.SANDBOX
                      else FailureReason.VERIFIER_CRASH)  # fmt: skip
            return CallOutcome(False, f"the answer could not be checked: {verdict.detail}", reason)
        if verdict.rejected:
            return CallOutcome(False, f"incorrect: {verdict.rejected}",
                               FailureReason.CHECKER_REJECTED,
                               components={"outcome": 0.0})  # fmt: skip
        return CallOutcome(verdict.equal, "correct" if verdict.equal else "incorrect",
                           components={"outcome": float(verdict.equal)})  # fmt: skip


async def calculate(pool: SandboxPool, expression: object) -> CallOutcome:
    """The calculator tool (shared by the math, tools and finance domains): exact, in the
    sandbox; the run's risk events (the sandbox's) are the call's."""
    if not isinstance(expression, str):
        return CallOutcome(False, "argument 'expression' must be a string",
                           FailureReason.MALFORMED_ACTION)  # fmt: skip
    if not expression.isascii():  # the program's stdin is UTF-8: a lone surrogate is no text
        try:
            expression.encode()
        except UnicodeEncodeError as exc:
            return CallOutcome(False, f"argument 'expression' is not text: {exc.reason}",
                               FailureReason.MALFORMED_ACTION)  # fmt: skip
    result = await pool.run(
        ExecRequest(code=CALCULATOR, stdin=expression, timeout_s=CALC_TIMEOUT_S)
    )
    if result.status is ExecStatus.SANDBOX_ERROR:
        return CallOutcome(False, result.error, FailureReason.SANDBOX_ERROR, risks=result.risks)
    out = json.loads(result.stdout) if result.status is ExecStatus.OK else {}
    if "value" not in out:
        tail = (result.stderr.strip().splitlines() or [""])[-1][:300]  # a crash's last words
        reason = out.get("error") or f"{result.status.value} ({result.error or tail})"
        return CallOutcome(False, f"calculator: {reason}", FailureReason.TOOL_ERROR,
                           components={"tool_ok": 0.0}, seconds=result.wall_s,
                           risks=result.risks)  # fmt: skip
    return CallOutcome(True, f"{expression} = {out['value']}", components={"tool_ok": 1.0},
                       seconds=result.wall_s, risks=result.risks)  # fmt: skip
