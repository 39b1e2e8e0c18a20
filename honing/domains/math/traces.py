"""Warm-start traces for math: an arithmetic task played as a calculator call on the expression
behind its answer, then the answer (`calculator_plan`); the expression is read off the task's
metadata or its prompt (`arithmetic_expression`). Not covered: tasks with no such expression
(their reference actions are played as they are).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from fractions import Fraction

from honing.domains.math.task import MathTask
from honing.envs.base import Action, ToolCall
from honing.tasks.domains import TracePlan

_FAMILIES: dict[str, list[str]] = {  # the generator's families (generate), by numbers in order
    "sum": ["{0} + {1}"],
    "difference": ["{0} - {1}", "{1} - {0}"],
    "product": ["{0} * {1}"],
    "product-large": ["{0} * {1}"],
    "quotient": ["{0} / {1}", "{0} // {1}"],
    "remainder": ["{0} % {1}"],
    "two-step": ["{0} * {1} - {2}", "{0} * {1} + {2}", "({0} + {1}) * {2}"],
}
_DIRECT = re.compile(r"^\s*(?:what is|compute|calculate|evaluate)\s+(.+?)\s*[?.!]?\s*$", re.I)
_WORDS = {"×": "*", "·": "*", "÷": "/", "−": "-", " times ": " * ", " mod ": " % "}
_ARITHMETIC = re.compile(r"^[\d\s+\-*/%().]+$")


def arithmetic_expression(task: MathTask) -> str | None:
    """An expression whose exact value is `task.answer`, read off the prompt; None when none is
    found (see the module docstring)."""
    target = _number(task.answer)
    if target is None:
        return None
    given = task.metadata.get("expression")  # the generator records its calculation
    candidates: list[str] = [given] if isinstance(given, str) else []
    direct = _DIRECT.match(task.prompt)
    if direct:
        body = direct.group(1)
        for word, op in _WORDS.items():
            body = body.replace(word, op)
        if _ARITHMETIC.match(body) and re.search(r"\d", body):
            candidates.append(" ".join(body.split()))
    numbers = re.findall(r"\d+", task.prompt)
    family = task.metadata.get("family")
    if isinstance(family, str) and family in _FAMILIES:
        for form in _FAMILIES[family]:
            if form.count("{") == len(numbers):
                candidates.append(form.format(*numbers))
    for expression in candidates:
        if _evaluate(expression) == target:
            return expression
    return None


def _number(text: str) -> Fraction | None:
    try:
        return Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        return None


_OPS: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: Fraction(a // b),
    ast.Mod: lambda a, b: a % b,
}


def _evaluate(expression: str) -> Fraction | None:
    """The exact value of + - * / // % over integers, parentheses; None for anything else."""

    def ev(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(ast.dump(node))

    try:
        return ev(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def calculator_plan(task: MathTask, env_actions: list[Action]) -> TracePlan | None:
    """An arithmetic task played as a calculator call on the expression behind its answer, then
    the answer; None when no expression is found (the reference actions are played)."""
    expression = arithmetic_expression(task)
    if expression is None:
        return None
    calc = ToolCall(id="calc", name="calculator", arguments={"expression": expression})
    answer = ToolCall(id="answer", name="answer", arguments={"value": task.answer.strip()})

    def check_first(shown: str) -> str | None:
        if shown.endswith(f" = {task.answer.strip()}"):
            return None
        return f"the calculator showed {shown!r}, not the answer {task.answer!r}"

    return TracePlan([Action(tool_calls=[calc]), Action(tool_calls=[answer])], check_first)
