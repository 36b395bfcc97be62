"""The rehearsal's steps, in order: each a small function ``(ctx) -> dict`` over today's public functions.

Where another change replaces today's behaviour, the step says so in a ``# swap-in:`` comment naming what
it calls now and what it will call; the step's signature and outputs stay. The demo's own steps and helpers
(``mlops_pipeline.steps``) are reused where the loop is the same (gates, the first champion, aliases).
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pandas as pd

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.local_server import request_rows
from mlops_pipeline.rehearsal import datapath, mlflow_roles, topology
from mlops_pipeline.rehearsal.context import RehearsalContext, config_env, load_rehearsal_config
from mlops_pipeline.rehearsal.gitops import init_gitops, served_at_head
from mlops_pipeline.rehearsal.release import analyze, pin_bootstrap, publish_version
from mlops_pipeline.rehearsal.serving import ServingPlane, reconcile, send_split
from mlops_pipeline.rehearsal.workloads import acl_probe, container_env, namespace
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
    topology.start_redis(ctx.harness, platform, ctx.repo_root)
    ctx.facts["spark_worker"] = topology.launch_spark(ctx.harness, platform)  # awaited in step_features
    topology.start_alertmanager(ctx.harness, platform)
    drift_port = topology.start_node_exporter(ctx.harness, platform, ctx.run_dir / "drift-metrics")
    topology.start_prometheus(ctx.harness, platform, ctx.repo_root, drift_port)
    ctx.gitops = init_gitops(ctx.repo_root, ctx.run_dir)
    ctx.facts["mlflow_server"] = mlflow  # awaited in step_tracking: data and features need no registry
    # the environment's own experiment and registered model on the shared tracking server, and a user per role and
    # environment (rehearsal.mlflow_roles: created in step_tracking); what no step sets is the reader's
    ctx.facts["mlflow_names"] = (ctx.cfg.tracking.experiment, ctx.model)
    ctx.facts["mlflow_namespaces"] = [namespace(ctx.repo_root, e) for e in ctx.cfg.delivery.environments]
    platform.mlflow_users = mlflow_roles.passwords(ctx.facts["mlflow_namespaces"], ctx.model)
    reader = f"{platform.namespace}.{ctx.model}-reader"
    ctx.env = {**config_env(platform, ctx.gitops.remote, fast=ctx.fast),
               **mlflow_roles.naming_env(platform.namespace, ctx.cfg.tracking.experiment),
               mlflow_roles.USER_ENV: reader, mlflow_roles.PASSWORD_ENV: platform.mlflow_users[reader]}
    ctx.loaded = load_rehearsal_config(ctx.repo_root, ctx.env)
    # the loop itself runs in this process (as a workflow step would): it reads the secrets by their names
    # (and the signing keys' files, as a pod gets mounted Secrets: the trainer's workers sign, the gates verify);
    # MLflow's: the reader's, a writing step runs as its role's user (:func:`as_role`)
    secret_env = {**platform.secrets, **{k: v for k, v in ctx.env.items()
                                         if k.startswith(("MLOPS_SIGNING", "MLFLOW_TRACKING_"))}}
    saved = {k: os.environ.get(k) for k in secret_env}
    ctx.cleanup.callback(_restore_env, saved)
    os.environ.update(secret_env)
    servers = {s.spec.name: {"pid": s.pid, "ready_s": round(s.ready_s, 1), "log": str(s.log_path)}
               for s in ctx.harness.servers.values()}
    acl = acl_probe(platform.redis_url, platform.redis_users, platform.namespace, ctx.cfg.features.feast_project)
    return {"servers": servers, "databases": platform.databases, "mlflow": platform.mlflow_url,
            "prometheus": platform.prometheus_url, "alertmanager": platform.alertmanager_url,
            "gitops_remote": str(ctx.gitops.remote), "redis_acl": acl,
            # who reads and writes the online store: the loop as the writer, each serving container as its
            # manifest says (the predictor: nobody)
            "redis_users": {"loop": os.environ[topology.REDIS_USERNAME_ENV],
                            **{w: container_env(ctx.repo_root, w, platform.namespace, {}).get("REDIS_USERNAME")
                               for w in ("transformer", "predictor")}}}


def step_tracking(ctx: RehearsalContext) -> dict[str, Any]:
    """The MLflow server (started with the platform) is up and refuses requests without credentials; the admin
    creates each environment's experiment, model and role users (:mod:`~.mlflow_roles`), and the probe checks
    on the live server that each role is refused what it must not do."""
    assert ctx.harness is not None and ctx.platform is not None
    platform = ctx.platform
    server = ctx.harness.wait_ready(ctx.facts["mlflow_server"])
    namespaces = ctx.facts["mlflow_namespaces"]
    if platform.namespace not in namespaces:
        raise PipelineError(f"the rehearsal's namespace {platform.namespace!r} is none of the overlays' {namespaces}")
    platform.mlflow_envs = mlflow_roles.provision(platform.mlflow_url, platform.mlflow_admin, platform.mlflow_users,
                                                  namespaces, *ctx.facts["mlflow_names"])
    env = platform.mlflow_envs[platform.namespace]
    url = f"{platform.mlflow_url}/api/2.0/mlflow/experiments/search"
    reader = (env.user("reader"), env.users[env.user("reader")])
    anonymous = httpx.get(url, params={"max_results": 1}, timeout=30).status_code
    authed = httpx.get(url, params={"max_results": 1}, timeout=30, auth=reader).status_code
    if (anonymous, authed) != (401, 200):
        raise PipelineError(f"mlflow server answered {anonymous} without and {authed} with credentials; "
                            "expected 401 and 200")
    probe = mlflow_roles.permission_probe(platform.mlflow_url, platform.mlflow_envs, platform.namespace)
    return {"url": platform.mlflow_url, "ready_s": round(server.ready_s, 1), "pid": server.pid,
            "anonymous_status": anonymous, "authenticated_status": authed,
            "experiment": env.experiment, "registered_model": env.model,
            "users": {ns: sorted(e.users) for ns, e in platform.mlflow_envs.items()},
            "grants": {role: {"experiment": on_exp, "registered_model": on_model}
                       for role, (on_exp, on_model) in mlflow_roles.GRANTS.items()},
            "mlflow_probe": probe}


@contextmanager
def acting(ctx: RehearsalContext, role: str) -> Iterator[None]:
    """This process talks to MLflow as the rehearsal environment's ``role`` user for the block."""
    assert ctx.platform is not None
    with mlflow_roles.acting_as(ctx.platform.mlflow_envs[ctx.platform.namespace], role):
        yield


def as_role(role: str, step: Callable[[RehearsalContext], dict[str, Any]]) -> Callable[[RehearsalContext],
                                                                                        dict[str, Any]]:
    """``step`` run with ``role``'s MLflow credentials (trainer, delivery, monitor), as its workload runs."""

    def run(ctx: RehearsalContext) -> dict[str, Any]:
        with acting(ctx, role):
            return {**step(ctx), "mlflow_user": os.environ[mlflow_roles.USER_ENV]}

    run.__name__, run.__doc__ = step.__name__, step.__doc__
    return run


def _restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# --- data ---------------------------------------------------------------------------------------------------


def step_ingest(ctx: RehearsalContext) -> dict[str, Any]:
    """A new batch lands under ``data.landing_uri`` (the bucket's landing prefix, here a folder)."""
    from mlops_features import generate_transactions

    data = ctx.cfg.data
    assert data.landing_uri
    paths = generate_transactions(data.landing_uri, rows=data.rows, days=data.days, seed=ctx.cfg.project.seed,
                                  start_date=data.start_date, users=data.users, merchants=data.merchants,
                                  fraud_rate=data.fraud_rate)
    return {"landing_uri": data.landing_uri, "batches": [p.name for p in paths],
            "rows": int(sum(len(pd.read_parquet(p)) for p in paths))}


def step_validate(ctx: RehearsalContext) -> dict[str, Any]:
    """The ingestion job, ``mlops data ingest``: the data gate on the new batches, then the accepted area
    versioned with DVC and pushed to ``data.dvc_remote`` with its pointer."""
    from mlops_features import data_version, ingest_landed

    ctx.move_root(datapath.checkout(ctx.repo_root, ctx.work_repo))
    report = ingest_landed(ctx.cfg.data, ctx.root, contract=ctx.cfg.declared_contract("the rehearsal's ingestion"))
    if report.validation is None or report.validation.accepted_rows == 0 or not report.pushed:
        raise PipelineError(f"the ingestion accepted or pushed nothing: {report.to_dict()}")
    version = data_version(ctx.cfg.data, ctx.root)
    ctx.facts["data_version"] = version
    ctx.facts["data_md5"] = report.data_md5
    remote = Path(str(ctx.cfg.data.dvc_remote))
    return {"accepted_rows": report.validation.accepted_rows, "quarantined_rows": report.validation.quarantined_rows,
            "new_batches": len(report.new), "data_version": version, "data_md5": report.data_md5,
            "remote_objects": sum(1 for f in remote.rglob("*") if f.is_file())}


def step_features(ctx: RehearsalContext) -> dict[str, Any]:
    """The training job's fresh checkout of ``main`` gets the pinned version (``mlops data pull``), then Feast: SQL
    registry + Redis online store."""
    from mlops_features import build_features, data_version, pull_accepted

    assert ctx.harness is not None and ctx.platform is not None
    assert ctx.gitops is not None  # main pins what the ingestion published (the pull request merged in step pin)
    folder, pinned = datapath.checkout_with_pin(ctx.repo_root, ctx.runner, ctx.gitops.remote,
                                                ctx.cfg.delivery.retrain.pin_path.format(model=ctx.model))
    ctx.move_root(folder)
    md5 = pull_accepted(ctx.cfg.data, ctx.root, pinned)
    got = data_version(ctx.cfg.data, ctx.root)
    if got != ctx.facts["data_version"]:
        raise PipelineError(f"dvc pull gave data {got[:12]}, the ingestion pushed {ctx.facts['data_version'][:12]}")
    features = ctx.cfg.features
    if features.batch_engine == "spark":
        ctx.harness.wait_ready(ctx.facts["spark_worker"])
    try:
        built = build_features(features, ctx.cfg.data, ctx.root,
                               contract=ctx.cfg.declared_contract("the rehearsal's features step"))
    finally:
        _stop_spark_driver()
    apps = topology.spark_applications(ctx.platform) if features.batch_engine == "spark" else []
    if features.batch_engine == "spark" and not any(a["cores"] for a in apps):
        raise PipelineError(f"batch_engine is spark on {features.spark_master}, yet its master ran no application "
                            f"with executors: {apps}")
    return {"data_md5": md5, "data_version": got, "ingested_rows": built["ingested_rows"],
            "registry": "sql", "online_store": features.online_store, "batch_engine": features.batch_engine,
            "spark_master": features.spark_master, "spark_applications": apps,
            "seconds": {k: round(v, 1) for k, v in built["seconds"].items()}}


def _stop_spark_driver() -> None:
    """End this process's Spark application, as the materialization pod's exit does: the executors go back to the
    workers (a driver left idle would hold the cluster's cores for the rest of the loop)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()


# --- training and registry ----------------------------------------------------------------------------------


def step_bootstrap(ctx: RehearsalContext) -> dict[str, Any]:
    """An empty registry and cluster get a first champion (the demo's bootstrap), published and serving."""
    assert ctx.harness is not None and ctx.platform is not None and ctx.gitops is not None
    with acting(ctx, "trainer"):  # train.yml's first run
        first = bootstrap_champion(ctx)
    if first is None:
        raise PipelineError("the rehearsal's registry is fresh, yet it holds a champion already")
    with acting(ctx, "delivery"):
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
    wrong = httpx.get(url, params={"name": name}, timeout=10,
                      auth=(os.environ[mlflow_roles.USER_ENV], "wrong")).status_code
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
    """The canary step at ``percent``: overlay commit, reconcile, split traffic, and (when ``analysed``) decide.

    An analysed step sends traffic in chunks and asks Prometheus and the shared log after each one, as
    promote.yml does: the sequential verdict stays valid however often it looks and stops at the first promote
    or rollback; a hold when the request budget runs out fails the step like the workflow's timeout.
    """

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
        seed = ctx.cfg.project.seed + percent
        contract = ctx.cfg.declared_contract("the rehearsal's canary traffic")
        if not analysed:
            n = 300 if ctx.fast else 800
            traffic = send_split(ctx.plane, request_rows(ctx.validated(), n, seed, contract), seed)
            return {"commit": change.commit, "percent": percent, "traffic": traffic}
        since = datetime.now(UTC)
        budget, chunk = (8_000, 1_000) if ctx.fast else (16_000, 1_000)
        rows = request_rows(ctx.validated(), budget, seed, contract)
        looks: list[dict[str, Any]] = []
        sent: dict[str, int] = {}
        analysis: dict[str, Any] = {}
        for start in range(0, len(rows), chunk):
            tally = send_split(ctx.plane, rows[start:start + chunk], seed + start)
            for label in ("stable", "canary"):
                sent[label] = sent.get(label, 0) + int(tally.get(label, {}).get("requests", 0))
            analysis = analyze(ctx, since)
            looks.append({"requests": sum(sent.values()), "decision": analysis["decision"],
                          "canary_requests": analysis["canary"]["requests"]})
            if analysis["decision"] != "hold":
                break
        out: dict[str, Any] = {"commit": change.commit, "percent": percent, "traffic": sent, "looks": looks,
                               "decision": analysis["decision"], "source": "prometheus"}
        if analysis["decision"] != "promote":
            raise PipelineError(f"canary v{version} at {percent}%: {analysis['decision']} after {len(looks)} looks, "
                                f"{sum(sent.values())} requests: " + "; ".join(analysis["reasons"]))
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
    ctx.facts["drifted_batch"] = str(paths[0])  # lands later as new data (step ingest-drifted)
    drifted = pd.read_parquet(paths[0])
    contract = cfg.declared_contract("the drift step (labels learn the drifted day's truth by its record_id)")
    ctx.facts["drifted_truth"] = drifted[[contract.record_id, contract.label]]  # its labels arrive a week later
    since = datetime.now(UTC)
    ctx.facts["drift_since"] = since
    n = 600 if ctx.fast else 1_500
    traffic = send_split(ctx.plane, request_rows(drifted, n, cfg.project.seed + 1, contract),
                         cfg.project.seed + 1, batch=10)
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
    """``mlops monitor run`` as the drift CronJob runs it, over the window since the drift began: it must say
    CRITICAL, deliver the alert to Alertmanager (v2) and carry out its rollback decision (overlay commit pushed
    to the GitOps remote, then the alias and the ledger entry)."""
    from mlops_pipeline.rollback import run_monitoring

    window = f"{int((datetime.now(UTC) - ctx.facts['drift_since']).total_seconds()) + 2}s"
    result = run_monitoring(ctx.loaded, window=window, html=not ctx.fast)
    ctx.facts["drift"] = result.to_dict()
    if result.level != "CRITICAL":
        raise PipelineError(f"the monitor said {result.level} on the drifted traffic, expected CRITICAL: "
                            + "; ".join(result.reasons))
    result.check()  # an undelivered alert or a failed rollback fails the step, as it fails the CronJob
    rollback = next((a for a in result.actions if a.action == "rollback"), None)
    if rollback is None or not rollback.ok:
        raise PipelineError(f"the CRITICAL run carried out no rollback: {[a.detail for a in result.actions]}")
    ctx.facts["rollback"] = dict(rollback.extra)
    asked = [a.extra for a in result.actions if a.action == "retrain"]
    if asked:  # the drift trigger's pull request (a data trigger's answer follows it)
        keep = ("status", "reason", "branch", "data_version", "head_sha", "url", "detail")
        ctx.result["retrain_pr"] = {k: asked[0].get(k) for k in keep}
    return {"level": result.level, "window": window,
            "drifted_features": [n for n, c in result.report.columns.items() if c.drifted],
            "actions": [{"action": a.action, "ok": a.ok, "detail": a.detail} for a in result.actions],
            "skew": {k: v for k, v in result.skew.to_dict().items() if k in ("rows_sampled", "rows_compared",
                                                                               "mismatch_rate", "causes")}
            if result.skew else None,
            "metrics_file": result.outputs.get("metrics")}


def step_alert(ctx: RehearsalContext) -> dict[str, Any]:
    """The CRITICAL reaches Alertmanager twice over: the drift job's own post (v2 API) and the repo's rule
    ``FraudDriftCritical`` fired by Prometheus, which scrapes the drift job's textfile metrics; the retraining
    request the monitor opened is in Prometheus's trigger counters."""
    assert ctx.platform is not None
    rule = "FraudDriftCritical"
    deadline = time.monotonic() + (60 if ctx.fast else 120)
    alerts: list[dict[str, Any]] = []

    def critical() -> set[str]:
        return {a["labels"].get("alertname", "") for a in alerts if a["labels"].get("severity") == "critical"}

    while time.monotonic() < deadline:
        got = httpx.get(f"{ctx.platform.alertmanager_url}/api/v2/alerts", timeout=10).json()
        alerts = [a for a in got if a["labels"].get("model") == ctx.model]
        if rule in critical() and len(critical()) >= 2:
            break
        time.sleep(1)
    ctx.result["alerts_received"] = len(alerts)
    if rule not in critical() or len(critical()) < 2:
        raise PipelineError(f"expected the drift job's critical alert and {rule} (Prometheus) for {ctx.model!r} in "
                            f"Alertmanager; it holds {[a['labels'] for a in alerts]}")
    return {"alerts": [{"alertname": a["labels"].get("alertname"), "severity": a["labels"].get("severity"),
                        "startsAt": a.get("startsAt"), "generatorURL": a.get("generatorURL")} for a in alerts],
            "retrain_triggers": _retrain_counters(ctx, deadline)}


def _retrain_counters(ctx: RehearsalContext, deadline: float) -> dict[str, float]:
    """``outcome -> count`` of the drift trigger's ``mlops_retrain_triggers_total`` as Prometheus scraped it from
    the drift job's textfile, once the pull request the monitor opened is counted (the counters a dashboard and
    ``RetrainTriggerFailed`` read)."""
    from mlops_delivery import query_prometheus

    assert ctx.platform is not None
    promql = f'mlops_retrain_triggers_total{{model="{ctx.model}", reason="drift"}}'
    while True:
        counts = {r["metric"]["outcome"]: float(r["value"][1])
                  for r in query_prometheus(ctx.platform.prometheus_url, promql)}
        if counts.get("opened", 0) + counts.get("updated", 0) >= 1:
            return counts
        if time.monotonic() > deadline:
            raise PipelineError(f"Prometheus at {ctx.platform.prometheus_url} holds no opened retraining request for "
                                f"{ctx.model!r} ({promql} = {counts}); the monitor recorded "
                                f"{ctx.result.get('retrain_pr')}")
        time.sleep(1)


def step_check_fallback(ctx: RehearsalContext) -> dict[str, Any]:
    """What the cluster sees of the drift job's rollback: the commit is in the GitOps remote, the overlay at HEAD
    names the fallback, the fallback serves, and the registry's champion alias and ledger agree."""
    assert ctx.gitops is not None and ctx.plane is not None
    done = ctx.facts["rollback"]
    commit = done.get("commit")
    if not commit or not ctx.gitops.has_commit(commit):
        raise PipelineError(f"rollback commit {commit!r} is not in the GitOps remote")
    served = reconcile(ctx.plane)
    if str(served.stable_version) != str(done["to_version"]) or served.canary_version is not None:
        raise PipelineError(f"after the rollback the overlay serves {served.to_dict()}, the fallback is "
                            f"v{done['to_version']}")
    aliases = _aliases(ctx)
    if str(aliases.get("champion")) != str(done["to_version"]):
        raise PipelineError(f"the registry's champion is v{aliases.get('champion')}, the overlay serves "
                            f"v{done['to_version']}")
    ctx.result["rollback_commit"] = commit
    return {"commit": commit, "champion_before": str(done["from_version"]), "fallback_before": str(done["to_version"]),
            "ledger_seq": done.get("seq"), "champion_after": aliases.get("champion"), "served": served.to_dict()}
