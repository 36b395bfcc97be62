"""Validation metrics of the fraud classifier (threshold 0.5), from :mod:`mlops_model.statistics`."""

from __future__ import annotations

import numpy as np

from mlops_model import statistics


def classification_metrics(labels: np.ndarray, scores: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    """Accuracy, precision, recall, F1 at ``threshold`` and ROC AUC, named ``val_*``."""
    counts = statistics.threshold_metrics(labels, scores, threshold)
    return {"val_accuracy": counts["accuracy"], "val_precision": counts["precision"], "val_recall": counts["recall"],
            "val_f1": counts["f1"], "val_roc_auc": statistics.roc_auc(labels, scores)}
