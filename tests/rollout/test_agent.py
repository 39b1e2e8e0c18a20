"""The agent loop on real environments (math, in the sandbox) with the scripted engine: success,
format penalties, token faithfulness, deadlines, infrastructure failures, the token budget."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from honing.envs.base import Action, EnvConfig, FailureReason, Observation, StepInfo, StepResult
from honing.envs.registry import make_env
from honing.records import Ending, Trajectory
from honing.rollout.agent import AgentConfig, Deadlines, InfraFailure, run_episode
from honing.rollout.chat import ChatFormat, first_messages, observation_messages
from honing.rollout.engines.base import Prompt, SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask, load_tasks

SAMPLING = SamplingParams(max_new_tokens=128)
# One pool (and one warm answer checker beside it) for the whole module.
pytestmark = pytest.mark.asyncio(loop_scope="module")


def call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool


@pytest.fixture(scope="module")
def product() -> AnyTask:
    [task] = [t for t in load_tasks("examples-math").tasks if t.id == "example-math/product"]
    return task  # What is 347 × 86? → 29842


class Recorded:
    """A real environment, with its calls counted (and a step that can be made to hang or to
    report an infrastructure failure)."""

    def __init__(self, env: Any, *, hang: bool = False, infra: bool = False) -> None:
        self.env, self.hang, self.infra = env, hang, infra
        self.calls: Counter[str] = Counter()

    @property
    def done(self) -> bool:
        return bool(self.env.done)

    async def reset(self, task: AnyTask) -> Observation:
        self.calls["reset"] += 1
        return await self.env.reset(task)  # type: ignore[no-any-return]

    async def step(self, action: Action) -> StepResult:
        self.calls["step"] += 1
        if self.hang:
            await asyncio.Event().wait()
        result: StepResult = await self.env.step(action)
        if self.infra:
            info = StepInfo(failure=FailureReason.SANDBOX_ERROR, detail="cell crashed")
            return result.model_copy(update={"info": info})
        return result

    async def reject(self, detail: str) -> StepResult:
        self.calls["reject"] += 1
        return await self.env.reject(detail)  # type: ignore[no-any-return]

    async def close(self) -> None:
        self.calls["close"] += 1
        await self.env.close()


class CountingGate:
    def __init__(self) -> None:
        self.entered: Counter[str] = Counter()

    @asynccontextmanager
    async def _slot(self, name: str) -> AsyncIterator[None]:
        self.entered[name] += 1
        yield

    def engine(self) -> AbstractAsyncContextManager[None]:
        return self._slot("engine")

    def env(self) -> AbstractAsyncContextManager[None]:
        return self._slot("env")


def math_env(pool: SandboxPool, **config: Any) -> Any:
    return make_env("math", pool, EnvConfig(**config))


def conversation(tok: Any, texts: list[str], steps: list[tuple[Observation, StepResult]]) -> str:
    """The template's rendering of the whole episode, built independently of the agent."""
    messages = first_messages(steps[0][0], None, describe_tools=True)
    for text, (_, result) in zip(texts, steps, strict=True):
        messages.append({"role": "assistant", "content": text})
        messages += observation_messages(result.observation, tool_role=False)
    return str(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def assert_spans(traj: Trajectory) -> None:
    """Turns tile the token ids; the loss mask is 1 exactly on the assistant spans."""
    assert traj.turns[0].start == 0 and traj.turns[-1].end == len(traj.token_ids)
    for before, after in zip(traj.turns, traj.turns[1:], strict=False):
        assert before.end == after.start
    mask = [0] * len(traj.token_ids)
    for t in traj.turns:
        if t.role == "assistant":
            mask[t.start : t.end] = [1] * (t.end - t.start)
    assert traj.loss_mask == mask
    assert len(traj.logprobs) == len(traj.versions) == len(traj.token_ids)


async def test_calculator_then_answer_solves_a_task_token_faithfully(
    tok: Any, pool: SandboxPool, product: AnyTask
) -> None:
    texts = ["I'll multiply first.\n" + call("calculator", expression="347*86"),
             call("answer", value="29842")]  # fmt: skip
    engine = ScriptedEngine(texts, tokenizer=tok, version=3)
    steps: list[tuple[Observation, StepResult]] = []
    gate = CountingGate()
    traj = await run_episode(product, math_env(pool), engine, AgentConfig(sampling=SAMPLING),
                             gate=gate, sample=2, group_id="g1",
                             on_step=lambda o, a, r: steps.append((o, r)))  # fmt: skip
    assert traj.success and traj.ending is Ending.DONE and traj.failure is None
    assert traj.reward == 1.0 and traj.components["outcome"] == 1.0
    assert traj.components["tool_ok"] == 1.0 and traj.steps == 2
    assert (traj.task_id, traj.sample, traj.group_id, traj.tags) == (
        product.id, 2, "g1", product.tags)  # fmt: skip
    assert [t.role for t in traj.turns] == ["user", "assistant", "tool", "assistant", "tool"]
    assistant = [t for t in traj.turns if t.role == "assistant"]
    assert assistant[0].tool_calls[0]["function"] == {
        "name": "calculator", "arguments": '{"expression": "347*86"}'}  # fmt: skip
    assert "347*86 = 29842" in traj.turns[2].text
    assert all(t.finish_reason == "stop" and t.version == 3 for t in assistant)

    # Token-faithful: the prompt, exactly the engine's tokens, and only the rendered deltas.
    assert_spans(traj)
    prompt = ChatFormat.of(tok).start(steps[0][0]).prompt_ids
    assert traj.token_ids[: traj.prompt_len] == prompt
    for turn, text in zip(assistant, texts, strict=True):
        engine_ids = [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]
        assert traj.token_ids[turn.start : turn.end] == engine_ids
    model = [i for i, m in enumerate(traj.loss_mask) if m]
    assert all(traj.logprobs[i] < 0 for i in model) and {traj.versions[i] for i in model} == {3}
    assert all(traj.logprobs[i] == 0 and traj.versions[i] == -1
               for i, m in enumerate(traj.loss_mask) if not m)  # fmt: skip
    assert tok.decode(traj.token_ids) == conversation(tok, texts, steps)
    assert traj.policy_version == 3
    assert gate.entered == {"engine": 2, "env": 4}  # reset, 2 steps, close


@pytest.mark.parametrize(
    "broken",
    [
        '<tool_call>{"name": "calculator", "arguments": {"expression": "347*86"</tool_call>',
        # json.loads raises a plain ValueError (not JSONDecodeError) past 4,300 digits
        '<tool_call>{"name": "calculator", "arguments": {"expression": '
        + "9" * 5000
        + "}}</tool_call>",
    ],
    ids=["unclosed", "digits"],
)
async def test_malformed_tool_call_costs_a_format_penalty_and_play_goes_on(
    tok: Any, pool: SandboxPool, product: AnyTask, broken: str
) -> None:
    engine = ScriptedEngine([broken, call("answer", value="29842")], tokenizer=tok)
    env = Recorded(math_env(pool, reward_weights={"outcome": 1.0, "well_formed": 0.5}))
    long = AgentConfig(sampling=SamplingParams(max_new_tokens=8192), max_total_tokens=16384)
    traj = await run_episode(product, env, engine, long)  # room for 5,000 digits
    assert env.calls == {"reset": 1, "reject": 1, "step": 1, "close": 1}
    first = traj.turns[2]
    assert first.failure == "malformed_action" and first.components == {"well_formed": 0.0}
    assert first.detail.startswith("tool call 1: not valid JSON")
    assert first.detail in tok.decode(traj.token_ids[first.start : first.end])  # the model sees it
    assert traj.turns[1].tool_calls == []
    assert traj.success and traj.ending is Ending.DONE
    assert traj.reward == 1.0 + 0.5  # the penalised step earned nothing; the answer 1 + 0.5
    assert_spans(traj)


async def test_cut_off_outputs_get_their_end_of_turn_unmasked(
    tok: Any, pool: SandboxPool, product: AnyTask
) -> None:
    long = "Let me think about this step by step. " * 4 + call("answer", value="29842")
    engine = ScriptedEngine([long], tokenizer=tok)
    config = AgentConfig(sampling=SamplingParams(max_new_tokens=12), max_turns=2)
    traj = await run_episode(product, math_env(pool), engine, config)
    assert traj.ending is Ending.STEP_LIMIT and traj.failure == "max_turns" and not traj.success
    for turn in [t for t in traj.turns if t.role == "assistant"]:
        assert turn.finish_reason == "length" and turn.end - turn.start == 12
        # the template's end-of-turn token follows, appended by honing: not trained on
        assert traj.token_ids[turn.end] == tok.eos_token_id and traj.loss_mask[turn.end] == 0
    assert traj.turns[2].failure == "malformed_action"  # the call never got written
    assert_spans(traj)


async def test_token_budget_caps_generation_and_ends_the_episode(
    tok: Any, pool: SandboxPool, product: AnyTask
) -> None:
    env = math_env(pool)
    prompt_len = len(ChatFormat.of(tok).start(await env.reset(product)).prompt_ids)
    engine = ScriptedEngine(["Hmm, " * 40], tokenizer=tok)
    config = AgentConfig(sampling=SAMPLING, max_total_tokens=prompt_len + 10)
    traj = await run_episode(product, env, engine, config)
    assert traj.ending is Ending.CONTEXT_LIMIT and traj.failure == "context_limit"
    assert len(traj.token_ids) == prompt_len + 10 and sum(traj.loss_mask) == 10
    assert traj.turns[1].finish_reason == "length"
    # The step happened (and is recorded) though its observation did not fit.
    assert traj.turns[-1].role == "tool" and traj.turns[-1].start == traj.turns[-1].end
    assert traj.prompt_len == prompt_len


async def test_engine_failure_is_an_infra_failure(
    tok: Any, pool: SandboxPool, product: AnyTask
) -> None:
    engine = ScriptedEngine([call("calculator", expression="1+1")], tokenizer=tok,
                            fail_on=lambda _p, i: i == 1)  # fmt: skip
    env = Recorded(math_env(pool))
    with pytest.raises(InfraFailure) as caught:
        await run_episode(product, env, engine, AgentConfig(sampling=SAMPLING))
    assert caught.value.stage == "generate" and caught.value.cause.startswith("EngineError:")
    assert env.calls["close"] == 1
    partial = caught.value.trajectory
    assert partial is not None and partial.steps == 1 and partial.model_tokens > 0


@pytest.mark.parametrize(("hang", "infra", "cause"), [
    (True, False, "DeadlineExceeded: step deadline of 0.3s exceeded"),
    (False, True, "sandbox_error: cell crashed"),
])  # fmt: skip
async def test_env_failures_are_infra_failures(
    tok: Any, pool: SandboxPool, product: AnyTask, hang: bool, infra: bool, cause: str
) -> None:
    engine = ScriptedEngine([call("calculator", expression="1+1")], tokenizer=tok)
    env = Recorded(math_env(pool), hang=hang, infra=infra)
    config = AgentConfig(sampling=SAMPLING, deadlines=Deadlines(step_s=0.3))
    with pytest.raises(InfraFailure) as caught:
        await run_episode(product, env, engine, config)
    assert caught.value.stage == "step" and caught.value.cause == cause
    assert env.calls["close"] == 1


async def test_episode_deadline_ends_the_trajectory_as_a_timeout(
    tok: Any, pool: SandboxPool, product: AnyTask
) -> None:
    engine = ScriptedEngine([call("calculator", expression="1+1")], tokenizer=tok,
                            hang_on=lambda _p, i: i == 1)  # fmt: skip
    env = Recorded(math_env(pool))
    config = AgentConfig(sampling=SAMPLING, deadlines=Deadlines(episode_s=1.0))
    traj = await run_episode(product, env, engine, config)
    assert traj.ending is Ending.TIMEOUT and traj.failure == "episode_deadline"
    assert traj.steps == 1 and env.calls["close"] == 1


async def test_chat_engine_gets_messages_and_tools(pool: SandboxPool, product: AnyTask) -> None:
    prompts: list[Prompt] = []

    def respond(prompt: Prompt, index: int) -> str:
        prompts.append(prompt)
        if index == 0:  # a bare JSON call: the engine returns it as structured tool_calls
            return json.dumps({"name": "calculator", "arguments": {"expression": "347*86"}})
        return "It is " + call("answer", value="29842")  # text the agent parses itself

    engine = ScriptedEngine(respond)
    traj = await run_episode(product, math_env(pool), engine, AgentConfig(sampling=SAMPLING))
    assert traj.success and traj.token_ids == [] and traj.loss_mask == []
    assert prompts[0].tools is not None and prompts[0].messages is not None
    assert [t["function"]["name"] for t in prompts[0].tools] == ["calculator", "answer"]
    second = prompts[1].messages
    assert second is not None
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "user"]
    assert second[2]["tool_calls"][0]["function"]["name"] == "calculator"
    assert second[3]["tool_call_id"] == second[2]["tool_calls"][0]["id"]
    assert second[3]["content"] == "347*86 = 29842"
    assert traj.turns[3].tool_calls[0]["function"]["name"] == "answer"
    assert traj.policy_version == 0


async def test_hf_engine_episode_is_token_faithful(
    tiny_model_dir: Path, tok: Any, pool: SandboxPool, product: AnyTask
) -> None:
    from honing.rollout.engines.hf import HFEngine

    steps: list[tuple[Observation, StepResult]] = []
    config = AgentConfig(sampling=SamplingParams(temperature=0, max_new_tokens=12), max_turns=2)
    async with HFEngine(tiny_model_dir, dtype="float32", max_batch=2) as engine:
        traj = await run_episode(product, math_env(pool), engine, config,
                                 on_step=lambda o, a, r: steps.append((o, r)))  # fmt: skip
    assert traj.steps == 2 and traj.ending is Ending.STEP_LIMIT  # random weights: no answer
    assert_spans(traj)
    assert sum(traj.loss_mask) == sum(t.end - t.start for t in traj.turns if t.role == "assistant")
    assert {traj.versions[i] for i, m in enumerate(traj.loss_mask) if m} == {0}
    texts = [t.text for t in traj.turns if t.role == "assistant"]
    assert tok.decode(traj.token_ids) == conversation(tok, texts, steps)
