"""GitOps delivery: promotion and rollback as manifest commits, canary analysis."""

from mlops_delivery.errors import DeliveryError, GitError, ManifestError, MetricsError, PromotionRefusedError
from mlops_delivery.manifest import ModelManifest, Placement
from mlops_delivery.promotion import (
    ManifestChange,
    gitops_status,
    plan_promotion,
    plan_rollback,
    promote_version,
    rollback_env,
)
from mlops_delivery.rollback import RollbackCommit, commit_rollback

__all__ = [
    "DeliveryError",
    "GitError",
    "ManifestChange",
    "ManifestError",
    "MetricsError",
    "ModelManifest",
    "Placement",
    "PromotionRefusedError",
    "RollbackCommit",
    "commit_rollback",
    "gitops_status",
    "plan_promotion",
    "plan_rollback",
    "promote_version",
    "rollback_env",
]
