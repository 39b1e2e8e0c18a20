"""A team through the one evaluator: `TeamPlayer` (a scripted team engine, real math tasks in the
sandbox) records only the executor's steps that stand; `team_figures` gives each role's figures
with their n; `load_team` reads a team config or a run config's team: block."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from team_script import call, reject_then_accept

from honing.errors import ConfigError
from honing.eval import evaluate
from honing.eval.config import load_team
from honing.eval.model import Figure, TeamPlayer, team_figures
from honing.records import Ending, Trajectory
from honing.rollout.agent import AgentConfig
from honing.rollout.engines.base import SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.rollout.team import TeamConfig
from honing.sandbox import SandboxPool
from honing.tasks import TaskSet
from honing.tasks.load import load_tasks

AGENT = AgentConfig(sampling=SamplingParams(max_new_tokens=96), max_turns=4)
TRIO = TeamConfig.model_validate(
    {"roles": [{"kind": "analyst"}, {"kind": "executor"}, {"kind": "validator"}]}
)


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    return load_tokenizer(tiny_model_dir)


@pytest.fixture
def product() -> TaskSet:
    [task] = [t for t in load_tasks("examples-math").tasks if t.id == "example-math/product"]
    return TaskSet("product", [task], total=1)  # What is 347 × 86? → 29842


async def test_the_tiers_count_the_steps_that_stand_and_each_role_is_figured(
    pool: SandboxPool, tok: Any, product: TaskSet
) -> None:
    """calculator, a wrong answer (rejected: rolled back), the right one (accepted)."""
    engine = reject_then_accept(tok)
    heard: list[Trajectory] = []
    player = TeamPlayer(engine, AGENT, TRIO, name="team", on_trajectory=heard.append)
    report = await evaluate(product, player, pool)
    e2e = report.end_to_end
    assert (e2e.passed, e2e.total, e2e.infra_failed) == (1, 1, 0)
    assert report.policy == "team"
    # Two steps stand (the calculator and the accepted answer); the rejected one is not a step.
    assert report.single_step.steps == 2
    assert report.trajectory.mean_steps_to_success == 2.0
    [lead] = heard
    assert lead.role == "executor" and {t.role for t in lead.partners} == {"analyst", "validator"}
    assert sorted(t.role for t in player.trajectories) == ["analyst", "executor", "validator"]

    figures = team_figures(player.trajectories)
    assert figures is not None and figures.episodes == 1
    assert figures.precision == Figure(1 / 1, 1)  # one accept, of a right answer
    assert figures.recall == Figure(1 / 1, 1)  # one right submission, accepted
    assert figures.verdict_accuracy == Figure(2 / 2, 2)  # the rejection was right too
    assert figures.rounds == Figure(2.0, 1)  # two reviews to acceptance, in one episode
    assert figures.accepted == Figure(1 / 1, 1)
    # The team's reward 1, plus: the analyst 0.2 × plan_followed (one of its two terms used),
    # the validator 0.5 × verdict_correct.
    reward = {role: (f.value, f.n) for role, f in figures.reward.items()}
    assert reward == {
        "analyst": (pytest.approx(1 + 0.2 * 0.5), 1),
        "executor": (1.0, 1),
        "validator": (pytest.approx(1 + 0.5 * 1.0), 1),
    }


async def test_an_engine_failure_is_counted_apart_and_no_role_is_judged(
    pool: SandboxPool, tok: Any, product: TaskSet
) -> None:
    duo = TeamConfig.model_validate({"roles": [{"kind": "executor"}, {"kind": "validator"}]})
    fails = lambda _p, i: i == 1  # noqa: E731  (call 1: the validator's review)
    engine = ScriptedEngine([call("answer", value="29842")], tokenizer=tok, fail_on=fails)
    heard: list[Trajectory] = []
    player = TeamPlayer(engine, AGENT, duo, name="flaky", on_trajectory=heard.append)
    report = await evaluate(product, player, pool)
    e2e = report.end_to_end
    assert (e2e.passed, e2e.total, e2e.infra_failed) == (0, 0, 1)
    [lead] = heard
    for t in [lead, *lead.partners]:
        assert t.ending is Ending.INFRA_ERROR and t.failure == "infra:generate"
    assert [t.role for t in player.trajectories] == ["executor", "validator"]
    assert team_figures(player.trajectories) is None  # nothing was judged


def _role(
    role: str, reward: float, ending: Ending = Ending.DONE, **components: float
) -> Trajectory:
    return Trajectory(task_id="t", domain="math", role=role, reward=reward, ending=ending,
                      components=dict(components))  # fmt: skip


def test_team_figures_count_what_each_figure_is_over() -> None:
    """Episode 1: rejected a wrong answer, accepted the right one. Episode 2: accepted a wrong
    answer at once. Episode 3: no submission reached the validator. Episode 4: the
    infrastructure failed (left out)."""
    trajectories = [
        _role("executor", 1.0, team_rounds=2, team_accepted=1),
        _role("validator", 1.5, accepted_good=1, rejected_bad=1, verdict_correct=1.0),
        _role("executor", 0.0, team_rounds=1, team_accepted=1),
        _role("validator", 0.0, accepted_bad=1, verdict_correct=0.0),
        _role("executor", 0.0, team_rounds=0, team_accepted=0),
        _role("validator", 0.0),
        _role("executor", 0.0, Ending.INFRA_ERROR, team_rounds=1, team_accepted=1),
        _role("validator", 0.0, Ending.INFRA_ERROR, accepted_good=1),
    ]
    f = team_figures(trajectories)
    assert f is not None and f.episodes == 3
    assert f.precision == Figure(1 / (1 + 1), 2)  # accepts: one right, one wrong
    assert f.recall == Figure(1 / 1, 1)  # right submissions: one, accepted
    assert f.verdict_accuracy == Figure(2 / 3, 3)  # reviews: 2 + 1
    assert f.rounds == Figure((2 + 1) / 2, 2)  # the episodes that ended accepted
    assert f.accepted == Figure(2 / 2, 2)  # the episodes with a review
    assert f.reward == {"executor": Figure(1 / 3, 3), "validator": Figure(1.5 / 3, 3)}
    assert team_figures([_role("", 1.0)]) is None  # a single agent's


def test_load_team_reads_a_team_config_or_a_run_configs_team_block(tmp_path: Path) -> None:
    alone = tmp_path / "team.yaml"
    alone.write_text("roles:\n  - kind: executor\n  - kind: validator\nmax_rounds: 2\n")
    assert [r.kind for r in load_team(alone).roles] == ["executor", "validator"]
    assert load_team(alone).max_rounds == 2
    run = tmp_path / "run.yaml"
    run.write_text("model: m\nsteps: 3\nteam:\n  roles: [{kind: analyst}, {kind: executor}]\n")
    assert [r.kind for r in load_team(run).roles] == ["analyst", "executor"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model: m\nsteps: 3\n", "no team in it: give a team config (roles:"),
        ("team: null\n", "team: expected a team's settings"),
        ("team:\n  roles: [{kind: coach}]\n", "key 'team.roles.0.kind'"),
        ("roles: [{kind: executor}]\nrounds: 2\n", "unknown key 'rounds' (allowed: "),
        ("roles: [{kind: analyst}]\n", "exactly one executor"),
        ("- roles\n", "the top level must be a mapping"),
    ],
)
def test_load_team_names_the_file_and_what_is_wrong(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_team(path)
    assert str(path) in str(caught.value) and message in str(caught.value)
