"""Metric sinks: where a run's per-update scalars and histograms go, chosen in the run config.

    observe:                 # a section of the `honing train` config (ObserveConfig)
      tensorboard: true      # RUN_DIR/tensorboard (on by default)
      mlflow: false          # RUN_DIR/mlflow, an MLflow file store
      wandb: false           # RUN_DIR/wandb, a W&B offline run (`wandb sync` uploads it later)
      prometheus: {enabled: false, host: 127.0.0.1, port: 0}   # /metrics while it trains
      alerts: true           # the alert rules, evaluated in process (`alert` events)

    sinks = make_sinks(config.observe, run_dir, run_name="quickstart", params=config_json)
    for sink in sinks: sink.log(step, metrics.scalars, metrics.histograms)
    close_sinks(sinks)
    with monitoring(config.observe, run_dir, event_log): ...   # alerts and /metrics, from events

Every sink writes under the run directory and never touches the network; a missing package is
a ConfigError saying what to install (resuming: docs/observability.md); only the Prometheus
exporter listens on a socket (off by default). Not covered: the event log
(`honing.observe.events`), the metrics (`honing.observe.metrics`), online W&B (sync offline).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field

from honing.config import StrictModel
from honing.errors import ConfigError
from honing.observe.alerts import AlertMonitor
from honing.observe.events import EventLog
from honing.observe.prometheus import MetricsServer, PrometheusConfig, TrainMetrics

log = logging.getLogger(__name__)

INSTALL = "pip install 'honing[observe]'"


class ObserveConfig(StrictModel):
    """Which metric sinks a run writes to (the event log `events.jsonl` is always written)."""

    tensorboard: bool = Field(True, description="TensorBoard event files in RUN_DIR/tensorboard.")
    mlflow: bool = Field(False, description="An MLflow file store in RUN_DIR/mlflow.")
    wandb: bool = Field(
        False, description="A W&B offline run in RUN_DIR/wandb (upload later: `wandb sync`)."
    )
    project: str = Field(
        "honing", min_length=1, description="The MLflow experiment and the W&B project."
    )
    prometheus: PrometheusConfig = Field(
        default_factory=PrometheusConfig,
        description="Prometheus metrics at http://HOST:PORT/metrics while the run trains.",
    )
    alerts: bool = Field(
        True,
        description="Evaluate the alert rules (honing.observe.alerts) after each update: an "
        "`alert` event and a log line when one fires or clears.",
    )


class MetricSink(Protocol):
    """Receives one update's metrics; `close` flushes and releases it (idempotent)."""

    def log(
        self, step: int, scalars: Mapping[str, float], histograms: Mapping[str, Sequence[float]]
    ) -> None: ...

    def close(self) -> None: ...


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """`{"learner": {"lr": 1e-5}}` -> `{"learner.lr": "1e-05"}` (lists as their JSON-ish repr)."""
    out: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = str(value)
    return out


# -- TensorBoard -------------------------------------------------------------------------------


class TensorBoardSink:
    """TensorBoard event files (torch's SummaryWriter); histograms as TensorBoard histograms."""

    def __init__(self, directory: Path, *, resume_step: int | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # tensorboard is a core dependency, but may be uninstalled
            raise ConfigError(
                f"observe.tensorboard needs the tensorboard package ({exc}): pip install "
                "tensorboard, or set observe.tensorboard=false"
            ) from exc
        self.directory = directory
        # A resumed run drops what the killed run wrote after its checkpoint.
        purge = None if resume_step is None else resume_step + 1
        self._writer: Any = SummaryWriter(log_dir=str(directory), purge_step=purge)

    def log(
        self, step: int, scalars: Mapping[str, float], histograms: Mapping[str, Sequence[float]]
    ) -> None:
        import numpy as np

        for name, value in scalars.items():
            self._writer.add_scalar(name, value, global_step=step)
        for name, values in histograms.items():
            if values:
                self._writer.add_histogram(name, np.asarray(values, dtype=float), global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


# -- MLflow ------------------------------------------------------------------------------------


class MlflowSink:
    """An MLflow run in a file store: the config's flattened keys as params, scalars as metrics
    (MLflow has no histograms: they are left out)."""

    RUN_ID = "run_id"

    def __init__(
        self, directory: Path, *, experiment: str, run_name: str, params: Mapping[str, Any]
    ) -> None:
        # No telemetry, and the (maintenance-mode) file store is what we want: no database.
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            from mlflow.entities import Metric, Param
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise ConfigError(f"observe.mlflow needs MLflow ({exc}): {INSTALL}") from exc
        self._metric = Metric
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.client: Any = MlflowClient(tracking_uri=directory.resolve().as_uri())
        saved = directory / self.RUN_ID
        if saved.is_file():
            self.run_id = saved.read_text().strip()
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = (
                found.experiment_id if found else self.client.create_experiment(experiment)
            )
            run = self.client.create_run(experiment_id, run_name=run_name)
            self.run_id = run.info.run_id
            saved.write_text(self.run_id)
            items = flatten(params)
            batch = [Param(k, v[:6000]) for k, v in items.items()]
            for start in range(0, len(batch), 100):  # MLflow's batch limit for params
                self.client.log_batch(self.run_id, params=batch[start : start + 100])
        self._closed = False

    def log(
        self, step: int, scalars: Mapping[str, float], histograms: Mapping[str, Sequence[float]]
    ) -> None:
        now = int(time.time() * 1000)
        metrics = [self._metric(k, float(v), now, step) for k, v in scalars.items()]
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit for metrics
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.client.set_terminated(self.run_id)


# -- Weights & Biases (offline) ----------------------------------------------------------------


class WandbSink:
    """A W&B run in offline mode under `directory` (nothing is sent; `wandb sync` uploads it)."""

    RUN_ID = "run_id"

    def __init__(
        self, directory: Path, *, project: str, run_name: str, params: Mapping[str, Any]
    ) -> None:
        for key, value in {
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "WANDB_DISABLE_CODE": "true",
            "WANDB_DISABLE_GIT": "true",
            "WANDB_CONSOLE": "off",
        }.items():
            os.environ[key] = value
        try:
            import wandb
        except ImportError as exc:
            raise ConfigError(f"observe.wandb needs wandb ({exc}): {INSTALL}") from exc
        self._wandb: Any = wandb
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        saved = directory / self.RUN_ID
        run_id = saved.read_text().strip() if saved.is_file() else None
        settings = wandb.Settings(
            mode="offline",
            silent=True,
            disable_git=True,
            save_code=False,
            console="off",
            x_disable_stats=True,
        )
        self.run: Any = wandb.init(
            project=project,
            name=run_name,
            dir=str(directory),
            id=run_id,
            resume="allow" if run_id else None,
            config=dict(params),
            mode="offline",
            settings=settings,
        )
        if run_id is None:
            saved.write_text(self.run.id)
        self._closed = False

    def log(
        self, step: int, scalars: Mapping[str, float], histograms: Mapping[str, Sequence[float]]
    ) -> None:
        data: dict[str, Any] = dict(scalars)
        for name, values in histograms.items():
            if values:
                data[name] = self._wandb.Histogram(list(values))
        self.run.log(data, step=step)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.run.finish()
            self._wandb.teardown()  # stops the wandb-core service process now, not at exit


# -- choosing them -----------------------------------------------------------------------------


def make_sinks(
    config: ObserveConfig,
    run_dir: Path,
    *,
    run_name: str,
    params: Mapping[str, Any],
    resume_step: int | None = None,
) -> list[MetricSink]:
    """The sinks `config` switches on, writing under `run_dir`. `params`: the run's config (as
    JSON) for MLflow params and the W&B config; `resume_step`: the checkpoint a resumed run
    continues from. A sink that cannot start closes the ones already made."""
    sinks: list[MetricSink] = []
    try:
        if config.tensorboard:
            sinks.append(TensorBoardSink(run_dir / "tensorboard", resume_step=resume_step))
        if config.mlflow:
            sinks.append(
                MlflowSink(
                    run_dir / "mlflow", experiment=config.project, run_name=run_name, params=params
                )
            )
        if config.wandb:
            sinks.append(
                WandbSink(
                    run_dir / "wandb", project=config.project, run_name=run_name, params=params
                )
            )
    except BaseException:
        close_sinks(sinks)
        raise
    return sinks


def log_to(
    sinks: Sequence[MetricSink],
    step: int,
    scalars: Mapping[str, float],
    histograms: Mapping[str, Sequence[float]] | None = None,
) -> None:
    """Send one step's metrics to every sink."""
    for sink in sinks:
        sink.log(step, scalars, histograms or {})


def close_sinks(sinks: Sequence[MetricSink]) -> None:
    """Close every sink; one that fails to close is logged, and the others are still closed."""
    for sink in sinks:
        try:
            sink.close()
        except Exception as exc:
            log.warning("closing the %s metric sink failed: %s", type(sink).__name__, exc)


@contextlib.contextmanager
def monitoring(
    config: ObserveConfig, run_dir: Path, events: EventLog
) -> Iterator[MetricsServer | None]:
    """Until the block exits: the Prometheus exporter (config.prometheus; yields its server, or
    None when off) and the in-process alerts (config.alerts), both listening to `events`."""
    metrics = TrainMetrics(run_dir) if config.prometheus.enabled else None
    if metrics is not None:
        events.listen(metrics.on_event)
    if config.alerts:
        events.listen(AlertMonitor(run_dir).on_event)
    if metrics is None:
        yield None
        return
    with MetricsServer(metrics.registry, config.prometheus) as server:
        yield server
