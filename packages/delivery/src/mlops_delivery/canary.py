"""Canary analysis: is the canary version as healthy as the stable one? Answers promote, hold or rollback.

The verdict is ``mlops_delivery.sequential``'s (always-valid tests, ``delivery.sequential``) unless
``delivery.sequential.verdict`` is ``threshold``; the fixed thresholds below then only veto a promotion.

Evidence per variant comes from its predictor's Prometheus metrics (5xx error rate; p99 latency from the
latency histogram) and from the prediction log (score distribution, compared by PSI). Thresholds are the
``delivery`` section's. Too few canary requests, or no stable baseline, means ``hold``: not enough evidence
either way. Any failed check with enough evidence means ``rollback``; all checks passing means ``promote``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from mlops_config import DeliveryConfig
from mlops_delivery.checks import Check, decide_checks, error_rate_check, requests_check
from mlops_delivery.errors import MetricsError
from mlops_delivery.estimate_guard import estimate_guard
from mlops_delivery.metrics import (
    counter_total,
    histogram_buckets,
    histogram_quantile,
    parse_samples,
    population_stability_index,
    read_metrics_text,
)
from mlops_delivery.sequential import (
    SequentialVerdict,
    arm_counts,
    band_counts,
    guarded_decision,
    sequential_verdict,
    skew_guard,
    slow_count,
)
from mlops_model import ThresholdChoice, resolve_threshold

logger = logging.getLogger(__name__)

Decision = Literal["promote", "hold", "rollback"]
ThresholdOf = Callable[[str], ThresholdChoice]
"""A registry version → its decision threshold (:func:`mlops_serving.version_thresholds`)."""


@dataclass(frozen=True)
class VariantEvidence:
    """What one variant's metrics and log say."""

    version: int
    requests: float
    """Requests seen: answered plus failed with 5xx."""
    errors: float
    """Requests failed with a 5xx status."""
    error_rate: float | None
    p99_s: float | None
    logged_predictions: int
    slow_requests: float | None = None
    """Requests slower than ``delivery.tabular.sequential.slow_ms`` (sequential verdict only)..."""
    latency_count: float | None = None
    """... out of this many in the latency histogram."""


@dataclass(frozen=True)
class CanaryAnalysis:
    """The decision, every reason for it, and the evidence it rests on."""

    decision: Decision
    reasons: tuple[str, ...]
    stable: VariantEvidence
    canary: VariantEvidence
    prediction_psi: float | None
    thresholds: dict[str, float]
    threshold_decision: Decision | None = None
    """What the fixed thresholds alone answer (the guard), when the sequential verdict decides."""
    sequential: SequentialVerdict | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form."""
        return {"decision": self.decision, "reasons": list(self.reasons), "stable": asdict(self.stable),
                "canary": asdict(self.canary), "prediction_psi": self.prediction_psi, "thresholds": self.thresholds,
                "threshold_decision": self.threshold_decision,
                "sequential": self.sequential.to_dict() if self.sequential else None}


def variant_evidence(delivery: DeliveryConfig, metrics_text: str, scores: np.ndarray, version: int, *,
                     source: str, model: str | None = None) -> VariantEvidence:
    """Error rate and p99 latency from one predictor's exposition, plus its logged prediction count."""
    samples = parse_samples(metrics_text, source=source)
    labels = {"model": model} if model else {}
    if any(s.labels.get("version") == str(version) for s in samples):
        # one exposition serving both variants (the local canary): keep only this version's series
        labels["version"] = str(version)
    names = {s.name for s in samples}
    for metric, suffix in ((delivery.requests_metric.removesuffix("_total"), ("", "_total")),
                           (delivery.tabular.latency_metric, ("_bucket",))):
        if not any(f"{metric}{x}" in names for x in suffix):
            raise MetricsError(f"{source!r} has no {metric!r} series; set delivery.requests_metric / "
                               f"delivery.tabular.latency_metric to the serving exporter's names")
    answered = counter_total(samples, delivery.requests_metric, labels=labels)
    errors = counter_total(samples, delivery.errors_metric, labels=labels, label_prefix={"status": "5"})
    buckets = histogram_buckets(samples, delivery.tabular.latency_metric, labels=labels)
    p99 = histogram_quantile(0.99, buckets) if answered > 0 else None
    return _evidence(delivery, version, answered, errors, p99, scores, buckets, source=source)


def decide(delivery: DeliveryConfig, stable: VariantEvidence, canary: VariantEvidence,
           psi: float | None) -> tuple[Decision, tuple[str, ...]]:
    """Apply the thresholds; return the decision and one reason per check (passed or not)."""
    checks = [requests_check(delivery, canary.requests),
              error_rate_check(delivery, stable.error_rate, canary.error_rate)]
    if stable.p99_s is None or canary.p99_s is None:
        checks.append(Check("no latency observations on one side: cannot compare p99", None))
    else:
        ratio = canary.p99_s / stable.p99_s if stable.p99_s > 0 else float("inf")
        limit_s = stable.p99_s * delivery.max_p99_ratio + delivery.p99_slack_ms / 1000
        checks.append(Check(f"p99 latency canary {canary.p99_s * 1000:.2f} ms vs stable {stable.p99_s * 1000:.2f} ms "
                            f"(x{ratio:.2f}; limit x{delivery.max_p99_ratio} + {delivery.p99_slack_ms:g} ms "
                            f"= {limit_s * 1000:.2f} ms)", canary.p99_s > limit_s))
    if psi is None:
        checks.append(Check("no logged predictions on one side: cannot compare score distributions", None))
    else:
        checks.append(Check(f"prediction PSI {psi:.4f} (max {delivery.tabular.max_prediction_psi})",
                            psi > delivery.tabular.max_prediction_psi))
    return decide_checks(checks)


DecideFn = Callable[[DeliveryConfig, VariantEvidence, VariantEvidence, float | None], tuple[Decision, tuple[str, ...]]]
"""The decision rule: evidence of both variants and the prediction PSI in, decision and reasons out.
:func:`decide` is the default; under ``delivery.sequential.verdict: sequential`` it only guards (vetoes) a
promotion that the sequential verdict makes."""


def _scores(log: pd.DataFrame, version: int) -> np.ndarray:
    if log.empty:
        return np.empty(0)
    for col in ("model_version", "score"):
        if col not in log.columns:
            raise MetricsError(f"prediction log lacks column {col!r}; columns: {sorted(log.columns)}")
    rows = log[log["model_version"].astype(str) == str(version)]
    return rows["score"].to_numpy(dtype=float)


def analyze_canary(
    delivery: DeliveryConfig,
    stable_metrics: str,
    canary_metrics: str,
    log: pd.DataFrame,
    *,
    stable_version: int,
    canary_version: int,
    model: str | None = None,
    decide_fn: DecideFn | None = None,
    skew_mismatch_rate: float | None = None,
    threshold_of: ThresholdOf | None = None,
) -> CanaryAnalysis:
    """Compare canary with stable and decide.

    Args:
        delivery: Thresholds and metric names.
        stable_metrics: Text exposition scraped from the stable predictor.
        canary_metrics: Text exposition scraped from the canary predictor.
        log: Prediction log rows (contract columns ``model_version`` and ``score``).
        stable_version: Registry version of the stable model (selects its log rows).
        canary_version: Registry version of the canary model.
        model: When set, only metric series with this ``model`` label count.
        decide_fn: The decision rule (default :func:`decide`).
        skew_mismatch_rate: A skew replay's mismatch rate; a promotion needs one at most
            ``delivery.tabular.max_skew_mismatch_rate`` when that is set.
        threshold_of: Version → its decision threshold (:func:`mlops_serving.version_thresholds`), for the
            estimated-F1 check; ``None``: ``delivery.tabular.canary_estimate_threshold``, else the legacy 0.5.
    """
    if stable_version == canary_version:
        raise MetricsError(f"stable and canary are both version {stable_version}: nothing to compare")
    stable_scores, canary_scores = _scores(log, stable_version), _scores(log, canary_version)
    stable = variant_evidence(delivery, stable_metrics, stable_scores, stable_version, source="stable", model=model)
    canary = variant_evidence(delivery, canary_metrics, canary_scores, canary_version, source="canary", model=model)
    return _conclude(delivery, stable, canary, stable_scores, canary_scores, decide_fn or decide,
                     skew_mismatch_rate, threshold_of)


def _conclude(delivery: DeliveryConfig, stable: VariantEvidence, canary: VariantEvidence, stable_scores: np.ndarray,
              canary_scores: np.ndarray, decide_fn: DecideFn, skew_mismatch_rate: float | None,
              threshold_of: ThresholdOf | None = None) -> CanaryAnalysis:
    psi = (population_stability_index(stable_scores, canary_scores, bins=delivery.psi_bins, floor=delivery.psi_floor)
           if stable_scores.size and canary_scores.size else None)
    decision, reasons = decide_fn(delivery, stable, canary, psi)
    threshold_decision, verdict = None, None
    if delivery.sequential.verdict == "sequential":
        verdict = sequential_verdict(delivery.sequential, delivery.tabular.sequential,
                                     _arm(delivery, stable, stable_scores), _arm(delivery, canary, canary_scores),
                                     min_requests=delivery.min_canary_requests)
        threshold_decision = decision
        decision, reasons = guarded_decision(verdict, decision, reasons, guard=delivery.sequential.threshold_guard)
    decision, reasons = skew_guard(decision, reasons, skew_mismatch_rate, delivery.tabular.max_skew_mismatch_rate)
    if delivery.tabular.canary_max_estimated_f1_drop is not None:  # each arm at its own threshold (model.json)
        key = "delivery.tabular.canary_estimate_threshold"
        st, ct = ((threshold_of(str(stable.version)), threshold_of(str(canary.version))) if threshold_of else
                  (resolve_threshold(None, delivery.tabular.canary_estimate_threshold, override_key=key,
                                     model=f"v{v.version}") for v in (stable, canary)))
        decision, reasons = estimate_guard(decision, reasons, stable_scores, canary_scores,
                                           limit=delivery.tabular.canary_max_estimated_f1_drop, threshold=st.value,
                                           canary_threshold=ct.value,
                                           notes=[c.note for c in (st, ct) if c.disagrees or c.source == "legacy"])
    logger.info("canary v%s vs stable v%s: %s", canary.version, stable.version, decision)
    thresholds = {"max_error_rate_increase": delivery.max_error_rate_increase, "max_p99_ratio": delivery.max_p99_ratio,
                  "p99_slack_ms": delivery.p99_slack_ms,
                  "max_prediction_psi": delivery.tabular.max_prediction_psi,
                  "min_canary_requests": float(delivery.min_canary_requests)}
    return CanaryAnalysis(decision=decision, reasons=reasons, stable=stable, canary=canary, prediction_psi=psi,
                          thresholds=thresholds, threshold_decision=threshold_decision, sequential=verdict)


def _arm(delivery: DeliveryConfig, evidence: VariantEvidence, scores: np.ndarray) -> Any:
    return arm_counts(requests=evidence.requests, errors=evidence.errors,
                      answered=evidence.latency_count or 0.0, slow=evidence.slow_requests or 0.0,
                      bands=band_counts(scores, delivery.tabular.sequential.score_edges))


def prometheus_evidence(delivery: DeliveryConfig, figures: dict[str, dict[str, Any]], scores: np.ndarray,
                        version: int) -> VariantEvidence:
    """One version's evidence from :func:`mlops_delivery.prometheus.version_figures` and its logged scores."""
    key = str(version)
    answered = figures["answered"].get(key, 0.0)
    errors = figures["errors"].get(key, 0.0)
    p99 = figures["p99_s"].get(key) if answered > 0 else None
    return _evidence(delivery, version, answered, errors, p99, scores, figures.get("buckets", {}).get(key, []),
                     source="Prometheus")


def _evidence(delivery: DeliveryConfig, version: int, answered: float, errors: float, p99: float | None,
              scores: np.ndarray, buckets: list[tuple[float, float]], *, source: str) -> VariantEvidence:
    """One variant's evidence; the slow count (sequential verdict only) from cumulative latency buckets."""
    requests = answered + errors
    tabular = delivery.tabular
    slow = (slow_count(buckets, tabular.sequential.slow_ms / 1000, source=f"{source} {tabular.latency_metric}")
            if delivery.sequential.verdict == "sequential" else None)
    return VariantEvidence(version=version, requests=requests, errors=errors,
                           error_rate=errors / requests if requests > 0 else None, p99_s=p99,
                           logged_predictions=int(scores.size), slow_requests=slow,
                           latency_count=buckets[-1][1] if buckets else 0.0)


def _read_scores(log_uri: str | Path, model: str, since: datetime | None, versions: list[int]) -> pd.DataFrame:
    """Only the two versions' partitions of the window, and only the columns compared."""
    from mlops_serving import PredictionLogError, read_prediction_log  # the log's one reader (docs/CONTRACTS.md)

    try:
        return read_prediction_log(log_uri, model, since=since, versions=versions, columns=["model_version", "score"])
    except PredictionLogError as exc:
        raise MetricsError(str(exc)) from None


def analyze_canary_prometheus(
    delivery: DeliveryConfig,
    prometheus_url: str,
    log_uri: str | Path,
    model: str,
    *,
    stable_version: int,
    canary_version: int,
    since: datetime | None = None,
    decide_fn: DecideFn | None = None,
    skew_mismatch_rate: float | None = None,
    threshold_of: ThresholdOf | None = None,
) -> CanaryAnalysis:
    """Compare canary with stable from Prometheus (error rate, p99 per version) and the shared prediction log.

    Runs the same from a workflow runner or a Job: it needs only Prometheus's HTTP API and the log's
    location, never a predictor's address.

    Args:
        delivery: Thresholds, metric names, ``canary_rate_window``.
        prometheus_url: Prometheus HTTP API base (``delivery.prometheus_url``).
        log_uri: The prediction log (``serving.prediction_log_uri``), read through ``mlops_serving``.
        model: Model name (the ``model`` label and the log's model).
        stable_version: Registry version serving the rest of the traffic.
        canary_version: Registry version under test.
        since: Only prediction-log rows at or after this time (UTC), e.g. when the canary step started, and
            Prometheus's increases over the same span instead of ``canary_rate_window``.
        decide_fn: The threshold rule (default :func:`decide`).
        skew_mismatch_rate: A skew replay's mismatch rate (see :func:`analyze_canary`).
        threshold_of: Each version's decision threshold (see :func:`analyze_canary`).
    """
    from mlops_delivery.prometheus import version_figures

    if stable_version == canary_version:
        raise MetricsError(f"stable and canary are both version {stable_version}: nothing to compare")
    figures = version_figures(delivery, prometheus_url, model, since=since)
    log = _read_scores(log_uri, model, since, [stable_version, canary_version])
    stable_scores, canary_scores = _scores(log, stable_version), _scores(log, canary_version)
    stable = prometheus_evidence(delivery, figures, stable_scores, stable_version)
    canary = prometheus_evidence(delivery, figures, canary_scores, canary_version)
    return _conclude(delivery, stable, canary, stable_scores, canary_scores, decide_fn or decide,
                     skew_mismatch_rate, threshold_of)


def canary_versions(delivery: DeliveryConfig, root: Path, model: str, stable_version: int | None,
                    canary_version: int | None) -> tuple[int, int]:
    """The versions given, or what the canary environment's overlay under ``root`` says runs (stable, canary).

    Raises:
        MetricsError: no canary version given and none runs there per git.
    """
    if stable_version is None or canary_version is None:
        from mlops_delivery.promotion import gitops_status, stage_env

        prod = gitops_status(delivery, root, model)[stage_env(delivery, "canary")]
        if canary_version is None and prod.canary_version is None:
            raise MetricsError(f"no canary of {model} runs in {prod.env} (per git); pass the canary version")
        stable_version = prod.stable_version if stable_version is None else stable_version
        canary_version = prod.canary_version if canary_version is None else canary_version
    if stable_version is None or canary_version is None:
        raise MetricsError(f"no stable version of {model} to compare the canary with (per git); pass "
                           "--stable-version")
    return stable_version, canary_version


def analyze_canary_sources(
    delivery: DeliveryConfig,
    root: Path,
    log_uri: str | Path,
    model: str,
    stable_source: str | None,
    canary_source: str | None,
    *,
    stable_version: int | None = None,
    canary_version: int | None = None,
    since: datetime | None = None,
    skew_mismatch_rate: float | None = None,
    threshold_of: ThresholdOf | None = None,
) -> CanaryAnalysis:
    """Read the metrics (Prometheus, or both predictors' ``/metrics``), read the prediction log, and decide.

    With no sources the figures come from ``delivery.prometheus_url`` (:func:`analyze_canary_prometheus`);
    otherwise each source is one predictor's ``/metrics`` (or a saved copy), so every series in it counts.
    Versions default to what the production overlay under ``root`` says runs (its stable and canary versions).
    """
    if (stable_source is None) != (canary_source is None):
        raise MetricsError("give both --stable-metrics and --canary-metrics, or neither (then Prometheus is asked)")
    if stable_source is None and not delivery.prometheus_url:
        raise MetricsError("no metrics source: set delivery.prometheus_url, or give --stable-metrics and "
                           "--canary-metrics (the predictors' /metrics)")

    stable_version, canary_version = canary_versions(delivery, root, model, stable_version, canary_version)
    if stable_source is None or canary_source is None:
        assert delivery.prometheus_url is not None
        return analyze_canary_prometheus(delivery, delivery.prometheus_url, log_uri, model,
                                         stable_version=stable_version, canary_version=canary_version, since=since,
                                         skew_mismatch_rate=skew_mismatch_rate, threshold_of=threshold_of)
    log = _read_scores(log_uri, model, since, [stable_version, canary_version])
    return analyze_canary(delivery, read_metrics_text(stable_source), read_metrics_text(canary_source), log,
                          stable_version=stable_version, canary_version=canary_version,
                          skew_mismatch_rate=skew_mismatch_rate, threshold_of=threshold_of)
