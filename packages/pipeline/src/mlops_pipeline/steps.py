"""The demo's steps, in order. Each takes the :class:`PipelineContext` and returns its figures.

Steps 1–3 run through DVC (its Python API), so a second run with nothing changed reuses DVC's cache and
does not retrain; a changed training value (a file in ``configs/``, an ``MLOPS__TRAINING__*`` override, a
new default) reaches the resolved config the ``config`` stage writes and re-runs the ``train`` stage.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from mlops_model import UNKNOWN_ENTITY
from mlops_pipeline.context import PipelineContext
from mlops_pipeline.errors import PipelineError
from mlops_pipeline.local_server import request_rows, run_server, send_traffic

log = logging.getLogger(__name__)
TRAIN_RESULT = Path("reports/train-run.json")  # the train stage's --out (dvc.yaml)


def _dvc(ctx: PipelineContext, stage: str) -> dict[str, Any]:
    """Reproduce ``stage`` and what it depends on through DVC's Python API.

    Returns which stages ran and which were up to date (from DVC's own stage objects, not its console
    output). The ``config`` stage, which writes the resolved config every time (``always_changed``), is
    reported apart as ``always``.
    """
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(ctx.root)) as repo, stdout_to_stderr():
            pipeline = repo.stage.collect(stage, with_deps=True)
            ran = {s.addressing for s in repo.reproduce(stage)}
    except DvcException as exc:
        raise PipelineError(f"`dvc repro {stage}` failed: {exc}") from exc
    always = [s.addressing for s in pipeline if s.always_changed]
    return {"ran": [s.addressing for s in pipeline if s.addressing in ran and not s.always_changed],
            "cached": [s.addressing for s in pipeline if s.addressing not in ran and not s.always_changed],
            "always": always}


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send fd 1 to stderr while inside (child processes inherit it): stdout carries only the JSON answer of
    ``mlops pipeline run|rehearse --json``."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


# --- 1. data ------------------------------------------------------------------------------------------------


def corrupt_batch(clean: pd.DataFrame, out: Path, seed: int) -> dict[str, int]:
    """Write a batch with deliberate row-level faults; returns how many rows carry each fault."""
    import numpy as np

    rng = np.random.default_rng(seed)
    df = clean.sample(n=min(2_000, len(clean)), random_state=seed).reset_index(drop=True).copy()
    df["transaction_id"] = df["transaction_id"].astype(str) + "-replayed"
    idx = rng.permutation(len(df))
    faults = {"null user_id": idx[:40], "negative amount": idx[40:80], "unknown category": idx[80:120],
              "future timestamp": idx[120:160]}
    df["user_id"] = df["user_id"].astype(object)
    df.loc[faults["null user_id"], "user_id"] = None
    df.loc[faults["negative amount"], "amount"] = -df.loc[faults["negative amount"], "amount"].abs() - 1
    df.loc[faults["unknown category"], "category"] = "crypto_casino"
    df.loc[faults["future timestamp"], "event_timestamp"] = pd.Timestamp("2099-01-01", tz="UTC")
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(out, index=False)
    return {name: len(rows) for name, rows in faults.items()}


def step_data(ctx: PipelineContext) -> dict[str, Any]:
    """Generate three days, validate them (DVC), then validate a deliberately corrupted and a truncated batch."""
    from mlops_features import validate_batches

    dvc = _dvc(ctx, "validate")
    cfg = ctx.cfg
    raw = sorted((ctx.root / cfg.data.raw_dir).glob("*.parquet"))
    reports = [json.loads(p.read_text()) for p in sorted((ctx.root / cfg.data.quarantine_dir).glob("*.report.json"))]
    incoming = ctx.work_dir / "incoming"
    faults = corrupt_batch(pd.read_parquet(raw[0]), incoming / "corrupted_batch.parquet", cfg.project.seed)
    truncated = incoming / "truncated_batch.parquet"
    truncated.write_bytes(raw[0].read_bytes()[: raw[0].stat().st_size // 3])
    side = cfg.data.model_copy(update={"validated_dir": str(ctx.work_dir / "incoming_validated"),
                                       "quarantine_dir": str(ctx.work_dir / "quarantine")})
    bad = validate_batches([incoming / "corrupted_batch.parquet", truncated], side, ctx.root,
                           contract=cfg.declared_contract("the pipeline's data step")).to_dict()
    batches = [*reports, *bad["batches"]]
    ctx.facts["validation"] = {"batches": batches, "injected_faults": faults}
    quarantined = sum(b["quarantined_rows"] for b in batches)
    rejected = [b["batch"] for b in batches if b["batch_rejected"]]
    return {
        "dvc": dvc,
        "batches": len(batches),
        "input_rows": sum(b["input_rows"] for b in batches),
        "accepted_rows": sum(b["accepted_rows"] for b in batches),
        "quarantined_rows": quarantined,
        "rejected_batches": rejected,
        "reasons": sorted({r for b in batches for r in b.get("reasons", [])} | set(_row_reasons(batches))),
    }


def _row_reasons(batches: list[dict[str, Any]]) -> list[str]:
    return [f"{name}: {count} rows" for b in batches for name, count in (b.get("row_failures") or {}).items()]


# --- 2. features --------------------------------------------------------------------------------------------


def step_features(ctx: PipelineContext) -> dict[str, Any]:
    """`feast apply` + materialize to the local online store (the DVC ``features`` stage)."""
    dvc = _dvc(ctx, "features")
    from mlops_features import OnlineFeatures

    store = OnlineFeatures(ctx.cfg.features, ctx.root,
                           contract=ctx.cfg.declared_contract("the pipeline's online check"))
    probe = ctx.validated().iloc[-1]
    row = store.get([{k: str(probe[k]) for k in store.entity_keys}])[0]
    return {"dvc": dvc, "feature_service": ctx.cfg.features.feature_service, "features": len(store.names),
            "probe_known_entity": not row.get(UNKNOWN_ENTITY, True)}


# --- 3. training --------------------------------------------------------------------------------------------


_FAST_LATENCY_REQUESTS = 150


def _evaluation_section(ctx: PipelineContext) -> Any:
    ev = ctx.cfg.evaluation
    if ctx.fast:
        # Fewer resamples and smaller latency rounds: the same gates, decided sooner when the evidence is clear.
        # The latency gate's budget (requests per round x rounds) is not cut: it stops at the first round that
        # decides, so small rounds cost nothing on a quiet machine, while on a loaded one the tail's CI needs the
        # samples (150 x 5 left a same-speed candidate "inconclusive": tail p95 CI [-3.3%, +19.7%] at 2 xdist workers).
        rounds = -(-ev.latency_requests * ev.latency_max_rounds // _FAST_LATENCY_REQUESTS)
        ev = ev.model_copy(update={"bootstrap_samples": 300, "latency_requests": _FAST_LATENCY_REQUESTS,
                                   "latency_warmup": 20, "latency_max_rounds": max(ev.latency_max_rounds, rounds)})
    return ev


def _aliases(ctx: PipelineContext) -> dict[str, str]:
    from mlops_core import LifecycleError, aliases

    try:
        return aliases(ctx.cfg.tracking, ctx.root, ctx.model)
    except LifecycleError as exc:  # no registered model yet on a fresh machine; anything else is a real fault
        log.debug("no aliases yet: %s", exc)
        return {}


def _held(ctx: PipelineContext, version: str) -> set[str]:
    """Aliases ``version`` holds now."""
    return {alias for alias, v in _aliases(ctx).items() if str(v) == str(version)}


def _promote(ctx: PipelineContext, version: str, to: str, reason: str, gate_report: Any = None) -> dict[str, Any]:
    from mlops_core import promote

    entry = promote(ctx.cfg.tracking, ctx.root, ctx.model, version, to, reason=reason, actor=ctx.actor,
                    gate_report=gate_report)
    return entry.as_dict()


def _evaluate(ctx: PipelineContext, version: str, label: str) -> Any:
    from mlops_evaluation import evaluate
    from mlops_model import model_verifier

    cfg = ctx.cfg
    return evaluate(cfg.model_copy(update={"evaluation": _evaluation_section(ctx)}), ctx.root, version,
                    report_dir=ctx.root / cfg.project.reports_dir / "latest" / f"gates-{label}-v{version}",
                    check=model_verifier(cfg.provenance, ctx.root))


def bootstrap_champion(ctx: PipelineContext) -> dict[str, Any] | None:
    """On a registry with no champion, train a shorter first generation and walk it through the gates to champion.

    Returns what it did, or ``None`` when a champion exists already (the demo and the rehearsal both call it).
    """
    from mlops_training import train_model

    if "champion" in _aliases(ctx):
        return None
    steps = max(10, ctx.cfg.training.max_steps // 6)  # an earlier, shorter-trained generation
    cfg = ctx.cfg.model_copy(update={"training": ctx.cfg.training.model_copy(update={"max_steps": steps})})
    first = train_model(cfg, ctx.root, run_name=f"{ctx.model}-first-champion")
    if first is None:
        raise PipelineError("the first training returned no result (this process did not host rank 0)")
    version = str(first.model_version)
    _promote(ctx, version, "candidate", "first version of a new registry")
    report = _evaluate(ctx, version, "first")
    if not report.passed:
        failed = [g.name for g in report.gates if not g.passed]
        raise PipelineError(f"the first champion v{version} failed gates {failed}; see {report.paths}")
    for alias in ("staging", "canary", "champion"):
        _promote(ctx, version, alias, "bootstrap: first champion of an empty registry")
    return {"version": version, "steps": steps, "weights_sha256": first.weights_sha256}


def step_train(ctx: PipelineContext) -> dict[str, Any]:
    """Train the fraud model with FSDP on 2 CPU processes (DVC ``train`` stage) and register the version.

    On a registry with no champion yet, a short first training is put through the gates and the stages first
    (:func:`bootstrap_champion`), so the canary and the rollback later have a version to compare with and fall
    back to.
    """
    out: dict[str, Any] = {}
    first = bootstrap_champion(ctx)
    if first is not None:
        out["first_champion"] = first
    dvc = _dvc(ctx, "train")
    result = json.loads((ctx.root / TRAIN_RESULT).read_text())
    ctx.facts["train"] = result
    ctx.facts["candidate_version"] = str(result["model_version"])
    from mlops_pipeline.provenance import SBOM_DEFAULT, attach_sbom

    if (ctx.root / SBOM_DEFAULT).is_file():  # `make sbom` ran: the version names the image's bill of materials
        out["sbom"] = attach_sbom(ctx.cfg, ctx.root, result["model_version"])
    return {**out, "dvc": dvc, "version": str(result["model_version"]), "run_id": result["run_id"],
            "metrics": result.get("metrics", {}), "weights_sha256": result["weights_sha256"],
            "samples_per_second": (result.get("system") or {}).get("samples_per_second")}


# --- 4. gates -----------------------------------------------------------------------------------------------


def step_gates(ctx: PipelineContext) -> dict[str, Any]:
    """Evaluate the candidate against the champion (the gates); on pass, promote it to ``staging``."""
    version = ctx.facts["candidate_version"]
    held = _held(ctx, version)
    if "champion" in held:
        raise PipelineError(f"v{version} is already champion: nothing to gate (change a training key to retrain)")
    if not held:
        _promote(ctx, version, "candidate", "registered by training")
    report = _evaluate(ctx, version, "candidate")
    ctx.facts["gates"] = report
    gates = {g.name: g.passed for g in report.gates}
    if not report.passed:
        failed = [f"{g.name}: {g.reason}" for g in report.gates if not g.passed]
        raise PipelineError(f"candidate v{version} blocked by the gates: " + "; ".join(failed))
    if not held & {"staging", "canary"}:  # a re-run resumes where an earlier one stopped
        _promote(ctx, version, "staging", "all gates passed")
    return {"candidate": version, "champion": (report.champion or {}).get("version"), "gates": gates,
            "report": report.paths}


# --- 5. canary ----------------------------------------------------------------------------------------------


def step_canary(ctx: PipelineContext) -> dict[str, Any]:
    """Serve champion (stable) + candidate (canary) with a split, send traffic, analyse, promote to champion.

    Traffic goes in chunks and the analysis looks after each one, as the workflow does: the sequential
    verdict (``delivery.sequential``) stays valid however often it looks, and stops at the first promote or
    rollback; a hold when the traffic budget runs out fails the step like the workflow's timeout.
    """
    from mlops_delivery import analyze_canary
    from mlops_serving import read_prediction_log, version_thresholds

    version = ctx.facts["candidate_version"]
    stable = _aliases(ctx)["champion"]
    threshold_of = version_thresholds(ctx.cfg.tracking, ctx.root, ctx.model,
                                      ctx.cfg.delivery.tabular.canary_estimate_threshold,
                                      override_key="delivery.tabular.canary_estimate_threshold")
    if "canary" not in _held(ctx, version):
        _promote(ctx, version, "canary", "staged; canary starts")
    percent = 50
    log_dir = ctx.work_dir / "canary_log"
    flush_s = 0.2
    args = ["--alias", "champion", "--canary-alias", "canary", "--canary-percent", str(percent),
            "--set", f"serving.prediction_log_uri={log_dir}", "--set", f"serving.prediction_log_flush_s={flush_s}"]
    budget = 8_000 if ctx.fast else 16_000
    chunk = 1_000
    rows = request_rows(ctx.validated(), budget, ctx.cfg.project.seed, ctx.cfg.declared_contract("the demo's traffic"))
    looks: list[dict[str, Any]] = []
    traffic: dict[str, Any] = {"requests": 0, "statuses": {}}
    with run_server(ctx.root, ctx.model, ctx.work_dir / "serve-canary.log", args) as server:
        for start in range(0, len(rows), chunk):
            sent = send_traffic(server, rows[start : start + chunk])
            traffic["requests"] += sent["requests"]
            for status, n in sent["statuses"].items():
                traffic["statuses"][status] = traffic["statuses"].get(status, 0) + n
            metrics = server.metrics_text()
            time.sleep(3 * flush_s)  # every answered row reaches the log before this look reads it
            served = read_prediction_log(log_dir, ctx.model)
            analysis = analyze_canary(ctx.cfg.delivery, metrics, metrics, served, stable_version=int(stable),
                                      canary_version=int(version), model=ctx.model, threshold_of=threshold_of)
            looks.append({"requests": traffic["requests"], "canary_requests": analysis.canary.requests,
                          "decision": analysis.decision, "threshold_decision": analysis.threshold_decision})
            if analysis.decision != "hold":
                break
    ctx.facts["canary"] = {"analysis": analysis.to_dict(), "traffic": traffic, "percent": percent,
                           "stable": stable, "canary": version, "looks": looks,
                           "scores": {v: served.loc[served["model_version"].astype(str) == v, "score"].tolist()
                                      for v in (stable, version)}}
    if analysis.decision != "promote":
        raise PipelineError(f"canary v{version} not promoted ({analysis.decision} after {len(looks)} looks, "
                            f"{traffic['requests']} requests): " + "; ".join(analysis.reasons))
    entry = _promote(ctx, version, "champion", "canary analysis: promote")
    return {"stable": stable, "canary": version, "percent": percent, "requests": traffic["requests"],
            "statuses": traffic["statuses"], "decision": analysis.decision, "looks": len(looks),
            "verdict": "sequential" if analysis.sequential else "threshold",
            "champion_now": entry["aliases_after"].get("champion"),
            "fallback_now": entry["aliases_after"].get("fallback")}


# --- 6. drift -----------------------------------------------------------------------------------------------


def step_drift(ctx: PipelineContext) -> dict[str, Any]:
    """A drifted day goes through the champion; `monitor run` says CRITICAL and rolls back to the fallback."""
    from mlops_features import generate_transactions
    from mlops_monitoring import MonitorRun, run_monitor
    from mlops_pipeline.rollback import fallback_executor

    cfg = ctx.cfg
    last_seen = pd.to_datetime(ctx.validated()["event_timestamp"]).max()
    next_day = (last_seen + pd.Timedelta(days=1)).date().isoformat()
    drift_dir = ctx.work_dir / "drifted"
    paths = generate_transactions(drift_dir, rows=max(2_000, cfg.data.rows // cfg.data.days), days=1,
                                  seed=cfg.project.seed + 1, drift="covariate", start_date=next_day,
                                  users=cfg.data.users, merchants=cfg.data.merchants, fraud_rate=cfg.data.fraud_rate)
    drifted = pd.read_parquet(paths[0])
    contract = cfg.declared_contract("the drift step (labels learn the drifted day's truth by its record_id)")
    ctx.facts["drifted_truth"] = drifted[[contract.record_id, contract.label]]  # what labels learn a week on
    log_dir = ctx.work_dir / "drift_log"
    champion_before = _aliases(ctx).get("champion")
    n = 600 if ctx.fast else 1_500
    with run_server(ctx.root, ctx.model, ctx.work_dir / "serve-drift.log",
                    ["--alias", "champion", "--set", f"serving.prediction_log_uri={log_dir}"]) as server:
        traffic = send_traffic(server, request_rows(drifted, n, cfg.project.seed + 1, contract), batch=10)
    serving = cfg.serving.model_copy(update={"prediction_log_uri": str(log_dir)})
    result = run_monitor(MonitorRun(
        cfg.monitoring, serving, cfg.tracking, cfg.project, ctx.root, ctx.model, window="1h", html=not ctx.fast,
        execute=fallback_executor(cfg.delivery, cfg.tracking, ctx.root), features=cfg.features,
        contract=cfg.contract))
    after = _aliases(ctx)
    ctx.facts["drift"] = result.to_dict()
    rolled_back = any(a.action == "rollback" and a.ok for a in result.actions)
    return {"level": result.level, "champion_before": champion_before, "champion_after": after.get("champion"),
            "rolled_back": rolled_back, "instances": traffic["instances"],
            "drifted_features": [n for n, c in result.report.columns.items() if c.drifted],
            "outputs": result.outputs}


# --- 7. labels ----------------------------------------------------------------------------------------------


def step_labels(ctx: PipelineContext) -> dict[str, Any]:
    """A simulated week later the labels of everything served arrive (the canary's normal traffic and the drifted
    day), go through the labels gate, and are joined to each log: realized vs estimated F1 per served version."""
    from mlops_pipeline.labels_step import labels_a_week_later, performance_of, version_figures, version_references
    from mlops_serving import version_thresholds

    contract = ctx.cfg.declared_contract("the labels step (labels join the log on its record_id)")
    truth = pd.concat([ctx.validated()[[contract.record_id, contract.label]], ctx.facts["drifted_truth"]],
                      ignore_index=True)
    # each version against its validation F1 at its threshold; val_f1 (raw scores at 0.5) only for a legacy export
    fallback = (ctx.facts.get("train") or {}).get("metrics", {}).get("val_f1")
    gated, windows, verdicts = [], [], {}
    report: dict[str, Any] = {}
    threshold_of = version_thresholds(ctx.cfg.tracking, ctx.root, ctx.model, ctx.cfg.monitoring.decision_threshold)
    for traffic, log_dir in (("normal", ctx.work_dir / "canary_log"), ("drifted", ctx.work_dir / "drift_log")):
        gated.append(labels_a_week_later(str(log_dir), ctx.model, truth, ctx.work_dir / "labels" / traffic,
                                         contract=contract))
        report = performance_of(str(log_dir), ctx.model, ctx.cfg.monitoring, fallback, threshold_of,
                                contract=contract)
        windows += [{**w, "traffic": traffic} for w in report["windows"]]
        verdicts.update({f"{v} {traffic}": d for v, d in report["verdicts"].items()})
    ctx.facts["performance"] = {**report, "windows": windows, "verdicts": verdicts}
    labels = {k: sum(g[k] for g in gated) for k in ("input_rows", "accepted_rows", "quarantined_rows")}
    return {"labels": labels, "references": version_references(verdicts), "versions": version_figures(windows)}
