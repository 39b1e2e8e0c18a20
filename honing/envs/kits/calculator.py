"""The calculator tool: exact arithmetic over + - * / // % ** and a few math functions, run in
the sandbox so that `9**9**9` costs the program its limits, not the host. The run's risk events
(the sandbox's) are the call's. Not covered: the tool's schema, which each environment words
for its own tools.
"""

from __future__ import annotations

import json

from honing.envs.base import CallOutcome, FailureReason
from honing.sandbox import ExecRequest, ExecStatus, SandboxPool

CALC_TIMEOUT_S = 5.0

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
