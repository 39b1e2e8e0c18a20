"""What a math task asks, whatever its wording (`Domain.question_key`): its calculation, with the
operands of `+` and `*` in a fixed order, when its metadata holds one (`expression`, as the
generator writes it). Not covered: tasks without a plain-arithmetic calculation (keyed by their
prompt, `honing.tasks.load.question_key`).
"""

from __future__ import annotations

import ast

from honing.tasks.load import AnyTask


def calculation_key(task: AnyTask) -> str | None:
    """`math:<canonical calculation>`, or None when the task records no plain arithmetic."""
    expression = task.metadata.get("expression")
    if isinstance(expression, str):
        try:
            return f"math:{_canonical(ast.parse(expression, mode='eval').body)}"
        except (SyntaxError, ValueError, RecursionError):
            pass
    return None


def _canonical(node: ast.expr) -> str:
    """An arithmetic expression's text with each `+` and `*` node's two sides sorted."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return repr(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return f"(-{_canonical(node.operand)})"
    if isinstance(node, ast.BinOp):
        symbols = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
                   ast.Mod: "%", ast.Pow: "**"}  # fmt: skip
        symbol = symbols.get(type(node.op))
        if symbol is not None:
            left, right = _canonical(node.left), _canonical(node.right)
            if symbol in ("+", "*"):
                left, right = sorted((left, right))
            return f"({left} {symbol} {right})"
    raise ValueError(f"not plain arithmetic: {ast.dump(node)}")
