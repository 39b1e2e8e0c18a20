"""Observability: the run's event log, metric sinks and live progress (the HTML report of a
run is `honing.report`).

    events.py     EventLog (RUN_DIR/events.jsonl), `use(log)` / `emit(kind, step, **fields)`,
                  read_events, truncate_events
    metrics.py    pure functions: one update's trajectories -> scalars and histograms
    sinks.py      TensorBoard (default), MLflow (file store), W&B (offline); ObserveConfig;
                  `monitoring`: the alerts and the Prometheus exporter, listening to the event log
    prometheus.py Prometheus metrics of a run (fed by its events) and of `honing serve`; /metrics
    alerts.py     the alert rules, evaluated in process (`alert` events) and as alerts.yml
    progress.py   rich live progress for train (RunProgress) and eval/rollout (EpisodeProgress)

A leaf package: every layer may emit events, so nothing here imports the layers above the store
at module level. See docs/observability.md for the event kinds and metric names.
"""

from honing.observe.events import Event, EventLog, emit, read_events, truncate_events, use

__all__ = ["Event", "EventLog", "emit", "read_events", "truncate_events", "use"]
