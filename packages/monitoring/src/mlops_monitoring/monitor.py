"""One monitoring run: window → compare with the reference → realized quality → level → actions → outputs.

This is the body of ``mlops monitor run`` and of the drift CronJob. What "the window against the reference" means
is the model family's (:data:`DRIFT_SOURCES`, keyed by :class:`~mlops_model.ModelKind`): a tabular model's
features and scores against its training profile, a fine-tuned language model's prompts against its fine-tuning
prompts (:mod:`mlops_monitoring.lm_drift`). Everything after the verdict (alert policy, Alertmanager / webhook
delivery with the outbox, the rollback decision, the Prometheus metrics file, the retraining request) is one path
for every family.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import ContractConfig, FeaturesConfig, MonitoringConfig, ProjectConfig, ServingConfig, TrackingConfig
from mlops_model import ModelKind
from mlops_monitoring.alert import (
    ActionResult,
    Alert,
    RollbackDecision,
    RollbackExecutor,
    build_alert,
    choose_fallback,
    dispatch,
)
from mlops_monitoring.drift import SCORE, DriftReport, compare
from mlops_monitoring.errors import AlertDeliveryError, MonitoringError, RetrainFailedError, RollbackFailedError
from mlops_monitoring.estimated_drop import EstimatedDrop, estimated_drop, reference_scores, should_roll_back
from mlops_monitoring.exporter import build_registry, push_metrics, write_metrics
from mlops_monitoring.lm_drift import lm_drift, lm_reference, read_prompts, tokenizer_encoder
from mlops_monitoring.notify import state_path
from mlops_monitoring.policy import Level, highest, quality_level
from mlops_monitoring.quality import RealizedQuality, realized_quality, served_threshold, validation_reference
from mlops_monitoring.retrain_signal import (
    RetrainRequest,
    RetrainRequester,
    request_retrain_on_critical,
    retrain_evidence,
    retrain_reason,
)
from mlops_monitoring.skew import SkewReport, replay_skew, skew_registry
from mlops_monitoring.source import (
    fetch_reference_profile,
    fetch_served_tokenizer,
    load_reference,
    load_window,
    read_table,
    sample_from_profile,
    window_source,
)

log = logging.getLogger(__name__)


@dataclass
class MonitorResult:
    """Everything one run concluded and did."""

    model: str
    level: str
    reasons: list[str]
    report: DriftReport
    quality: RealizedQuality | None
    alert: Alert
    actions: list[ActionResult]
    outputs: dict[str, str] = field(default_factory=dict)
    skew: SkewReport | None = None
    """The training/serving skew replay, when ``monitoring.skew_sample_rows`` > 0 and features were given."""
    decision: RollbackDecision | None = None
    """The rollback this run decided on (CRITICAL), whether or not it was carried out."""
    estimate: EstimatedDrop | None = None
    """The window's CBPE estimated F1 against the reference's (``monitoring.rollback_signal``)."""
    calls_rollback: bool = False
    """Whether the verdict calls for the rollback (``monitoring.rollback_signal``), carried out or not."""
    rollback_call: str = ""
    """Why the verdict did or did not call for the rollback."""
    decision_threshold: dict[str, Any] | None = None
    """The threshold the verdict decided at (:class:`mlops_model.ThresholdChoice`): value, source, note."""

    def check(self) -> None:
        """Raise when an action this run owed failed: an alert not delivered, a rollback not done.

        Raises:
            AlertDeliveryError: names the receiver's URL, its HTTP status and where the alert is kept.
            RollbackFailedError: the decided rollback failed.
            RetrainFailedError: the retraining request failed (the verdict and the rollback stand).
        """
        failed = [a for a in self.actions if a.action == "webhook" and not a.ok and a.extra.get("url")]
        if failed:
            first = failed[0]
            status = first.extra.get("status")
            raise AlertDeliveryError(
                f"{self.level} alert for {self.model} not delivered to {first.extra['url']!r} "
                f"({'HTTP ' + str(status) if status else 'no HTTP answer'}): {first.detail}; kept in "
                f"{first.extra.get('outbox')!r} and re-sent on the next run", url=first.extra["url"], status=status)
        broken = [a for a in self.actions if a.action == "rollback" and a.extra.get("failed")]
        if broken:
            raise RollbackFailedError(f"{self.level} for {self.model}: {broken[0].detail}")
        unasked = [a for a in self.actions if a.action == "retrain" and a.extra.get("status") == "failed"]
        if unasked:
            raise RetrainFailedError(f"{self.level} for {self.model} (verdict and rollback done): the retraining pull "
                                     f"request was not opened: {unasked[0].extra.get('detail') or unasked[0].detail}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON report: the drift report's fields plus quality, actions and output paths."""
        return {
            "model": self.model,
            **self.report.to_dict(),
            "level": self.level,
            "reasons": list(self.reasons),
            "drift_level": self.report.level,
            "quality": self.quality.to_dict() if self.quality else None,
            "actions": [asdict(a) for a in self.actions],
            "outputs": dict(self.outputs),
            "decision": self.decision.to_dict() if self.decision else None,
            "skew": self.skew.to_dict() if self.skew else None,
            "estimate": self.estimate.to_dict() if self.estimate else None,
            "calls_rollback": self.calls_rollback,
            "rollback_call": self.rollback_call,
            "decision_threshold": self.decision_threshold,
        }


def _feature_columns(reference: pd.DataFrame, current: pd.DataFrame, ignore: tuple[str, ...]) -> list[str]:
    return [str(c) for c in reference.columns if c in current.columns and c not in ignore and c != SCORE]


def _compare(reference: dict[str, Any] | pd.DataFrame, current: pd.DataFrame, monitoring: MonitoringConfig,
             window: dict[str, Any]) -> DriftReport:
    if isinstance(reference, dict):
        return compare(reference, current, monitoring, window=window)
    columns = _feature_columns(reference, current, monitoring.ignore_columns)
    unmatched = sorted(str(c) for c in reference.columns if c not in current.columns and c not in
                       monitoring.ignore_columns)
    if unmatched:
        log.warning("reference columns %s are not in the current data; they are not compared", unmatched)
        window = {**window, "reference_only_columns": unmatched}
    if not columns:
        raise MonitoringError(
            f"the reference and the current data share no feature column (reference has {list(reference.columns)!r})"
        )
    return compare(reference[[*columns, *([SCORE] if SCORE in reference.columns else [])]], current, monitoring,
                   window=window)


def assess(
    reference: dict[str, Any] | pd.DataFrame, current: pd.DataFrame, monitoring: MonitoringConfig, *,
    labels: pd.DataFrame | None = None, window: dict[str, Any] | None = None,
    contract: ContractConfig,
) -> tuple[Level, list[str], DriftReport, RealizedQuality | None]:
    """The verdict on a window without side effects: drift against the reference, plus realized quality.

    With a reference DataFrame the compared columns are those both frames share, minus
    ``monitoring.ignore_columns``; with a profile, the profile's columns. ``contract`` names the label (the
    reference rows' positive rate, the labels' column) and the record id predictions join their labels on.

    Returns:
        The window's level, its reasons (quality first), the drift report and the realized quality (or None).
    """
    report = _compare(reference, current, monitoring, dict(window or {}))
    quality = None
    if labels is not None:
        quality = realized_quality(current, labels, served_threshold(reference, monitoring).value,
                                   key=contract.record_id, label=contract.label)
    label = contract.label
    if isinstance(reference, dict):
        ref_metrics = reference.get("metrics") or {}
    else:  # reference rows: the label rate is all the validation facts they carry
        ref_metrics = {"positive_rate": float(reference[label].mean())} if label in reference.columns else {}
    q_level, q_reasons = quality_level(quality, monitoring, ref_metrics, validation_reference(reference, monitoring))
    return highest([Level(report.level), q_level]), [*q_reasons, *report.reasons], report, quality


def _out_dir(project: ProjectConfig, root: Path, model: str, stamp: datetime) -> Path:
    return root / project.reports_dir / "monitoring" / model / stamp.strftime("%Y%m%dT%H%M%SZ")


@dataclass(frozen=True)
class MonitorRun:
    """One monitoring run, resolved once from the sections and the caller's options; every step reads it.

    Attributes:
        monitoring: Thresholds, key features, webhook, rollback switch, outputs.
        serving: Where the prediction log is and which alias is served (its reference is compared against).
        tracking: Registry access for the reference profile and the rollback.
        project: ``reports_dir`` for the outputs.
        root: Repository root that relative paths resolve against.
        model: Model name (``fraud``).
        window: Duration of the prediction log to read (default ``monitoring.window``).
        current: A parquet file / folder / CSV to use instead of the prediction log.
        reference: A profile (``.json``) or reference rows to use instead of the served version's profile.
        labels: Delayed labels (default ``monitoring.labels_path``).
        dry_run: Report the actions without rolling back.
        html: Write Evidently's HTML report (default ``monitoring.evidently_html``).
        now: End of the window (default: when the run is built, UTC).
        execute: Carries out the :class:`RollbackDecision` a CRITICAL run makes (the layer above supplies it;
            ``None``: the decision is reported, not carried out).
        features: The ``features`` section the served model reads; with ``monitoring.skew_sample_rows`` > 0
            the window's rows are replayed against its offline store (``mlops_monitoring.skew``).
        retrain: Asked for a retraining after a CRITICAL verdict's rollback (the layer above supplies it and
            applies ``delivery.retrain``'s policy; ``None``: nothing is asked).
        kind: The served model's family (``mlops_model.kind_of`` of its training section): picks the drift source
            in :data:`DRIFT_SOURCES`.
        prompts: A fine-tuned language model's reference prompts (the JSONL ``training.causal_lm.dataset``
            names); its drift source compares the logged prompts with them.
        contract: The model config's contract (``cfg.contract``; required, ``None`` only for a model that declares
            none, which a tabular model's monitor refuses): the label and the record id the delayed labels are
            joined on.
    """

    monitoring: MonitoringConfig
    serving: ServingConfig
    tracking: TrackingConfig
    project: ProjectConfig
    root: Path
    model: str
    window: str | None = None
    current: Path | None = None
    reference: Path | None = None
    labels: Path | None = None
    dry_run: bool = False
    html: bool | None = None
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    execute: RollbackExecutor | None = None
    features: FeaturesConfig | None = None
    retrain: RetrainRequester | None = None
    kind: ModelKind = ModelKind.TABULAR
    prompts: Path | None = None
    contract: ContractConfig | None = field(kw_only=True)

    @property
    def declared(self) -> ContractConfig:
        """:attr:`contract`, for what needs it (a tabular model's verdict: its label and record id).

        Raises:
            MonitoringError: the model declares no contract (names its ``configs/models/<model>.yaml``).
        """
        if self.contract is None:
            raise MonitoringError(f"monitoring tabular model {self.model!r} needs the model config's contract (its "
                                  f"label and record id), and it declares none; expected a section contract in "
                                  f"configs/models/{self.model}.yaml")
        return self.contract

    @property
    def want_html(self) -> bool:
        """Whether Evidently's HTML report is written: ``html``, else ``monitoring.evidently_html``."""
        return self.monitoring.evidently_html if self.html is None else self.html


def run_monitor(run: MonitorRun) -> MonitorResult:
    """Run the monitor once over a window of the prediction log (or a batch) and act on the verdict.

    The result's :meth:`MonitorResult.check` raises when an alert was not delivered or a rollback failed.

    Raises:
        MonitoringError: no data in the window, too few rows, no reference, or unusable inputs.
    """
    monitoring, project, root, model = run.monitoring, run.project, run.root, run.model
    token_env = monitoring.webhook_token_env
    if monitoring.webhook_url and token_env and not os.environ.get(token_env):  # fail now, not when alerting
        raise MonitoringError(f"webhook token env var {token_env!r} is not set; export it or unset it in config")
    labels_path = run.labels or (root / monitoring.labels_path if monitoring.labels_path else None)
    label_rows = read_table(labels_path, "labels") if labels_path is not None else None
    source = drift_source(run.kind)
    assessed = source.assess(run, label_rows)

    out_dir = _out_dir(project, root, model, run.now)
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = {"json": str(out_dir / "drift.json")}
    if run.want_html and not source.evidently_html:
        log.info("no Evidently HTML for a %r model: its data-drift report compares tabular columns", run.kind.value)
    elif run.want_html:
        from mlops_monitoring.evidently_report import write_evidently_html

        ref = assessed.reference
        ref_rows = ref if isinstance(ref, pd.DataFrame) else sample_from_profile(
            ref, min(monitoring.evidently_max_rows, int(ref["n_rows"])), seed=project.seed)
        report = assessed.report
        numeric = [n for n, c in report.columns.items() if c.kind != "categorical"]
        categorical = [n for n, c in report.columns.items() if c.kind == "categorical"]
        write_evidently_html(ref_rows, assessed.frame, numeric, categorical, out_dir / "drift.html",
                             psi_threshold=monitoring.psi_warning, max_rows=monitoring.evidently_max_rows,
                             seed=project.seed)
        outputs["html"] = str(out_dir / "drift.html")
    return _act(run, assessed, out_dir, outputs)


@dataclass(frozen=True)
class _Assessed:
    """The verdict on the window before any action: the rows compared (or their sample), the reference shown
    in the HTML report, the level and its reasons, the drift report, realized quality and skew."""

    frame: pd.DataFrame
    reference: dict[str, Any] | pd.DataFrame
    level: Level
    reasons: list[str]
    report: DriftReport
    quality: RealizedQuality | None
    skew: SkewReport | None
    quality_level: Level = Level.OK
    scores: np.ndarray | None = None
    reference_scores: np.ndarray | None = None


def _assess_duckdb(run: MonitorRun, labels: pd.DataFrame | None) -> _Assessed:
    """``monitoring.engine: duckdb`` or ``spark``: the window stays in parquet; only aggregates and samples come
    back."""
    from mlops_monitoring.drift_duckdb import TableSource
    from mlops_monitoring.window_duckdb import assess_window

    monitoring, current, reference = run.monitoring, run.current, run.reference
    info: dict[str, Any]
    if current is not None:
        source, info = TableSource.from_path(current, "current batch"), {"source": str(current)}
    else:
        from mlops_serving import resolve_prediction_log_uri

        log_uri = resolve_prediction_log_uri(run.serving.prediction_log_uri, run.root)
        source, info = window_source(log_uri, run.model, run.window or monitoring.window, now=run.now)
    loaded: list[dict[str, Any] | TableSource] = []

    def load() -> dict[str, Any] | TableSource:  # after the window's row count is checked, as in memory
        if reference is None:
            loaded.append(fetch_reference_profile(run.tracking, run.root, run.model, run.serving.alias))
        elif reference.suffix == ".json":
            profile = load_reference(reference)
            assert isinstance(profile, dict)
            loaded.append(profile)
        else:
            loaded.append(TableSource.from_path(reference, "reference"))
        return loaded[0]
    features = run.features
    skew_rows = monitoring.skew_sample_rows if features is not None and current is None else 0
    done = assess_window(monitoring, load, source, info, labels=labels, contract=run.declared,
                         sample_rows=monitoring.evidently_max_rows if run.want_html else 0, skew_rows=skew_rows,
                         seed=run.project.seed)
    skew = None
    if skew_rows and features is not None and done.skew_sample is not None:
        skew = replay_skew(features, run.root, done.skew_sample, model=run.model, sample=skew_rows,
                           seed=run.project.seed)
    ref = loaded[0]
    q_level, q_reasons = quality_level(done.quality, monitoring, done.reference_metrics,
                                       validation_reference(ref, monitoring))
    level = highest([Level(done.report.level), q_level])
    shown: dict[str, Any] | pd.DataFrame = ref if isinstance(ref, dict) else (
        done.reference_sample if done.reference_sample is not None else pd.DataFrame())  # shown only with html
    return _Assessed(done.current_sample, shown, level, [*q_reasons, *done.report.reasons], done.report,
                     done.quality, skew, q_level, done.scores, done.reference_scores)


def _read_window(run: MonitorRun) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The rows to judge, in memory: ``--current``'s batch, else the prediction log's window."""
    if run.current is not None:
        return read_table(run.current, "current batch"), {"source": str(run.current)}
    from mlops_serving import resolve_prediction_log_uri

    log_uri = resolve_prediction_log_uri(run.serving.prediction_log_uri, run.root)
    return load_window(log_uri, run.model, run.window or run.monitoring.window, now=run.now)


def _assess_pandas(run: MonitorRun, labels: pd.DataFrame | None) -> _Assessed:
    """``monitoring.engine: pandas``: the window is read into memory."""
    monitoring, current, root = run.monitoring, run.current, run.root
    frame, info = _read_window(run)
    skew = None
    if run.features is not None and monitoring.skew_sample_rows > 0 and current is None:  # a batch: no serving time
        skew = replay_skew(run.features, root, frame, model=run.model, sample=monitoring.skew_sample_rows,
                           seed=run.project.seed)
    if "degraded" in frame.columns and frame["degraded"].any():
        # answered with default features while the online store was down: a serving incident, not drift
        info["degraded_rows_excluded"] = int(frame["degraded"].sum())
        log.warning("%d degraded predictions (default features) are left out of the comparison",
                    info["degraded_rows_excluded"])
        frame = frame[~frame["degraded"].astype(bool)].reset_index(drop=True)
    if len(frame) < monitoring.min_rows:
        raise MonitoringError(
            f"{info.get('source')!r} holds {len(frame)} rows in the window {info.get('window', 'given')!r}; "
            f"at least monitoring.min_rows={monitoring.min_rows} are needed for a verdict (widen --window)"
        )
    ref = load_reference(run.reference) if run.reference is not None else fetch_reference_profile(
        run.tracking, root, run.model, run.serving.alias)
    level, reasons, report, quality = assess(ref, frame, monitoring, labels=labels, window=info,
                                             contract=run.declared)
    q_level, _ = quality_level(quality, monitoring, (ref.get("metrics") or {}) if isinstance(ref, dict) else {},
                               validation_reference(ref, monitoring))
    scores = frame[SCORE].to_numpy(dtype=np.float64) if SCORE in frame.columns else None
    return _Assessed(frame, ref, level, reasons, report, quality, skew, q_level, scores, reference_scores(ref))


def _assess_features(run: MonitorRun, labels: pd.DataFrame | None) -> _Assessed:
    """A tabular model: the window's features and scores against the training profile (``monitoring.engine``)."""
    if run.monitoring.engine in ("duckdb", "spark"):
        return _assess_duckdb(run, labels)
    return _assess_pandas(run, labels)


def _assess_lm(run: MonitorRun, labels: pd.DataFrame | None) -> _Assessed:
    """A fine-tuned language model: the logged prompts (length; token ids where ``serving.lm.log_text`` keeps
    their text) against the fine-tuning prompts, encoded by the served version's tokenizer
    (:func:`mlops_monitoring.lm_drift.lm_drift`). ``--reference`` names an :func:`lm_reference` JSON instead."""
    monitoring, root = run.monitoring, run.root
    if run.labels is not None:
        raise MonitoringError(f"--labels {str(run.labels)!r}: realized quality needs scored predictions, and a "
                              f"{run.kind.value!r} model's log holds generations; leave --labels out")
    frame, info = _read_window(run)
    if len(frame) < monitoring.min_rows:
        raise MonitoringError(
            f"{info.get('source')!r} holds {len(frame)} LM requests in the window {info.get('window', 'given')!r}; "
            f"at least monitoring.min_rows={monitoring.min_rows} are needed for a verdict (widen --window)")
    if run.reference is not None:
        reference, encode = _lm_reference_file(run.reference), None
    else:
        if run.prompts is None:
            raise MonitoringError(f"no reference prompts for {run.model!r}: set training.causal_lm.dataset (the "
                                  "fine-tuning prompts) or pass --reference an LM reference JSON")
        with tempfile.TemporaryDirectory() as tmp:
            folder, version = fetch_served_tokenizer(run.tracking, root, run.model, run.serving.alias, Path(tmp))
            encode = tokenizer_encoder(folder)
        reference = {**lm_reference(read_prompts(run.prompts), encode),
                     "source": {"prompts": str(run.prompts), "tokenizer_version": version}}
    report = lm_drift(reference, frame, monitoring, encode=encode)
    report.window.update(info)
    return _Assessed(frame, reference, Level(report.level), list(report.reasons), report, None, None)


def _lm_reference_file(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise MonitoringError(f"LM reference {str(path)!r} is not a readable JSON file: {exc}") from None
    missing = [k for k in ("prompt_tokens", "top_ids", "id_counts") if not isinstance(doc, dict) or k not in doc]
    if missing:
        raise MonitoringError(f"LM reference {str(path)!r} lacks {missing}; expected what "
                              "mlops_monitoring.lm_reference writes")
    return dict(doc)


@dataclass(frozen=True)
class DriftSource:
    """How one model family's window is compared with its reference."""

    assess: Callable[[MonitorRun, pd.DataFrame | None], _Assessed]
    """The verdict on the window, before any action (the delayed labels, if any, passed in)."""
    evidently_html: bool
    """Whether Evidently's tabular data-drift report applies (``--html``)."""


DRIFT_SOURCES: dict[ModelKind, DriftSource] = {
    ModelKind.TABULAR: DriftSource(_assess_features, evidently_html=True),
    ModelKind.HF_CAUSAL_LM: DriftSource(_assess_lm, evidently_html=False),
}
"""The drift source of each served family (a byte-level LM is not served, so it has no traffic to watch): the one
place monitoring chooses by family."""


def drift_source(kind: ModelKind) -> DriftSource:
    """The family's drift source.

    Raises:
        MonitoringError: no drift source is registered for ``kind``.
    """
    try:
        return DRIFT_SOURCES[kind]
    except KeyError:
        raise MonitoringError(f"no drift source for model kind {kind.value!r} (it is not served, so there is no "
                              f"traffic to monitor); drift sources exist for {[k.value for k in DRIFT_SOURCES]}"
                              ) from None


def _act(run: MonitorRun, assessed: _Assessed, out_dir: Path, outputs: dict[str, str]) -> MonitorResult:
    """Alert, decide the rollback, write the metrics and the JSON report."""
    monitoring, project, root, model, now = run.monitoring, run.project, run.root, run.model, run.now
    level, reasons, report, quality, skew = (assessed.level, assessed.reasons, assessed.report, assessed.quality,
                                             assessed.skew)
    threshold = served_threshold(assessed.reference, monitoring)
    estimate = estimated_drop(assessed.scores, assessed.reference_scores, monitoring, threshold=threshold.value)
    if threshold.disagrees or threshold.source == "legacy":  # the verdict names a threshold that is not the model's
        reasons = [*reasons, f"decision threshold: {threshold.note}"]
    called, why = should_roll_back(monitoring, drift_critical=report.level == Level.CRITICAL.value,
                                  quality_critical=assessed.quality_level is Level.CRITICAL, estimate=estimate)
    if called and level is not Level.CRITICAL:  # only the estimate calls below CRITICAL (rollback_signal estimate)
        level, reasons = Level.CRITICAL, [f"CRITICAL: {estimate.reason}", *reasons]
    elif level is Level.CRITICAL and not called:
        reasons = [*reasons, f"rollback withheld (monitoring.rollback_signal: estimate): {why}"]
    alert = build_alert(model, level, reasons, report, quality, out_dir / "drift.json")
    decision = None
    if called and monitoring.auto_rollback and not run.dry_run:
        decision = choose_fallback(run.tracking, root, model, run.serving.alias, alert)
    actions = dispatch(alert, monitoring, state_file=state_path(root / project.state_dir, monitoring, model),
                       decision=decision, execute=run.execute, dry_run=run.dry_run, now=now)
    if level is Level.CRITICAL:  # after the rollback: a retraining is the slow fix, the rollback the fast one
        evidence = retrain_evidence(model, level.value, reasons, report, quality, decision, actions,
                                    str(out_dir / "drift.json"))
        asked = request_retrain_on_critical(run.retrain, RetrainRequest(model, retrain_reason(report), evidence, now),
                                            dry_run=run.dry_run)
        if asked is not None:
            actions.append(asked)
    done = {a.action: a.ok for a in actions}
    registry = build_registry(model, report, level, time.time(), quality, done)
    metrics_path = root / project.reports_dir / monitoring.metrics_file
    outputs["metrics"] = str(write_metrics(registry, metrics_path))
    if skew is not None:
        skew_path = metrics_path.with_name(f"{metrics_path.stem}-skew.prom")
        outputs["skew_metrics"] = str(write_metrics(skew_registry(skew), skew_path))
    if monitoring.pushgateway_url:
        try:
            push_metrics(registry, monitoring.pushgateway_url, model)
            actions.append(ActionResult("pushgateway", True, monitoring.pushgateway_url))
        except MonitoringError as exc:
            log.error("%s", exc)
            actions.append(ActionResult("pushgateway", False, str(exc)))
    result = MonitorResult(model=model, level=level.value, reasons=reasons, report=report, quality=quality,
                           alert=alert, actions=actions, outputs=outputs, decision=decision, skew=skew,
                           estimate=estimate, calls_rollback=called, rollback_call=why,
                           decision_threshold=threshold.as_dict())
    (out_dir / "drift.json").write_text(json.dumps(result.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
    log.info("monitor %s: %s (%s)", model, level.value, outputs["json"])
    return result
