"""Replaying stored trajectories through the real math environment (in the sandbox): episodes are
played by the agent loop with a scripted chat engine, stored as they came, then replayed (some
after a change to what was stored, to stand for an environment that has changed since)."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from honing.domains.math.env import MathEnv
from honing.domains.math.task import MathTask
from honing.envs.base import Action, CallOutcome, EnvConfig, FailureReason, ToolCall
from honing.envs.registry import make_env
from honing.records import Ending, Trajectory, Turn
from honing.rollout.agent import AgentConfig, run_episode
from honing.rollout.chat import parse_action
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.replay import replay, stored_action
from honing.sandbox import SandboxPool
from honing.store.rescore import RescoreStatus

pytestmark = pytest.mark.asyncio(loop_scope="module")
TASK = MathTask(id="replay/51", prompt="Multiply 17 by 3.", answer="51")


def call(name: str, **arguments: str) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool


async def play(pool: SandboxPool, script: list[str], *, max_turns: int = 4) -> Trajectory:
    """One episode of TASK by a chat engine that says `script[i]` at its i-th turn."""

    def respond(prompt: Prompt, _index: int) -> str:
        turn = sum(m["role"] == "assistant" for m in prompt.messages or [])
        return script[min(turn, len(script) - 1)]

    agent = AgentConfig(sampling=SamplingParams(max_new_tokens=256), max_turns=max_turns)
    env = make_env("math", pool, EnvConfig(max_steps=max_turns))
    return await run_episode(TASK, env, ScriptedEngine(respond), agent)


def fresh(pool: SandboxPool, max_steps: int = 4) -> Any:
    return make_env("math", pool, EnvConfig(max_steps=max_steps))


# -- the actions, as the agent made them ---------------------------------------------------------
async def test_stored_actions_are_parsed_as_the_agent_parsed_them() -> None:
    text = "Let me compute. " + call("calculator", expression="17*3")
    action, malformed = stored_action(Turn("assistant", text), 2)
    assert malformed is None and action == parse_action(text, call_prefix="call_2")
    assert action.tool_calls[0].id == "call_2_0"

    cut = '<tool_call>{"name": "answer", "argu'  # cut off by the token limit
    action, malformed = stored_action(Turn("assistant", cut), 0)
    assert action == Action(content=cut)
    assert malformed is not None and "not closed with </tool_call>" in malformed

    native = [{"id": "srv-1", "type": "function",
               "function": {"name": "answer", "arguments": '{"value": "51"}'}}]  # fmt: skip
    action, malformed = stored_action(Turn("assistant", "Done.", tool_calls=native), 0)
    assert malformed is None and action.content == "Done."  # a chat engine's own tool calls
    assert action.tool_calls == [ToolCall(id="srv-1", name="answer", arguments={"value": "51"})]


# -- same, and the course of the episode ---------------------------------------------------------
async def test_an_unchanged_episode_replays_to_the_same_scores(pool: SandboxPool) -> None:
    native = '{"name": "calculator", "arguments": {"expression": "17*3"}}'  # a chat engine's call
    stored = await play(pool, [native, '<tool_call>{"name": "answer"', call("answer", value="51")])
    assert stored.success and stored.turns[1].tool_calls  # native calls, a malformed turn

    row = await replay(stored, TASK, fresh(pool), verifier="v1")

    assert row.status is RescoreStatus.SAME and row.detail == "", row.detail
    assert row.new_step_rewards == row.old_step_rewards == [t.reward for t in stored.turns
                                                            if t.role == "tool"]  # fmt: skip
    assert row.new_step_components[1] == {"well_formed": 0.0}  # rejected again, as then
    assert row.new_components == stored.components and row.new_success is True
    assert row.new_ending == stored.ending.value == "done" and row.verifier_version == "v1"
    assert row.last_action == 'answer({"value": "51"})'


async def test_a_different_tool_result_before_the_last_step_is_a_divergence(
    pool: SandboxPool,
) -> None:
    stored = await play(pool, [call("calculator", expression="17*3"), call("answer", value="51")])
    then = copy.deepcopy(stored)
    then.turns[2].text = then.turns[2].text.replace("= 51", "= 50")  # what the model saw then

    row = await replay(then, TASK, fresh(pool))

    assert row.status is RescoreStatus.DIVERGED and row.turn == 1
    assert "tool calculator now returns '17*3 = 51'" in row.detail
    assert row.new_success is True  # the replay's own scores are still recorded


async def test_an_episode_the_environment_ends_earlier_or_not_at_all_diverges(
    pool: SandboxPool,
) -> None:
    stored = await play(pool, [call("answer", value="50"), call("answer", value="51")])
    assert stored.steps == 1 and not stored.success  # an answer ends the episode
    went_on = copy.deepcopy(stored)  # as an environment that allowed a second answer stored it
    went_on.turns += [Turn("assistant", call("answer", value="51")), Turn("tool", "correct")]
    went_on.success, went_on.reward = True, 1.0

    row = await replay(went_on, TASK, fresh(pool))

    assert row.status is RescoreStatus.DIVERGED and row.turn == 1
    assert "ends the episode after model turn 1; the stored episode went on to turn 2" in row.detail
    assert row.new_step_rewards == [0.0] and row.new_success is False

    two = await play(pool, [call("calculator", expression="17*3"), call("answer", value="51")])
    cut = copy.deepcopy(two)  # as if the calculator had ended the episode
    del cut.turns[3:]
    row = await replay(cut, TASK, fresh(pool))
    assert row.status is RescoreStatus.DIVERGED and row.turn == 1 and row.new_ending is None
    assert "no longer ends the episode after model turn 1 (it ended as done)" in row.detail


async def test_a_changed_task_diverges_at_the_reset(pool: SandboxPool) -> None:
    stored = await play(pool, [call("answer", value="51")])
    changed = TASK.model_copy(update={"prompt": "Multiply 18 by 3.", "answer": "54"})

    row = await replay(stored, changed, fresh(pool))

    assert row.status is RescoreStatus.DIVERGED and row.turn == 0
    assert "the task changed; it now asks 'Multiply 18 by 3.'" in row.detail


async def test_episodes_the_agent_ended_keep_their_ending(pool: SandboxPool) -> None:
    stored = await play(pool, [call("calculator", expression="17*3")], max_turns=2)
    assert stored.ending is Ending.STEP_LIMIT and not stored.success
    clocked = copy.deepcopy(stored)  # the agent's clock ran out during its answer's step
    clocked.turns = [*clocked.turns[:3], Turn("assistant", call("answer", value="51"))]
    clocked.ending, clocked.failure = Ending.TIMEOUT, "episode_deadline"

    row = await replay(clocked, TASK, fresh(pool))

    assert row.status is RescoreStatus.SAME, row.detail
    assert row.new_step_rewards == [0.0] and row.new_ending == "timeout"  # the answer never ran
    assert row.new_components == {"well_formed": 1.0, "tool_ok": 1.0, "outcome": 0.0}


# -- infrastructure, and what has no verdict ------------------------------------------------------
class CrashingChecker(MathEnv):
    """The answer checker cannot run (as when its runtime is broken)."""

    async def _call(self, call: ToolCall) -> CallOutcome:
        if call.name != "answer":
            return await super()._call(call)
        self.done = True
        return CallOutcome(False, "the answer could not be checked: no runtime",
                           FailureReason.VERIFIER_CRASH)  # fmt: skip


class HangingCalculator(MathEnv):
    """A calculator that never answers (a stuck sandbox)."""

    async def _call(self, call: ToolCall) -> CallOutcome:
        if call.name == "calculator":
            await asyncio.Event().wait()
        return await super()._call(call)


async def test_infrastructure_failures_are_no_verdict(pool: SandboxPool) -> None:
    stored = await play(pool, [call("calculator", expression="17*3"), call("answer", value="51")])

    row = await replay(stored, TASK, CrashingChecker(pool, EnvConfig(max_steps=4)))
    assert row.status is RescoreStatus.INFRA_ERROR and row.turn == 2
    assert "verifier_crash" in row.detail and "no runtime" in row.detail
    assert row.new_reward is None and row.new_success is None and row.new_components is None

    slow = HangingCalculator(pool, EnvConfig(max_steps=4, step_timeout_s=0.2))
    row = await replay(stored, TASK, slow)
    assert row.status is RescoreStatus.INFRA_ERROR and row.turn == 1
    assert "timed out in the replay" in row.detail

    crashed = copy.deepcopy(stored)
    crashed.ending, crashed.failure = Ending.INFRA_ERROR, "step"
    row = await replay(crashed, TASK, fresh(pool))
    assert row.status is RescoreStatus.SKIPPED and "no verdict" in row.detail
    assert row.old_success is True and row.new_success is None
