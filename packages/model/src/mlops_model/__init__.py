"""The model contract: request schema and feature list, the encoder, the exported-model format, load-and-score.

Also the shared statistics (``mlops_model.statistics``: PSI, KS, chi², binary metrics; scipy and scikit-learn
load on first use). Between core and features: imports mlops_config and mlops_core only.
"""

from __future__ import annotations

from mlops_model import statistics
from mlops_model.calibration import Calibration, fit_calibration, served_scores
from mlops_model.contract import DEFAULT_CONTRACT, UNKNOWN_ENTITY
from mlops_model.encoder import CategoricalColumn, DerivedColumn, EncoderSpec, NumericColumn
from mlops_model.errors import (
    EncoderSpecError,
    ExportedModelError,
    ModelContractError,
    ModelKindError,
    ModelSignatureError,
    StatisticsError,
)
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
from mlops_model.kind import KNOWN_KINDS, ModelKind, kind_of, kind_problem
from mlops_model.recorded_contract import contract_meta, contract_of
from mlops_model.seal import ManifestSeal, manifest_seal
from mlops_model.signing import (
    SIGNATURE_FILE,
    ModelSigner,
    ModelVerifier,
    ensure_local_keys,
    model_digest,
    model_signer,
    model_verifier,
    sign_folder,
    verify_folder,
)
from mlops_model.sketch import compare_sketches, weights_sketch
from mlops_model.threshold import (
    LEGACY_THRESHOLD,
    ReferenceF1,
    ThresholdChoice,
    choose_threshold,
    f1_optimal_threshold,
    recorded_f1,
    recorded_threshold,
    reference_f1,
    resolve_threshold,
)

__all__ = [
    "DEFAULT_CONTRACT",
    "FALLBACK_CHAT_TEMPLATE",
    "KNOWN_KINDS",
    "LEGACY_THRESHOLD",
    "META_FILE",
    "SIGNATURE_FILE",
    "UNKNOWN_ENTITY",
    "WEIGHTS_FILE",
    "Calibration",
    "CategoricalColumn",
    "DerivedColumn",
    "EncoderSpec",
    "EncoderSpecError",
    "ExportedModel",
    "ExportedModelError",
    "ManifestSeal",
    "ModelContractError",
    "ModelKind",
    "ModelKindError",
    "ModelSignatureError",
    "ModelSigner",
    "ModelVerifier",
    "NumericColumn",
    "ReferenceF1",
    "StatisticsError",
    "ThresholdChoice",
    "build_tabular_mlp",
    "choose_threshold",
    "compare_sketches",
    "contract_meta",
    "contract_of",
    "ensure_local_keys",
    "f1_optimal_threshold",
    "fit_calibration",
    "kind_of",
    "kind_problem",
    "load_exported",
    "manifest_seal",
    "model_digest",
    "model_signer",
    "model_verifier",
    "read_meta",
    "recorded_f1",
    "recorded_threshold",
    "reference_f1",
    "resolve_threshold",
    "save_exported",
    "served_scores",
    "sign_folder",
    "statistics",
    "verify_folder",
    "weights_hash",
    "weights_sketch",
]

