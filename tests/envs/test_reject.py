"""Environment.reject: a malformed model output counts as a step, with a format penalty."""

from __future__ import annotations

import pytest

from honing.domains.math.env import MathEnv
from honing.domains.math.task import MathTask
from honing.envs import Action, EnvConfig, FailureReason, ToolCall
from honing.errors import HoningError
from honing.sandbox import SandboxPool

PRODUCT = MathTask(id="mul", prompt="What is 17*23?", answer="391")
DETAIL = "tool call 1: arguments are not JSON: Expecting ',' delimiter"


async def test_reject_is_a_step_with_a_format_penalty(pool: SandboxPool) -> None:
    env = MathEnv(pool, EnvConfig(max_steps=3, reward_weights={"well_formed": 1.0}))
    await env.reset(PRODUCT)
    result = await env.reject(DETAIL)
    assert result.info.failure is FailureReason.MALFORMED_ACTION
    assert result.components == {"well_formed": 0.0} and result.reward == 0.0
    assert result.info.step == 1 and env.steps == 1 and not result.done
    # The model is told what was wrong, in the task state it sees next.
    assert DETAIL in result.observation.text and "malformed output" in result.observation.text
    # The episode goes on: a good call afterwards works and clears the error.
    calc = Action(
        tool_calls=[ToolCall(id="c", name="calculator", arguments={"expression": "17*23"})]
    )
    after = await env.step(calc)
    assert after.info.failure is None and after.components["well_formed"] == 1.0
    assert after.info.step == 2 and not after.done
    assert "17*23 = 391" in after.observation.tool_results[0].content
    assert "Latest errors" not in after.observation.text


async def test_reject_counts_against_the_step_limit(pool: SandboxPool) -> None:
    env = MathEnv(pool, EnvConfig(max_steps=2))
    with pytest.raises(HoningError, match="reset"):
        await env.reject(DETAIL)
    await env.reset(PRODUCT)
    assert not (await env.reject(DETAIL)).done
    last = await env.reject(DETAIL)
    # The limit ends the episode; the step keeps its own failure (the malformed output).
    assert last.done and env.done and last.info.failure is FailureReason.MALFORMED_ACTION
    with pytest.raises(HoningError, match="over"):
        await env.reject(DETAIL)
