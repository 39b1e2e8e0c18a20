"""Team warm-start data: a scripted team plays each task in the real environment; every role's
row renders to exactly the tokens of its role's trajectory; a rejected wrong submission stays in
the executor's row as context only; the warm start of a team run trains on those rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from honing.domains.code.repair import generate_code_repair_tasks
from honing.domains.code.submissions import describe_change, submitted_code
from honing.domains.code.task import CODE_SOLUTION
from honing.domains.math.generate import generate_math_tasks
from honing.envs.base import Action, ToolCall
from honing.envs.registry import make_env
from honing.rollout.agent import AgentConfig
from honing.rollout.chat import ChatFormat
from honing.rollout.engines.base import Engine, SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.rollout.saved_agent import SavedAgent, load_agent
from honing.rollout.team import Conversation, RoleEngines, TeamConfig, run_team_episode
from honing.sandbox import SandboxPool
from honing.trainer.run_config import TrainConfig
from honing.trainer.sft import ChatExample, SftDataError, load_chat_data, tokenize_example
from honing.trainer.team_traces import (
    reference_plan,
    reject_choice,
    team_traces,
    validator_reply,
    wrong_submissions,
)
from honing.trainer.traces import TraceError, action_text
from honing.trainer.warm import warm_start

MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
TEAM = TeamConfig.model_validate(
    {
        "roles": [{"kind": "analyst"}, {"kind": "executor"}, {"kind": "validator"}],
        "submit_tools": [],  # code repair: the ```python reply submits, run_tests only looks
    }
)
AGENT = AgentConfig(sampling=SamplingParams(max_new_tokens=1024), max_total_tokens=8192,
                    max_turns=3, system_prompt="")  # fmt: skip


@pytest.fixture(scope="module")
def pool(module_pool: SandboxPool) -> SandboxPool:
    return module_pool


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


def test_the_scripts_plan_without_the_answer_and_name_the_change() -> None:
    [task] = generate_code_repair_tasks(1, 0)
    assert task.reference is not None
    read = ToolCall(id="a", name="read_file", arguments={"path": CODE_SOLUTION})
    fix = Action(content=f"```python\n{task.reference}```")
    test = ToolCall(id="b", name="run_tests", arguments={})
    plan = reference_plan([Action(tool_calls=[read, test]), fix], submits=())
    assert plan.splitlines()[0] == "1. Call read_file on solution.py and run_tests."
    assert plan.splitlines()[1].startswith("2. Reply with the whole fixed file")
    assert task.reference.strip() not in plan
    assert submitted_code(fix) == task.reference
    given = task.files[CODE_SOLUTION]
    change = describe_change(given, task.reference)
    assert change.startswith("It changes line ") and "` to `" in change
    assert describe_change(given, given) == "It submits solution.py unchanged."
    assert validator_reply(change, True).splitlines()[-1] == "ACCEPT"
    assert validator_reply(change, False).splitlines()[-1].startswith("REJECT: ")
    # wrong versions: never the reference itself, each a real change of it
    wrongs = [submitted_code(w) for w in wrong_submissions(task, fix)]
    assert wrongs and all(w is not None and w.strip() != task.reference.strip() for w in wrongs)
    assert given in wrongs
    # a numeric answer: one off
    answer = Action(tool_calls=[ToolCall(id="c", name="answer", arguments={"value": "29842"})])
    [math] = generate_math_tasks(1, 0)
    [off] = wrong_submissions(math, answer)
    assert off.tool_calls[0].arguments == {"value": "29843"}


def test_reject_choice_is_a_stable_share() -> None:
    tasks = generate_code_repair_tasks(8, 3)
    half = reject_choice(tasks, 0.5)
    assert len(half) == 4 and half <= reject_choice(tasks, 0.75)
    assert reject_choice(tasks, 0.0) == set() and len(reject_choice(tasks, 1.0)) == 8
    with pytest.raises(Exception, match=r"reject_share must be within \[0, 1\]"):
        reject_choice(tasks, 1.5)


@MODULE_LOOP
async def test_each_roles_conversation_renders_to_its_trajectory_token_for_token(
    pool: SandboxPool, tok: Any
) -> None:
    """`run_team_episode(conversations=)`: each role's row, tokenised as SFT tokenises it, is the
    role's trajectory (ids and mask), the weight-0 turn aside."""
    [task] = generate_code_repair_tasks(1, 5)
    assert task.reference is not None
    env = make_env(task.domain, pool)
    look, fix = env.reference_actions(task)
    await env.close()
    wrong = Action(content=f"```python\n{task.files[CODE_SOLUTION]}```")
    engines: dict[str, Engine] = {
        "analyst": ScriptedEngine(["1. Call read_file."], tokenizer=tok),
        "executor": ScriptedEngine([action_text(a) for a in (look, wrong, fix)], tokenizer=tok),
        "validator": ScriptedEngine(["REJECT: same code", "ACCEPT"], tokenizer=tok),
    }
    conversations: dict[str, Conversation] = {}
    lead = await run_team_episode(task, make_env(task.domain, pool),
                                  RoleEngines(engines, "executor"), TEAM, AGENT,
                                  conversations=conversations)  # fmt: skip
    assert lead.success and lead.components["team_rounds"] == 2.0, lead.detail
    fmt = ChatFormat.of(tok)
    for traj in [lead, *lead.partners]:
        conversation = conversations[traj.role]
        example = ChatExample.model_validate({"messages": conversation.messages,
                                              "tools": conversation.tools})  # fmt: skip
        seq = tokenize_example(example, fmt)
        n = len(seq.token_ids)
        assert traj.token_ids[:n] == seq.token_ids, traj.role
        assert traj.loss_mask[:n] == seq.loss_mask, traj.role
        assert not any(traj.loss_mask[n:]), traj.role


@MODULE_LOOP
async def test_a_scripted_team_plays_every_task_and_rejects_where_chosen(
    pool: SandboxPool, tok: Any, tmp_path: Path
) -> None:
    tasks = generate_code_repair_tasks(4, 7)
    traces = await team_traces(tasks, pool, TEAM, AGENT, tok, reject_share=0.5)
    assert [t.task_id for t in traces] == [t.id for t in tasks]
    assert {t.task_id for t in traces if t.rejected} == reject_choice(tasks, 0.5)
    fmt = ChatFormat.of(tok)
    for trace in traces:
        assert trace.roles == ["analyst", "executor", "validator"]
        assert all(r.correct for r in trace.reviews)
        rows = {role: row for role, row in zip(trace.roles, trace.rows, strict=True)}
        verdicts = [m["content"].splitlines()[-1] for m in rows["validator"]["messages"]
                    if m["role"] == "assistant"]  # fmt: skip
        said = [m for m in rows["executor"]["messages"] if m["role"] == "assistant"]
        if trace.rejected:
            assert verdicts[0].startswith("REJECT: ") and verdicts[1] == "ACCEPT"
            assert [m.get("weight", 1) for m in said] == [1, 0, 1]  # the mistake: context only
            row = rows["executor"]
            seq = tokenize_example(ChatExample.model_validate(row), fmt)
            unweighted = {**row, "messages": [{k: v for k, v in m.items() if k != "weight"}
                                              for m in row["messages"]]}  # fmt: skip
            every = tokenize_example(ChatExample.model_validate(unweighted), fmt)
            assert seq.token_ids == every.token_ids
            off = [i for i, (a, b) in enumerate(zip(every.loss_mask, seq.loss_mask, strict=True))
                   if a and not b]  # fmt: skip
            assert off == list(range(off[0], off[-1] + 1))  # one span: the wrong turn
            assert fmt.decode(seq.token_ids[off[0] : off[-1] + 1]).startswith(said[1]["content"])
        else:
            assert verdicts == ["ACCEPT"] and len(said) == 2
    # the rows are `honing sft` rows
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for t in traces for r in t.rows))
    assert len(load_chat_data(str(path))) == 12


@MODULE_LOOP
async def test_with_several_verdicts_a_review_gets_the_same_scripted_verdict_each_time(
    pool: SandboxPool, tok: Any
) -> None:
    """examples/code_repair_team.yaml's validator: checks run on the submission, and four
    verdicts on each. Checked by hand: with the script's verdicts not repeated four times, the
    right fix after a rejection gets a REJECT meant for the wrong one (the script cycles), the
    team fails, and every rejecting task falls back to an episode without a rejection."""
    team = TeamConfig.model_validate({
        "roles": [{"kind": "analyst"}, {"kind": "executor"},
                  {"kind": "validator", "checks": ["run_tests"]}],
        "submit_tools": [], "verdicts": 4,
    })  # fmt: skip
    tasks = generate_code_repair_tasks(4, 7)
    traces = await team_traces(tasks, pool, team, AGENT, tok, reject_share=0.5)
    assert {t.task_id for t in traces if t.rejected} == reject_choice(tasks, 0.5)
    assert all(r.correct for t in traces for r in t.reviews)
    assert [len(t.reviews) for t in traces] == [2 if t.rejected else 1 for t in traces]


@MODULE_LOOP
async def test_a_scripted_reply_longer_than_its_roles_turn_is_named_with_what_to_raise(
    pool: SandboxPool, tok: Any
) -> None:
    team = TEAM.model_copy(update={"roles": [
        *TEAM.roles[:2], TEAM.roles[2].model_copy(update={"max_new_tokens": 8})]})  # fmt: skip
    with pytest.raises(TraceError, match=r"the scripted validator's reply takes \d+ tokens, more "
                       r"than its turn \(team.roles\[2\].max_new_tokens: 8\); raise it to at "
                       r"least \d+"):  # fmt: skip
        await team_traces(generate_code_repair_tasks(1, 0), pool, team, AGENT, tok,
                          reject_share=0.0)  # fmt: skip


def test_a_long_changed_line_is_described_by_the_part_that_changed() -> None:
    before = "def f(values, limit):\n    return [x for x in values if x > limit and x % 2 == 0]\n"
    after = before.replace("x > limit", "x >= limit")
    assert describe_change(before, after) == (
        "It changes line 2 from `…values if x > limit and…` to `…values if x >= limit and…`."
    )
    short = "def f(a):\n    return a + 1\n"
    assert describe_change(short, short.replace("+", "-")) == (
        "It changes line 2 from `return a + 1` to `return a - 1`."
    )


@MODULE_LOOP
async def test_when_a_look_counts_as_a_submission_the_error_says_what_to_set(
    pool: SandboxPool, tok: Any
) -> None:
    team = TEAM.model_copy(update={"submit_tools": None})  # code's default: run_tests submits
    with pytest.raises(TraceError, match=r"disagrees with the script.*team.submit_tools"):
        await team_traces(generate_code_repair_tasks(1, 0), pool, team, AGENT, tok,
                          reject_share=0.0)  # fmt: skip


def test_a_row_may_keep_an_assistant_turn_as_context_only(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": "2+2?"},
                      {"role": "assistant", "content": "5", "weight": 0},
                      {"role": "user", "content": "No."},
                      {"role": "assistant", "content": "4"}]},
        {"messages": [{"role": "user", "content": "hi", "weight": 0},
                      {"role": "assistant", "content": "5", "weight": 0}]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SftDataError) as info:
        load_chat_data(str(path))
    text = str(info.value)
    assert "w.jsonl:2: field 'messages[0].weight': only assistant messages have a weight" in text
    assert "w.jsonl:2: field 'messages': no assistant message of weight 1" in text
    path.write_text(json.dumps(rows[0]) + "\n")
    [example] = load_chat_data(str(path))
    assert [m.weight for m in example.messages] == [1, 0, 1, 1]


@MODULE_LOOP
async def test_the_warm_start_of_a_team_run_trains_every_role(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    config = TrainConfig.model_validate(
        {
            "model": str(tiny_model_dir),
            "out": str(tmp_path / "run"),
            "train": {"r": {"tasks": "synthetic-code-repair", "count": 4}},
            "steps": 1,
            "team": TEAM.model_dump(),
            "agent": {"max_turns": 3, "max_total_tokens": 4096, "system_prompt": ""},
            "warm_start": {
                "traces": {"tasks": "synthetic-code-repair", "count": 2, "seed": 9},
                "reject_share": 1.0,
                "batch_size": 2,
            },
        }
    )
    model = await warm_start(config, tmp_path / "run")
    assert (model / "config.json").exists()
    assert load_agent(model) == config.agent.saved()  # `honing eval` plays it as the run does
    assert load_agent(model) == SavedAgent(system_prompt="", max_turns=3, max_new_tokens=96,
                                           max_total_tokens=4096, restate=True)  # fmt: skip
    written = (tmp_path / "run" / "warm_start" / "traces.jsonl").read_text().splitlines()
    roles = sorted(json.loads(line)["id"].rsplit("/", 1)[1] for line in written)
    assert roles == ["analyst", "analyst", "executor", "executor", "validator", "validator"]
    done = json.loads((tmp_path / "run" / "warm_start" / "done.json").read_text())
    assert done["examples"] == 6
