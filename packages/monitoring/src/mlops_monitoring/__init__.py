"""Drift monitoring: PSI / KS / chi² against the training reference, alert policy, fallback action, reports."""

from mlops_monitoring.drift import ColumnDrift, DriftReport, compare
from mlops_monitoring.errors import AlertDeliveryError, MonitoringError
from mlops_monitoring.policy import Level
from mlops_monitoring.skew import FeatureSkew, SkewReport, replay_skew, skew_metrics_text

__all__ = [
    "AlertDeliveryError",
    "ColumnDrift",
    "DriftReport",
    "FeatureSkew",
    "Level",
    "MonitoringError",
    "SkewReport",
    "compare",
    "replay_skew",
    "skew_metrics_text",
]
