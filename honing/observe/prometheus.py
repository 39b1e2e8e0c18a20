"""Prometheus metrics: what `honing train` and `honing serve` expose at `/metrics`.

    metrics = TrainMetrics(run_dir)            # a registry of its own (not the global default)
    log.listen(metrics.on_event)               # fed by the run's event log (honing.observe.events)
    with MetricsServer(metrics.registry, PrometheusConfig(enabled=True)) as server:
        server.url                             # http://127.0.0.1:PORT/metrics (port 0: a free one)
    ServeMetrics()                             # the server's: requests, tokens, latency, in flight

Every number comes from an event the run already writes (an `episode`, `sandbox`, `sync`,
`update`, `eval`, `alert`), so the scrape and events.jsonl agree; the names are listed in NAMES
and docs/observability.md ("Prometheus and alerts"). Not covered: the alert rules
(`honing.observe.alerts`), pushing (Prometheus scrapes), multi-process aggregation (one exporter
per process), authentication or TLS on the exporter.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest, start_http_server
from pydantic import Field

from honing.config import StrictModel
from honing.errors import ConfigError
from honing.observe.events import Event

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST  # the text exposition format's content type
SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
REWARDS = (-1.0, -0.5, 0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 2.0)
LAGS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0)
LEARNER_STATS = ("loss", "kl", "entropy", "grad_norm", "lr")


class PrometheusConfig(StrictModel):
    """The `/metrics` endpoint of `honing train` (observe.prometheus)."""

    enabled: bool = Field(False, description="Serve Prometheus metrics while the run trains.")
    host: str = Field(
        "127.0.0.1", min_length=1, description="The address to listen on (0.0.0.0: every one)."
    )
    port: int = Field(
        0, ge=0, le=65535, description="The port; 0 picks a free one (the URL is logged)."
    )


def render(registry: CollectorRegistry) -> bytes:
    """The registry's metrics in Prometheus' text exposition format."""
    return generate_latest(registry)


def _outcome(fields: dict[str, Any]) -> str:
    if fields.get("ending") == "infra_error":
        return "infra_error"
    return "success" if fields.get("success") else "failure"


def _number(value: Any) -> float:
    """A gauge's value: an unmeasured figure (None) is NaN, which no alert compares true."""
    return float(value) if isinstance(value, int | float) else math.nan


class TrainMetrics:
    """The metrics of one training run, in a registry of its own, fed by its event log."""

    def __init__(self, run_dir: Path | None = None) -> None:
        self.run_dir = run_dir  # the disk whose free space is watched (None: not watched)
        r = self.registry = CollectorRegistry(auto_describe=True)
        split = ("split",)  # train | eval
        self.episodes = Counter("honing_episodes", "Episodes played, by outcome (success, "
                                "failure, infra_error).", ("split", "domain", "outcome"),
                                registry=r)  # fmt: skip
        self.episode_tags = Counter("honing_episode_tags", "Episodes played, per task tag.",
                                    ("split", "tag", "outcome"), registry=r)  # fmt: skip
        self.failures = Counter("honing_episode_failures", "Failed episodes by failure reason.",
                                ("split", "domain", "reason"), registry=r)  # fmt: skip
        self.retries = Counter("honing_retries", "Attempts retried after an infrastructure "
                               "failure, by stage.", ("split", "stage"), registry=r)  # fmt: skip
        self.sandbox_errors = Counter("honing_sandbox_errors", "Episode attempts a sandbox "
                                      "failure ended.", split, registry=r)  # fmt: skip
        self.model_tokens = Counter("honing_model_tokens", "Tokens the policy generated.",
                                    split, registry=r)  # fmt: skip
        self.generation = Histogram("honing_generation_seconds", "Generation seconds per episode.",
                                    split, buckets=SECONDS, registry=r)  # fmt: skip
        self.env = Histogram("honing_env_seconds", "Environment seconds per episode.", split,
                             buckets=SECONDS, registry=r)  # fmt: skip
        self.reward = Histogram("honing_episode_reward", "Rewards of the judged episodes.",
                                ("split", "domain"), buckets=REWARDS, registry=r)  # fmt: skip
        self.staleness = Histogram("honing_episode_staleness", "Policy versions behind, per "
                                   "training episode.", buckets=LAGS, registry=r)  # fmt: skip
        self.sandbox_runs = Counter("honing_sandbox_runs", "Sandbox jobs run during updates.",
                                    registry=r)  # fmt: skip
        self.sandbox_cells = Gauge("honing_sandbox_cells", "Sandbox cells kept.", registry=r)
        self.sandbox_busy = Gauge("honing_sandbox_busy_fraction", "Share of the cells' time "
                                  "spent running jobs in the last update.", registry=r)  # fmt: skip
        self.sandbox_queued = Gauge("honing_sandbox_queued", "Mean jobs waiting for a cell in "
                                    "the last update.", registry=r)  # fmt: skip
        self.sync = Histogram("honing_sync_seconds", "Weight sync seconds per update.",
                              buckets=SECONDS, registry=r)  # fmt: skip
        self.updates = Counter("honing_updates", "Policy updates done.", registry=r)
        self.step = Gauge("honing_step", "The last update's step.", registry=r)
        self.success = Gauge("honing_success_rate", "Success over the last update's judged "
                             "episodes.", registry=r)  # fmt: skip
        self.reward_mean = Gauge("honing_reward_mean", "Mean reward over the last update's "
                                 "judged episodes.", registry=r)  # fmt: skip
        self.reward_std = Gauge("honing_reward_std", "The reward's standard deviation over the "
                                "last update's judged episodes.", registry=r)  # fmt: skip
        self.zero_variance = Gauge("honing_zero_variance_share", "Share of the last update's "
                                   "groups whose rewards were all equal.", registry=r)  # fmt: skip
        self.infra = Counter("honing_infra_failures", "Training episodes the infrastructure "
                             "failed.", registry=r)  # fmt: skip
        self.phase_s = Gauge("honing_phase_seconds", "Seconds of the last update's phases.",
                             ("phase",), registry=r)  # fmt: skip
        self.tokens_per_s = Gauge("honing_tokens_per_second", "Model tokens per rollout second "
                                  "in the last update.", registry=r)  # fmt: skip
        self.episodes_per_s = Gauge("honing_episodes_per_second", "Episodes per rollout second "
                                    "in the last update.", registry=r)  # fmt: skip
        self.staleness_max = Gauge("honing_staleness_max", "The largest staleness in the last "
                                   "update (policy versions).", registry=r)  # fmt: skip
        self.learner = {name: Gauge(f"honing_learner_{name}", f"The learner's {name} at the last "
                                    "update.", registry=r) for name in LEARNER_STATS}  # fmt: skip
        self.disk_free = Gauge("honing_disk_free_bytes", "Free bytes on the run directory's "
                               "file system.", registry=r)  # fmt: skip
        self.disk_size = Gauge("honing_disk_size_bytes", "Size of the run directory's file "
                               "system.", registry=r)  # fmt: skip
        self.eval_success = Gauge("honing_eval_success", "Held-out success at the last "
                                  "evaluation.", ("set",), registry=r)  # fmt: skip
        self.alerts = Counter("honing_alerts", "Alerts raised in process (honing.observe.alerts).",
                              ("alertname", "severity"), registry=r)  # fmt: skip
        self.firing = Gauge("honing_alert_firing", "1 while the in-process alert fires.",
                            ("alertname", "severity"), registry=r)  # fmt: skip
        self._handlers: dict[str, Callable[[int | None, dict[str, Any]], None]] = {
            "episode": self._on_episode, "sandbox": self._on_sandbox, "sync": self._on_sync,
            "update": self._on_update, "eval": self._on_eval, "alert": self._on_alert,
        }  # fmt: skip

    def on_event(self, event: Event) -> None:
        """Count one event (an EventLog listener); kinds without metrics are ignored."""
        handler = self._handlers.get(event.kind)
        if handler is not None:
            handler(event.step, event.data)

    def _on_episode(self, step: int | None, d: dict[str, Any]) -> None:
        split, domain, outcome = str(d.get("split", "train")), str(d.get("domain", "")), _outcome(d)
        self.episodes.labels(split, domain, outcome).inc()
        for tag in d.get("tags") or []:
            self.episode_tags.labels(split, str(tag), outcome).inc()
        if d.get("failure"):
            self.failures.labels(split, domain, str(d["failure"])).inc()
        for retry in d.get("retries") or []:
            self.retries.labels(split, str(retry.get("stage", ""))).inc()
        self.sandbox_errors.labels(split).inc(int(d.get("sandbox_errors") or 0))
        self.model_tokens.labels(split).inc(int(d.get("model_tokens") or 0))
        self.generation.labels(split).observe(float(d.get("generation_s") or 0.0))
        self.env.labels(split).observe(float(d.get("env_s") or 0.0))
        if outcome != "infra_error" and isinstance(d.get("reward"), int | float):
            self.reward.labels(split, domain).observe(float(d["reward"]))
        if split == "train" and isinstance(d.get("staleness"), int):
            self.staleness.observe(d["staleness"])

    def _on_sandbox(self, step: int | None, d: dict[str, Any]) -> None:
        self.sandbox_runs.inc(int(d.get("runs") or 0))
        self.sandbox_cells.set(_number(d.get("cells")))
        self.sandbox_busy.set(_number(d.get("busy_fraction")))
        self.sandbox_queued.set(_number(d.get("queued")))

    def _on_sync(self, step: int | None, d: dict[str, Any]) -> None:
        self.sync.observe(float(d.get("seconds") or 0.0))

    def _on_update(self, step: int | None, d: dict[str, Any]) -> None:
        self.updates.inc()
        self.step.set(_number(step))
        self.success.set(_number(d.get("success_rate")))
        self.reward_mean.set(_number(d.get("reward_mean")))
        signal = d.get("signal") or {}
        self.reward_std.set(_number(signal.get("reward_std")))
        self.zero_variance.set(zero_variance_share(signal))
        self.infra.inc(int(d.get("infra_errors") or 0))
        for phase in ("rollout", "update", "sync"):
            self.phase_s.labels(phase).set(_number(d.get(f"{phase}_s")))
        self.tokens_per_s.set(_number(d.get("tokens_per_s")))
        self.episodes_per_s.set(_number(d.get("episodes_per_s")))
        self.staleness_max.set(_number(staleness_max(d.get("staleness") or {})))
        learner = d.get("learner") or {}
        for name, gauge in self.learner.items():
            gauge.set(_number(learner.get(name)))
        if self.run_dir is not None:
            free, size = disk_space(self.run_dir)
            self.disk_free.set(free)
            self.disk_size.set(size)

    def _on_eval(self, step: int | None, d: dict[str, Any]) -> None:
        self.eval_success.labels(str(d.get("set", ""))).set(_number(d.get("success")))

    def _on_alert(self, step: int | None, d: dict[str, Any]) -> None:
        labels = (str(d.get("name", "")), str(d.get("severity", "")))
        firing = d.get("state") == "firing"
        if firing:
            self.alerts.labels(*labels).inc()
        self.firing.labels(*labels).set(1.0 if firing else 0.0)


def zero_variance_share(signal: dict[str, Any]) -> float:
    """An `update` event's `signal` -> the share of its groups with equal rewards (NaN: none)."""
    groups = signal.get("groups") or 0
    return float(signal.get("zero_variance") or 0) / groups if groups else math.nan


def staleness_max(counts: dict[str, Any]) -> int | None:
    """An `update` event's `staleness` ({"<lag>": count}) -> its largest lag (None: none)."""
    lags = [int(lag) for lag, n in counts.items() if n]
    return max(lags) if lags else None


def disk_space(path: Path) -> tuple[float, float]:
    """(free, total) bytes of the file system holding `path` (NaN when it cannot be read)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        log.warning("cannot read the free space of %s: %s", path, exc)
        return math.nan, math.nan
    return float(usage.free), float(usage.total)


class ServeMetrics:
    """`honing serve`'s metrics, in a registry of its own (one per server)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("honing_serve_requests", "HTTP requests answered, by route and "
                                "status.", ("route", "status"), registry=r)  # fmt: skip
        self.prompt_tokens = Counter("honing_serve_prompt_tokens", "Prompt tokens of the "
                                     "generations.", registry=r)  # fmt: skip
        self.completion_tokens = Counter("honing_serve_completion_tokens", "Tokens generated.",
                                         registry=r)  # fmt: skip
        self.latency = Histogram("honing_serve_generation_seconds", "Seconds per generation.",
                                 buckets=SECONDS, registry=r)  # fmt: skip
        self.in_flight = Gauge("honing_serve_in_flight", "Requests inside the engine now.",
                               registry=r)  # fmt: skip


class MetricsServer:
    """An HTTP exporter of `registry` at http://HOST:PORT/metrics in a daemon thread; a context
    manager (leaving it stops the server). Port 0 picks a free port; `url` says which."""

    def __init__(self, registry: CollectorRegistry, config: PrometheusConfig) -> None:
        self.registry, self.config = registry, config
        self._server: Any = None
        self._thread: Any = None
        self.url = ""

    def __enter__(self) -> MetricsServer:
        host = self.config.host
        try:
            self._server, self._thread = start_http_server(
                self.config.port, addr=host, registry=self.registry
            )
        except OSError as exc:
            raise ConfigError(
                f"observe.prometheus: cannot listen on {host}:{self.config.port} ({exc}); "
                "choose another port (0: a free one) or host"
            ) from exc
        port = self._server.server_port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}/metrics"
        log.info("prometheus metrics at %s", self.url)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None


NAMES = (
    "honing_episodes_total", "honing_episode_tags_total", "honing_episode_failures_total",
    "honing_retries_total", "honing_sandbox_errors_total", "honing_model_tokens_total",
    "honing_generation_seconds", "honing_env_seconds", "honing_episode_reward",
    "honing_episode_staleness", "honing_sandbox_runs_total", "honing_sandbox_cells",
    "honing_sandbox_busy_fraction", "honing_sandbox_queued", "honing_sync_seconds",
    "honing_updates_total", "honing_step", "honing_success_rate", "honing_reward_mean",
    "honing_reward_std", "honing_zero_variance_share", "honing_infra_failures_total",
    "honing_phase_seconds", "honing_tokens_per_second", "honing_episodes_per_second",
    "honing_staleness_max", *(f"honing_learner_{name}" for name in LEARNER_STATS),
    "honing_disk_free_bytes", "honing_disk_size_bytes", "honing_eval_success",
    "honing_alerts_total", "honing_alert_firing",
    "honing_serve_requests_total", "honing_serve_prompt_tokens_total",
    "honing_serve_completion_tokens_total", "honing_serve_generation_seconds",
    "honing_serve_in_flight",
)  # fmt: skip
