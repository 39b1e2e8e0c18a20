"""The math domain: a final-answer problem, with a calculator the model may use.

Covered: `calculator(expression)` (exact arithmetic, run in the sandbox so that `9**9**9` costs
the program its limits, not the host), `answer(value)`, a reply stating a boxed value or an
`Answer:` line read as the answer, and the reward components outcome (math-verify, in the
sandbox), tool_ok and well_formed (docs/envs.md, "Domains", "Verdicts"); a calculator run's
risk events are what the sandbox saw it do (the answer's check is the verifier's, not the
model's). Not covered: the checker itself (`honing.domains.math.judge`) and the calculator
(`honing.envs.kits.calculator`).
"""

from __future__ import annotations

from typing import Any

from honing.domains.math.judge import Problem, math_equal
from honing.domains.math.task import MathTask
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
from honing.envs.kits.answers import stated_answer
from honing.envs.kits.calculator import calculate
from honing.tasks.load import AnyTask

TOOLS = [
    tool_schema("calculator", "Evaluate an arithmetic expression exactly, e.g. 123*45 or "
                "sqrt(2)/3.", {"expression": {"type": "string"}}, ["expression"]),
    tool_schema("answer", "Submit the final answer; ends the episode.",
                {"value": {"type": "string"}}, ["value"]),
]  # fmt: skip


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
