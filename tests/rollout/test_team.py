"""Team episodes on a real environment (math, in the sandbox) with a scripted engine: the
protocol (plan, gated submission, rollback on rejection, STOP), each role's token-faithful
trajectory and named reward, and per-role groups whose advantages differ as they should."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from team_script import call, reject_then_accept, team_engine

from honing.envs.base import EnvConfig
from honing.envs.registry import make_env
from honing.errors import ConfigError
from honing.records import ROLE_CREDIT, Ending, Group, Trajectory, by_role, team_of
from honing.rl.advantages import grpo_advantages
from honing.rollout.agent import AgentConfig
from honing.rollout.engines.base import SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.rollout.team import (
    Review,
    TeamConfig,
    TeamRewards,
    Verdict,
    parse_verdict,
    plan_followed,
    plan_terms,
    run_team_episode,
    verdict_value,
)
from honing.sandbox import SandboxPool
from honing.tasks.load import AnyTask, load_tasks
from honing.trainer.batching import drop_zero_variance, training_rewards

ON_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
AGENT = AgentConfig(sampling=SamplingParams(max_new_tokens=96), max_turns=4)
TEAM = TeamConfig.model_validate(
    {"roles": [{"kind": "analyst"}, {"kind": "executor"}, {"kind": "validator"}]}
)


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="module")
def product() -> AnyTask:
    [task] = [t for t in load_tasks("examples-math").tasks if t.id == "example-math/product"]
    return task  # What is 347 × 86? → 29842


async def play(
    task: AnyTask,
    pool: SandboxPool,
    engine: ScriptedEngine,
    team: TeamConfig = TEAM,
    reviews: list[Review] | None = None,
) -> Trajectory:
    env = make_env("math", pool, EnvConfig(max_steps=AGENT.max_turns))
    on_review: Callable[[Review], None] | None = None if reviews is None else reviews.append
    return await run_team_episode(task, env, engine, team, AGENT, on_review=on_review)


def roles(lead: Trajectory) -> dict[str, Trajectory]:
    return {t.role: t for t in [lead, *lead.partners]}


@ON_MODULE_LOOP
async def test_a_rejected_answer_is_rolled_back_and_the_accepted_one_scores(
    module_pool: SandboxPool, tok: Any, product: AnyTask
) -> None:
    engine = reject_then_accept(tok)
    reviews: list[Review] = []
    lead = await play(product, module_pool, engine, reviews=reviews)
    team = roles(lead)
    assert set(team) == {"analyst", "executor", "validator"}
    assert lead.role == "executor" and lead.success and lead.ending is Ending.DONE
    # The rejected answer never reached the verifier's record: rolled back, the executor told.
    tool_turns = [t for t in lead.turns if t.role == "tool"]
    assert tool_turns[0].failure is None  # the calculator: no submission, no review
    assert tool_turns[1].failure == "validator_rejected"
    assert "347 × 86 is not 29000" in tool_turns[1].text
    assert tool_turns[-1].components["outcome"] == 1.0
    assert [(r.verdict, r.good) for r in reviews] == [
        (Verdict.REJECT, False),
        (Verdict.ACCEPT, True),
    ]
    validator = team["validator"]
    assert validator.components["verdict_correct"] == 1.0
    assert validator.components["accepted_good"] == 1.0
    assert validator.components["rejected_bad"] == 1.0
    assert validator.reward == pytest.approx(1.0 + 0.5)
    # What the learner trains each role on: the team's outcome plus the role's own reward.
    assert validator.components[ROLE_CREDIT] == pytest.approx(1.0 + 0.5)
    assert lead.components[ROLE_CREDIT] == 1.0
    assert team["analyst"].components[ROLE_CREDIT] == pytest.approx(1.0 + 0.2 * 0.5)
    assert lead.components["team_rounds"] == 2.0
    # The analyst's plan reached the executor's prompt; of its terms (multiply, calculator) the
    # executor used one.
    assert "The analyst's plan:" in lead.turns[0].text
    analyst = team["analyst"]
    assert analyst.components["plan_followed"] == 0.5
    assert analyst.reward == pytest.approx(1.0 + 0.2 * 0.5)
    assert all(t.success for t in team.values())
    # Token-faithful per role: each role's model tokens are its own turns, nothing else.
    for t in team.values():
        assert len(t.token_ids) == len(t.loss_mask) == len(t.logprobs) == len(t.versions)
        mine = [tid for tid, m in zip(t.token_ids, t.loss_mask, strict=True) if m]
        spans = [tid for turn in t.turns if turn.role == "assistant"
                 for tid in t.token_ids[turn.start:turn.end]]  # fmt: skip
        assert mine == spans and mine


@ON_MODULE_LOOP
async def test_a_wrong_accept_costs_the_validator_its_verdict_reward(
    module_pool: SandboxPool, tok: Any, product: AnyTask
) -> None:
    engine = team_engine(tok, executor=[call("answer", value="29000")], validator=["ACCEPT"])
    lead = await play(product, module_pool, engine)
    validator = roles(lead)["validator"]
    assert not lead.success
    assert validator.components["verdict_correct"] == 0.0
    assert validator.components["accepted_bad"] == 1.0
    # A wrong submission let through costs what the team lost: -false_accept (1) x weight 0.5.
    assert validator.components["verdict_value"] == -1.0
    assert validator.reward == pytest.approx(-0.5)


@ON_MODULE_LOOP
async def test_validator_outcome_0_rewards_the_validator_for_its_verdicts_alone(
    module_pool: SandboxPool, tok: Any, product: AnyTask
) -> None:
    """A right answer sent back (round 1 of 3: -false_reject, 0.5), then sent again and
    accepted (+1): verdict_value (-0.5 + 1) / 2 = 0.25. With the team's reward the validator gets
    1 + 0.5 x 0.25; with validator_outcome 0 only 0.5 x 0.25, and the other roles keep the
    team's reward."""
    right = call("answer", value="29842")
    script = {"executor": [right, right], "validator": ["REJECT: check it", "ACCEPT"]}
    shared = roles(await play(product, module_pool, team_engine(tok, **script)))
    alone = TEAM.model_copy(update={"rewards": TEAM.rewards.model_copy(
        update={"validator_outcome": 0.0})})  # fmt: skip
    own = roles(await play(product, module_pool, team_engine(tok, **script), team=alone))
    for team in (shared, own):
        assert team["executor"].success and team["validator"].components["verdict_correct"] == 0.5
        assert team["executor"].reward == pytest.approx(1.0)
    assert shared["validator"].components["verdict_value"] == pytest.approx(0.25)
    assert shared["validator"].reward == pytest.approx(1.0 + 0.5 * 0.25)
    assert own["validator"].reward == pytest.approx(0.5 * 0.25)
    assert shared["validator"].components[ROLE_CREDIT] == pytest.approx(1.0 + 0.5 * 0.25)
    assert own["validator"].components[ROLE_CREDIT] == pytest.approx(0.5 * 0.25)
    assert own["analyst"].reward == pytest.approx(shared["analyst"].reward)
    assert TEAM.rewards.outcome_weight("validator") == 1.0
    assert alone.rewards.outcome_weight("validator") == 0.0
    assert alone.rewards.outcome_weight("analyst") == 1.0


@ON_MODULE_LOOP
async def test_rejections_past_max_rounds_end_the_episode_unsubmitted(
    module_pool: SandboxPool, tok: Any, product: AnyTask
) -> None:
    team = TEAM.model_copy(update={"max_rounds": 2})
    engine = team_engine(tok, executor=[call("answer", value="29842")],
                         validator=["REJECT: show your work"])  # fmt: skip
    lead = await play(product, module_pool, engine, team)
    assert lead.failure == "validator_rejected" and not lead.success
    assert lead.components["outcome"] == 0.0
    validator = roles(lead)["validator"]
    assert validator.components["rejected_good"] == 2.0
    assert validator.components["verdict_correct"] == 0.0
    # Round 1 spent a turn (-0.5); round 2, the last, threw the right answer away (-1).
    assert validator.components["verdict_value"] == pytest.approx(-0.75)


@ON_MODULE_LOOP
async def test_a_tool_call_after_stop_is_a_risk_and_is_not_run(
    module_pool: SandboxPool, tok: Any, product: AnyTask
) -> None:
    engine = team_engine(
        tok,
        executor=[call("answer", value="29842"), call("calculator", expression="1+1")],
        validator=["STOP: the task must not be answered"],
    )
    lead = await play(product, module_pool, engine)
    assert lead.failure == "validator_stopped"
    assert [e.name for e in lead.risks] == ["acted_after_stop"]
    assert lead.risk == 0.5  # medium: the call it made was not run
    last = lead.turns[-1]
    assert last.role == "tool" and "Not run" in last.text


@ON_MODULE_LOOP
async def test_a_validator_without_a_verdict_counts_as_wrong_and_blocks(
    module_pool: SandboxPool, tok: Any, product: AnyTask
) -> None:
    team = TEAM.model_copy(update={"max_rounds": 1})
    engine = team_engine(tok, executor=[call("answer", value="29842")],
                         validator=["Looks plausible to me."])  # fmt: skip
    lead = await play(product, module_pool, engine, team)
    assert lead.failure == "validator_rejected"
    assert roles(lead)["validator"].components["verdict_correct"] == 0.0


@ON_MODULE_LOOP
async def test_validator_checks_run_on_a_checkpoint_and_leave_no_trace(
    module_pool: SandboxPool, tok: Any, product: AnyTask
) -> None:
    team = TeamConfig.model_validate({"roles": [
        {"kind": "executor"},
        {"kind": "validator", "tools": ["calculator", "answer"]},  # answer: a submit tool, dropped
    ]})  # fmt: skip
    engine = team_engine(
        tok,
        executor=[call("answer", value="29842")],
        validator=[call("calculator", expression="347*86"), call("answer", value="1"), "ACCEPT"],
    )
    lead = await play(product, module_pool, engine, team)
    validator = roles(lead)["validator"]
    assert lead.success and "analyst" not in roles(lead)
    results = [t.text for t in validator.turns if t.role == "tool"]
    assert "29842" in results[0]
    assert "may not call answer" in results[1]
    # The environment judged only the executor's answer: one step.
    assert [t.failure for t in lead.turns if t.role == "tool"] == [None]
    assert validator.reward == pytest.approx(1.5) and validator.components["outcome"] == 1.0


@pytest.fixture(scope="module")
def slugify() -> AnyTask:
    [task] = [t for t in load_tasks("examples-code").tasks if t.id == "example-code/slugify"]
    return task


@ON_MODULE_LOOP
async def test_the_validator_reviews_the_state_after_the_submission(
    module_pool: SandboxPool, tok: Any, slugify: AnyTask
) -> None:
    """The executor's fix (a ```python reply: written, tested, and the episode over, solved) is
    reviewed where it stands: the validator reads the submitted solution.py and runs the tests
    there (the episode reopened for its checks), then accepts. It is never shown the
    environment's answer to the submission. Reviewed on the state before it, as it once was, it
    would read the stub and could only guess."""
    fix = f"```python\n{slugify.reference}```"
    team = TeamConfig.model_validate({"roles": [
        {"kind": "executor"},
        {"kind": "validator", "tools": ["read_file", "run_tests"], "max_turns": 3},
    ], "submit_tools": []})  # fmt: skip
    engine = team_engine(tok, executor=[fix], validator=[
        call("read_file", path="solution.py"), call("run_tests"), "The tests pass.\nACCEPT",
    ])  # fmt: skip
    env = make_env("code", module_pool, EnvConfig(max_steps=AGENT.max_turns))
    reviews: list[Review] = []
    lead = await run_team_episode(slugify, env, engine, team, AGENT, on_review=reviews.append)
    validator = roles(lead)["validator"]
    assert lead.success and [(r.verdict, r.good) for r in reviews] == [(Verdict.ACCEPT, True)]
    checks = [t for t in validator.turns if t.role == "tool"]
    assert "re.sub" in checks[0].text  # the fix as submitted, not the stub
    assert checks[1].failure is None and "pass" in checks[1].text.lower()
    shown = validator.turns[0].text
    assert "your tools (read_file, run_tests) run on the work as submitted" in shown
    answered = next(t.text for t in lead.turns if t.role == "tool")
    assert answered not in shown  # the environment's answer to the fix is not evidence given
    # What the environment judged: the executor's one step; the checks left no trace.
    assert [t.failure for t in lead.turns if t.role == "tool"] == [None]
    assert validator.components["verdict_value"] == 1.0


@ON_MODULE_LOOP
async def test_a_rejected_submission_is_reviewed_in_place_then_rolled_back(
    module_pool: SandboxPool, tok: Any, slugify: AnyTask
) -> None:
    """A wrong fix: the validator reads it in place, rejects it, and the workspace returns to
    the stub before the executor's next turn."""
    team = TeamConfig.model_validate({"roles": [
        {"kind": "executor", "tools": ["read_file"]},
        {"kind": "validator", "tools": ["read_file"], "max_turns": 2},
    ], "submit_tools": [], "max_rounds": 2})  # fmt: skip
    wrong = "```python\ndef slugify(title):\n    return 'wrong-fix'\n```"
    engine = team_engine(tok, executor=[wrong, call("read_file", path="solution.py")],
                         validator=[call("read_file", path="solution.py"),
                                    "REJECT: it ignores the title"])  # fmt: skip
    env = make_env("code", module_pool, EnvConfig(max_steps=AGENT.max_turns))
    lead = await run_team_episode(slugify, env, engine, team, AGENT)
    validator = roles(lead)["validator"]
    assert "wrong-fix" in next(t.text for t in validator.turns if t.role == "tool")
    steps = [t for t in lead.turns if t.role == "tool"]
    assert steps[0].failure == "validator_rejected"
    assert "wrong-fix" not in steps[1].text and "slugify" in steps[1].text  # rolled back
    assert validator.components["verdict_correct"] == 1.0


@ON_MODULE_LOOP
async def test_verdicts_sampled_on_one_submission_are_the_validators_group(
    module_pool: SandboxPool, tok: Any, product: AnyTask
) -> None:
    """verdicts: 3: three verdicts on the same (right) answer, each in a fresh context; the
    first is the team's (accepted: solved). Each is priced alone: right +1, the right answer
    sent back with rounds left -0.5; `by_role` groups the three apart from other submissions,
    so the advantages compare them with each other."""
    team = TeamConfig.model_validate({"roles": [{"kind": "executor"}, {"kind": "validator"}],
                                      "verdicts": 3})  # fmt: skip
    engine = team_engine(tok, executor=[call("answer", value="29842")],
                         validator=["ACCEPT", "REJECT: unsure", "ACCEPT"])  # fmt: skip
    lead = await play(product, module_pool, engine, team)
    assert lead.success and lead.components["team_rounds"] == 1.0
    verdicts = [t for t in lead.partners if t.role == "validator"]
    assert [t.components["verdict_value"] for t in verdicts] == [1.0, -0.5, 1.0]
    assert [t.reward for t in verdicts] == pytest.approx([1.5, 0.75, 1.5])
    assert all(t.turns[0].text == verdicts[0].turns[0].text for t in verdicts)  # one context
    lead.id, lead.sample = "g/1", 1
    groups = {g.group_id: g for g in by_role([Group(product.id, "g", [lead])])}
    assert set(groups) == {"g:executor", "g:validator:1.review0"}
    grouped = groups["g:validator:1.review0"].trajectories
    assert [t.sample for t in grouped] == [0, 1, 2]
    assert [t.id for t in grouped] == [f"g/1:validator:review0.{k}" for k in range(3)]
    assert {team_of(t) for t in grouped} == {("g", 1)}
    assert team_of(lead) == ("g", 1)
    advantages = grpo_advantages(training_rewards(grouped)[None])[0].tolist()
    assert advantages[0] == advantages[2] > 0 > advantages[1]


@ON_MODULE_LOOP
async def test_seeded_verdicts_on_one_submission_sample_with_seeds_of_their_own(
    module_pool: SandboxPool, tok: Any, product: AnyTask
) -> None:
    """With a sampling seed (a deterministic run), each of the K verdicts on one submission,
    and each role, samples with its own seed: K fresh contexts that shared one seed would say
    the same thing, and the validator's group would never vary. Reproducible: a second episode
    asks for the same seeds."""
    team = TeamConfig.model_validate({"roles": [{"kind": "executor"}, {"kind": "validator"}],
                                      "verdicts": 3})  # fmt: skip
    agent = AGENT.model_copy(update={"sampling": AGENT.sampling.model_copy(update={"seed": 7})})

    async def seeds() -> list[int | None]:
        engine = team_engine(tok, executor=[call("answer", value="29842")],
                             validator=["ACCEPT"])  # fmt: skip
        asked: list[int | None] = []
        generate = engine.generate

        async def recording(prompts: Any, sampling: SamplingParams) -> Any:
            asked.extend([sampling.seed] * len(prompts))
            return await generate(prompts, sampling)

        engine.generate = recording  # type: ignore[method-assign]
        env = make_env("math", module_pool, EnvConfig(max_steps=agent.max_turns))
        await run_team_episode(product, env, engine, team, agent)
        return asked

    first = await seeds()
    assert len(first) == 4  # the executor's answer, then three verdicts
    assert None not in first and len(set(first)) == 4, first
    assert await seeds() == first


@ON_MODULE_LOOP
async def test_the_validators_checks_run_on_the_submission_and_are_shown_with_it(
    module_pool: SandboxPool, tok: Any, slugify: AnyTask
) -> None:
    """checks: [run_tests]: the tests run on the submitted fix before the validator speaks, and
    their results are in its request: a failing fix's failure, a right fix's pass. The checks
    change nothing the environment judges."""
    team = TeamConfig.model_validate({"roles": [
        {"kind": "executor"}, {"kind": "validator", "checks": ["run_tests"], "max_turns": 1},
    ], "submit_tools": [], "max_rounds": 1})  # fmt: skip
    wrong = "```python\ndef slugify(title):\n    return 'wrong-fix'\n```"
    shown = {}
    for name, fix, verdict in (
        ("wrong", wrong, "REJECT: a test fails"),
        ("right", f"```python\n{slugify.reference}```", "ACCEPT"),
    ):
        engine = team_engine(tok, executor=[fix], validator=[verdict])
        env = make_env("code", module_pool, EnvConfig(max_steps=AGENT.max_turns))
        lead = await run_team_episode(slugify, env, engine, team, AGENT)
        shown[name] = roles(lead)["validator"].turns[0].text
        assert lead.success == (name == "right")
        assert roles(lead)["validator"].components["verdict_correct"] == 1.0
        assert [t.failure for t in lead.turns if t.role == "tool"][:1] == (
            [None] if name == "right" else ["validator_rejected"]
        )
    for text in shown.values():
        assert "Checks run on the work as submitted:\n- run_tests():" in text
    assert "wrong-fix" not in shown["right"]
    assert shown["wrong"] != shown["right"]


@ON_MODULE_LOOP
async def test_show_tried_gives_the_executor_the_tried_steps_answer_unless_it_ended_the_episode(
    module_pool: SandboxPool, tok: Any, slugify: AnyTask, product: AnyTask
) -> None:
    """show_tried: a fix sent back comes with what the environment answered it (its failing
    tests), as the agent alone sees after the same step; without it the reason only. A math
    answer ends the episode (its answer is the verdict): nothing more is shown even with it."""
    wrong = "```python\ndef slugify(title):\n    return 'wrong-fix'\n```"
    seen = {}
    for show in (False, True):
        team = TeamConfig.model_validate({"roles": [
            {"kind": "executor"}, {"kind": "validator", "max_turns": 1},
        ], "submit_tools": [], "show_tried": show})  # fmt: skip
        engine = team_engine(tok, executor=[wrong, f"```python\n{slugify.reference}```"],
                             validator=["REJECT: a test fails", "ACCEPT"])  # fmt: skip
        env = make_env("code", module_pool, EnvConfig(max_steps=AGENT.max_turns))
        lead = await run_team_episode(slugify, env, engine, team, AGENT)
        assert lead.success
        [sent_back] = [t for t in lead.turns if t.failure == "validator_rejected"]
        seen[show] = sent_back.text
    assert "the validator rejected it: a test fails" in seen[False]
    assert "When it was tried" not in seen[False]
    said, _, answered = seen[True].partition("When it was tried, the environment answered:\n")
    assert "the validator rejected it: a test fails" in said
    assert "0/5 tests passed" in answered and "assert slugify(" in answered
    math = TEAM.model_copy(update={"show_tried": True})
    lead = await play(product, module_pool, reject_then_accept(tok), math)
    [sent_back] = [t for t in lead.turns if t.failure == "validator_rejected"]
    assert "347 × 86 is not 29000" in sent_back.text and "When it was tried" not in sent_back.text


@ON_MODULE_LOOP
async def test_checks_are_a_validators_and_name_a_tool_that_does_not_submit(
    module_pool: SandboxPool, tok: Any, product: AnyTask
) -> None:
    with pytest.raises(ValueError, match="only a validator runs checks"):
        TeamConfig.model_validate({"roles": [{"kind": "executor", "checks": ["calculator"]}]})
    env = make_env("math", module_pool, EnvConfig())
    for name, why in (("answer", "submits"), ("run_tests", "is not one of its tools")):
        team = TeamConfig.model_validate({"roles": [
            {"kind": "executor"}, {"kind": "validator", "checks": [name]}]})  # fmt: skip
        engine = team_engine(tok, executor=["done"], validator=["ACCEPT"])
        with pytest.raises(ConfigError, match=f"checks: '{name}' {why}.*a check is one of"):
            await run_team_episode(product, env, engine, team, AGENT)


def test_verdict_value_prices_each_mistake_by_what_it_costs_the_team() -> None:
    rewards = TeamRewards(false_accept=1.0, false_reject=0.25)

    def value(verdict: Verdict | None, good: bool, last: bool = False) -> float:
        return verdict_value(Review(verdict, "", good, last), rewards)

    assert value(Verdict.ACCEPT, True) == 1.0
    assert value(Verdict.REJECT, False) == 1.0 and value(Verdict.STOP, False) == 1.0
    assert value(Verdict.ACCEPT, False) == -1.0  # a wrong answer let through: the outcome lost
    assert value(Verdict.REJECT, True) == -0.25  # a round spent
    assert value(None, True) == -0.25  # no verdict blocks as a rejection does
    assert value(Verdict.REJECT, True, last=True) == -1.0  # the right answer thrown away
    assert value(Verdict.STOP, True) == -1.0
    assert value(None, False) == -0.25


def test_team_config_names_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="exactly one executor"):
        TeamConfig.model_validate({"roles": [{"kind": "analyst"}]})
    with pytest.raises(ValueError, match="at most one validator"):
        TeamConfig.model_validate({"roles": [{"kind": "executor"}, {"kind": "validator"},
                                             {"kind": "validator", "name": "second"}]})  # fmt: skip
    with pytest.raises(ValueError, match="distinct"):
        TeamConfig.model_validate({"roles": [{"kind": "executor", "name": "x"},
                                             {"kind": "validator", "name": "x"}]})  # fmt: skip


def test_parse_verdict_reads_the_last_verdict_line() -> None:
    assert parse_verdict("I ran it.\n**ACCEPT**") == (Verdict.ACCEPT, "")
    assert parse_verdict("REJECT: off by one\nsee above") == (Verdict.REJECT, "off by one")
    assert parse_verdict("accept\nReject - the loop never ends.") == (
        Verdict.REJECT,
        "the loop never ends",
    )
    assert parse_verdict("STOP: it deletes the table") == (Verdict.STOP, "it deletes the table")
    assert parse_verdict("I accept that this looks right") == (None, "")
    assert parse_verdict("") == (None, "")


def test_plan_followed_is_the_share_of_plan_terms_used() -> None:
    plan = "1. Parse the numbers with int().\n2. Multiply them and return the product."
    assert plan_terms(plan) == {"parse", "numbers", "multiply", "product"}
    assert plan_followed(plan, "x = int(a)\nproduct = multiply(x, y)") == 0.5
    assert plan_followed(plan, "nothing relevant") == 0.0
    assert plan_followed("Do it.", "anything") == 0.0


def _traj(role: str, sample: int, reward: float) -> Trajectory:
    return Trajectory(task_id="t", domain="math", role=role, sample=sample, reward=reward)


def test_the_learner_trains_each_role_on_its_credit_not_the_teams_outcome() -> None:
    """Four team episodes, all failed (team outcome 0): the executor's group has no signal and
    dynamic sampling drops it, but the validator's verdicts differ (right rejections 0.5, wrong
    accepts 0), so its group is kept and its advantages follow its credit."""

    def episode(sample: int, verdict_reward: float) -> Trajectory:
        lead = _traj("executor", sample, 0.0)
        lead.components = {"outcome": 0.0, ROLE_CREDIT: 0.0}
        validator = _traj("validator", sample, verdict_reward)
        validator.components = {"outcome": 0.0, ROLE_CREDIT: verdict_reward}
        lead.partners = [validator]
        lead.id = f"g/{sample}"
        return lead

    groups = by_role([Group("t", "g", [episode(i, r) for i, r in enumerate([0.5, 0, 0.5, 0])])])
    sampled = drop_zero_variance(groups)
    assert sampled.dropped == 1 and [g.group_id for g in sampled.kept] == ["g:validator"]
    rewards = training_rewards(sampled.kept[0].trajectories)
    assert rewards.tolist() == [0.5, 0.0, 0.5, 0.0]
    advantages = grpo_advantages(rewards[None])[0].tolist()
    assert advantages[0] > 0 > advantages[1] and advantages[0] == advantages[2]
    # A single agent's trajectory (no credit) is trained on its outcome, as before.
    alone = Trajectory(task_id="t", domain="math", reward=0.7, components={"outcome": 1.0})
    assert training_rewards([alone]).tolist() == [1.0]


def test_by_role_gives_each_role_its_own_advantages() -> None:
    """Two samples where the executor answered wrong both times: the validator rejected it once
    (right) and accepted it once (wrong). The executor's group has no signal; the validator's
    credits the right rejection and blames the wrong accept."""
    leads = []
    for sample, validator_reward in enumerate([0.5, 0.0]):
        lead = _traj("executor", sample, 0.0)
        lead.partners = [_traj("validator", 0, validator_reward)]
        lead.id = f"g/{sample}"
        leads.append(lead)
    groups = by_role([Group("t", "g", leads)])
    by_name = {g.group_id: g for g in groups}
    assert set(by_name) == {"g:executor", "g:validator"}
    validators = by_name["g:validator"].trajectories
    assert [t.sample for t in validators] == [0, 1]
    assert [t.id for t in validators] == ["g/0:validator", "g/1:validator"]
    executor_adv = grpo_advantages(torch.tensor([by_name["g:executor"].rewards]))[0].tolist()
    validator_adv = grpo_advantages(torch.tensor([by_name["g:validator"].rewards]))[0].tolist()
    assert executor_adv == [0.0, 0.0]
    assert validator_adv[0] > 0 > validator_adv[1]
    assert all(not t.partners for t in leads)
    assert by_role(groups) == groups  # already split: unchanged
