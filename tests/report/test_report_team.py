"""`honing report`'s Team section: a run whose episodes were played by teams (analyst → executor
↔ validator, honing.rollout.team), recorded as the trainer records them — each lead with its
partners split by `honing.records.by_role`, a row per role in the store, an `episode` event per
role. The section gives the validator's precision, recall and verdict accuracy, the rounds to
acceptance, the share accepted and each role's mean reward, per update and over the run, counted
by hand (infra failures left out); the sample episodes show each role as a badge, a team
episode's roles together, and headless Chromium draws it all cleanly. A run without teams gets no
Team section and no link to one."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_report import Opened, run_async
from test_report_risk import _body_rows, _section

from honing.observe.metrics import episode_fields, judged, team_scalars
from honing.records import Ending, Group, Trajectory, Turn, by_role
from honing.report import build_report, load_run
from honing.report.markup import num
from honing.store import TrajectoryWriter

REVIEWS = ("accepted_good", "accepted_bad", "rejected_good", "rejected_bad")


def _team(
    task: str,
    step: int,
    sample: int,
    reviews: dict[str, int],
    accepted: bool,
    plan_followed: float,
    ending: Ending = Ending.DONE,
) -> Trajectory:
    """One team episode as `run_team_episode` returns it: the executor's trajectory with the
    analyst's and the validator's in `partners`, rewarded as honing.rollout.team does (outcome
    1, verdict 0.5, plan 0.2). The team succeeds when its last submission was accepted and right
    (the review counts say which)."""
    n = sum(reviews.get(k, 0) for k in REVIEWS)
    success = accepted and reviews.get("accepted_good", 0) > 0 and ending is Ending.DONE
    outcome = float(success)
    failure = None
    if ending is Ending.INFRA_ERROR:
        failure = "infra:step"
    elif not accepted:
        failure = "validator_rejected"
    correct = (reviews.get("accepted_good", 0) + reviews.get("rejected_bad", 0)) / n if n else 0.0

    def role(name: str, text: str, **fields: Any) -> Trajectory:
        turns = [Turn(role="user", text=f"solve {task}"),
                 Turn(role="assistant", text=text, version=0)]  # fmt: skip
        return Trajectory(task_id=task, domain="sql", tags=["db"], turns=turns, role=name,
                          success=success, ending=ending, failure=failure, policy_version=0,
                          **fields)  # fmt: skip

    lead = role("executor", f"SELECT answer FROM {task}", reward=outcome,
                components={"outcome": outcome, "team_rounds": float(n),
                            "team_accepted": float(accepted)})  # fmt: skip
    lead.id, lead.sample = f"{task}-{step}-{sample}", sample
    lead.turns.append(Turn(role="tool", text="3 rows", reward=outcome))
    analyst = role("analyst", f"1. query the {task} table", reward=outcome + 0.2 * plan_followed,
                   components={"outcome": outcome, "plan_followed": plan_followed})  # fmt: skip
    validator = role("validator", "ACCEPT" if accepted else "REJECT: wrong table",
                     reward=outcome + 0.5 * correct,
                     components={"outcome": outcome, "verdict_correct": correct, "reviews": n,
                                 **{k: float(reviews.get(k, 0)) for k in REVIEWS}})  # fmt: skip
    lead.partners = [analyst, validator]
    return lead


AG, AB, RG, RB = REVIEWS


def _leads(step: int) -> list[Trajectory]:
    """Update `step`'s team episodes (fresh records: `by_role` changes them): two tasks of two
    samples; each dict is the validator's reviews of that episode."""
    if step == 1:
        return [
            _team("a", 1, 0, {RB: 1, AG: 1}, True, 0.5),  # rejected a wrong one, accepted a right
            _team("a", 1, 1, {RB: 1, AB: 1}, True, 0.5),  # ... then accepted a wrong one
            _team("b", 1, 0, {RG: 2}, False, 0.5),  # rejected a right one twice: gave up
            _team("b", 1, 1, {AG: 1}, True, 0.5),
        ]
    return [
        _team("a", 2, 0, {AG: 1}, True, 1.0),
        _team("a", 2, 1, {RB: 1, AG: 1}, True, 1.0),
        _team("b", 2, 0, {RG: 1, RB: 1}, False, 1.0),
        # the infrastructure failed it: left out of every team figure
        _team("b", 2, 1, {AB: 1}, True, 1.0, ending=Ending.INFRA_ERROR),
    ]


ROWS_PER_UPDATE = 4 * 3  # four team episodes, three roles each
# By hand, over the judged episodes:
#   update 1: accepted_good 2, accepted_bad 1, rejected_good 2, rejected_bad 2 (7 reviews)
#     precision 2/(2+1) = 67%, recall 2/(2+2) = 50%, verdict accuracy (2+2)/7 = 57%
#     ended accepted a/0 (2 reviews), a/1 (2), b/1 (1): rounds 5/3 = 1.67, accepted 3/4 = 75%
#   update 2 (b/1 left out): accepted_good 2, rejected_good 1, rejected_bad 2 (5 reviews)
#     precision 2/2 = 100%, recall 2/3 = 67%, verdict accuracy 4/5 = 80%
#     ended accepted a/0 (1), a/1 (2): rounds 3/2 = 1.5, accepted 2/3 = 67%
#   the run: 4, 1, 3, 4 (12 reviews): precision 4/5 = 80%, recall 4/7 = 57%, accuracy 8/12 = 67%,
#     rounds (2 + 2 + 1 + 1 + 2)/5 = 1.6, accepted 5/7 = 71%
EXECUTOR = [(1 + 0 + 0 + 1) / 4, (1 + 1 + 0) / 3]  # success: a right submission accepted
ANALYST = [(1.1 + 0.1 + 0.1 + 1.1) / 4, (1.2 + 1.2 + 0.2) / 3]
VALIDATOR = [(1.5 + 0.25 + 0 + 1.5) / 4, (1.5 + 1.5 + 0.25) / 3]  # outcome + 0.5 × correct


def _groups(step: int) -> list[Group]:
    """The update's groups as the trainer stores them: one per (task, role)."""
    leads = _leads(step)
    played = [Group(task, f"g{step}-{task}", [t for t in leads if t.task_id == task])
              for task in ("a", "b")]  # fmt: skip
    return by_role(played)


async def _store(run: Path, groups: list[list[Group]]) -> None:
    async with TrajectoryWriter(run, flush_s=None) as writer:
        for update in groups:
            for group in update:
                await writer.add_group(group)
            await writer.flush()


def _team_record(groups: list[Group]) -> dict[str, float]:
    """The update record's `team`, as the trainer records it (honing.trainer.result)."""
    scored = judged([t for g in groups for t in g.trajectories])
    return {k.removeprefix("team/"): v for k, v in team_scalars(scored).items()}


def _metrics(run: Path, groups: list[list[Group]] | None, rows: int = ROWS_PER_UPDATE) -> None:
    """metrics.jsonl (with each update's `team` when `groups` are given) and config.yaml."""
    lines = []
    for step in (1, 2):
        line: dict[str, Any] = {
            "step": step,
            "phase": "main",
            "episodes": rows,
            "success_rate": 0.5,
            "reward_mean": 0.5,
            "infra_errors": 0,
        }
        if groups is not None:
            line["team"] = _team_record(groups[step - 1])
        lines.append(line)  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run / "config.yaml").write_text(json.dumps({"name": "team", "model": "tiny", "steps": 2}))


def _events(run: Path, groups: list[list[Group]]) -> None:
    """An `episode` event per role's trajectory (with `role`) and an `update` event per update
    (with `team`)."""
    lines: list[dict[str, Any]] = []
    for step, update in enumerate(groups, 1):
        for group in update:
            for t in group.trajectories:
                fields = episode_fields(t, split="train", set="sql", staleness=0)
                lines.append({"t": float(len(lines)), "kind": "episode", "step": step, **fields})
        lines.append({"t": 100.0 + step, "kind": "update", "step": step, "phase": "main",
                      "episodes": ROWS_PER_UPDATE, "success_rate": 0.5, "reward_mean": 0.5,
                      "infra_errors": 0, "team": _team_record(update)})  # fmt: skip
    (run / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture(scope="module")
def team_groups() -> list[list[Group]]:
    return [_groups(1), _groups(2)]


@pytest.fixture(scope="module")
def team_run(tmp_path_factory: pytest.TempPathFactory, team_groups: list[list[Group]]) -> Path:
    """Two updates of four team episodes, recorded as the trainer records them (store,
    metrics.jsonl with each update's `team`, config.yaml)."""
    run = tmp_path_factory.mktemp("team") / "run"
    run_async(_store(run, team_groups))
    _metrics(run, team_groups)
    return run


UPDATE_ROWS = [
    ["update 1", "4", "7", "67%", "50%", "57%", num(5 / 3), "75%",
     num(ANALYST[0]), num(EXECUTOR[0]), num(VALIDATOR[0])],
    ["update 2", "3", "5", "100%", "67%", "80%", num(1.5), "67%",
     num(ANALYST[1]), num(EXECUTOR[1]), num(VALIDATOR[1])],
]  # fmt: skip
RUN_ROW = ["all updates", "7", "12", "80%", "57%", "67%", num(1.6), "71%",
           num((4 * ANALYST[0] + 3 * ANALYST[1]) / 7), num((4 * EXECUTOR[0] + 3 * EXECUTOR[1]) / 7),
           num((4 * VALIDATOR[0] + 3 * VALIDATOR[1]) / 7)]  # fmt: skip


@pytest.mark.parametrize("source", ["store", "events", "older updates"])
def test_the_team_section_gives_the_figures_counted_by_hand(
    team_run: Path, team_groups: list[list[Group]], tmp_path: Path, source: str
) -> None:
    """Per update from the update records' `team` (a run from before they carried it: counted
    from the episodes, the same figures); over the run from the episodes (the event log's, else
    the store's)."""
    run = tmp_path / "run"
    shutil.copytree(team_run, run)
    if source == "events":  # the episodes come from the event log, the samples from the store
        _events(run, team_groups)
    if source == "older updates":
        _metrics(run, None)
    data = load_run(run)
    assert ("events.jsonl" in data.sources) == (source == "events")
    assert all(bool(u.team) == (source != "older updates") for u in data.updates)
    assert len(data.episodes) == 2 * ROWS_PER_UPDATE
    roles = [e.role for e in data.episodes[:6]]
    assert roles == ["executor"] * 2 + ["analyst"] * 2 + ["validator"] * 2
    assert [e.step for e in data.episodes] == [1] * 12 + [2] * 12

    page = build_report(run).read_text()
    assert '<a href="#team">Team</a>' in page
    team = _section(page, "team")
    header = re.findall(r"<th class=[^>]*>(.*?)</th>", team)
    assert header == ["", "team episodes", "reviews", "validator precision", "validator recall",
                      "verdict accuracy", "rounds to acceptance", "accepted", "reward: analyst",
                      "reward: executor", "reward: validator"]  # fmt: skip
    rows = _body_rows(team)
    assert rows == [*UPDATE_ROWS, RUN_ROW]
    assert rows[0][6] == "1.67" and rows[1][-1] == "1.08"  # what num() writes, for a reader
    # per update: precision, recall and verdict accuracy; each role's mean reward
    assert 'id="chart-team-validator" data-marks="6"' in team
    assert 'id="chart-team-reward" data-marks="6"' in team
    assert "recall, update 2: 67%" in team and "validator, update 1: 0.812" in team
    assert "a team episode counts once" in team
    # the section sits between the risky actions and the time
    order = re.findall(r'<section id="(\w+)">', page)
    assert order[order.index("risk") + 1 : order.index("risk") + 3] == ["team", "time"]


def test_without_episodes_the_update_records_still_give_the_team(
    team_run: Path, tmp_path: Path
) -> None:
    """No store and no event log: the per-update figures are the update records'; the team
    episodes per update and the run's figures are not recorded."""
    run = tmp_path / "run"
    shutil.copytree(team_run, run)
    shutil.rmtree(run / "trajectories")
    team = _section(build_report(run).read_text(), "team")
    assert _body_rows(team) == [["update 1", "—", *UPDATE_ROWS[0][2:]],
                                ["update 2", "—", *UPDATE_ROWS[1][2:]]]  # fmt: skip
    assert 'id="chart-team-validator" data-marks="6"' in team
    assert "<b>The team over the run: not recorded.</b>" in team


def test_the_samples_show_each_role_and_a_team_episode_together(team_run: Path) -> None:
    page = build_report(team_run).read_text()
    samples = _section(page, "samples")
    shown = re.findall(
        r'<details class="traj" id="(sample-\d+)" open><summary>(.*?)</summary>', samples
    )
    # each sample is a team episode, picked as its executor's trajectory: update 2's a/1 (the
    # newest success), b/1 (the newest failure with a reason, the infra failure, also the latest)
    assert [re.sub(r"<[^>]+>", "", s).split(" · ")[0] for _, s in shown] == [
        "a success: executor a sample 1",
        "a failure (also the latest episode): executor b sample 1",
    ]
    assert all('<span class="badge role">executor</span>' in s for _, s in shown)
    first = samples.split(f'id="{shown[0][0]}"')[1].split(f'id="{shown[1][0]}"')[0]
    partners = re.findall(r'<details class="traj partner"><summary>(.*?)</summary>', first)
    assert [re.sub(r"<[^>]+>", "", p) for p in partners] == [
        f"analyst reward {num(1.2)} · plan_followed 1 · 0 steps · 0 model tokens",
        f"validator reward {num(1.5)} · verdict_correct 1 · 0 steps · 0 model tokens",
    ]
    assert "1. query the a table" in first and "ACCEPT" in first  # their conversations
    assert "A team episode is shown as its executor" in samples


def test_the_team_in_chromium(team_run: Path, browser: Any, tmp_path: Path) -> None:
    out = build_report(team_run, tmp_path / "report.html")
    opened = Opened(browser, out)
    opened.check_clean(out)
    charts = opened.charts()
    for key in ("chart-team-validator", "chart-team-reward"):
        drawn, announced, box = charts[key]
        assert drawn == announced == 6 and box["width"] > 100 and box["height"] > 30, key
    team = opened.page.query_selector("#team")
    assert team.is_visible() and "validator precision" in team.inner_text()
    nav = opened.page.query_selector('nav a[href="#team"]')
    assert nav is not None and nav.inner_text() == "Team"
    sample = opened.page.query_selector("#sample-0")
    badge = sample.query_selector("summary .badge.role")
    assert badge.inner_text() == "executor" and badge.is_visible()
    colour = badge.evaluate("b => getComputedStyle(b).backgroundColor")
    assert colour not in ("rgba(0, 0, 0, 0)", "transparent")
    folded = sample.query_selector_all("details.partner")
    assert [d.query_selector(".badge.role").inner_text() for d in folded] == [
        "analyst",
        "validator",
    ]
    validator = folded[1]
    assert not validator.query_selector(".turn.assistant").is_visible()  # folded until clicked
    validator.query_selector("summary").click()
    assert validator.query_selector(".turn.assistant").is_visible()
    assert "ACCEPT" in validator.inner_text()
    opened.check_clean(out)
    opened.page.close()


def test_a_run_without_teams_has_no_team_section(tmp_path: Path) -> None:
    run = tmp_path / "single"
    single = _leads(1)
    for t in single:  # single agents: no role, no partners, no team components
        t.role, t.partners, t.components = "", [], {"outcome": t.reward}
    groups = [[Group("a", "g-a", single[:2]), Group("b", "g-b", single[2:])]] * 2
    run_async(_store(run, groups))
    _metrics(run, groups, rows=4)
    _events(run, groups)
    page = build_report(run).read_text()
    assert 'id="team"' not in page and 'href="#team"' not in page
    assert "badge role" not in _section(page, "samples")
    assert "team episode" not in page
    nav = re.findall(r'<a href="#(\w+)">', page.split("<nav>")[1].split("</nav>")[0])
    assert nav == ["summary", "progress", "evals", "failures", "risk", "time", "staleness",
                   "learner", "signal", "tasks", "samples"]  # fmt: skip
