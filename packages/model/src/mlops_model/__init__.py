"""The model contract: request schema and feature list, the encoder, the exported-model format, load-and-score.

Also the shared statistics (``mlops_model.statistics``: PSI, KS, chi², binary metrics; scipy and scikit-learn
load on first use). Between core and features: imports mlops_config and mlops_core only.
"""

from __future__ import annotations

from mlops_model import statistics
from mlops_model.contract import (
    CATEGORICAL_FIELDS,
    ENTITY_KEYS,
    FEATURE_DEFAULTS,
    FEATURES,
    LABEL,
    MERCHANT_FEATURES,
    NUMERIC_FIELDS,
    OPTIONAL_FIELDS,
    REQUEST_FIELDS,
    REQUIRED_FIELDS,
    UNKNOWN_ENTITY,
    UNKNOWN_FLAGS,
    USER_FEATURES,
    Feature,
)
from mlops_model.encoder import CategoricalColumn, DerivedColumn, EncoderSpec, NumericColumn
from mlops_model.errors import EncoderSpecError, ExportedModelError, ModelContractError, StatisticsError
from mlops_model.exported import (
    FALLBACK_CHAT_TEMPLATE,
    META_FILE,
    WEIGHTS_FILE,
    ExportedModel,
    build_tabular_mlp,
    load_exported,
    read_meta,
    save_exported,
    weights_hash,
)

__all__ = [
    "CATEGORICAL_FIELDS",
    "ENTITY_KEYS",
    "FALLBACK_CHAT_TEMPLATE",
    "FEATURES",
    "FEATURE_DEFAULTS",
    "LABEL",
    "MERCHANT_FEATURES",
    "META_FILE",
    "NUMERIC_FIELDS",
    "OPTIONAL_FIELDS",
    "REQUEST_FIELDS",
    "REQUIRED_FIELDS",
    "UNKNOWN_ENTITY",
    "UNKNOWN_FLAGS",
    "USER_FEATURES",
    "WEIGHTS_FILE",
    "CategoricalColumn",
    "DerivedColumn",
    "EncoderSpec",
    "EncoderSpecError",
    "ExportedModel",
    "ExportedModelError",
    "Feature",
    "ModelContractError",
    "NumericColumn",
    "StatisticsError",
    "build_tabular_mlp",
    "load_exported",
    "read_meta",
    "save_exported",
    "statistics",
    "weights_hash",
]

