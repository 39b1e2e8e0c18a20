"""The code environment against the real sandbox: contract, rewards, failures, rollback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from honing.domains.code.env import CodeEnv
from honing.domains.code.task import CodeTask
from honing.domains.math.task import MathTask
from honing.envs import Action, EnvConfig, FailureReason, MalformedAction
from honing.errors import HoningError
from honing.sandbox import ExecResult, ExecStatus, SandboxPool

ADD = CodeTask(
    id="add",
    prompt="def add(a, b):\n    ...\n",
    entry_point="add",
    tests="import math\nassert add(1, 2) == 3\nassert add(-1, 1) == 0\nassert add(2, 2) == 4\n",
    reference="def add(a, b):\n    return a + b\n",
)
REPAIR = CodeTask(
    id="repair",
    prompt="Fix the bug in solution.py: some tests of `span` fail.",
    entry_point="span",
    tests="assert span(1, 3) == 3\nassert span(5, 5) == 1\nassert span(0, 9) == 10\n",
    files={"solution.py": "def span(lo, hi):\n    return hi - lo\n", "notes.txt": "inclusive"},
    reference="def span(lo, hi):\n    return hi - lo + 1\n",
)
CHECKED = CodeTask(
    id="checked",
    prompt="def double(x):\n",
    entry_point="double",
    tests="def check(candidate):\n    assert candidate(2) == 4\n",
    reference="def double(x):\n    return 2 * x\n",
)


def code(source: str) -> Action:
    return Action(content=f"Here it is:\n```python\n{source}```\n")


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": f"c-{name}", "function": {"name": name, "arguments": json.dumps(arguments)}}


@pytest.fixture
def env(pool: SandboxPool) -> CodeEnv:
    return CodeEnv(pool, EnvConfig(max_steps=4))


async def test_reference_solves_through_tool_calls(env: CodeEnv) -> None:
    obs = await env.reset(ADD)
    assert "Goal: def add" in obs.text and "add" in obs.text
    assert {t["function"]["name"] for t in obs.tools} >= {"write_file", "run_tests", "rollback"}
    message = {"content": "", "tool_calls": [
        call("write_file", path="solution.py", content=ADD.reference),
        call("run_tests"),
    ]}  # fmt: skip
    result = await env.step(Action.from_openai(message))
    assert result.done and result.info.failure is None
    assert result.components == {"well_formed": 1.0, "outcome": 1.0, "compiles": 1.0,
                                 "tests_passed": 1.0}  # fmt: skip
    assert result.reward == 1.0  # default weights: outcome only
    assert result.observation.tool_results[-1].content.startswith("3/3 tests passed")


async def test_check_style_tests_count_as_one(env: CodeEnv) -> None:
    await env.reset(CHECKED)
    result = await env.step(code(CHECKED.reference or ""))
    assert result.components["outcome"] == 1.0
    assert result.observation.tool_results[-1].content.startswith("1/1 tests passed")


async def test_partial_solution_earns_a_share_and_sees_the_failure(env: CodeEnv) -> None:
    await env.reset(ADD)
    result = await env.step(code("def add(a, b):\n    return a + b if a > 0 else 99\n"))
    assert not result.done
    assert result.components["outcome"] == 0.0
    assert result.components["tests_passed"] == pytest.approx(2 / 3)
    assert result.info.failure is FailureReason.TOOL_ERROR and not result.info.infrastructure
    assert "assert add(-1, 1) == 0 -> AssertionError (got 99)" in result.observation.text


async def test_noop_answer_fails_with_a_format_penalty(env: CodeEnv) -> None:
    await env.reset(ADD)
    result = await env.step(Action(content="I am not sure."))
    assert result.components == {"well_formed": 0.0}
    assert result.info.failure is FailureReason.MALFORMED_ACTION
    assert "call a tool" in result.observation.text
    weighted = CodeEnv(env.pool, EnvConfig(reward_weights={"well_formed": 0.5}))
    assert weighted.weighted({"well_formed": 0.0, "outcome": 1.0}) == 1.0
    assert weighted.weighted({"well_formed": 1.0, "outcome": 0.0}) == 0.5


def test_malformed_tool_calls_are_named() -> None:
    with pytest.raises(MalformedAction, match=r"tool call 0 \(run_tests\): arguments are not JSON"):
        Action.from_openai({"tool_calls": [{"function": {"name": "run_tests", "arguments": "{"}}]})
    with pytest.raises(MalformedAction, match="must be a JSON object"):
        Action.from_openai({"tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]})
    with pytest.raises(MalformedAction, match=r"needs function\.name"):
        Action.from_openai({"tool_calls": [{"function": {}}]})


DIGITS = "Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits"


@pytest.mark.parametrize(
    ("arguments", "why"),
    [  # json.loads raises a plain ValueError here, and RecursionError: not JSONDecodeError
        ('{"n": ' + "9" * 5000 + "}", DIGITS),
        ('{"n": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deep (maximum recursion depth"),
    ],
)  # fmt: skip
def test_arguments_past_pythons_json_limits_are_malformed(arguments: str, why: str) -> None:
    message = {"tool_calls": [{"function": {"name": "run_tests", "arguments": arguments}}]}
    with pytest.raises(MalformedAction) as caught:
        Action.from_openai(message)
    assert str(caught.value).startswith(f"tool call 0 (run_tests): arguments are not JSON: {why}")


async def test_unknown_tool_and_bad_arguments_are_not_crashes(env: CodeEnv) -> None:
    await env.reset(ADD)
    result = await env.step(Action.from_openai({"tool_calls": [call("delete_everything")]}))
    assert result.info.failure is FailureReason.UNKNOWN_TOOL
    assert result.components["well_formed"] == 0.0
    assert "available: write_file" in result.observation.tool_results[0].content
    result = await env.step(Action.from_openai({"tool_calls": [
        call("write_file", path="../../etc/x", content="x")]}))  # fmt: skip
    assert result.info.failure is FailureReason.MALFORMED_ACTION
    assert "without '..'" in result.observation.tool_results[0].content


async def test_reward_hacks_earn_nothing(env: CodeEnv) -> None:
    await env.reset(ADD)
    early_exit = await env.step(code("import os\nos._exit(0)\n"))
    assert early_exit.components["outcome"] == 0.0
    fake = json.dumps({"compiled": True, "passed": 3, "total": 3, "errors": []})
    forged = await env.step(code(f"import sys\nprint('0' * 32 + ' ' + {fake!r})\nsys.exit(0)\n"))
    assert forged.components["outcome"] == 0.0
    stolen = await env.step(code("import sys\nprint(sys.stdin.read())\n"))
    assert stolen.components["outcome"] == 0.0


async def test_a_solution_that_crashes_the_test_harness_is_wrong_not_infrastructure(
    env: CodeEnv,
) -> None:
    """The tests run the model's own program: its crash is a wrong answer, with the reason."""
    await env.reset(ADD)
    result = await env.step(code("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"))
    assert result.components["outcome"] == 0.0 and not result.info.infrastructure
    assert result.info.failure is FailureReason.TOOL_ERROR
    assert "killed by signal SIGSEGV" in result.info.detail


async def test_rollback_tool_restores_the_best_solution(env: CodeEnv) -> None:
    await env.reset(ADD)
    await env.step(code("def add(a, b):\n    return a + b if a != 2 else 0\n"))  # 2/3
    worse = await env.step(code("def add(a, b):\n    return -99\n"))  # 0/3
    assert worse.components["tests_passed"] == 0.0
    await env.step(Action.from_openai({"tool_calls": [call("rollback")]}))
    assert env.workspace is not None
    assert env.workspace.read("solution.py").decode().endswith("if a != 2 else 0\n")


async def test_checkpoint_and_rollback(env: CodeEnv) -> None:
    await env.reset(ADD)
    token = await env.checkpoint()
    await env.step(Action.from_openai({"tool_calls": [
        call("write_file", path="notes.txt", content="scratch")]}))  # fmt: skip
    assert env.workspace is not None and env.workspace.read("notes.txt") == b"scratch"
    await env.rollback(token)
    with pytest.raises(FileNotFoundError):
        env.workspace.read("notes.txt")
    assert env.workspace.read("solution.py").decode() == ADD.prompt


async def test_infrastructure_failure_is_flagged_not_scored(
    env: CodeEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    await env.reset(ADD)

    async def broken(request: object) -> ExecResult:
        return ExecResult(ExecStatus.SANDBOX_ERROR, error="cell crashed")

    monkeypatch.setattr(env.pool, "run", broken)
    result = await env.step(code(ADD.reference or ""))
    assert result.info.failure is FailureReason.SANDBOX_ERROR
    assert result.info.infrastructure
    assert "outcome" not in result.components  # no reward of 0 stands for a broken sandbox


async def test_step_limit_and_episode_timeout(pool: SandboxPool) -> None:
    env = CodeEnv(pool, EnvConfig(max_steps=2))
    await env.reset(ADD)
    first = await env.step(Action(content="thinking"))
    assert not first.done
    second = await env.step(Action(content="still thinking"))
    assert second.done
    with pytest.raises(HoningError, match="episode is over"):
        await env.step(Action(content="more"))
    slow = CodeEnv(pool, EnvConfig(step_timeout_s=0.5, episode_timeout_s=0.5))
    await slow.reset(ADD)
    result = await slow.step(code("import time\ntime.sleep(30)\n"))
    assert result.info.failure is FailureReason.EPISODE_TIMEOUT and result.done
    assert result.info.detail.startswith(
        "the episode's 0.5 s of steps ran out (env.episode_timeout_s;"
    )
    one_step = CodeEnv(pool, EnvConfig(step_timeout_s=0.5, episode_timeout_s=60))
    await one_step.reset(ADD)
    result = await one_step.step(code("import time\ntime.sleep(30)\n"))
    assert result.info.failure is FailureReason.STEP_TIMEOUT and not result.done
    assert result.info.detail == "no result within the step's 0.5 s (env.step_timeout_s)"


async def test_the_episode_limit_counts_the_steps_not_the_models_turns(pool: SandboxPool) -> None:
    """How long the model's turns take depends on how many episodes share the engine and the
    host: a turn longer than the episode's limit ends nothing; the steps' own time does."""
    env = CodeEnv(pool, EnvConfig(step_timeout_s=30, episode_timeout_s=4.0))
    await env.reset(ADD)
    await asyncio.sleep(4.5)  # the model's first turn, queued behind other episodes
    first = await env.step(code("def add(a, b):\n    return 0\n"))
    assert first.info.failure is not FailureReason.EPISODE_TIMEOUT and not first.done
    await asyncio.sleep(4.5)
    second = await env.step(code("import time\ntime.sleep(30)\n"))  # the steps' 4 s run out
    assert second.info.failure is FailureReason.EPISODE_TIMEOUT and second.done


async def test_state_stays_compact(env: CodeEnv) -> None:
    long_env = CodeEnv(env.pool, EnvConfig(max_steps=30))
    await long_env.reset(ADD)
    for _ in range(12):
        result = await long_env.step(Action.from_openai({"tool_calls": [
            call("read_file", path="solution.py")]}))  # fmt: skip
    text = result.observation.text
    assert "(4 earlier actions)" in text and text.count("- read_file") == 8


async def test_wrong_domain_is_refused(env: CodeEnv) -> None:
    with pytest.raises(HoningError, match="runs code tasks, not math"):
        await env.reset(MathTask(id="m", prompt="1+1?", answer="2"))


async def test_episodes_run_concurrently(pool: SandboxPool) -> None:
    envs = [CodeEnv(pool) for _ in range(4)]
    await asyncio.gather(*(e.reset(ADD) for e in envs))
    results = await asyncio.gather(*(e.step(code(ADD.reference or "")) for e in envs))
    assert [r.components["outcome"] for r in results] == [1.0] * 4


async def test_close_releases_the_workspace(env: CodeEnv) -> None:
    await env.reset(ADD)
    assert env.workspace is not None
    path = env.workspace.path
    await env.reset(ADD)  # a new episode drops the last one's workspace
    assert not path.exists()
    assert env.workspace is not None
    current = env.workspace.path
    await env.close()
    assert not current.exists() and env.workspace is None


async def test_a_repair_episode_reads_the_starter_sees_the_failure_and_fixes_it(
    pool: SandboxPool,
) -> None:
    env = CodeEnv(pool, EnvConfig(max_steps=4))
    obs = await env.reset(REPAIR)
    assert "read_file solution.py and run_tests" in obs.text
    assert obs.text.endswith("Goal: " + REPAIR.prompt)
    look, fix = env.reference_actions(REPAIR)
    assert [c.name for c in look.tool_calls] == ["read_file", "run_tests"]
    result = await env.step(look)
    shown, verdict = (r.content for r in result.observation.tool_results)
    assert shown == REPAIR.files["solution.py"]  # the starter, not the prompt
    assert verdict.splitlines() == [
        "0/3 tests passed",
        "assert span(1, 3) == 3 -> AssertionError (got 2)",
        "assert span(5, 5) == 1 -> AssertionError (got 0)",
        "assert span(0, 9) == 10 -> AssertionError (got 9)",
    ]
    assert not result.done and "fix solution.py using the errors above" in (
        result.observation.update or ""
    )
    assert fix.content == f"```python\n{REPAIR.reference}```"  # write + run_tests in one reply
    result = await env.step(fix)
    assert result.done and result.components["outcome"] == 1.0
    assert result.observation.tool_results[-1].content == "3/3 tests passed"
    assert env.workspace is not None and env.workspace.read("notes.txt") == b"inclusive"


async def test_got_is_shown_for_equalities_only(env: CodeEnv) -> None:
    task = ADD.model_copy(update={"tests": "assert add(1, 2) > 5\nassert add(1, 2) == 4, 'no'\n"})
    await env.reset(task)
    result = await env.step(code(ADD.reference or ""))
    assert result.observation.tool_results[-1].content.splitlines()[1:] == [
        "assert add(1, 2) > 5 -> AssertionError",
        "assert add(1, 2) == 4, 'no' -> AssertionError: no (got 3)",
    ]
