"""Drift monitoring: PSI / KS / chi² against the training reference, alert policy, rollback decision, reports."""

from mlops_monitoring.alert import ActionResult, Alert, RollbackDecision, RollbackExecutor
from mlops_monitoring.drift import ColumnDrift, DriftReport, compare
from mlops_monitoring.errors import AlertDeliveryError, MonitoringError, RollbackFailedError
from mlops_monitoring.lm_drift import lm_drift, lm_reference
from mlops_monitoring.monitor import MonitorResult, MonitorRun, run_monitor
from mlops_monitoring.notify import notify, state_path
from mlops_monitoring.policy import Level
from mlops_monitoring.skew import FeatureSkew, SkewReport, replay_skew, skew_metrics_text

__all__ = [
    "ActionResult",
    "Alert",
    "AlertDeliveryError",
    "ColumnDrift",
    "DriftReport",
    "FeatureSkew",
    "Level",
    "MonitorResult",
    "MonitorRun",
    "MonitoringError",
    "RollbackDecision",
    "RollbackExecutor",
    "RollbackFailedError",
    "SkewReport",
    "compare",
    "lm_drift",
    "lm_reference",
    "notify",
    "replay_skew",
    "run_monitor",
    "skew_metrics_text",
    "state_path",
]
