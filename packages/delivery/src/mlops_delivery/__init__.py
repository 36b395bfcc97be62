"""GitOps delivery: promotion, revert, shadow and the drift rollback's fallback as overlay commits (one writer,
:mod:`mlops_delivery.overlay`), canary analysis.

Public names only. Canary analysis (numpy + pandas) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlops_delivery.errors import (
    DeliveryError,
    GitError,
    ManifestError,
    MetricsError,
    PromotionRefusedError,
    PushRejectedError,
    ShadowError,
)
from mlops_delivery.fallback import FallbackCommit, plan_fallback, serve_fallback
from mlops_delivery.git import push_compare_and_swap
from mlops_delivery.images import ImagesChange, set_images
from mlops_delivery.ledger import resolve_version
from mlops_delivery.manifest import ModelManifest, Placement
from mlops_delivery.overlay import Checkout, OverlayWrite, cloned_checkout, local_checkout, write_overlay
from mlops_delivery.prometheus import query as query_prometheus
from mlops_delivery.promotion import (
    ManifestChange,
    gitops_status,
    plan_promotion,
    plan_revert,
    promote_version,
    revert_promotion,
)
from mlops_delivery.publish import Published, PublishError, publish_folder, publish_model
from mlops_delivery.retrain import RetrainOutcome, RetrainTrigger, load_evidence, merge_retrain, request_retrain
from mlops_delivery.retrain_metrics import retrain_metrics_text
from mlops_delivery.retrain_trigger import trigger_retrain
from mlops_delivery.shadow_stage import (
    ShadowChange,
    ShadowPlacement,
    plan_shadow,
    shadow_status,
    start_shadow,
    stop_shadow,
)
from mlops_delivery.summary import write_job_summary, write_step_output

if TYPE_CHECKING:
    from mlops_delivery.canary import analyze_canary, analyze_canary_prometheus
    from mlops_delivery.canary_evidence import CanaryLook, analyze_until_decided
    from mlops_delivery.lm_canary import LMCanaryAnalysis, analyze_lm_canary
    from mlops_delivery.shadow import (
        ShadowAnalysis,
        ShadowLimits,
        analyze_shadow,
        analyze_shadow_until_enough,
        summarize_shadow,
    )

_LAZY = {"analyze_canary": "mlops_delivery.canary", "analyze_canary_prometheus": "mlops_delivery.canary",
         **dict.fromkeys(("CanaryLook", "analyze_until_decided"), "mlops_delivery.canary_evidence"),
         **dict.fromkeys(("LMCanaryAnalysis", "analyze_lm_canary"), "mlops_delivery.lm_canary"),
         **dict.fromkeys(("ShadowAnalysis", "ShadowLimits", "analyze_shadow", "analyze_shadow_until_enough",
                          "summarize_shadow"), "mlops_delivery.shadow")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mlops_delivery' has no attribute {name!r}")


__all__ = [
    "CanaryLook",
    "Checkout",
    "DeliveryError",
    "FallbackCommit",
    "GitError",
    "ImagesChange",
    "LMCanaryAnalysis",
    "ManifestChange",
    "ManifestError",
    "MetricsError",
    "ModelManifest",
    "OverlayWrite",
    "Placement",
    "PromotionRefusedError",
    "PublishError",
    "Published",
    "PushRejectedError",
    "RetrainOutcome",
    "RetrainTrigger",
    "ShadowAnalysis",
    "ShadowChange",
    "ShadowError",
    "ShadowLimits",
    "ShadowPlacement",
    "analyze_canary",
    "analyze_canary_prometheus",
    "analyze_lm_canary",
    "analyze_shadow",
    "analyze_shadow_until_enough",
    "analyze_until_decided",
    "cloned_checkout",
    "gitops_status",
    "load_evidence",
    "local_checkout",
    "merge_retrain",
    "plan_fallback",
    "plan_promotion",
    "plan_revert",
    "plan_shadow",
    "promote_version",
    "publish_folder",
    "publish_model",
    "push_compare_and_swap",
    "query_prometheus",
    "request_retrain",
    "resolve_version",
    "retrain_metrics_text",
    "revert_promotion",
    "serve_fallback",
    "set_images",
    "shadow_status",
    "start_shadow",
    "stop_shadow",
    "summarize_shadow",
    "trigger_retrain",
    "write_job_summary",
    "write_overlay",
    "write_step_output",
]
