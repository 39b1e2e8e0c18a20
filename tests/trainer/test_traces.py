"""Reference traces: the expression behind synthetic math answers, traces played in the real
sandboxed environments, and the key faithfulness check — the agent loop, made to write a trace's
actions, reaches outcome 1 with exactly the token ids and loss mask SFT gives the trace."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from honing.domains.code.generate import generate_code_tasks
from honing.domains.code.repair import generate_code_repair_tasks
from honing.domains.code.task import CODE_SOLUTION, CodeTask
from honing.domains.math.generate import generate_math_tasks
from honing.domains.math.task import MathTask
from honing.domains.math.traces import _evaluate, arithmetic_expression
from honing.domains.sql.generate import generate_sql_tasks
from honing.domains.tools.generate import generate_tools_tasks
from honing.envs.base import Action, ToolCall
from honing.envs.registry import make_env
from honing.rollout.agent import AgentConfig, run_episode
from honing.rollout.chat import ChatFormat
from honing.rollout.engines.base import SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask
from honing.trainer.sft import ChatExample, load_chat_data, tokenize_example
from honing.trainer.traces import (
    Trace,
    TraceError,
    reference_traces,
    trace_budget,
    trace_plan,
    write_traces,
)

MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
# ChatML that knows the tool role (SmolLM2's own template does not: results become user messages)
TOOL_ROLE_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'tool' %}"
    "{{ '<|im_start|>tool\n' + m['content'] + '<|im_end|>\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool


def test_every_synthetic_math_task_gets_the_expression_of_its_answer() -> None:
    tasks = generate_math_tasks(70, 0) + generate_math_tasks(70, 1, phrasings="heldout")
    forms = {"remainder": "%", "quotient": "/", "product": "*", "sum": "+"}
    for task in tasks:
        expression = arithmetic_expression(task)
        assert expression is not None, task.prompt
        assert _evaluate(expression) == int(task.answer), (task.prompt, expression)
        family = str(task.metadata["family"])
        assert forms.get(family, "") in expression, (family, expression)


def test_the_calculator_is_used_only_where_the_expression_is_known() -> None:
    answer_only = [Action(tool_calls=[ToolCall(id="a", name="answer", arguments={"value": "24"})])]
    riddle = MathTask(id="m", prompt="How many legs do three spiders have?", answer="24")
    assert arithmetic_expression(riddle) is None
    assert trace_plan(riddle, answer_only, calculator_first=True).actions is answer_only
    direct = MathTask(id="d", prompt="Compute 12 × 34.", answer="408")
    plan = trace_plan(direct, answer_only, calculator_first=True)
    assert plan.actions is not answer_only and plan.check_first is not None
    assert [a.tool_calls[0].arguments for a in plan.actions] == [
        {"expression": "12 * 34"},
        {"value": "408"},
    ]
    assert trace_plan(direct, answer_only, calculator_first=False).actions is answer_only
    wrong = MathTask(id="w", prompt="What is 12 * 34?", answer="407")  # never a false expression
    assert arithmetic_expression(wrong) is None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def played(pool: SandboxPool, tmp_path_factory: pytest.TempPathFactory) -> Played:
    tasks: list[AnyTask] = [
        *generate_math_tasks(7, 0),  # one of each family
        *generate_tools_tasks(3, 0),
        *generate_code_tasks(1, 0),
        *generate_code_repair_tasks(2, 0),
    ]
    path = tmp_path_factory.mktemp("traces") / "traces.jsonl"
    traces = await write_traces(tasks, path, pool)
    return Played(tasks, traces, load_chat_data(str(path)))  # the file is valid SFT data


@dataclass
class Played:
    tasks: list[AnyTask]
    traces: list[Trace]
    examples: list[ChatExample]


@MODULE_LOOP
async def test_traces_are_played_in_task_order_and_math_uses_the_calculator(
    played: Played,
) -> None:
    assert [t.task_id for t in played.traces] == [t.id for t in played.tasks]
    assert all(t.outcome == 1.0 for t in played.traces)
    calculator = [t.calculator for t in played.traces]
    assert calculator == [True] * 7 + [False] * 6
    assert played.traces[0].actions[0].startswith('<tool_call>{"name": "calculator"')


@MODULE_LOOP
async def test_repair_traces_look_then_fix(played: Played) -> None:
    """A repair trace teaches the loop: read the file and run the tests, read the failures,
    then write the fixed file (a ```python block: written, then tested)."""
    repairs = [
        (task, trace)
        for task, trace in zip(played.tasks, played.traces, strict=True)
        if isinstance(task, CodeTask) and task.repair
    ]
    assert len(repairs) == 2
    for task, trace in repairs:
        look, fix = trace.actions
        assert look.count("<tool_call>") == 2 and '"name": "read_file"' in look
        assert '"name": "run_tests"' in look
        assert fix == f"```python\n{task.reference}```"
        shown = [str(m["content"]) for m in trace.messages if m["role"] != "assistant"]
        assert any(task.files[CODE_SOLUTION].strip() in text for text in shown)  # the starter
        assert any(" tests passed\nassert " in text for text in shown)  # which assert failed
        assert trace.outcome == 1.0


@MODULE_LOOP
@pytest.mark.parametrize("template", [None, TOOL_ROLE_TEMPLATE], ids=["smollm2", "tool-role"])
async def test_traces_replay_to_outcome_1_and_tokenise_exactly_like_the_agent_loop(
    played: Played, pool: SandboxPool, tiny_model_dir: Path, template: str | None
) -> None:
    tok = load_tokenizer(tiny_model_dir)
    if template is not None:
        tok.chat_template = template
    fmt = ChatFormat.of(tok)
    assert fmt.traits.tool_role == (template is not None)
    config = AgentConfig(sampling=SamplingParams(max_new_tokens=2048), max_total_tokens=8192)
    for task, trace, example in zip(played.tasks, played.traces, played.examples, strict=True):
        # The agent loop, with a model that writes the trace's actions, in a fresh environment
        engine = ScriptedEngine(trace.actions, tokenizer=tok)
        traj = await run_episode(task, make_env(task.domain, pool), engine, config)
        assert traj.success and traj.components["outcome"] == 1.0, (task.id, traj.detail)
        seq = tokenize_example(example, fmt)
        n = len(seq.token_ids)
        assert traj.token_ids[:n] == seq.token_ids, task.id
        assert traj.loss_mask[:n] == seq.loss_mask, task.id
        assert not any(traj.loss_mask[n:])  # only the final observation follows
        assert seq.tokens == sum(traj.loss_mask) > 0


@MODULE_LOOP
@pytest.mark.parametrize("template", [None, TOOL_ROLE_TEMPLATE], ids=["smollm2", "tool-role"])
async def test_traces_that_do_not_restate_the_state_match_such_an_agent(
    pool: SandboxPool, tiny_model_dir: Path, tmp_path: Path, template: str | None
) -> None:
    """restate=False: after a step that went as planned only its tool results are shown, in the
    trace as in the agent loop, token for token."""
    tasks: list[AnyTask] = [
        *generate_math_tasks(3, 0),
        *generate_tools_tasks(2, 0),
        *generate_code_repair_tasks(1, 0),
    ]
    path = tmp_path / "traces.jsonl"
    traces = await write_traces(tasks, path, pool, restate=False)
    examples = load_chat_data(str(path))
    tok = load_tokenizer(tiny_model_dir)
    if template is not None:
        tok.chat_template = template
    fmt = ChatFormat.of(tok)
    config = AgentConfig(sampling=SamplingParams(max_new_tokens=2048), max_total_tokens=8192,
                         restate=False)  # fmt: skip
    for task, trace, example in zip(tasks, traces, examples, strict=True):
        after_first = [m for m in trace.messages[2:] if m["role"] == "user"]
        assert not any("Goal:" in str(m["content"]) for m in after_first), task.id
        engine = ScriptedEngine(trace.actions, tokenizer=tok)
        traj = await run_episode(task, make_env(task.domain, pool), engine, config)
        assert traj.success, (task.id, traj.detail)
        seq = tokenize_example(example, fmt)
        assert traj.token_ids[: len(seq.token_ids)] == seq.token_ids, task.id
        assert traj.loss_mask[: len(seq.token_ids)] == seq.loss_mask, task.id


@MODULE_LOOP
async def test_a_reference_that_does_not_solve_its_task_is_an_error_naming_it(
    pool: SandboxPool, tmp_path: Path
) -> None:
    good: Any = generate_math_tasks(1, 0)[0]
    bad = MathTask(id="bad-ref", prompt="What is 2 + 2?", answer="4", reference="5")
    with pytest.raises(TraceError, match=r"1 of 2 .*\n  bad-ref: outcome 0"):
        await write_traces([good, bad], tmp_path / "t.jsonl", pool, calculator_first=False)
    assert not (tmp_path / "t.jsonl").exists()  # nothing written when one fails
    [trace] = await reference_traces([bad], pool, calculator_first=True)  # via the calculator
    assert trace.outcome == 1.0 and trace.calculator


class _Words:
    """A tokenizer of whitespace-separated words, for hand-counted budgets."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[str]:
        assert not add_special_tokens
        return text.split()


def test_the_budget_names_the_traces_the_agent_could_not_write() -> None:
    traces = [
        Trace("short", [], [], 1.0, actions=["a b", "c"]),  # turns of 3 and 2 tokens
        Trace("long", [], [], 1.0, actions=["a b c d e"]),  # 6 with its end token
        Trace("many", [], [], 1.0, actions=["a", "b", "c"]),  # three turns
    ]
    budget = trace_budget(traces, _Words(), max_new_tokens=5, max_turns=2)
    assert (budget.traces, budget.longest, budget.turns) == (3, 6, 3)
    assert (budget.too_long, budget.too_many) == (["long"], ["many"])
    warning = budget.warning(5, 2)
    assert warning is not None
    assert "1 of 3 reference traces have a turn longer than agent.max_new_tokens (5" in warning
    assert "raise agent.max_new_tokens to at least 6" in warning
    assert "raise agent.max_turns to 3" in warning
    assert trace_budget(traces, _Words(), 6, 3).warning(6, 3) is None  # exactly enough fits


@MODULE_LOOP
async def test_sql_references_need_more_than_128_new_tokens(
    pool: SandboxPool, tiny_model_dir: Path
) -> None:
    """The sql recipe once gave its agent 128 tokens a turn: its `change` and `reconciliation`
    answers (the number and the query that computes it) need ~155, so two of its six families
    could never be answered. The budget check says so, with the value that fits."""
    tasks = generate_sql_tasks(12, 13)  # two of each family
    traces = await reference_traces(tasks, pool, system_prompt="", restate=False)
    budget = trace_budget(traces, load_tokenizer(tiny_model_dir), 128, 3)
    families = {t.id: t.metadata["family"] for t in tasks}
    assert {families[i] for i in budget.too_long} == {"change", "reconciliation"}
    assert 128 < budget.longest <= 176 and not budget.too_many
    assert trace_budget(traces, load_tokenizer(tiny_model_dir), 176, 3).warning(176, 3) is None
