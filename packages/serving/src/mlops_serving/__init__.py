"""KServe serving: transformer (Feast online features) + predictor (exported model), prediction log, canary.

Public names only; heavy imports (kserve, torch, pandas) happen when a function is called.
"""

from mlops_serving.errors import (
    BadRequestError,
    FeatureStoreUnavailableError,
    ModelLoadError,
    ServingError,
)
from mlops_serving.prediction_log import read_prediction_log

__all__ = [
    "BadRequestError",
    "FeatureStoreUnavailableError",
    "ModelLoadError",
    "ServingError",
    "read_prediction_log",
]
