"""The Prometheus exporters scraped over HTTP and parsed: a training run's (fed by real events)
and `honing serve`'s (after real requests to the tiny random model); the names the docs, the
Grafana dashboard and the alert rules use all exist in the exporters."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from honing.observe.alerts import RULES
from honing.observe.events import EventLog, emit, use
from honing.observe.metrics import episode_fields
from honing.observe.prometheus import (
    NAMES,
    MetricsServer,
    PrometheusConfig,
    ServeMetrics,
    TrainMetrics,
    render,
)
from honing.records import Ending, Retry, Trajectory
from honing.serve.server import background_server

ROOT = Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """{(sample name, labels): value} of a text exposition."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def at(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def traj(domain: str, tags: list[str], reward: float, success: bool, **kw: Any) -> Trajectory:
    return Trajectory(task_id=f"{domain}-{reward}", domain=domain, tags=tags, reward=reward,
                      success=success, **kw)  # fmt: skip


def feed(run_dir: Path) -> None:
    """One update's events, as the trainer writes them, into the current log."""
    played = [
        (traj("math", ["easy"], 1.0, True, generation_s=2.0, env_s=0.5, loss_mask=[1] * 4,
              policy_version=3), 0),
        (traj("math", ["easy", "add"], 0.25, False, failure="tool_error", generation_s=0.5,
              env_s=3.0, loss_mask=[1] * 6, policy_version=2,
              retries=[Retry(attempt=0, stage="step", cause="sandbox_error: the cell died",
                             at_s=1.0)]), 1),
        (traj("code", [], 0.0, False, ending=Ending.INFRA_ERROR, failure="infra:step",
              detail="retry budget of 1 spent; sandbox_error: gone",
              retries=[Retry(attempt=0, stage="step", cause="sandbox_error: x", at_s=0.0)]),
         None),
    ]  # fmt: skip
    for t, lag in played:
        emit("episode", 1, **episode_fields(t, split="train", set="s", staleness=lag))
    held = traj("math", ["easy"], 1.0, True, generation_s=1.0)
    emit("episode", 1, **episode_fields(held, split="eval", set="h", staleness=None))
    emit("sync", 1, seconds=0.2, mode="state_dict")
    emit("sandbox", 1, cells=4, busy_fraction=0.5, queued=0.25, runs=10)
    emit("update", 1, phase="main", episodes=3, success_rate=0.5, reward_mean=0.625,
         infra_errors=1, rollout_s=4.0, update_s=1.0, sync_s=0.2, tokens_per_s=2.5,
         episodes_per_s=0.75, staleness={"0": 1, "1": 1},
         learner={"loss": 0.5, "kl": 0.01, "entropy": 1.2, "grad_norm": 3.0, "lr": 1e-5},
         signal={"groups": 2, "zero_variance": 1, "reward_std": 0.375})  # fmt: skip
    emit("eval", 1, set="h", success=0.75)
    emit("alert", 1, name="RetryStorm", state="firing", severity="warning", value=1.0,
         threshold=0.5, message="m")  # fmt: skip


def test_a_runs_exporter_serves_its_events_at_metrics(tmp_path: Path) -> None:
    metrics = TrainMetrics(tmp_path)
    config = PrometheusConfig(enabled=True, port=0)
    with EventLog(tmp_path / "events.jsonl") as log, use(log):
        log.listen(metrics.on_event)
        with MetricsServer(metrics.registry, config) as server:
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", server.url)
            feed(tmp_path)
            response = httpx.get(server.url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    s = parse(response.text)

    # episodes by domain and outcome; the infrastructure's failures apart
    assert at(s, "honing_episodes_total", split="train", domain="math", outcome="success") == 1
    assert at(s, "honing_episodes_total", split="train", domain="math", outcome="failure") == 1
    assert at(s, "honing_episodes_total", split="train", domain="code", outcome="infra_error") == 1
    assert at(s, "honing_episodes_total", split="eval", domain="math", outcome="success") == 1
    assert at(s, "honing_episode_tags_total", split="train", tag="easy", outcome="failure") == 1
    assert at(s, "honing_episode_tags_total", split="train", tag="add", outcome="failure") == 1
    assert at(s, "honing_episode_failures_total", split="train", domain="math",
              reason="tool_error") == 1  # fmt: skip
    assert at(s, "honing_episode_failures_total", split="train", domain="code",
              reason="infra:step") == 1  # fmt: skip
    assert at(s, "honing_retries_total", split="train", stage="step") == 2
    # a retried sandbox error, and one retried then final: 1 + (1 + 1)
    assert at(s, "honing_sandbox_errors_total", split="train") == 3
    assert at(s, "honing_model_tokens_total", split="train") == 4 + 6
    # times per episode: generation 2.0 + 0.5 + 0, env 0.5 + 3.0 + 0
    assert at(s, "honing_generation_seconds_count", split="train") == 3
    assert at(s, "honing_generation_seconds_sum", split="train") == pytest.approx(2.5)
    assert at(s, "honing_generation_seconds_bucket", split="train", le="1.0") == 2  # 0.5 and 0
    assert at(s, "honing_env_seconds_sum", split="train") == pytest.approx(3.5)
    # rewards of the judged episodes only (the infrastructure failure is no reward of 0)
    assert at(s, "honing_episode_reward_count", split="train", domain="math") == 2
    assert at(s, "honing_episode_reward_bucket", split="train", domain="math", le="0.25") == 1
    assert at(s, "honing_episode_reward_bucket", split="train", domain="math", le="0.9") == 1
    assert at(s, "honing_episode_reward_bucket", split="train", domain="math", le="1.0") == 2
    code = frozenset({("split", "train"), ("domain", "code")})
    assert ("honing_episode_reward_count", code) not in s
    assert (
        at(s, "honing_episode_staleness_count") == 2 and at(s, "honing_episode_staleness_sum") == 1
    )
    # the sandbox, sync and the update
    assert at(s, "honing_sandbox_runs_total") == 10 and at(s, "honing_sandbox_cells") == 4
    assert at(s, "honing_sandbox_busy_fraction") == 0.5 and at(s, "honing_sandbox_queued") == 0.25
    assert at(s, "honing_sync_seconds_count") == 1 and at(s, "honing_sync_seconds_sum") == 0.2
    assert at(s, "honing_updates_total") == 1 and at(s, "honing_step") == 1
    assert at(s, "honing_success_rate") == 0.5 and at(s, "honing_reward_mean") == 0.625
    assert at(s, "honing_reward_std") == 0.375
    assert at(s, "honing_zero_variance_share") == 1 / 2
    assert at(s, "honing_infra_failures_total") == 1
    assert at(s, "honing_phase_seconds", phase="rollout") == 4.0
    assert at(s, "honing_tokens_per_second") == 2.5 and at(s, "honing_episodes_per_second") == 0.75
    assert at(s, "honing_staleness_max") == 1
    assert at(s, "honing_learner_loss") == 0.5 and at(s, "honing_learner_kl") == 0.01
    assert at(s, "honing_learner_entropy") == 1.2 and at(s, "honing_learner_grad_norm") == 3.0
    assert 0 < at(s, "honing_disk_free_bytes") <= at(s, "honing_disk_size_bytes")
    assert at(s, "honing_eval_success", set="h") == 0.75
    assert at(s, "honing_alerts_total", alertname="RetryStorm", severity="warning") == 1
    assert at(s, "honing_alert_firing", alertname="RetryStorm", severity="warning") == 1
    with pytest.raises(httpx.TransportError):  # the server stopped with the block
        httpx.get(server.url, timeout=2)


def test_two_runs_in_one_process_keep_their_own_registries(tmp_path: Path) -> None:
    first, second = TrainMetrics(tmp_path), TrainMetrics(None)
    with EventLog(tmp_path / "events.jsonl") as log, use(log):
        log.listen(first.on_event)
        feed(tmp_path)
    assert at(parse(render(first.registry).decode()), "honing_updates_total") == 1
    untouched = parse(render(second.registry).decode())
    assert at(untouched, "honing_updates_total") == 0
    assert (
        math.isnan(at(untouched, "honing_reward_mean")) or at(untouched, "honing_reward_mean") == 0
    )


def test_an_update_without_judged_episodes_leaves_no_stale_reward(tmp_path: Path) -> None:
    metrics = TrainMetrics(None)
    with EventLog(tmp_path / "events.jsonl") as log, use(log):
        log.listen(metrics.on_event)
        feed(tmp_path)
        emit("update", 2, episodes=2, success_rate=None, reward_mean=None, infra_errors=2,
             staleness={}, learner={}, signal={"groups": 0})  # fmt: skip
    s = parse(render(metrics.registry).decode())
    assert math.isnan(at(s, "honing_reward_mean")) and math.isnan(at(s, "honing_staleness_max"))
    assert at(s, "honing_infra_failures_total") == 1 + 2 and at(s, "honing_step") == 2


def test_the_server_counts_requests_tokens_and_latency_at_metrics(tiny_model_dir: Path) -> None:
    with background_server(tiny_model_dir, dtype="float32", max_batch=2) as running:
        body = {"model": running.server.name, "prompt": "Hello there", "max_tokens": 4,
                "temperature": 0}  # fmt: skip
        answer = httpx.post(running.base_url + "/completions", json=body, timeout=120)
        assert answer.status_code == 200
        assert httpx.get(running.url + "/no/such/path").status_code == 404
        scraped = httpx.get(running.url + "/metrics")
    assert scraped.headers["content-type"].startswith("text/plain")
    s = parse(scraped.text)
    usage = answer.json()["usage"]
    assert at(s, "honing_serve_requests_total", route="/v1/completions", status="200") == 1
    assert at(s, "honing_serve_requests_total", route="other", status="404") == 1
    assert at(s, "honing_serve_prompt_tokens_total") == usage["prompt_tokens"]
    assert at(s, "honing_serve_completion_tokens_total") == usage["completion_tokens"] > 0
    assert at(s, "honing_serve_generation_seconds_count") == 1
    assert at(s, "honing_serve_in_flight") == 0


def exported(tmp_path: Path) -> set[str]:
    """Every sample name a fed training exporter and a used server exporter expose."""
    metrics = TrainMetrics(tmp_path)
    with EventLog(tmp_path / "events.jsonl") as log, use(log):
        log.listen(metrics.on_event)
        feed(tmp_path)
    serve = ServeMetrics()
    serve.requests.labels("/v1/completions", "200").inc()
    text = render(metrics.registry).decode() + render(serve.registry).decode()
    return {name for name, _ in parse(text)}


def test_names_are_documented_and_every_dashboard_and_rule_metric_exists(tmp_path: Path) -> None:
    names = exported(tmp_path)
    families = set()
    for text in (render(TrainMetrics(None).registry), render(ServeMetrics().registry)):
        for family in text_string_to_metric_families(text.decode()):
            if family.name.endswith("_created"):  # prometheus_client's creation times
                continue
            families.add(family.name + ("_total" if family.type == "counter" else ""))
    assert families == set(NAMES)
    docs = (ROOT / "docs" / "observability.md").read_text()
    assert [n for n in NAMES if f"`{n}`" not in docs] == []

    dashboard = json.loads((ROOT / "deploy" / "grafana" / "honing-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\bhoning_\w+", e)}
    assert used and used - names == set()
    assert set(NAMES) - {re.sub(r"_(bucket|sum|count)$", "", m) for m in used} == set(), \
        "every metric has a panel"  # fmt: skip
    in_rules = {m for r in RULES for m in re.findall(r"\bhoning_\w+", r.promql)}
    assert in_rules - names == set()


def test_a_port_in_use_is_a_config_error_naming_the_setting(tmp_path: Path) -> None:
    from honing.errors import ConfigError

    registry = TrainMetrics(None).registry
    with MetricsServer(registry, PrometheusConfig(enabled=True, port=0)) as first:
        port = int(first.url.rsplit(":", 1)[1].split("/")[0])
        taken = PrometheusConfig(enabled=True, port=port)
        with pytest.raises(ConfigError, match=f"observe.prometheus: cannot listen on .*:{port}"):
            MetricsServer(registry, taken).__enter__()
