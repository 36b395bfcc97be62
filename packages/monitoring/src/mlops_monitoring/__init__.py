"""Drift monitoring: PSI / KS / chi² against the training reference, alert policy, rollback decision, reports."""

from mlops_monitoring.alert import ActionResult, Alert, RollbackDecision, RollbackExecutor
from mlops_monitoring.drift import ColumnDrift, DriftReport, compare
from mlops_monitoring.errors import AlertDeliveryError, MonitoringError, RetrainFailedError, RollbackFailedError
from mlops_monitoring.estimation import EstimatedPerformance, estimate_performance, expected_auc, expected_confusion
from mlops_monitoring.lm_drift import lm_drift, lm_reference
from mlops_monitoring.monitor import MonitorResult, MonitorRun, run_monitor
from mlops_monitoring.notify import notify, state_path
from mlops_monitoring.performance import (
    PerformanceReport,
    WindowPerformance,
    ingest_label_batches,
    ingest_landed_labels,
    join_labels,
    performance_metrics_text,
    performance_report,
)
from mlops_monitoring.policy import Level
from mlops_monitoring.retrain_signal import RetrainRequest, RetrainRequester
from mlops_monitoring.skew import FeatureSkew, SkewReport, replay_skew, skew_metrics_text

__all__ = [
    "ActionResult",
    "Alert",
    "AlertDeliveryError",
    "ColumnDrift",
    "DriftReport",
    "EstimatedPerformance",
    "FeatureSkew",
    "Level",
    "MonitorResult",
    "MonitorRun",
    "MonitoringError",
    "PerformanceReport",
    "RetrainFailedError",
    "RetrainRequest",
    "RetrainRequester",
    "RollbackDecision",
    "RollbackExecutor",
    "RollbackFailedError",
    "SkewReport",
    "WindowPerformance",
    "compare",
    "estimate_performance",
    "expected_auc",
    "expected_confusion",
    "ingest_label_batches",
    "ingest_landed_labels",
    "join_labels",
    "lm_drift",
    "lm_reference",
    "notify",
    "performance_metrics_text",
    "performance_report",
    "replay_skew",
    "run_monitor",
    "skew_metrics_text",
    "state_path",
]
