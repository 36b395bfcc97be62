"""The three retraining triggers, composed here because each joins a package of one floor to delivery.

- **drift** (``mlops monitor run``): a CRITICAL run hands its request to :func:`retrain_requester` after the
  rollback (monitoring decides, this layer asks delivery).
- **performance** (``mlops monitor performance``, :func:`run_performance`): a served version's realized F1
  drop beyond ``monitoring.max_f1_drop``; the CBPE estimated drop only with ``on_estimated_performance``.
- **data** (``mlops data ingest``, :func:`run_ingest`): the ingestion published a new accepted version; it is
  what the pull request pins. In the cluster the ingestion job has neither git nor a repository token, so the
  same trigger runs in the drift job, which has both (:func:`run_data_trigger`, after every ``mlops monitor
  run``): the newest published version against the pin; a branch that already pins it is left alone.

Each goes through :func:`mlops_delivery.trigger_retrain` (the policy's switches, then the same
``request_retrain`` that ``mlops retrain request`` calls) and every outcome lands in one ledger,
``<state_dir>/retrain/triggers.jsonl``; after each one the ledger's counts are rewritten as Prometheus text beside
the drift metrics (``<metrics_file>-retrain.prom``: ``mlops_retrain_triggers_total{model, reason, outcome}``).
A failed request never undoes the command's own work; the result's
``check()`` raises after the command has printed it, so the command (and its CronJob) exits non-zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mlops_config import LoadedConfig
from mlops_delivery import RetrainOutcome, RetrainTrigger, retrain_metrics_text, trigger_retrain
from mlops_features import IngestReport, ingest_landed
from mlops_model import LEGACY_THRESHOLD
from mlops_monitoring import (
    ActionResult,
    PerformanceReport,
    RetrainRequest,
    RetrainRequester,
    performance_metrics_text,
    performance_report,
)
from mlops_pipeline.errors import PipelineError


class RetrainTriggerError(PipelineError):
    """A trigger fired and its retraining pull request could not be opened (the command's own work stands)."""

    exit_code = 1


def retrain_ledger(loaded: LoadedConfig) -> Path:
    """The ledger every retraining request is appended to (``mlops retrain request`` writes the same one)."""
    return loaded.root / loaded.config.project.state_dir / "retrain" / "triggers.jsonl"


def retrain_metrics_path(loaded: LoadedConfig) -> Path:
    """Where the triggers' counters go: beside ``monitoring.metrics_file`` (the same textfile collector reads it)."""
    metrics = loaded.resolve_path(loaded.config.project.reports_dir) / loaded.config.monitoring.metrics_file
    return metrics.with_name(f"{metrics.stem}-retrain.prom")


def write_retrain_metrics(loaded: LoadedConfig) -> Path:
    """Rewrite the triggers' counters from the ledger (atomically, as the textfile collector wants)."""
    from mlops_core import atomic_write_text

    return atomic_write_text(retrain_metrics_path(loaded), retrain_metrics_text(retrain_ledger(loaded)))


def _triggered(loaded: LoadedConfig, outcome: RetrainOutcome) -> RetrainOutcome:
    write_retrain_metrics(loaded)
    return outcome


def outcome_action(outcome: RetrainOutcome) -> ActionResult:
    """The monitor's ``retrain`` action for ``outcome`` (``ok`` unless it failed; the evidence stays out: the
    run's report holds it)."""
    where = f" {outcome.url}" if outcome.url else ""
    detail = f"{outcome.status}: {outcome.branch} → data {outcome.data_version or '-'}{where}"
    extra = {k: v for k, v in outcome.to_dict().items() if k != "evidence"}
    return ActionResult("retrain", outcome.status != "failed", f"{detail} ({outcome.detail})" if outcome.detail
                        else detail, extra)


def retrain_requester(loaded: LoadedConfig) -> RetrainRequester:
    """What a CRITICAL monitoring run asks: a retraining through ``delivery.retrain``'s policy."""
    cfg, ledger = loaded.config, retrain_ledger(loaded)

    def ask(request: RetrainRequest) -> ActionResult:
        trigger = RetrainTrigger(model=request.model, reason=request.reason, evidence=request.evidence)
        return outcome_action(_triggered(loaded, trigger_retrain(cfg.delivery, cfg.data, loaded.root, trigger,
                                                                 now=request.now, ledger=ledger)))

    return ask


def _check(outcome: RetrainOutcome | None, what: str) -> None:
    if outcome is not None and outcome.status == "failed":
        raise RetrainTriggerError(f"{what}; the retraining pull request for {outcome.model!r} was not opened: "
                                  f"{outcome.detail}")


def _retrain_dict(outcome: RetrainOutcome | None) -> dict[str, Any] | None:
    return None if outcome is None else {k: v for k, v in outcome.to_dict().items() if k != "evidence"}


@dataclass
class PerformanceRun:
    """``mlops monitor performance``: the report, its metrics file and the retraining it asked for (if any)."""

    report: PerformanceReport
    metrics: Path
    retrain: RetrainOutcome | None

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON plus ``metrics`` and ``retrain`` (``null``: no drop, nothing asked)."""
        return {**self.report.to_dict(), "metrics": str(self.metrics), "retrain": _retrain_dict(self.retrain)}

    def check(self) -> None:
        """Raise when the retraining request failed (the report and its metrics are written)."""
        _check(self.retrain, f"{self.report.model}: performance dropped beyond the policy")


def performance_drop(report: PerformanceReport) -> tuple[str, dict[str, Any]] | None:
    """``(trigger, evidence)`` when a version served in the latest window dropped beyond ``report.max_drop``:
    ``performance`` for a realized drop, else ``estimated_performance`` for the CBPE estimate's; else ``None``.

    Only the versions of the latest window count: a version rolled back or replaced long ago keeps its drop in
    the log, and retraining for it again every day would be noise.
    """
    if not report.windows:
        return None
    latest = max(w.window_start for w in report.windows)
    served = sorted({w.version for w in report.windows if w.window_start == latest})
    verdicts = {v: report.verdicts[v] for v in served if v in report.verdicts}
    realized = {v: x for v, x in verdicts.items() if x["verdict"] == "drop"}
    estimated = {v: x for v, x in verdicts.items()
                 if x.get("estimated_drop") is not None and x["estimated_drop"] > report.max_drop}
    hits, trigger = (realized, "performance") if realized else (estimated, "estimated_performance")
    if not hits:
        return None
    worst = max(hits, key=lambda v: hits[v]["realized_drop" if realized else "estimated_drop"])
    window = next(w for w in reversed(report.windows) if w.version == worst)
    kind = "realized" if realized else "estimated (CBPE)"
    evidence = {
        "summary": f"served version {worst} of {report.model}: {kind} F1 drop beyond the policy; "
                   + (hits[worst]["reason"] if realized else
                      f"estimated F1 {window.estimated['f1']} at threshold {window.threshold:.4g} vs "
                      f"{hits[worst].get('reference')}"),
        "signal": "realized" if realized else "estimated",
        "version": worst,
        "reference_f1": hits[worst].get("reference_f1"),
        "reference": hits[worst].get("reference"),
        "max_drop": report.max_drop,
        "realized_drop": hits[worst].get("realized_drop"),
        "estimated_drop": hits[worst].get("estimated_drop"),
        "threshold": report.threshold,
        "window_start": window.window_start,
        "realized_f1": window.realized.get("f1"),
        "estimated_f1": window.estimated.get("f1"),
        "label_coverage": window.label_coverage,
        "labelled": window.n_labelled,
        "verdicts": verdicts,
        "latest_window": {"realized": window.realized, "estimated": window.estimated,
                          "intervals": {k: list(v) for k, v in window.intervals.items()},
                          "label_delay_hours": window.label_delay_hours},
    }
    return trigger, evidence


def run_performance(loaded: LoadedConfig, *, window: str | None = None, reference_f1: float | None = None,
                    now: datetime | None = None) -> PerformanceRun:
    """``mlops monitor performance``: the report, its Prometheus file, and a retraining request on a drop.

    Each version's realized F1 is compared with its validation F1 at its recorded threshold; ``reference_f1``
    stands in only for a version whose ``model.json`` records none (the verdict's reason says so).
    """
    from mlops_core import atomic_write_text
    from mlops_model import reference_f1 as version_reference
    from mlops_serving import resolve_prediction_log_uri, version_thresholds

    cfg, m = loaded.config, loaded.config.monitoring
    uri = resolve_prediction_log_uri(cfg.serving.prediction_log_uri, loaded.root)
    threshold_of = version_thresholds(cfg.tracking, loaded.root, cfg.project.model, m.decision_threshold)
    contract = cfg.declared_contract("mlops monitor performance (labels join the log on its record_id)")
    report = performance_report(uri, cfg.project.model, m.decision_threshold or LEGACY_THRESHOLD,
                                record_id=contract.record_id,
                                window=window or m.performance_window, reference_f1=reference_f1,
                                max_drop=m.max_f1_drop, min_labelled=m.performance_min_labelled,
                                bins=m.calibration_bins, interval=m.estimate_interval,
                                threshold_of=lambda version: threshold_of(version).value,
                                reference_of=lambda v: version_reference(threshold_of(v), model=f"v{v}",
                                                                         fallback=reference_f1,
                                                                         fallback_what="--reference-f1"))
    metrics = loaded.resolve_path(cfg.project.reports_dir) / m.performance_metrics_file
    atomic_write_text(metrics, performance_metrics_text(report))
    outcome = None
    drop = performance_drop(report)
    if drop is not None:
        switch, evidence = drop
        trigger = RetrainTrigger(model=cfg.project.model, reason="performance", evidence=evidence)
        outcome = _triggered(loaded, trigger_retrain(cfg.delivery, cfg.data, loaded.root, trigger, switch=switch,
                                                     now=now, ledger=retrain_ledger(loaded)))
    return PerformanceRun(report, metrics, outcome)


def run_data_trigger(loaded: LoadedConfig, *, now: datetime | None = None) -> RetrainOutcome | None:
    """The data trigger where git is (the drift job): ask for a retraining on the newest published version.

    ``None`` when ``delivery.retrain.on_data`` is off (nothing asked, nothing recorded). Otherwise the request
    resolves ``pointers/latest.dvc`` of ``data.dvc_remote`` and compares it with the pin on the base branch
    (``up_to_date`` when they agree, or when the open retraining branch already pins it).
    """
    cfg = loaded.config
    if not (cfg.delivery.retrain.enabled and cfg.delivery.retrain.on_data):
        return None
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    evidence = {"summary": f"the drift job's data check found the newest accepted data version published under "
                           f"{cfg.data.dvc_remote!r} (pointers/latest.dvc) is not the pinned one",
                "dvc_remote": cfg.data.dvc_remote, "checked_at": moment.isoformat()}
    trigger = RetrainTrigger(model=cfg.project.model, reason="data", evidence=evidence)
    return _triggered(loaded, trigger_retrain(cfg.delivery, cfg.data, loaded.root, trigger, now=moment,
                                              ledger=retrain_ledger(loaded)))


@dataclass
class IngestRun:
    """``mlops data ingest``: the ingestion's report and the retraining it asked for (if any)."""

    report: IngestReport
    retrain: RetrainOutcome | None

    def to_dict(self) -> dict[str, Any]:
        """The ingestion's JSON plus ``retrain`` (``null``: no new version, nothing asked)."""
        return {**self.report.to_dict(), "retrain": _retrain_dict(self.retrain)}

    def check(self) -> None:
        """Raise when the retraining request failed (the new version is published)."""
        _check(self.retrain, f"data version {self.report.data_md5} is published")


def run_ingest(loaded: LoadedConfig, *, push: bool = True, now: datetime | None = None) -> IngestRun:
    """``mlops data ingest``: validate and version what landed; a newly published version asks for a retraining
    that pins it (``delivery.retrain.on_data``)."""
    cfg = loaded.config
    report = ingest_landed(cfg.data, loaded.root, push=push,
                           contract=cfg.declared_contract("mlops data ingest (the gate checks batches against it)"))
    outcome = None
    if report.new_version:
        assert report.data_md5 is not None
        validation = report.validation
        evidence = {
            "summary": f"`mlops data ingest` published accepted data version {report.data_md5} "
                       f"(previously {report.previous_md5 or 'none'}) from {len(report.new)} new batch(es)",
            "data_md5": report.data_md5,
            "previous_md5": report.previous_md5,
            "new_batches": len(report.new),
            "accepted_rows": validation.accepted_rows if validation else None,
            "quarantined_rows": validation.quarantined_rows if validation else None,
            "batches": [Path(p).name for p in report.new],
            "ingested_at": (now or datetime.now(UTC)).astimezone(UTC).isoformat(),
        }
        trigger = RetrainTrigger(model=cfg.project.model, reason="data", evidence=evidence,
                                 data_version=report.data_md5)
        outcome = _triggered(loaded, trigger_retrain(cfg.delivery, cfg.data, loaded.root, trigger, now=now,
                                                     ledger=retrain_ledger(loaded)))
    return IngestRun(report, outcome)
