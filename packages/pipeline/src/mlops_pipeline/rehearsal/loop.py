"""The rehearsal's steps, in order: each a small function ``(ctx) -> dict`` over today's public functions.

Where another change replaces today's behaviour, the step says so in a ``# swap-in:`` comment naming what
it calls now and what it will call; the step's signature and outputs stay. The demo's own steps and helpers
(``mlops_pipeline.steps``) are reused where the loop is the same (gates, the first champion, aliases).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import pandas as pd

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.local_server import request_rows
from mlops_pipeline.rehearsal import datapath, topology
from mlops_pipeline.rehearsal.context import RehearsalContext, config_env, load_rehearsal_config
from mlops_pipeline.rehearsal.gitops import init_gitops, served_at_head
from mlops_pipeline.rehearsal.release import analyze, pin_bootstrap, publish_version, roll_back
from mlops_pipeline.rehearsal.serving import ServingPlane, reconcile, send_split
from mlops_pipeline.steps import _aliases, _held, _promote, bootstrap_champion, step_gates

log = logging.getLogger(__name__)
POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


# --- the platform -------------------------------------------------------------------------------------------


def step_platform(ctx: RehearsalContext) -> dict[str, Any]:
    """Start every platform server, create its databases, the GitOps remote and the DVC remote."""
    assert ctx.harness is not None and ctx.cleanup is not None
    topology.check_binaries()
    admin = os.environ.get("MLOPS_REHEARSAL_POSTGRES_URL", POSTGRES_ADMIN_URL)
    platform = topology.Platform(ctx.run_dir, postgres_url=admin)
    ctx.platform = platform
    prefix = f"rehearsal_{datetime.now(UTC):%Y%m%d%H%M%S}_{secrets.token_hex(3)}"
    urls = {}
    for purpose in ("mlflow", "mlflow_auth", "feast"):
        name = f"{prefix}_{purpose}"
        urls[purpose] = topology.create_database(admin, name)
        platform.databases.append(name)
        ctx.cleanup.callback(topology.drop_database, admin, name)  # runs after the servers are stopped
    # staging connects as its own role with a password; the machine's server trusts loopback, so any value works
    platform.feast_registry_url = topology.sqlalchemy_url(urls["feast"])
    platform.secrets[topology.FEAST_REGISTRY_PASSWORD_ENV] = secrets.token_urlsafe(12)
    mlflow = topology.launch_mlflow(ctx.harness, platform, urls["mlflow"], urls["mlflow_auth"])
    topology.start_redis(ctx.harness, platform)
    topology.start_alertmanager(ctx.harness, platform)
    drift_port = topology.start_node_exporter(ctx.harness, platform, ctx.run_dir / "drift-metrics")
    topology.start_prometheus(ctx.harness, platform, ctx.repo_root, drift_port)
    ctx.gitops = init_gitops(ctx.repo_root, ctx.run_dir)
    ctx.facts["mlflow_server"] = mlflow  # awaited in step_tracking: data and features need no registry
    ctx.env = config_env(platform, fast=ctx.fast)
    ctx.loaded = load_rehearsal_config(ctx.repo_root, ctx.env)
    # the loop itself runs in this process (as a workflow step would): it reads the secrets by their names
    saved = {k: os.environ.get(k) for k in platform.secrets}
    ctx.cleanup.callback(_restore_env, saved)
    os.environ.update(platform.secrets)
    servers = {s.spec.name: {"pid": s.pid, "ready_s": round(s.ready_s, 1), "log": str(s.log_path)}
               for s in ctx.harness.servers.values()}
    return {"servers": servers, "databases": platform.databases, "mlflow": platform.mlflow_url,
            "prometheus": platform.prometheus_url, "alertmanager": platform.alertmanager_url,
            "gitops_remote": str(ctx.gitops.remote)}


def step_tracking(ctx: RehearsalContext) -> dict[str, Any]:
    """The MLflow server (started with the platform) is up and refuses requests without credentials."""
    assert ctx.harness is not None and ctx.platform is not None
    server = ctx.harness.wait_ready(ctx.facts["mlflow_server"])
    url = f"{ctx.platform.mlflow_url}/api/2.0/mlflow/experiments/search"
    anonymous = httpx.get(url, params={"max_results": 1}, timeout=30).status_code
    authed = httpx.get(url, params={"max_results": 1}, timeout=30, auth=ctx.platform.mlflow_auth).status_code
    if (anonymous, authed) != (401, 200):
        raise PipelineError(f"mlflow server answered {anonymous} without and {authed} with credentials; "
                            "expected 401 and 200")
    return {"url": ctx.platform.mlflow_url, "ready_s": round(server.ready_s, 1), "pid": server.pid,
            "anonymous_status": anonymous, "authenticated_status": authed}


def _restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# --- data ---------------------------------------------------------------------------------------------------


def step_ingest(ctx: RehearsalContext) -> dict[str, Any]:
    """A new batch lands for the ingestion job (the workspace is a git + DVC repo with the DVC remote)."""
    from mlops_features import generate_transactions

    datapath.init_workspace(ctx.repo_root, ctx.work_repo, ctx.dvc_remote)
    ctx.move_root(ctx.work_repo)
    data = ctx.cfg.data
    # swap-in: raw batches land in object storage (the landing prefix of the profile's bucket) and the scheduled
    # ingestion lists the new ones; today the generator writes them into the workspace's raw folder
    paths = generate_transactions(ctx.root / data.raw_dir, rows=data.rows, days=data.days, seed=ctx.cfg.project.seed,
                                  start_date=data.start_date, users=data.users, merchants=data.merchants,
                                  fraud_rate=data.fraud_rate)
    ctx.facts["raw_paths"] = paths
    return {"batches": [p.name for p in paths], "rows": int(sum(len(pd.read_parquet(p)) for p in paths))}


def step_validate(ctx: RehearsalContext) -> dict[str, Any]:
    """The data gate; the accepted area is versioned with DVC and pushed to the remote."""
    from mlops_features import data_version, validate_batches

    summary = validate_batches(ctx.facts["raw_paths"], ctx.cfg.data, ctx.root)
    if summary.accepted_rows == 0:
        raise PipelineError("the data gate accepted no rows; see the quarantine reports")
    version = data_version(ctx.cfg.data, ctx.root)
    # swap-in: the ingestion function of the data-path change (validate → dvc add → dvc push to the profile's
    # remote); today the same three moves, composed here
    pushed = datapath.version_and_push(ctx.root, ctx.cfg.data.validated_dir, f"data: validated {version[:12]}")
    ctx.facts["data_version"] = version
    return {"accepted_rows": summary.accepted_rows, "quarantined_rows": summary.quarantined_rows,
            "data_version": version, "dvc": pushed, "remote_objects": sum(1 for _ in ctx.dvc_remote.rglob("*")
                                                                         if _.is_file())}


def step_features(ctx: RehearsalContext) -> dict[str, Any]:
    """The runner's checkout pulls the data version (``dvc pull``), then Feast: SQL registry + Redis online store."""
    from mlops_features import build_features, data_version

    pulled = datapath.pull_into_runner(ctx.work_repo, ctx.runner)
    ctx.move_root(ctx.runner)
    got = data_version(ctx.cfg.data, ctx.root)
    if got != ctx.facts["data_version"]:
        raise PipelineError(f"dvc pull gave data {got[:12]}, the ingestion pushed {ctx.facts['data_version'][:12]}")
    built = build_features(ctx.cfg.features, ctx.cfg.data, ctx.root)
    return {"runner_commit": pulled["commit"], "data_version": got, "ingested_rows": built["ingested_rows"],
            "registry": "sql", "online_store": ctx.cfg.features.online_store,
            "seconds": {k: round(v, 1) for k, v in built["seconds"].items()}}


# --- training and registry ----------------------------------------------------------------------------------


def step_bootstrap(ctx: RehearsalContext) -> dict[str, Any]:
    """An empty registry and cluster get a first champion (the demo's bootstrap), published and serving."""
    assert ctx.harness is not None and ctx.platform is not None and ctx.gitops is not None
    first = bootstrap_champion(ctx)
    if first is None:
        raise PipelineError("the rehearsal's registry is fresh, yet it holds a champion already")
    published = publish_version(ctx, int(first["version"]))
    commit = pin_bootstrap(ctx, int(first["version"]))
    ctx.plane = ServingPlane(ctx.harness, ctx.platform, ctx.gitops, ctx.repo_root, ctx.root, ctx.model,
                             ctx.prod_env, ctx.cfg.delivery.storage_uri_template, ctx.env)
    served = reconcile(ctx.plane)
    return {**first, "published": published, "gitops_commit": commit, "served": served.to_dict()}


def step_train(ctx: RehearsalContext) -> dict[str, Any]:
    """``mlops train run`` as train.yml runs it, on the pulled data version: FSDP on 2 CPU processes."""
    from mlops_training import train_model

    result = train_model(ctx.cfg, ctx.root)
    if result is None:
        raise PipelineError("training returned no result (this process did not host rank 0)")
    doc = result.to_json()
    ctx.facts["train"] = doc
    ctx.facts["candidate_version"] = str(result.model_version)
    return {"version": str(result.model_version), "run_id": result.run_id, "steps": result.steps,
            "metrics": result.metrics, "weights_sha256": result.weights_sha256}


def step_register(ctx: RehearsalContext) -> dict[str, Any]:
    """The version is in the authenticated registry; a request without credentials is refused."""
    from mlops_core import mlflow_client, registered_model_name

    assert ctx.platform is not None
    version = ctx.facts["candidate_version"]
    name = registered_model_name(ctx.cfg.tracking, ctx.model)
    mv = mlflow_client(ctx.cfg.tracking, ctx.root).get_model_version(name, version)
    url = f"{ctx.platform.mlflow_url}/api/2.0/mlflow/registered-models/get"
    anonymous = httpx.get(url, params={"name": name}, timeout=10).status_code
    wrong = httpx.get(url, params={"name": name}, timeout=10, auth=(ctx.platform.mlflow_auth[0], "wrong")).status_code
    if anonymous != 401 or wrong != 401:
        raise PipelineError(f"the registry answered {anonymous} without and {wrong} with wrong credentials; want 401")
    if not _held(ctx, version):
        _promote(ctx, version, "candidate", "registered by training")
    return {"version": version, "run_id": mv.run_id, "source": mv.source, "status": mv.status,
            "anonymous_status": anonymous, "wrong_password_status": wrong}


def step_gates_rehearsed(ctx: RehearsalContext) -> dict[str, Any]:
    """The demo's gates step, unchanged: evaluate against the champion, promote to ``staging`` on pass."""
    return step_gates(ctx)


# --- delivery -----------------------------------------------------------------------------------------------


def step_staging(ctx: RehearsalContext) -> dict[str, Any]:
    """Publish the version to its storageUri, then the staging overlay commit, pushed to the GitOps remote."""
    from mlops_delivery import promote_version

    assert ctx.gitops is not None
    version = int(ctx.facts["candidate_version"])
    published = publish_version(ctx, version)
    change = promote_version(ctx.cfg.delivery, ctx.cfg.tracking, ctx.gitops.clone, ctx.model, version, "staging",
                             commit=True, push=True)
    env = ctx.cfg.delivery.environments[0]
    served = served_at_head(ctx.gitops, env, ctx.model, ctx.cfg.delivery.storage_uri_template)
    if served.stable_version != version:
        raise PipelineError(f"the {env} overlay at HEAD serves v{served.stable_version}, expected v{version}")
    return {"commit": change.commit, "pushed": change.pushed, "published": published, "served": served.to_dict()}


def canary_step(percent: int, *, analysed: bool) -> Any:
    """The canary step at ``percent``: overlay commit, reconcile, split traffic, and (when ``analysed``) decide."""

    def step(ctx: RehearsalContext) -> dict[str, Any]:
        from mlops_delivery import promote_version

        assert ctx.gitops is not None and ctx.plane is not None
        version = ctx.facts["candidate_version"]
        if "canary" not in _held(ctx, version):
            _promote(ctx, version, "canary", f"canary starts at {percent}%")
        change = promote_version(ctx.cfg.delivery, ctx.cfg.tracking, ctx.gitops.clone, ctx.model, int(version),
                                 "canary", percent=percent, commit=True, push=True)
        served = reconcile(ctx.plane)
        if served.canary_version != int(version) or served.canary_percent != percent:
            raise PipelineError(f"overlay at HEAD: canary v{served.canary_version} at {served.canary_percent}%")
        since = datetime.now(UTC)
        n = (300 if percent < 50 else 700) if ctx.fast else (800 if percent < 50 else 2_000)
        traffic = send_split(ctx.plane, request_rows(ctx.validated(), n, ctx.cfg.project.seed + percent),
                             ctx.cfg.project.seed + percent)
        out: dict[str, Any] = {"commit": change.commit, "percent": percent, "traffic": traffic}
        if analysed:
            analysis = analyze(ctx, since)
            out["decision"] = analysis["decision"]
            if analysis["decision"] != "promote":
                raise PipelineError(f"canary v{version} at {percent}%: {analysis['decision']}: "
                                    + "; ".join(analysis["reasons"]))
        return out

    step.__name__ = f"step_canary_{percent}"
    return step


def step_production(ctx: RehearsalContext) -> dict[str, Any]:
    """The production commit (100 %), the champion alias; the old stable revision goes away."""
    from mlops_delivery import promote_version

    assert ctx.gitops is not None and ctx.plane is not None
    version = ctx.facts["candidate_version"]
    change = promote_version(ctx.cfg.delivery, ctx.cfg.tracking, ctx.gitops.clone, ctx.model, int(version),
                             "production", commit=True, push=True)
    entry = _promote(ctx, version, "champion", "canary analysis: promote")
    served = reconcile(ctx.plane)
    if served.stable_version != int(version) or served.canary_version is not None:
        raise PipelineError(f"after the production commit the overlay serves {served.to_dict()}")
    return {"commit": change.commit, "champion": entry["aliases_after"].get("champion"),
            "fallback": entry["aliases_after"].get("fallback"), "served": served.to_dict()}


# --- monitoring and rollback --------------------------------------------------------------------------------


def step_drift_traffic(ctx: RehearsalContext) -> dict[str, Any]:
    """A drifted day goes through the production transformer; its rows reach the prediction log."""
    from mlops_features import generate_transactions
    from mlops_serving import read_prediction_log, resolve_prediction_log_uri

    assert ctx.plane is not None
    cfg = ctx.cfg
    last_seen = pd.to_datetime(ctx.validated()["event_timestamp"]).max()
    paths = generate_transactions(ctx.work_dir / "drifted", rows=max(2_000, cfg.data.rows // cfg.data.days), days=1,
                                  seed=cfg.project.seed + 1, drift="covariate",
                                  start_date=(last_seen + pd.Timedelta(days=1)).date().isoformat(),
                                  users=cfg.data.users, merchants=cfg.data.merchants, fraud_rate=cfg.data.fraud_rate)
    since = datetime.now(UTC)
    ctx.facts["drift_since"] = since
    n = 600 if ctx.fast else 1_500
    traffic = send_split(ctx.plane, request_rows(pd.read_parquet(paths[0]), n, cfg.project.seed + 1),
                         cfg.project.seed + 1, batch=10)
    # swap-in: read_prediction_log(uri, model, since=...) over the partitioned sink
    deadline, rows = time.monotonic() + 30, 0
    while time.monotonic() < deadline:
        log_uri = resolve_prediction_log_uri(cfg.serving.prediction_log_uri, ctx.root)
        rows = len(read_prediction_log(log_uri, ctx.model, since=since))
        if rows >= n:
            break
        time.sleep(0.5)
    if rows < n:
        raise PipelineError(f"only {rows} of {n} drifted predictions reached the prediction log within 30 s")
    return {"instances": n, "logged_rows": rows, "traffic": traffic}


def step_monitor(ctx: RehearsalContext) -> dict[str, Any]:
    """The drift job over the window since the drift began: it must say CRITICAL and raise the alert."""
    from mlops_monitoring import run_monitor

    cfg = ctx.cfg
    window = f"{int((datetime.now(UTC) - ctx.facts['drift_since']).total_seconds()) + 2}s"
    # The monitor decides; the rollback is carried out one layer up (step_rollback), as monitoring must not import
    # delivery. swap-in: the monitor's decision object instead of auto_rollback=False.
    monitoring = cfg.monitoring.model_copy(update={"auto_rollback": False})
    # swap-in: Alertmanager v2 delivery (a JSON array of {labels, annotations, startsAt, ...}); today's webhook
    # posts one object, which Alertmanager refuses: its outcome is recorded, the alert still comes via Prometheus
    result = run_monitor(monitoring, cfg.serving, cfg.tracking, cfg.project, ctx.root, ctx.model, window=window,
                         html=not ctx.fast)
    ctx.facts["drift"] = result.to_dict()
    if result.level != "CRITICAL":
        raise PipelineError(f"the monitor said {result.level} on the drifted traffic, expected CRITICAL: "
                            + "; ".join(result.reasons))
    return {"level": result.level, "window": window,
            "drifted_features": [n for n, c in result.report.columns.items() if c.drifted],
            "actions": [{"action": a.action, "ok": a.ok, "detail": a.detail} for a in result.actions],
            "metrics_file": result.outputs.get("metrics")}


def step_alert(ctx: RehearsalContext) -> dict[str, Any]:
    """The CRITICAL reaches Alertmanager: Prometheus scraped the drift exporter and fired the repo's rule."""
    assert ctx.platform is not None
    deadline, alerts = time.monotonic() + (60 if ctx.fast else 120), []
    while time.monotonic() < deadline:
        got = httpx.get(f"{ctx.platform.alertmanager_url}/api/v2/alerts", timeout=10).json()
        alerts = [a for a in got if a["labels"].get("model") == ctx.model]
        if any(a["labels"].get("severity") == "critical" for a in alerts):
            break
        time.sleep(1)
    ctx.result["alerts_received"] = len(alerts)
    if not any(a["labels"].get("severity") == "critical" for a in alerts):
        raise PipelineError(f"no critical alert for {ctx.model!r} in Alertmanager; it holds {alerts}")
    return {"alerts": [{"alertname": a["labels"].get("alertname"), "severity": a["labels"].get("severity"),
                        "startsAt": a.get("startsAt"), "generatorURL": a.get("generatorURL")} for a in alerts]}


def step_rollback(ctx: RehearsalContext) -> dict[str, Any]:
    """The rollback the cluster sees: revert commit on the overlay, alias + ledger, then the fallback serves."""
    assert ctx.gitops is not None and ctx.plane is not None
    before = _aliases(ctx)
    done = roll_back(ctx, reason=f"drift CRITICAL: {'; '.join(ctx.facts['drift'].get('reasons', [])[:2])}")
    served = reconcile(ctx.plane)
    if str(served.stable_version) != str(before.get("fallback")):
        raise PipelineError(f"after the rollback the overlay serves v{served.stable_version}, the fallback was "
                            f"v{before.get('fallback')}")
    if not ctx.gitops.has_commit(done["commit"]):
        raise PipelineError(f"rollback commit {done['commit']} is not in the GitOps remote")
    ctx.result["rollback_commit"] = done["commit"]
    return {**done, "champion_before": before.get("champion"), "fallback_before": before.get("fallback"),
            "served": served.to_dict()}
