"""Realized performance from delayed labels, per window and per served version, beside the CBPE estimate.

The labels gate (:func:`mlops_features.ingest_labels`) stores accepted labels next to the prediction log;
here they are joined to the log by the model contract's ``record_id`` (the prediction log stores the request's
id under that name: ``transaction_id`` for fraud). Each (window, ``model_version``) gets: precision,
recall and F1 at the serving threshold, ROC AUC, the expected calibration error, label coverage, the
label-delay distribution (label_time − prediction ts), the CBPE estimate of the same metrics and, where labels
exist, the estimate's error. A version's realized drop is ``1 − f1 / reference`` of its latest window with at
least ``min_labelled`` labels; fewer labels make that verdict "inconclusive", never a pass. Each version's
reference is its own validation F1 at its recorded threshold (:func:`mlops_model.reference_f1`: the same
threshold its realized F1 is scored at), not the trainer's ``val_f1`` (raw scores at 0.5); every verdict's reason
names the figure and its threshold.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from mlops_features import ValidationSummary, ingest_labels, read_labels
from mlops_model import ReferenceF1, statistics
from mlops_monitoring.errors import MonitoringError
from mlops_monitoring.estimation import estimate_performance
from mlops_serving import read_prediction_log

DELAY_QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class WindowPerformance:
    """One (window, version): realized metrics (``None`` without both classes labelled) and the estimate."""

    window_start: str
    window_end: str
    version: str
    n_predictions: int
    n_labelled: int
    label_coverage: float
    realized: dict[str, float | None]
    estimated: dict[str, float | None]
    intervals: dict[str, tuple[float, float]]
    estimation_error: dict[str, float | None]
    label_delay_hours: dict[str, float | None]
    threshold: float = 0.5
    """The decision threshold this version's window was scored at (its own, recorded in its ``model.json``)."""


@dataclass
class PerformanceReport:
    """Every window of every version, and each version's realized-drop verdict against ``reference_f1``."""

    model: str
    threshold: float
    """The threshold of a version whose own is not known (``threshold_of`` absent): override or legacy 0.5."""
    windows: list[WindowPerformance]
    reference_f1: float | None
    """The reference F1 given (``--reference-f1``): every version's without ``reference_of``, else only the
    fallback of a version that records none. Each verdict's ``reference_f1`` and ``reference`` say what it used."""
    max_drop: float
    min_labelled: int
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def ingest_label_batches(paths: list[Any], log_uri: str, model: str, *, record_id: str,
                         now: datetime | None = None) -> ValidationSummary:
    """Run the labels gate against every id the prediction log served (``log_uri`` resolved), keyed by the model
    contract's ``record_id``."""
    served = read_prediction_log(log_uri, model, columns=[record_id, "ts"])
    if served.empty:
        served = pd.DataFrame({record_id: pd.Series(dtype=str), "ts": pd.Series(dtype="datetime64[ns, UTC]")})
    return ingest_labels(paths, log_uri, model, served, record_id=record_id, now=now)


def ingest_landed_labels(landing_uri: str, log_uri: str, model: str, *, record_id: str,
                         now: datetime | None = None) -> tuple[ValidationSummary, list[str]]:
    """The labels CronJob's run: gate the batches under ``landing_uri`` not gated yet; ``(summary, skipped)``."""
    import tempfile
    from pathlib import Path

    from mlops_features import fetch_landed_labels

    with tempfile.TemporaryDirectory(prefix="mlops-labels-") as tmp:
        new, skipped = fetch_landed_labels(landing_uri, log_uri, model, Path(tmp), record_id=record_id)
        summary = (ingest_label_batches(list(new), log_uri, model, record_id=record_id, now=now) if new
                   else ValidationSummary([]))
    return summary, skipped


def window_performance(
    frame: pd.DataFrame, threshold: float, *, start: str, end: str, version: str, bins: int = 10,
    interval: float = 0.9,
) -> WindowPerformance:
    """Metrics of one window's joined rows (``score``, ``ts``; ``label``/``label_time`` null where unlabelled)."""
    labelled = frame[frame["label"].notna()]
    y = labelled["label"].to_numpy(dtype=np.int64)
    s = labelled["score"].to_numpy(dtype=np.float64)
    realized: dict[str, float | None] = dict.fromkeys(("precision", "recall", "f1", "auc", "ece"))
    if len(labelled):
        m = statistics.threshold_metrics(y, s, threshold)
        realized.update(precision=m["precision"], recall=m["recall"], f1=m["f1"],
                        ece=statistics.expected_calibration_error(y, s, bins))
        auc = statistics.roc_auc(y, s)
        realized["auc"] = None if math.isnan(auc) else auc
    est = estimate_performance(frame["score"].to_numpy(dtype=np.float64), threshold, interval=interval)
    estimated = {"precision": est.precision, "recall": est.recall, "f1": est.f1, "auc": est.auc}
    error = {k: (None if realized[k] is None or estimated[k] is None or len(labelled) < len(frame)
                 else float(estimated[k] - realized[k]))  # type: ignore[operator]
             for k in estimated}
    delay = (pd.to_datetime(labelled["label_time"], utc=True) - pd.to_datetime(labelled["ts"], utc=True))
    hours = delay.dt.total_seconds().to_numpy() / 3600
    delays = {f"p{round(q * 100)}": (float(np.quantile(hours, q)) if len(hours) else None) for q in DELAY_QUANTILES}
    delays["max"] = float(hours.max()) if len(hours) else None
    return WindowPerformance(
        window_start=start, window_end=end, version=version, n_predictions=len(frame), n_labelled=len(labelled),
        label_coverage=len(labelled) / len(frame) if len(frame) else 0.0, realized=realized, estimated=estimated,
        intervals=est.intervals, estimation_error=error, label_delay_hours=delays, threshold=float(threshold))


def performance_report(
    log_uri: str, model: str, threshold: float, *, record_id: str, window: str = "1D", since: datetime | None = None,
    until: datetime | None = None, reference_f1: float | None = None, max_drop: float = 0.1,
    min_labelled: int = 50, bins: int = 10, interval: float = 0.9,
    threshold_of: Callable[[str], float] | None = None, reference_of: Callable[[str], ReferenceF1] | None = None,
) -> PerformanceReport:
    """Join the log to its labels and score every ``window`` (a pandas frequency: ``1h``, ``1D``) per version,
    each version at ``threshold_of(version)`` (its recorded threshold: :func:`mlops_serving.version_thresholds`),
    or at ``threshold`` without it. Each version's drop is measured against ``reference_of(version)`` (its
    validation F1 at its threshold: :func:`mlops_model.reference_f1`), else against ``reference_f1`` for all.
    Labels join the log on ``record_id`` (the model contract's).

    Raises:
        MonitoringError: the log has no ``record_id``/``score``, or nothing was logged in the window.
    """
    log = read_prediction_log(log_uri, model, since=since, until=until)
    if log.empty:
        raise MonitoringError(f"no predictions of {model!r} in {log_uri!r} between {since} and {until}")
    absent = [c for c in (record_id, "score", "model_version") if c not in log.columns]
    if absent:
        raise MonitoringError(f"the prediction log lacks {absent!r} (labels join it on the contract's record_id "
                              f"{record_id!r}); it has {sorted(log.columns)!r}")
    joined = join_labels(log, read_labels(log_uri, model, record_id=record_id), record_id=record_id)
    try:
        key = joined["ts"].dt.floor(window)
    except ValueError as exc:
        raise MonitoringError(f"window {window!r} is not a pandas frequency (expected e.g. '1h', '1D'): {exc}"
                              ) from None
    step = pd.tseries.frequencies.to_offset(window)
    at = threshold_of or (lambda version: threshold)
    windows = [window_performance(group, at(str(version)), start=start.isoformat(), end=(start + step).isoformat(),
                                  version=str(version), bins=bins, interval=interval)
               for (start, version), group in joined.groupby([key, joined["model_version"].astype(str)], sort=True)]
    report = PerformanceReport(model=model, threshold=threshold, windows=windows, reference_f1=reference_f1,
                               max_drop=max_drop, min_labelled=min_labelled)
    report.verdicts = realized_drop_verdicts(windows, reference_of or given_reference(reference_f1), max_drop,
                                             min_labelled)
    return report


def given_reference(value: float | None) -> Callable[[str], ReferenceF1]:
    """Every version against one given reference F1 (``None``: no reference, every verdict inconclusive)."""
    ref = (ReferenceF1(None, "none", None, "no reference F1 was given") if value is None
           else ReferenceF1(float(value), "given", None, f"the given reference F1 {value:.4f}"))
    return lambda version: ref


def join_labels(predictions: pd.DataFrame, labels: pd.DataFrame, *, record_id: str) -> pd.DataFrame:
    """The predictions with ``label`` and ``label_time`` by ``record_id`` (the model contract's; null where none
    arrived yet)."""
    right = labels[[record_id, "label", "label_time"]].drop_duplicates(record_id)
    left = predictions.drop(columns=[c for c in ("label", "label_time") if c in predictions.columns])
    out = left.merge(right, on=record_id, how="left", validate="many_to_one")
    out["ts"] = pd.to_datetime(out["ts"], utc=True)
    return out


def realized_drop_verdicts(windows: list[WindowPerformance], reference_of: Callable[[str], ReferenceF1],
                           max_drop: float, min_labelled: int) -> dict[str, dict[str, Any]]:
    """Per version: ``drop`` / ``ok`` / ``inconclusive`` from its latest window with enough labels, against
    ``reference_of(version)``; the reason names the reference figure and the threshold it was measured at."""
    out: dict[str, dict[str, Any]] = {}
    for version in sorted({w.version for w in windows}):
        mine = [w for w in windows if w.version == version]
        enough = [w for w in mine if w.n_labelled >= min_labelled and w.realized["f1"] is not None]
        ref = reference_of(version)
        reference_f1 = ref.value
        est = mine[-1].estimated["f1"]
        est_drop = None if reference_f1 is None or not reference_f1 or est is None else 1 - est / reference_f1
        base = {"reference_f1": reference_f1, "reference": ref.note, "reference_source": ref.source,
                "estimated_drop": est_drop}
        if reference_f1 is None or not enough:
            reason = (f"no reference F1 to compare with: {ref.note}" if reference_f1 is None
                      else f"fewer than {min_labelled} labels in every window")
            out[version] = {"verdict": "inconclusive", "reason": reason, "realized_drop": None, **base}
            continue
        last = enough[-1]
        drop = 1 - float(last.realized["f1"]) / reference_f1 if reference_f1 else 0.0  # type: ignore[arg-type]
        out[version] = {"verdict": "drop" if drop > max_drop else "ok", "realized_drop": drop,
                        "window_start": last.window_start, **base,
                        "reason": f"realized F1 {last.realized['f1']:.4f} at threshold {last.threshold:.4g} vs "
                                  f"{ref.note} ({drop:+.1%} drop; limit {max_drop:.0%})"}
    return out


PERFORMANCE_METRICS = ("mlops_performance", "mlops_performance_label_coverage", "mlops_performance_labelled",
                       "mlops_performance_label_delay_hours", "mlops_performance_realized_drop",
                       "mlops_performance_estimated_drop")


def performance_registry(report: PerformanceReport) -> Any:
    """A fresh Prometheus registry of each version's latest window (the drift exporter's style: nothing global)."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    metric = Gauge("mlops_performance", "Latest window's performance of a served version at the serving threshold",
                   ["model", "version", "source", "metric"], registry=registry)
    coverage = Gauge("mlops_performance_label_coverage", "Share of the latest window's predictions labelled",
                     ["model", "version"], registry=registry)
    labelled = Gauge("mlops_performance_labelled", "Labelled predictions in the latest window",
                     ["model", "version"], registry=registry)
    delay = Gauge("mlops_performance_label_delay_hours", "Label delay (label_time - prediction ts) quantile",
                  ["model", "version", "quantile"], registry=registry)
    realized_drop = Gauge("mlops_performance_realized_drop", "1 - realized F1 / reference F1 (latest labelled window)",
                          ["model", "version"], registry=registry)
    estimated_drop = Gauge("mlops_performance_estimated_drop", "1 - CBPE-estimated F1 / reference F1 (latest window)",
                           ["model", "version"], registry=registry)
    latest = {w.version: w for w in report.windows}
    for version, w in latest.items():
        for source, values in (("realized", w.realized), ("estimated", w.estimated)):
            for name, value in values.items():
                if value is not None:
                    metric.labels(report.model, version, source, name).set(value)
        coverage.labels(report.model, version).set(w.label_coverage)
        labelled.labels(report.model, version).set(w.n_labelled)
        for q, hours in w.label_delay_hours.items():
            if hours is not None:
                delay.labels(report.model, version, q).set(hours)
    for version, v in report.verdicts.items():
        if v["realized_drop"] is not None:
            realized_drop.labels(report.model, version).set(v["realized_drop"])
        if v["estimated_drop"] is not None:
            estimated_drop.labels(report.model, version).set(v["estimated_drop"])
    return registry


def performance_metrics_text(report: PerformanceReport) -> str:
    """The report's metrics in Prometheus' text format (for the textfile collector or a Pushgateway)."""
    from prometheus_client import generate_latest

    return generate_latest(performance_registry(report)).decode()
