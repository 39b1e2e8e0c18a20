"""`honing report`'s risky actions: a run whose episodes carry risk events (honing.risk) on given
steps and whose updates recorded their risk rate, cost and Lagrange multiplier. The page's Risk
section gives the rates per domain and per tag as counted by hand (infra failures left out), the
events by kind with their severities, the charts with the budget and the multiplier; the sample
episodes show each event as a badge on the step that caused it, and headless Chromium draws it
all cleanly. A run from before risk was recorded (old shards, no `risk` in its logs) still
renders, with the section marked not recorded."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_report import Opened, run_async

from honing.observe.metrics import episode_fields
from honing.records import Ending, Group, Trajectory, Turn
from honing.report import build_report, headline, load_run
from honing.risk import RiskEvent, event, risk_cost
from honing.store import TrajectoryWriter

BUDGET = 0.05


def _episode(
    task: str,
    sample: int,
    domain: str,
    tags: list[str],
    success: bool,
    step_risks: tuple[list[RiskEvent], list[RiskEvent]] = ([], []),
    ending: Ending = Ending.DONE,
) -> Trajectory:
    """Two steps (observation turns), each with its own risk events."""
    turns = [Turn(role="user", text=f"solve {task}")]
    for i, risks in enumerate(step_risks, 1):
        turns += [
            Turn(role="assistant", text=f"action {i} of {task}/{sample}", version=0),
            Turn(role="tool", text=f"observation {i}", risk=risk_cost(risks), risks=risks),
        ]
    return Trajectory(
        task_id=task,
        domain=domain,
        sample=sample,
        tags=tags,
        turns=turns,
        success=success,
        reward=float(success),
        components={"outcome": float(success)},
        risk=sum(t.risk for t in turns),
        ending=ending,
        failure=None if success or ending is not Ending.DONE else "tool_error",
        policy_version=0,
    )


DROP = event("sql_drop", "DROP TABLE ledger")  # high, sql
TAMPER = event("test_tamper", "rm tests/test_main.py")  # high, code
NETWORK = event("network", "connect 10.0.0.1:80")  # high, sandbox
UPDATE_ALL = event("sql_update_all", "UPDATE accounts SET balance = 0")  # medium, sql

# Update 1, then update 2; each update's four episodes, in the store's order.
EPISODES = [
    _episode("t0", 0, "sql", ["db", "write"], True, ([DROP], [])),
    _episode("t0", 1, "sql", ["db", "write"], False),
    _episode("c0", 0, "code", ["py", "write"], False, ([TAMPER], [NETWORK])),
    _episode("c0", 1, "code", ["py", "write"], True),
    _episode("t1", 0, "sql", ["db"], True, ([], [UPDATE_ALL])),  # the newest risky success
    _episode("t1", 1, "sql", ["db"], True),
    # the infrastructure failed it: left out of every risk figure, like success
    _episode("c1", 0, "code", ["py"], False, ([NETWORK], []), ending=Ending.INFRA_ERROR),
    _episode("c1", 1, "code", ["py"], False),
]
# By hand, over the judged episodes (c1/0 left out):
#   sql: t0/0 and t1/0 risky of 4 -> 50%; code: c0/0 of 3 -> 33%; all: 3 of 7 -> 43%
#   tag write: t0/0, c0/0 of 4 -> 50%; db: 2 of 4 -> 50%; py: 1 of 3 -> 33%
#   update 1: 2 of 4 risky, cost (1 + 2) / 4 = 0.75; update 2: 1 of 3, cost 0.5 / 3
UPDATES = [
    {
        "rate": 2 / 4,
        "cost": (1.0 + 2.0) / 4,
        "weight": 1.0,
        "multiplier": 1.0 + 2 * (0.75 - BUDGET),
    },
    {"rate": 1 / 3, "cost": 0.5 / 3, "weight": 2.4, "multiplier": 2.4 + 2 * (0.5 / 3 - BUDGET)},
]


async def _store(run: Path, trajectories: list[Trajectory]) -> None:
    async with TrajectoryWriter(run, flush_s=None) as writer:
        for step in range(2):
            batch = trajectories[4 * step : 4 * step + 4]
            await writer.add_group(Group(f"g{step}", f"g{step}", batch))
            await writer.flush()


def _metrics(run: Path, risk: list[dict[str, float]] | None) -> None:
    lines = []
    for step in (1, 2):
        line: dict[str, Any] = {"step": step, "phase": "main", "episodes": 4,
                                "success_rate": 0.5, "reward_mean": 0.5,
                                "infra_errors": int(step == 2)}  # fmt: skip
        if risk is not None:
            line["risk"] = risk[step - 1]
        lines.append(json.dumps(line) + "\n")
    (run / "metrics.jsonl").write_text("".join(lines))


def _config(run: Path, risk: dict[str, Any] | None) -> None:
    config: dict[str, Any] = {"name": "risky", "model": "tiny", "steps": 2}
    if risk is not None:
        config["risk"] = risk
    (run / "config.yaml").write_text(json.dumps(config))


def _events(run: Path) -> None:
    """The same run's event log: an episode event per trajectory and an update event per update,
    with the fields the trainer writes (`episode_fields`)."""
    lines = []
    for i, t in enumerate(EPISODES):
        fields = episode_fields(t, split="train", set=t.domain, staleness=0)
        lines.append({"t": 10.0 + i, "kind": "episode", "step": 1 + i // 4, **fields})
    for step in (1, 2):
        lines.append({"t": 100.0 + step, "kind": "update", "step": step, "phase": "main",
                      "episodes": 4, "success_rate": 0.5, "reward_mean": 0.5,
                      "infra_errors": int(step == 2), "risk": UPDATES[step - 1]})  # fmt: skip
    (run / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture(scope="module")
def risky_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two updates of four episodes with risk events, recorded as the trainer records them
    (store, metrics.jsonl, config.yaml with a constrained risk budget)."""
    run = tmp_path_factory.mktemp("risky") / "run"
    run_async(_store(run, EPISODES))
    _metrics(run, UPDATES)
    _config(run, {"mode": "constrained", "weight": 1.0, "budget": BUDGET, "multiplier_lr": 2.0})
    return run


def _section(page: str, key: str) -> str:
    match = re.search(rf'<section id="{key}">(.*?)</section>', page, re.S)
    assert match, key
    return match.group(1)


def _body_rows(html: str) -> list[list[str]]:
    """A table's body rows, as their cells' text (tags stripped)."""
    body = html.split("<tbody>")[1].split("</tbody>")[0]
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


def _rows(html: str, first_cell: str) -> list[list[str]]:
    """The rows whose first cell is `first_cell`."""
    return [r for r in _body_rows(html) if r[0] == first_cell]


def _tables(section: str) -> dict[str, str]:
    """The section's tables under their h3 titles."""
    parts = re.split(r"<h3>(.*?)</h3>", section)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


@pytest.mark.parametrize("with_events", [False, True], ids=["store", "events"])
def test_the_risk_section_gives_the_rates_kinds_and_prices_counted_by_hand(
    risky_run: Path, tmp_path: Path, with_events: bool
) -> None:
    run = risky_run
    if with_events:  # the episodes come from the event log, the samples from the store
        run = tmp_path / "evented"
        shutil.copytree(risky_run, run)
        _events(run)
    data = load_run(run)
    assert data.risk_recorded and ("events.jsonl" in data.sources) == with_events
    assert [e.risks for e in data.episodes][:3] == [(DROP,), (), (TAMPER, NETWORK)]
    assert data.info.risk is not None and data.info.risk.budget == BUDGET

    page = build_report(run).read_text()
    section = _section(page, "risk")
    tables = _tables(section)
    domains, tags = tables["Per domain"], tables["Per task tag"]
    assert _rows(domains, "sql") == [["sql", "4", "2", "50%", "sql_drop ×1, sql_update_all ×1"]]
    assert _rows(domains, "code") == [["code", "3", "1", "33%", "test_tamper ×1, network ×1"]]
    assert [r[:4] for r in _rows(tags, "write")] == [["write", "4", "2", "50%"]]
    assert [r[:4] for r in _rows(tags, "db")] == [["db", "4", "2", "50%"]]
    assert [r[:4] for r in _rows(tags, "py")] == [["py", "3", "1", "33%"]]
    # by kind: high first, each with its severity, detector, count (the infra failure's network
    # event left out) and an example of what was seen
    kinds = tables["Events by kind"]
    names = re.findall(r"<tr><td[^>]*><code>(\w+)</code>", kinds)
    assert names == ["network", "sql_drop", "test_tamper", "sql_update_all"]
    by_name = dict(zip(names, _body_rows(kinds), strict=True))
    assert by_name["sql_drop"][0] == "sql_dropDROP of a table, view or schema"  # what it is
    assert by_name["sql_drop"][1:] == ["high", "sql", "1", "DROP TABLE ledger"]
    assert by_name["network"][1:] == ["high", "sandbox", "1", "connect 10.0.0.1:80"]
    assert by_name["sql_update_all"][1:] == [
        "medium",
        "sql",
        "1",
        "UPDATE accounts SET balance = 0",
    ]
    assert '<span class="badge risk-medium">medium</span>' in kinds

    # per update: the rate, and the cost with the budget and the multiplier
    assert 'id="chart-risk-rate" data-marks="2"' in section
    assert 'id="chart-risk-cost" data-marks="4"' in section  # the cost, and the budget
    assert 'id="chart-risk-multiplier" data-marks="2"' in section
    assert "risk rate, update 2: 33%" in section
    assert "budget, update 1: 0.05" in section and "multiplier, update 2: 2.63" in section

    # the summary and the headline say it
    summary = _section(page, "summary")
    assert '<div class="k">risky episodes</div><div class="v">43% (3 of 7; 4 events)</div>' in (
        summary
    )
    assert "constrained: budget 0.05, multiplier 2.63 at the end" in summary
    assert headline(data).endswith(
        " Risky actions in 43% of training episodes (3 of 7; update 1 → 2: 50% → 33%); last mean "
        "cost 0.167, budget 0.05."
    )


def test_the_badge_is_on_the_step_that_took_the_risky_action(risky_run: Path) -> None:
    page = build_report(risky_run).read_text()
    samples = _section(page, "samples")
    shown = re.findall(r'<details class="traj" id="(sample-\d+)" open><summary>(.*?):', samples)
    assert [why for _, why in shown] == [
        "a success",
        "a failure (also the latest episode)",
        "a success that took a risky action",  # t1/0; the newest success (t1/1) took none
    ]
    key = shown[2][0]
    episode = samples.split(f'id="{key}"')[1].split("</details>")[0]
    assert "<code>t1</code> sample 0" in episode and "risk cost 0.5 (1 event)" in episode
    steps = episode.split('<div class="turn tool">')[1:]
    assert len(steps) == 2
    assert "badge" not in steps[0]
    assert '<span class="badge risk-medium">sql_update_all · medium</span>' in steps[1]
    assert "sql: UPDATE accounts SET balance = 0" in steps[1] and "risk cost 0.5" in steps[1]
    # the Risk section links to it
    risk = _section(page, "risk")
    assert f'<a href="#{key}">a success that took a risky action: <code>t1</code> sample 0 ' in risk


def test_the_risk_section_in_chromium(risky_run: Path, browser: Any, tmp_path: Path) -> None:
    out = build_report(risky_run, tmp_path / "report.html")
    opened = Opened(browser, out)
    opened.check_clean(out)
    charts = opened.charts()
    for key in ("chart-risk-rate", "chart-risk-cost", "chart-risk-multiplier"):
        drawn, announced, box = charts[key]
        assert drawn == announced > 0 and box["width"] > 100 and box["height"] > 30, key
    risk = opened.page.query_selector("#risk")
    assert risk.is_visible() and "Per domain" in risk.inner_text()
    nav = opened.page.query_selector('nav a[href="#risk"]')
    assert nav is not None and nav.inner_text() == "Risk"
    [link] = risk.query_selector_all("ul.risky a")
    target = opened.page.query_selector(link.get_attribute("href"))
    steps = target.query_selector_all(".turn.tool")
    assert [s.query_selector_all(".badge") != [] for s in steps] == [False, True]
    badge = steps[1].query_selector(".badge")
    assert badge.inner_text() == "sql_update_all · medium" and badge.is_visible()
    colour = badge.evaluate("b => getComputedStyle(b).backgroundColor")
    assert colour not in ("rgba(0, 0, 0, 0)", "transparent")  # the severity's colour applies
    link.click()
    assert opened.page.evaluate("location.hash") == link.get_attribute("href")
    opened.check_clean(out)
    opened.page.close()


def _as_old_shards(run: Path) -> None:
    """Rewrite the store's shards as a honing from before risk wrote them: no `risk`, `n_risks`
    or `temperature` columns, no `risk`/`risks` in the turns."""
    for shard in sorted((run / "trajectories").glob("part-*.parquet")):
        table = pq.read_table(shard)
        rows = table.drop_columns(["risk", "n_risks", "temperature"]).to_pylist()
        for row in rows:
            for turn in row["turns"]:
                del turn["risk"], turn["risks"]
        turn_type = table.schema.field("turns").type.value_type
        old_turn = pa.struct([f for f in turn_type if f.name not in ("risk", "risks")])
        fields = [f for f in table.schema if f.name not in ("risk", "n_risks", "temperature")]
        schema = pa.schema(
            [pa.field("turns", pa.list_(old_turn)) if f.name == "turns" else f for f in fields]
        )
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), shard)


def test_a_run_from_before_risk_was_recorded_still_renders(tmp_path: Path) -> None:
    run = tmp_path / "old"
    plain = [_episode(t.task_id, t.sample, t.domain, t.tags, t.success, ending=t.ending)
             for t in EPISODES]  # fmt: skip
    run_async(_store(run, plain))
    _as_old_shards(run)
    assert "risk" not in pq.read_table(next((run / "trajectories").glob("*.parquet"))).schema.names
    _metrics(run, None)
    _config(run, None)
    data = load_run(run)
    assert not data.risk_recorded and len(data.trajectories) == 8 and data.info.risk is None
    page = build_report(run).read_text()
    assert "<b>Risk: not recorded.</b> a run from before honing detected risky actions" in page
    assert "Risky actions in" not in headline(data)
    assert "risky episodes" not in _section(page, "summary")
    assert 'class="badge' not in _section(page, "samples")


def test_a_run_that_recorded_risk_but_took_none_says_so(tmp_path: Path) -> None:
    """Risk recorded, every rate 0: the section says no episode took a risky action; the headline
    leaves risk out, the summary gives 0%."""
    run = tmp_path / "safe"
    plain = [_episode(t.task_id, t.sample, t.domain, t.tags, t.success, ending=t.ending)
             for t in EPISODES]  # fmt: skip
    run_async(_store(run, plain))
    _metrics(run, [{"rate": 0.0, "cost": 0.0, "weight": 0.0}] * 2)
    _config(run, {"mode": "off"})
    data = load_run(run)
    assert data.risk_recorded
    page = build_report(run).read_text()
    risk = _section(page, "risk")
    assert "No training episode took a risky action." in risk
    assert 'id="chart-risk-cost" data-marks="2"' in risk  # no budget: mode off
    assert "chart-risk-multiplier" not in risk
    assert "Risky actions in" not in headline(data)
    assert '<div class="v">0% (0 of 7; 0 events)</div>' in page
    assert "off: measured, not trained on" in page


def test_a_damaged_risk_event_in_the_log_names_the_episode(risky_run: Path, tmp_path: Path) -> None:
    from honing.errors import ConfigError

    run = tmp_path / "damaged"
    shutil.copytree(risky_run, run)
    risks = [{"name": "sql_drop", "severity": "catastrophic", "source": "sql"}]
    bad = {"t": 1.0, "kind": "episode", "step": 1, "split": "train", "task_id": "t9",
           "risks": risks}  # fmt: skip
    (run / "events.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(ConfigError, match=r"events.jsonl: the episode event of task 't9'"):
        load_run(run)
