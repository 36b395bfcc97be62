"""The rehearsal's closed loop: pins in git, the drifted day as new data, labels a week late, the retraining PR.

- ``pin`` (after the ingestion): the drift job's data check (:func:`mlops_pipeline.run_data_trigger`, the data
  trigger where git is) opens the retraining pull request pinning the version the ingestion published, on the
  GitOps remote; it is merged as a person merges it (``mlops retrain merge``). The training job's checkout takes
  the pin from the remote's ``main``, and with ``require_pin`` (staging) training refuses anything else.
- ``ingest-drifted``: the drifted day also lands and is ingested: a newer accepted version is published.
- ``labels`` (after the rollback): a simulated week later the labels of everything served land under
  ``data.labels_landing_uri`` and the labels CronJob's path gates them; realized vs estimated F1 per version.
- ``retrain``: the monitor's CRITICAL opened the retraining pull request pinning the newer version; the merge
  step merges it, then runs what ``train.yml`` runs on the merge: a fresh checkout, ``mlops data pull`` of the pin,
  the features, training, registration, the gates and the staging commit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.rehearsal import datapath
from mlops_pipeline.rehearsal.context import RehearsalContext
from mlops_pipeline.rehearsal.gitops import git


def _merge(ctx: RehearsalContext) -> dict[str, Any]:
    """``mlops retrain merge``: fast-forward the remote's main to the open retraining branch; its record."""
    from mlops_delivery import merge_retrain

    assert ctx.gitops is not None
    sha = merge_retrain(ctx.cfg.delivery, ctx.root, ctx.model)
    git(ctx.gitops.clone, "pull", "--quiet", "--ff-only", "origin", "main")  # the runner's checkout sees the merge
    record = json.loads(git(ctx.gitops.remote, "show", f"refs/retrain-prs/{ctx.model}:record.json"))
    return {"merged_sha": sha, "state": record.get("state"), "reason": record.get("reason"),
            "data_version": record.get("data_version"), "previous": record.get("previous")}


def checkout_with_pin(ctx: RehearsalContext) -> str:
    """The merge's training job: a fresh checkout (``retrain-runner/``, beside the first job's, which the serving
    plane still reads) of the remote's ``main`` with its pin; returns the pinned version."""
    assert ctx.gitops is not None
    rel = ctx.cfg.delivery.retrain.pin_path.format(model=ctx.model)
    folder, pinned = datapath.checkout_with_pin(ctx.repo_root, ctx.run_dir / "retrain-runner", ctx.gitops.remote, rel)
    ctx.move_root(folder)
    return pinned


def step_pin(ctx: RehearsalContext) -> dict[str, Any]:
    """The drift job's data check opens the pull request pinning the ingested version; it is merged."""
    from mlops_pipeline import run_data_trigger

    outcome = run_data_trigger(ctx.loaded)
    if outcome is None or outcome.status != "opened":
        raise PipelineError(f"the data trigger did not open the pinning pull request: "
                            f"{outcome.to_dict() if outcome else 'delivery.retrain.on_data is off'}")
    if outcome.data_version != ctx.facts["data_md5"]:
        raise PipelineError(f"the pull request pins {outcome.data_version!r}, the ingestion published "
                            f"{ctx.facts['data_md5']!r}")
    merged = _merge(ctx)
    return {"status": outcome.status, "branch": outcome.branch, "data_version": outcome.data_version, **merged}


def step_ingest_drifted(ctx: RehearsalContext) -> dict[str, Any]:
    """The drifted day lands under ``data.landing_uri`` and the ingestion job publishes a newer data version."""
    from mlops_features import ingest_landed

    data = ctx.cfg.data
    assert data.landing_uri
    day = Path(ctx.facts["drifted_batch"])
    shutil.copy(day, Path(data.landing_uri.removeprefix("file://")) / day.name)
    report = ingest_landed(data, ctx.work_repo, contract=ctx.cfg.declared_contract("the rehearsal's ingestion"))
    if not report.new_version or report.data_md5 is None:
        raise PipelineError(f"the drifted day published no new data version: {report.to_dict()}")
    ctx.facts["drifted_md5"] = report.data_md5
    return {"data_version": report.data_md5, "previous": report.previous_md5,
            "accepted_rows": report.validation.accepted_rows if report.validation else None}


def step_labels(ctx: RehearsalContext) -> dict[str, Any]:
    """A simulated week on, the labels of everything served land and the labels CronJob's path gates them."""
    from mlops_pipeline.labels_step import labels_a_week_later, performance_of, version_figures, version_references
    from mlops_serving import resolve_prediction_log_uri, version_thresholds

    cfg = ctx.cfg
    uri = resolve_prediction_log_uri(cfg.serving.prediction_log_uri, ctx.root)
    contract = cfg.declared_contract("the rehearsal's labels step (labels join the log on its record_id)")
    truth = pd.concat([ctx.validated()[[contract.record_id, contract.label]], ctx.facts["drifted_truth"]],
                      ignore_index=True)
    fallback = (ctx.facts.get("train") or {}).get("metrics", {}).get("val_f1")  # only for a legacy export
    gated = labels_a_week_later(uri, ctx.model, truth, ctx.work_dir / "labels", landing_uri=cfg.data.labels_landing_uri,
                                contract=contract)
    report = performance_of(uri, ctx.model, cfg.monitoring, fallback,
                            version_thresholds(cfg.tracking, ctx.root, ctx.model, cfg.monitoring.decision_threshold),
                            contract=contract)
    ctx.facts["performance"] = report
    return {"labels": gated, "references": version_references(report["verdicts"]),
            "versions": version_figures(report["windows"])}


def step_retrain(ctx: RehearsalContext) -> dict[str, Any]:
    """Merge the monitor's retraining pull request, then ``train.yml`` on the merge: pull the pin, features, train,
    register, gates, staging."""
    from mlops_features import build_features, pull_accepted
    from mlops_pipeline.rehearsal.loop import _stop_spark_driver, acting, step_register, step_staging, step_train
    from mlops_pipeline.steps import step_gates

    opened = ctx.result.get("retrain_pr")
    if not opened or opened.get("status") not in ("opened", "updated"):
        raise PipelineError(f"the monitor opened no retraining pull request to merge: {opened}")
    merged = _merge(ctx)
    pinned = checkout_with_pin(ctx)
    if pinned != ctx.facts["drifted_md5"]:
        raise PipelineError(f"main pins {pinned!r} after the merge; the pull request pinned {opened['data_version']!r}")
    pull_accepted(ctx.cfg.data, ctx.root, pinned)
    try:
        build_features(ctx.cfg.features, ctx.cfg.data, ctx.root,
                       contract=ctx.cfg.declared_contract("the rehearsal's retrain features step"))
    finally:
        _stop_spark_driver()
    with acting(ctx, "trainer"):  # train.yml on the merge, with the training job's MLflow user
        trained = step_train(ctx)  # refuses unless the accepted area is exactly the pin (require_pin)
        step_register(ctx)
        gates = step_gates(ctx)
    with acting(ctx, "delivery"):
        staged = step_staging(ctx)
    ctx.result["retrained_version"] = trained["version"]
    return {**merged, "data_version": pinned, "version": trained["version"], "gates": gates["gates"],
            "staging_commit": staged["commit"]}
