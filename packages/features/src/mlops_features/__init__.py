"""Data and features as code: sample data, the validation gate, ingestion, Feast access, training sets.

Heavy dependencies (Feast, Great Expectations) load on first use, not on import; Feast's argument checks are
instrumented on each method's first call, not at its import (:mod:`mlops_features.lazy_typecheck`).
"""

from mlops_features.aggregates import ingest, read_validated
from mlops_features.backfill import backfill, offline_views
from mlops_features.dataset import historical_features, service_defaults, service_features, training_set
from mlops_features.errors import DataError, FeaturesError, FeatureStoreError, FeatureStoreUnavailableError
from mlops_features.gate import BatchResult, ValidationSummary, validate_batches
from mlops_features.holdout_cut import order_by_time, row_key, split_off_holdout
from mlops_features.instructions import (
    IGNORE_INDEX,
    InstructionGateResult,
    encode_example,
    read_examples,
    validate_instructions,
)
from mlops_features.labels import fetch_landed_labels, ingest_labels, label_reasons, label_schema, read_labels
from mlops_features.landing import (
    IngestReport,
    accepted_md5,
    check_pinned_data,
    ingest_landed,
    pull_accepted,
    read_pointer,
)
from mlops_features.lazy_typecheck import install as install_lazy_typecheck
from mlops_features.lineage import LineageVerdict, check_data_lineage, data_lineage
from mlops_features.online import OnlineFeatures
from mlops_features.pipeline import PreparedData, build_features, data_version, prepare_local_data, refresh_online
from mlops_features.registry_digest import registry_digest
from mlops_features.review import PlanReport, base_repo_from_git, plan_features
from mlops_features.sample import DRIFT_MODES, generate_transactions
from mlops_features.store import apply_repo, materialize, open_store, render_feature_store_yaml
from mlops_features.stream import StreamUpdater, freshness, freshness_metrics_text, publish_transactions

install_lazy_typecheck()  # before anything imports feast, which binds typeguard's decorator at its import

__all__ = [
    "DRIFT_MODES",
    "IGNORE_INDEX",
    "BatchResult",
    "DataError",
    "FeatureStoreError",
    "FeatureStoreUnavailableError",
    "FeaturesError",
    "IngestReport",
    "InstructionGateResult",
    "LineageVerdict",
    "OnlineFeatures",
    "PlanReport",
    "PreparedData",
    "StreamUpdater",
    "ValidationSummary",
    "accepted_md5",
    "apply_repo",
    "backfill",
    "base_repo_from_git",
    "build_features",
    "check_data_lineage",
    "check_pinned_data",
    "data_lineage",
    "data_version",
    "encode_example",
    "fetch_landed_labels",
    "freshness",
    "freshness_metrics_text",
    "generate_transactions",
    "historical_features",
    "ingest",
    "ingest_labels",
    "ingest_landed",
    "label_reasons",
    "label_schema",
    "materialize",
    "offline_views",
    "open_store",
    "order_by_time",
    "plan_features",
    "prepare_local_data",
    "publish_transactions",
    "pull_accepted",
    "read_examples",
    "read_labels",
    "read_pointer",
    "read_validated",
    "refresh_online",
    "registry_digest",
    "render_feature_store_yaml",
    "row_key",
    "service_defaults",
    "service_features",
    "split_off_holdout",
    "training_set",
    "validate_batches",
    "validate_instructions",
]
