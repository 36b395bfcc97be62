"""KServe serving: transformer (Feast online features) + predictor (exported model), prediction log, canary.

Public names only. The prediction-log store (``read_prediction_log``, ``write_prediction_log``,
``prune_prediction_log``, ``resolve_prediction_log_uri``) and the errors import cheaply (monitoring and delivery
read the log); the server side (``serve``, ``create_app``, ...) pulls in kserve and torch, so it loads on first use.
"""

from __future__ import annotations

from typing import Any

from mlops_serving.errors import (
    BadRequestError,
    FeatureStoreUnavailableError,
    ModelLoadError,
    PredictionLogError,
    PredictorUnavailableError,
    ServingError,
)
from mlops_serving.log_store import (
    prediction_log_parts,
    prune_prediction_log,
    read_prediction_log,
    resolve_prediction_log_uri,
    write_prediction_log,
)
from mlops_serving.shadow import read_shadow_log, shadow_log_uri

_LAZY = {
    "serve": "mlops_serving.service",
    "create_app": "mlops_serving.service",
    "create_predictor_app": "mlops_serving.service",
    "create_lm_app": "mlops_serving.service",
    "folder_loader": "mlops_serving.service",
    "registry_loader": "mlops_serving.service",
    "remote_loader": "mlops_serving.remote",
    "PredictionLogWriter": "mlops_serving.prediction_log",
    "version_thresholds": "mlops_serving.registry",
    "MODEL_META_ARTIFACT": "mlops_serving.registry",
}

__all__ = [
    "MODEL_META_ARTIFACT",
    "BadRequestError",
    "FeatureStoreUnavailableError",
    "ModelLoadError",
    "PredictionLogError",
    "PredictionLogWriter",
    "PredictorUnavailableError",
    "ServingError",
    "create_app",
    "create_lm_app",
    "create_predictor_app",
    "folder_loader",
    "prediction_log_parts",
    "prune_prediction_log",
    "read_prediction_log",
    "read_shadow_log",
    "registry_loader",
    "remote_loader",
    "resolve_prediction_log_uri",
    "serve",
    "shadow_log_uri",
    "version_thresholds",
    "write_prediction_log",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mlops_serving' has no attribute {name!r}")
