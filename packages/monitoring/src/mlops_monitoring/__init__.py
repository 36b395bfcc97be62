"""Drift monitoring: PSI / KS / chi² against the training reference, alert policy, fallback action, reports."""

from mlops_monitoring.drift import ColumnDrift, DriftReport, compare
from mlops_monitoring.errors import AlertDeliveryError, MonitoringError
from mlops_monitoring.monitor import run_monitor
from mlops_monitoring.policy import Level

__all__ = ["AlertDeliveryError", "ColumnDrift", "DriftReport", "Level", "MonitoringError", "compare", "run_monitor"]
