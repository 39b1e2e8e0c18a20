"""The alert rules: hand-computed firing, clearing and once-per-firing in process; the monitor on a
real event log; deploy/prometheus/alerts.yml generated from the same RULES (and valid for promtool
when it is installed: Debian's `prometheus` package, `make test-deps`)."""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from honing.observe.alerts import (
    RULES,
    AlertMonitor,
    Change,
    Rule,
    RuleState,
    Sample,
    evaluate,
    rules_yaml,
)
from honing.observe.events import EventLog, emit, read_events, use

ROOT = Path(__file__).resolve().parents[2]
ALERTS_YML = ROOT / "deploy" / "prometheus" / "alerts.yml"


def rule(name: str) -> Rule:
    return next(r for r in RULES if r.name == name)


def run(r: Rule, samples: Sequence[Sample]) -> list[tuple[int, str, float | None]]:
    """Evaluate `r` after each sample in turn: the changes as (step, state, value)."""
    state, history, out = RuleState(), [], []
    for sample in samples:
        history.append(sample)
        state, change = evaluate(r, history, state)
        if change is not None:
            out.append((change.step, change.state, change.value))
    return out


def numbered(**series: Sequence[Any]) -> list[Sample]:
    """Samples 1..n with the given fields."""
    n = len(next(iter(series.values())))
    return [Sample(step=i + 1, **{k: v[i] for k, v in series.items()}) for i in range(n)]


def test_no_learning_signal_fires_after_five_updates_once_and_resolves() -> None:
    shares = [0.95] * 4 + [0.95, 1.0] + [0.5] + [0.95] * 5
    changes = run(rule("NoLearningSignal"), numbered(zero_variance_share=shares))
    # held at updates 1-5: fires at the 5th; 6 still holds (no second event); 7 clears; 8-12
    # hold again: fires again at 12
    assert changes == [(5, "firing", 0.95), (7, "resolved", 0.5), (12, "firing", 0.95)]


def test_an_unmeasured_value_never_holds_and_breaks_the_streak() -> None:
    shares = [0.95, 0.95, None, 0.95, 0.95, 0.95, 0.95]
    assert run(rule("NoLearningSignal"), numbered(zero_variance_share=shares)) == []


def test_reward_collapse_is_the_drop_from_the_recent_best() -> None:
    rewards = [0.8, 0.9, 0.5, 0.55, 0.9]
    changes = run(rule("RewardCollapse"), numbered(reward_mean=rewards))
    # update 3: 0.9 - 0.5 = 0.4 > 0.3 (held once); 4: 0.9 - 0.55 = 0.35 (twice: fires); 5: 0
    assert changes == [(4, "firing", pytest.approx(0.9 - 0.55)), (5, "resolved", 0.0)]
    # the best is over the last 10 updates only: a peak 10 updates back no longer counts
    old_peak = [1.0] + [0.5] * 11
    assert run(rule("RewardCollapse"), numbered(reward_mean=old_peak)) == [
        (3, "firing", 0.5), (11, "resolved", 0.0),
    ]  # fmt: skip


def test_the_sandbox_error_rate_is_over_the_last_five_updates() -> None:
    errors = [0, 0, 0, 0, 30, 0, 0, 0, 0, 0]
    changes = run(
        rule("SandboxErrorRate"), numbered(sandbox_errors=errors, sandbox_runs=[100] * 10)
    )
    # 30 / (5 x 100) = 0.06 > 0.05 at update 5; still in the window through update 9 (30/500);
    # gone from it at update 10: 0 / 500
    assert changes == [(5, "firing", 30 / 500), (10, "resolved", 0.0)]
    # errors with no job run at all: infinitely bad; nothing at all: not measured
    r = rule("SandboxErrorRate")
    assert r.value([Sample(step=1, sandbox_errors=2)]) == math.inf
    assert r.value([Sample(step=1)]) is None


def test_a_retry_storm_counts_retries_per_training_episode() -> None:
    samples = numbered(retries=[3, 3, 0], episodes=[4, 4, 4])
    # (3) / 4 = 0.75 held once; (3 + 3) / 8 = 0.75 twice: fires; 6 / 12 = 0.5 is not > 0.5
    assert run(rule("RetryStorm"), samples) == [(2, "firing", 0.75), (3, "resolved", 0.5)]


def test_throughput_drop_compares_with_the_recent_mean() -> None:
    tokens = [100.0, 100.0, 100.0, 20.0, 20.0, 20.0]
    changes = run(rule("ThroughputDrop"), numbered(tokens_per_s=tokens))
    # 4: 20 / (320/4) = 0.25; 5: 20 / (340/5) = 0.29; 6: 20 / (360/6) = 1/3 -> fires, 3 in a row
    assert changes == [(6, "firing", pytest.approx(20 / 60))]


def test_staleness_and_disk_fire_on_the_latest_update() -> None:
    lags = run(rule("StalenessOverBound"), numbered(staleness_max=[3, 3, 3, 2]))
    assert lags == [(3, "firing", 3.0), (4, "resolved", 2.0)]
    disk = run(rule("DiskAlmostFull"), numbered(disk_free_fraction=[0.2, 0.04, 0.3]))
    assert disk == [(2, "firing", 0.04), (3, "resolved", 0.3)]


def test_the_monitor_reads_an_update_from_its_events_and_emits_alerts(tmp_path: Path) -> None:
    """A planted sandbox failure rate: 2 errors in 10 jobs in the first update, none after."""
    monitor = AlertMonitor(tmp_path)
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log, use(log):
        log.listen(monitor.on_event)
        for step, errors in ((1, 2), (2, 0)):
            for sample in range(2):
                emit("episode", step, split="train", retries=[], sandbox_errors=errors if sample
                     else 0)  # fmt: skip
            emit("episode", step, split="eval", retries=[{"stage": "step"}], sandbox_errors=5)
            emit("sandbox", step, runs=10)
            emit("update", step, episodes=2, reward_mean=0.5, tokens_per_s=10.0,
                 staleness={"0": 2}, signal={"groups": 1, "zero_variance": 0})  # fmt: skip
    assert monitor.history[0] == replace(
        monitor.history[0], step=1, episodes=2, retries=0, sandbox_errors=2, sandbox_runs=10,
        reward_mean=0.5, zero_variance_share=0.0, staleness_max=0, tokens_per_s=10.0,
    )  # fmt: skip
    free = monitor.history[0].disk_free_fraction
    assert free is not None and 0 < free <= 1
    alerts = [e for e in read_events(path) if e.kind == "alert"]
    # update 1: 2 / 10 = 0.2; update 2: (2 + 0) / 20 = 0.1, still firing (no second event)
    assert [(e.step, e.data["name"], e.data["state"]) for e in alerts] == [
        (1, "SandboxErrorRate", "firing")
    ]
    first = alerts[0].data
    assert first["severity"] == "critical" and first["value"] == 0.2
    assert (
        first["threshold"] == 0.05 and "SandboxErrorRate (critical) at step 1" in first["message"]
    )


def test_a_change_says_what_fired_and_why() -> None:
    change = Change(rule("DiskAlmostFull"), "firing", 0.01, 7)
    assert change.message().startswith("DiskAlmostFull (critical) at step 7: value 0.01 < 0.05")
    assert Change(rule("DiskAlmostFull"), "resolved", None, 8).message().endswith("value n/a")


def test_alerts_yml_is_generated_from_the_rules() -> None:
    assert ALERTS_YML.read_text() == rules_yaml(), (
        "deploy/prometheus/alerts.yml is out of date: "
        "python -m honing.observe.alerts > deploy/prometheus/alerts.yml"
    )
    [group] = yaml.safe_load(ALERTS_YML.read_text())["groups"]
    by_name = {r["alert"]: r for r in group["rules"]}
    assert list(by_name) == [r.name for r in RULES]
    for r in RULES:
        entry = by_name[r.name]
        assert entry["expr"].endswith(f" {r.op} {r.threshold:g}")
        assert entry["labels"]["severity"] == r.severity and entry["for"] == r.for_


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian's prometheus package; make test-deps installs it)",
)
def test_promtool_accepts_the_rules_and_the_scrape_config() -> None:
    for args in (["check", "rules", str(ALERTS_YML)],
                 ["check", "config", str(ALERTS_YML.with_name("prometheus.yml"))]):  # fmt: skip
        done = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


async def test_a_training_run_with_a_planted_condition_writes_and_exports_its_alert(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Two real updates of the tiny model with the disk reading 1% free (the one thing planted):
    one `alert` event (not one per update), in the report, and on the run's /metrics."""
    import logging
    import re

    import httpx

    from honing.observe import alerts
    from honing.report.data import load_run
    from honing.report.page import render
    from honing.trainer.loop import train
    from honing.trainer.run_config import TrainConfig

    monkeypatch.setattr(alerts, "disk_space", lambda path: (1.0, 100.0))
    caplog.set_level(logging.INFO, logger="honing.observe")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "m1", "domain": "math", "prompt": "What is 1 + 2?", "answer": "3"}\n')
    config = TrainConfig.model_validate({
        "name": "planted", "model": str(tiny_model_dir), "out": str(tmp_path / "run"),
        "train": {"m": {"tasks": str(tasks)}}, "steps": 2, "groups_per_step": 1, "n": 2,
        "agent": {"max_turns": 1, "max_new_tokens": 4, "system_prompt": ""},
        "sandbox": {"pool_size": 1, "timeout_s": 20.0},
        "observe": {"tensorboard": False, "prometheus": {"enabled": True, "port": 0}},
    })  # fmt: skip
    scraped: list[str] = []

    def scrape(_: object) -> None:  # after each update, while the exporter is up
        [url] = re.findall(r"prometheus metrics at (\S+)", caplog.text)
        scraped.append(httpx.get(url).text)

    await train(config, on_step=scrape)
    run = tmp_path / "run"
    fired = [e for e in read_events(run / "events.jsonl") if e.kind == "alert"]
    assert [(e.step, e.data["name"], e.data["state"], e.data["value"]) for e in fired] == [
        (1, "DiskAlmostFull", "firing", 0.01)
    ]
    assert "alert: DiskAlmostFull (critical) at step 1" in caplog.text
    line = 'honing_alert_firing{alertname="DiskAlmostFull",severity="critical"} 1.0'
    assert len(scraped) == 2 and all(line in text for text in scraped)
    assert "honing_updates_total 2.0" in scraped[1]
    data = load_run(run)
    assert [(a.step, a.name, a.state) for a in data.alerts] == [(1, "DiskAlmostFull", "firing")]
    assert '<section id="alerts">' in render(data)
