"""Synthetic tool-use SFT data: each task's reference actions, played through the real environment.

    traces = await reference_traces(tasks, pool)              # played, each checked: outcome 1
    await write_traces(tasks, "runs/traces.jsonl", pool)      # the `honing sft` data format

A trace is the conversation the agent loop would have had, had the model written the reference
actions itself; it tokenises exactly like the agent's trajectory of the same actions. Every trace
is played in the sandbox and must end with outcome 1. `calculator_first` plays arithmetic math
tasks as a calculator call, then the answer (docs/training.md, "The modules in detail").
Not covered: traces sampled from a model (use rollouts and the store), reasoning text before the
calls (the assistant messages are calls only, plus whatever content the reference action has).
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from honing.envs.base import Action, EnvConfig, ToolCall
from honing.envs.registry import make_env
from honing.errors import HoningError
from honing.rollout.chat import Message, observation_messages, parse_action
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask, TaskSet
from honing.tasks.schema import MathTask
from honing.trainer.sft import tool_call_text

MAX_LISTED = 20
OUTCOME = "outcome"


@dataclass(frozen=True)
class Trace:
    """One played reference episode, as an SFT example."""

    task_id: str
    messages: list[Message]
    tools: list[dict[str, Any]]
    outcome: float
    calculator: bool = False  # played calculator-first
    actions: list[str] = field(default_factory=list)  # the assistant texts, in order

    def to_json_dict(self) -> dict[str, Any]:
        """The `honing sft` row."""
        return {"id": self.task_id, "messages": self.messages, "tools": self.tools}


class TraceError(HoningError):
    """Reference episodes that did not end with outcome 1 (or could not be played)."""


def action_text(action: Action) -> str:
    """An action as the model would write it: its content, then its calls in the call format."""
    calls = tool_call_text([(c.name, c.arguments) for c in action.tool_calls])
    return "\n".join(part for part in (action.content, calls) if part)


# -- math: the expression behind an arithmetic answer ----------------------------------------
_FAMILIES: dict[str, list[str]] = {  # honing.tasks.synthetic.math's families, by numbers in order
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
    given = task.metadata.get("expression")  # honing.tasks.synthetic records its calculation
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


# -- playing -----------------------------------------------------------------------------------
def reference_plan(
    task: AnyTask, env_actions: list[Action], *, calculator_first: bool
) -> tuple[list[Action], bool]:
    """The actions to play, and whether they go through the calculator first."""
    if calculator_first and isinstance(task, MathTask):
        expression = arithmetic_expression(task)
        if expression is not None:
            calc = ToolCall(id="calc", name="calculator", arguments={"expression": expression})
            value = task.answer.strip()
            answer = ToolCall(id="answer", name="answer", arguments={"value": value})
            return [Action(tool_calls=[calc]), Action(tool_calls=[answer])], True
    return env_actions, False


async def play_reference(
    task: AnyTask,
    pool: SandboxPool,
    *,
    calculator_first: bool = True,
    system_prompt: str | None = None,
    env_config: EnvConfig | None = None,
    restate: bool = True,
) -> Trace:
    """Play `task`'s reference through its real environment; the trace, with its outcome."""
    env = make_env(task.domain, pool, env_config)
    try:
        actions, calculator = reference_plan(
            task, env.reference_actions(task), calculator_first=calculator_first
        )
        observation = await env.reset(task)
        messages: list[Message] = []
        if system_prompt is not None:
            messages.append({"role": "system", "content": system_prompt})
        messages.append({"role": "user", "content": observation.text})
        outcome, texts = 0.0, []
        for turn, planned in enumerate(actions):
            text = action_text(planned)
            action = parse_action(text, call_prefix=f"call_{turn}")  # exactly as the agent does
            result = await env.step(action)
            if result.info.infrastructure:
                raise TraceError(
                    f"{task.id}: infrastructure failure at step {turn + 1}: {result.info.detail}"
                )
            texts.append(text)
            messages.append({"role": "assistant", "content": text})
            messages += observation_messages(result.observation, tool_role=True,
                                             restate=restate)  # fmt: skip
            if calculator and turn == 0:
                _check_calculator(task, result.observation.tool_results[0].content)
            outcome = max(outcome, result.components.get(OUTCOME, 0.0))
            if result.done:
                break
        return Trace(task.id, messages, list(observation.tools), outcome, calculator, texts)
    finally:
        await env.close()


def _check_calculator(task: AnyTask, shown: str) -> None:
    assert isinstance(task, MathTask)
    if not shown.endswith(f" = {task.answer.strip()}"):
        raise TraceError(
            f"{task.id}: the calculator showed {shown!r}, not the answer {task.answer!r}"
        )


async def reference_traces(
    tasks: TaskSet | Sequence[AnyTask],
    pool: SandboxPool,
    *,
    calculator_first: bool = True,
    system_prompt: str | None = None,
    env_config: EnvConfig | None = None,
    restate: bool = True,
    concurrency: int = 8,
) -> list[Trace]:
    """Every task's reference trace, in task order; TraceError lists the tasks whose reference
    did not end with outcome 1 (or could not be played)."""
    items = list(tasks.tasks if isinstance(tasks, TaskSet) else tasks)
    gate = asyncio.Semaphore(concurrency)

    async def one(task: AnyTask) -> Trace | str:
        async with gate:
            try:
                trace = await play_reference(
                    task,
                    pool,
                    calculator_first=calculator_first,
                    system_prompt=system_prompt,
                    env_config=env_config,
                    restate=restate,
                )
            except HoningError as exc:
                return f"{task.id}: {exc}"
        if trace.outcome < 1.0:
            return f"{task.id}: outcome {trace.outcome:g} (the reference does not solve it)"
        return trace

    played = await asyncio.gather(*(one(t) for t in items))
    failed = [p for p in played if isinstance(p, str)]
    if failed:
        listed = "\n".join(f"  {f}" for f in failed[:MAX_LISTED])
        more = f"\n  ... and {len(failed) - MAX_LISTED} more" if len(failed) > MAX_LISTED else ""
        raise TraceError(
            f"{len(failed)} of {len(items)} reference episodes did not succeed; fix "
            f"or leave out these tasks:\n{listed}{more}"
        )
    return [p for p in played if isinstance(p, Trace)]


async def write_traces(
    tasks: TaskSet | Sequence[AnyTask],
    path: str | Path,
    pool: SandboxPool,
    *,
    calculator_first: bool = True,
    system_prompt: str | None = None,
    env_config: EnvConfig | None = None,
    restate: bool = True,
) -> list[Trace]:
    """Play every reference (see `reference_traces`) and write them as SFT JSONL to `path`;
    nothing is written when one fails."""
    traces = await reference_traces(
        tasks,
        pool,
        calculator_first=calculator_first,
        system_prompt=system_prompt,
        env_config=env_config,
        restate=restate,
    )
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".tmp")
    with staging.open("w") as f:
        for trace in traces:
            f.write(json.dumps(trace.to_json_dict(), ensure_ascii=False) + "\n")
    staging.replace(target)
    return traces
