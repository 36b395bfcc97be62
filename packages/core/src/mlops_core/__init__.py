"""Shared platform core: errors, logging, seeding, lineage, MLflow tracking (one client factory over the tracking
section), the registry lifecycle and its ledger, and the reference profile.

Public names only. The reference profile (numpy + pandas) loads on first use, so importing the package
stays cheap for the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlops_core.atomic import atomic_dir, atomic_path, atomic_write_bytes, atomic_write_text
from mlops_core.environment import LocalStateError, require_shared_state
from mlops_core.errors import ConfigError, PlatformError, TrackingError
from mlops_core.ledger import ChainVerdict, now_iso, report_hash
from mlops_core.lifecycle import (
    FALLBACK,
    GATE_REPORT_ARTIFACT,
    MODEL_DIGEST_TAG,
    GateNotPassedError,
    LifecycleError,
    aliases,
    default_actor,
    fetch_gate_report,
    history,
    promote,
    record_deploy,
    restore_champion,
    verify_ledger,
    versions,
)
from mlops_core.lineage import CODE_PATHS, GitInfo, dirty_code_files, git_info, hash_files
from mlops_core.logs import KNOWN_WARNINGS, RedactingFormatter, filter_known_warnings, setup_logging
from mlops_core.progress import Progress
from mlops_core.redact import redact_credentials, redact_tree, restore_credentials
from mlops_core.seed import seed_everything
from mlops_core.spark_cluster import spark_class, spark_master_args, spark_worker_args
from mlops_core.tracking import (
    ensure_experiment,
    flatten,
    mlflow_client,
    registered_model_name,
    resolve_uri,
    start_run,
    tracking_scope,
    tracking_uris,
)
from mlops_core.tracking_server import write_auth_config

if TYPE_CHECKING:
    from mlops_core.profile import (
        ProfileError,
        bin_counts,
        build_reference_profile,
        check_profile,
        edge_probs,
        lerp_quantiles,
        quantile_edges,
        quantile_positions,
        sorted_finite,
    )
    from mlops_core.tracking_roles import GRANTS, AppliedRoles, apply_roles, role_passwords, user_name

# pandas (the profile) and mlflow's REST clients (the tracking server's admin API) only where they are used
_LAZY = {name: "mlops_core.profile" for name in (
    "ProfileError", "bin_counts", "build_reference_profile", "check_profile", "edge_probs", "lerp_quantiles",
    "quantile_edges", "quantile_positions", "sorted_finite")}
_LAZY.update({name: "mlops_core.tracking_roles" for name in (
    "GRANTS", "AppliedRoles", "apply_roles", "role_passwords", "user_name")})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mlops_core' has no attribute {name!r}")


__all__ = [
    "CODE_PATHS",
    "FALLBACK",
    "GATE_REPORT_ARTIFACT",
    "GRANTS",
    "KNOWN_WARNINGS",
    "MODEL_DIGEST_TAG",
    "AppliedRoles",
    "ChainVerdict",
    "ConfigError",
    "GateNotPassedError",
    "GitInfo",
    "LifecycleError",
    "LocalStateError",
    "PlatformError",
    "ProfileError",
    "Progress",
    "RedactingFormatter",
    "TrackingError",
    "aliases",
    "apply_roles",
    "atomic_dir",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "bin_counts",
    "build_reference_profile",
    "check_profile",
    "default_actor",
    "dirty_code_files",
    "edge_probs",
    "ensure_experiment",
    "fetch_gate_report",
    "filter_known_warnings",
    "flatten",
    "git_info",
    "hash_files",
    "history",
    "lerp_quantiles",
    "mlflow_client",
    "now_iso",
    "promote",
    "quantile_edges",
    "quantile_positions",
    "record_deploy",
    "redact_credentials",
    "redact_tree",
    "registered_model_name",
    "report_hash",
    "require_shared_state",
    "resolve_uri",
    "restore_champion",
    "restore_credentials",
    "role_passwords",
    "seed_everything",
    "setup_logging",
    "sorted_finite",
    "spark_class",
    "spark_master_args",
    "spark_worker_args",
    "start_run",
    "tracking_scope",
    "tracking_uris",
    "user_name",
    "verify_ledger",
    "versions",
    "write_auth_config",
]
