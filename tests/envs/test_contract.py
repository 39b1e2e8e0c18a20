"""Every registered domain honours the environment contract, on its bundled example tasks."""

from __future__ import annotations

import pytest

from honing.envs import Action, EnvConfig, FailureReason, ToolCall
from honing.envs.registry import environments, make_env
from honing.errors import ConfigError
from honing.sandbox import SandboxPool
from honing.tasks import load_tasks
from honing.tasks.load import AnyTask

DOMAINS = sorted(environments())


def example(domain: str) -> AnyTask:
    tasks = load_tasks(f"examples-{domain}").tasks
    # An executable task where the domain has two kinds (tools: answer set).
    return next((t for t in tasks if getattr(t, "answer", "x") is not None), tasks[0])


@pytest.mark.parametrize("domain", DOMAINS)
async def test_reference_solves_every_example(pool: SandboxPool, domain: str) -> None:
    for task in load_tasks(f"examples-{domain}").tasks:
        env = make_env(domain, pool, EnvConfig(max_steps=6))
        observation = await env.reset(task)
        assert observation.tools and observation.text.endswith(f"Goal: {task.prompt}")
        for action in env.reference_actions(task):
            result = await env.step(action)
            assert (result.risk, result.info.risks) == (0.0, []), (task.id, result.info.risks)
        assert result.done and result.components.get("outcome") == 1.0, (task.id, result.info)
        await env.close()


@pytest.mark.parametrize("domain", DOMAINS)
async def test_noop_fails_and_unknown_tools_are_a_format_failure(
    pool: SandboxPool, domain: str
) -> None:
    task = example(domain)
    env = make_env(domain, pool, EnvConfig(max_steps=3))
    await env.reset(task)
    noop = await env.step(Action(content="I don't know."))
    assert noop.components.get("outcome", 0.0) == 0.0 and noop.reward == 0.0
    if not env.done:
        bogus = Action(tool_calls=[ToolCall(id="x", name="no_such_tool", arguments={})])
        result = await env.step(bogus)
        assert result.info.failure is FailureReason.UNKNOWN_TOOL
        assert result.components["well_formed"] == 0.0
        assert "no_such_tool" in result.observation.tool_results[0].content
    await env.close()


@pytest.mark.parametrize("domain", DOMAINS)
async def test_rollback_returns_to_the_checkpoint(pool: SandboxPool, domain: str) -> None:
    task = example(domain)
    env = make_env(domain, pool, EnvConfig(max_steps=6))
    first = await env.reset(task)
    token = await env.checkpoint()
    played = [await env.step(action) for action in env.reference_actions(task)]
    assert env.done and env.steps > 0
    await env.rollback(token)  # back to before the answer: the episode goes on
    assert not env.done and env.steps == 0
    assert env.state is not None and env.state.render() == first.text
    again = [await env.step(action) for action in env.reference_actions(task)]
    assert again[-1].components.get("outcome") == 1.0
    # What each observation says has changed is measured from the checkpoint's, not from the
    # last one shown before the rollback.
    assert [r.observation.update for r in again] == [r.observation.update for r in played]
    await env.close()


def test_unknown_domain_names_the_available_ones(pool: SandboxPool) -> None:
    with pytest.raises(ConfigError, match="available: code"):
        make_env("astrology", pool)
