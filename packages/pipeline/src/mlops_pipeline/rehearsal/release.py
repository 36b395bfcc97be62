"""The release moves the rehearsal composes from today's functions; each is one seam another change fills.

- :func:`publish_version`: the registry version's exported model copied to its ``storageUri`` (immutable,
  verified by hash) before any overlay names it.
- :func:`pin_bootstrap`: an empty cluster's first champion pinned in every overlay (one commit).
- :func:`analyze`: the canary analysis of the running revisions.
- :func:`roll_back`: the rollback the cluster sees (overlay revert commit, alias move, ledger entry).
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
    """Canary vs stable since ``since``: today's analysis of both transformers' metrics and the prediction log.

    swap-in: the Prometheus + shared-sink analysis (PromQL over the serving histograms, scores from the sink),
    which runs the same from a workflow runner or a Job; Prometheus already scrapes both revisions here.
    """
    from mlops_delivery import analyze_canary
    from mlops_serving import read_prediction_log, resolve_prediction_log_uri

    plane = ctx.plane
    assert plane is not None and plane.served is not None and ctx.platform is not None
    canary = plane.canary()
    stable = plane.stable()
    assert canary is not None
    time.sleep(ctx.cfg.serving.prediction_log_flush_s + 1)  # the transformers flush their log every flush_s
    log_uri = resolve_prediction_log_uri(ctx.cfg.serving.prediction_log_uri, ctx.root)
    log_rows = read_prediction_log(log_uri, ctx.model, since=since)
    result = analyze_canary(ctx.cfg.delivery, httpx.get(f"{stable.transformer_url}/metrics", timeout=10).text,
                            httpx.get(f"{canary.transformer_url}/metrics", timeout=10).text, log_rows,
                            stable_version=stable.version, canary_version=canary.version, model=ctx.model)
    up = prometheus_query(ctx.platform.prometheus_url, 'up{job="fraud-serving"}')
    doc = result.to_dict()
    ctx.facts["canary"] = {
        "analysis": doc, "percent": plane.served.canary_percent, "stable": str(stable.version),
        "canary": str(canary.version), "prometheus_targets_up": sum(float(r["value"][1]) for r in up),
        "scores": {str(v): log_rows.loc[log_rows["model_version"].astype(str) == str(v), "score"].tolist()
                   for v in (stable.version, canary.version)},
    }
    return doc


def prometheus_query(url: str, query: str) -> list[dict[str, Any]]:
    """An instant PromQL query; the result vector."""
    body = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=10).json()
    if body.get("status") != "success":
        raise PipelineError(f"Prometheus refused {query!r}: {body}")
    return list(body["data"]["result"])


def roll_back(ctx: RehearsalContext, *, reason: str) -> dict[str, Any]:
    """The overlay's revert commit (pushed), then the alias move with its ledger entry.

    swap-in: the one-operation rollback composed in mlops_pipeline by the alerts/rollback change (defined order,
    idempotent, safe when two monitors fire at once); today the two calls in that order: the manifest is the
    truth, the alias records it.
    """
    from mlops_core import rollback
    from mlops_delivery import rollback_env

    assert ctx.gitops is not None
    change = rollback_env(ctx.cfg.delivery, ctx.gitops.clone, ctx.model, ctx.prod_env, commit=True, push=True)
    entry = rollback(ctx.cfg.tracking, ctx.root, ctx.model, reason=reason, actor="monitoring")
    if change.commit is None:
        raise PipelineError(f"the rollback wrote no commit ({change.action})")
    return {"commit": change.commit, "pushed": change.pushed, "action": change.action,
            "ledger_seq": entry.seq, "champion_after": entry.aliases_after.get("champion")}
