"""The release moves the rehearsal composes from today's functions; each is one seam another change fills.

- :func:`publish_version`: the registry version's exported model copied to its ``storageUri`` (immutable,
  verified by hash) before any overlay names it.
- :func:`pin_bootstrap`: an empty cluster's first champion pinned in every overlay (one commit).
- :func:`analyze`: the canary analysis of the running revisions, from Prometheus and the shared log.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

import httpx

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.rehearsal.context import RehearsalContext
from mlops_pipeline.rehearsal.gitops import git

log = logging.getLogger(__name__)


def publish_version(ctx: RehearsalContext, version: int) -> dict[str, Any]:
    """Publish registry version ``version``'s exported model to its storageUri (immutable, verified by hash)
    through the promotion's own publish step, before any overlay names it."""
    from mlops_delivery import publish_model

    uri = ctx.cfg.delivery.storage_uri_template.format(model=ctx.model, version=version)
    published = publish_model(ctx.cfg.tracking, ctx.root, ctx.model, version, uri)
    return {"uri": published.uri, "files": len(published.files), "uploaded": published.uploaded}


def pin_bootstrap(ctx: RehearsalContext, version: int) -> str:
    """Pin ``version`` in every overlay as the running state of an empty cluster; one commit, pushed."""
    from mlops_delivery import ModelManifest

    assert ctx.gitops is not None
    delivery, clone = ctx.cfg.delivery, ctx.gitops.clone
    uri = delivery.storage_uri_template.format(model=ctx.model, version=version)
    for env in delivery.environments:
        path = clone / delivery.infra_dir / "overlays" / env / delivery.model_manifest.format(model=ctx.model)
        manifest = ModelManifest(path, env, ctx.model)
        manifest.set_stable(version, uri)
        path.write_text(manifest.dump(), encoding="utf-8")
    git(clone, "commit", "-qam", f"gitops: bootstrap: {ctx.model} v{version} serves in "
        + ", ".join(delivery.environments))
    git(clone, "push", "-q", "origin", "HEAD:refs/heads/main")
    return git(clone, "rev-parse", "HEAD")


def analyze(ctx: RehearsalContext, since: datetime) -> dict[str, Any]:
    """Canary vs stable since ``since``, as promote.yml asks it: PromQL per version on Prometheus (which scrapes
    both revisions' transformers) and scores from the shared prediction log; never a predictor's address."""
    from mlops_delivery import analyze_canary_prometheus
    from mlops_serving import resolve_prediction_log_uri, version_thresholds

    plane, delivery = ctx.plane, ctx.cfg.delivery
    assert plane is not None and plane.served is not None and ctx.platform is not None
    canary, stable = plane.canary(), plane.stable()
    assert canary is not None and delivery.prometheus_url
    # every answered row reaches the log (flushed every flush_s) and Prometheus (scraped every second)
    time.sleep(max(ctx.cfg.serving.prediction_log_flush_s, 1.0) + 1.5)
    log_uri = resolve_prediction_log_uri(ctx.cfg.serving.prediction_log_uri, ctx.root)
    result = analyze_canary_prometheus(delivery, delivery.prometheus_url, log_uri, ctx.model,
                                       stable_version=stable.version, canary_version=canary.version, since=since,
                                       threshold_of=version_thresholds(
                                           ctx.cfg.tracking, ctx.root, ctx.model,
                                           delivery.tabular.canary_estimate_threshold,
                                           override_key="delivery.tabular.canary_estimate_threshold"))
    up = prometheus_query(ctx.platform.prometheus_url, 'up{job="fraud-serving"}')
    doc = result.to_dict()
    ctx.facts["canary"] = {
        "analysis": doc, "percent": plane.served.canary_percent, "stable": str(stable.version),
        "canary": str(canary.version), "prometheus_targets_up": sum(float(r["value"][1]) for r in up),
    }
    return doc


def prometheus_query(url: str, query: str) -> list[dict[str, Any]]:
    """An instant PromQL query; the result vector."""
    body = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=10).json()
    if body.get("status") != "success":
        raise PipelineError(f"Prometheus refused {query!r}: {body}")
    return list(body["data"]["result"])
