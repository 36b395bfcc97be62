"""Prometheus metrics of a monitoring run: per-column PSI gauges, the alert level, the last run time.

The drift CronJob runs once and exits, so nothing scrapes it: it writes the metrics in the text format
(node-exporter's textfile collector reads that file) and, when ``monitoring.pushgateway_url`` is set,
pushes the same registry to a Pushgateway under ``job="mlops-drift"`` and the model as grouping key.
The Grafana dashboard and PrometheusRule under ``infra/base/monitoring/`` query these names.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from mlops_monitoring.drift import DriftReport
from mlops_monitoring.errors import MonitoringError
from mlops_monitoring.policy import Level
from mlops_monitoring.quality import RealizedQuality

log = logging.getLogger(__name__)

JOB = "mlops-drift"
METRIC_NAMES = (
    "mlops_drift_psi",
    "mlops_drift_statistic",
    "mlops_drift_p_value",
    "mlops_drift_alert_level",
    "mlops_drift_last_run_timestamp_seconds",
    "mlops_drift_rows",
    "mlops_drift_rollback",
    "mlops_realized_quality",
)


def build_registry(
    model: str, report: DriftReport, level: Level, run_time: float, quality: RealizedQuality | None = None,
    actions: Mapping[str, bool] | None = None,
) -> CollectorRegistry:
    """A fresh registry holding one run's metrics (nothing global is touched)."""
    registry = CollectorRegistry()
    psi = Gauge("mlops_drift_psi", "PSI of a column against the training reference", ["model", "feature"],
                registry=registry)
    stat = Gauge("mlops_drift_statistic", "KS D (numeric) or chi² (categorical) against the reference",
                 ["model", "feature", "method"], registry=registry)
    p_value = Gauge("mlops_drift_p_value", "p-value of the column's test (reported beside PSI, not the verdict)",
                    ["model", "feature", "method"], registry=registry)
    for name, col in report.columns.items():
        psi.labels(model, name).set(col.psi)
        stat.labels(model, name, col.method).set(col.statistic)
        if col.p_value is not None:
            p_value.labels(model, name, col.method).set(col.p_value)
    Gauge("mlops_drift_alert_level", "Alert level of the last run: 0 OK, 1 INFO, 2 WARNING, 3 CRITICAL", ["model"],
          registry=registry).labels(model).set(level.rank)
    Gauge("mlops_drift_last_run_timestamp_seconds", "Unix time the last monitoring run finished", ["model"],
          registry=registry).labels(model).set(run_time)
    rows = Gauge("mlops_drift_rows", "Rows compared in the last run", ["model", "side"], registry=registry)
    rows.labels(model, "reference").set(report.n_reference)
    rows.labels(model, "current").set(report.n_current)
    Gauge("mlops_drift_rollback", "1 when the last run rolled the model back to its fallback", ["model"],
          registry=registry).labels(model).set(1 if (actions or {}).get("rollback") else 0)
    if quality is not None and quality.n_labelled:
        realized = Gauge("mlops_realized_quality", "Realized quality on predictions whose labels arrived",
                         ["model", "metric"], registry=registry)
        for metric in ("precision", "recall", "f1"):
            realized.labels(model, metric).set(getattr(quality, metric))
    return registry


def write_metrics(registry: CollectorRegistry, path: Path) -> Path:
    """Write the registry in Prometheus' text format (atomically, as the textfile collector wants)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), registry)
    return path


def push_metrics(registry: CollectorRegistry, url: str, model: str, timeout_s: float = 10.0) -> None:
    """Push the registry to a Pushgateway (replaces this model's group).

    Raises:
        MonitoringError: the Pushgateway refused or could not be reached.
    """
    try:
        push_to_gateway(url, job=JOB, registry=registry, grouping_key={"model": model}, timeout=timeout_s)
    except OSError as exc:
        raise MonitoringError(f"cannot push metrics to the Pushgateway {url!r}: {exc}") from None


def metric_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], Any]:
    """Parse Prometheus text into ``{(name, sorted labels): value}`` (for checks and tests)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out
