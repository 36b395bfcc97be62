"""The canary evidence of each model family, and the look repeated until the verdict decides.

``mlops canary analyze`` looks at the canary again and again (every ``interval_s``, for up to ``wait_s``) while the
answer is ``hold``; the sequential verdict stays valid however often it is looked at
(:mod:`mlops_delivery.sequential`). What one look reads is the family's, registered in :data:`CANARY_EVIDENCE`
under its :class:`~mlops_model.ModelKind`:

- a tabular model: error rate and latency from Prometheus or both predictors' ``/metrics``, scores from the shared
  prediction log (:func:`mlops_delivery.canary.analyze_canary_sources`);
- a fine-tuned language model: error rate, time to first token and decode rate from Prometheus
  (:func:`mlops_delivery.lm_canary.lm_version_counts`, as promote.yml's analyze steps ask it) or both LM servers'
  ``/metrics``, response lengths and truncations from the shared prediction log
  (:func:`mlops_delivery.lm_canary.analyze_lm_counts`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from mlops_config import DeliveryConfig
from mlops_delivery.canary import CanaryAnalysis, ThresholdOf, analyze_canary_sources, canary_versions
from mlops_delivery.errors import MetricsError
from mlops_delivery.lm_canary import LMCanaryAnalysis, analyze_lm_canary, analyze_lm_counts, lm_version_counts
from mlops_delivery.metrics import read_metrics_text
from mlops_model import ModelKind

logger = logging.getLogger(__name__)

CanaryVerdict = CanaryAnalysis | LMCanaryAnalysis
"""One look's answer: ``decision``, ``reasons``, both sides' evidence (``stable.version``, ``canary.version``),
``sequential`` and ``threshold_decision``, ``to_dict()``."""


@dataclass(frozen=True)
class CanaryLook:
    """What one look at the canary reads, resolved once from the sections and the caller's options."""

    delivery: DeliveryConfig
    root: Path
    """Repository root: the overlay under it names the versions that are not given."""
    log_uri: str | Path
    """The shared prediction log (``serving.prediction_log_uri``)."""
    model: str
    stable_source: str | None = None
    """Stable server's ``/metrics`` URL or a saved exposition (``None``: Prometheus, where the family reads it)."""
    canary_source: str | None = None
    stable_version: int | None = None
    canary_version: int | None = None
    since: datetime | None = None
    """Only prediction-log rows at or after this time (UTC)."""
    skew_mismatch_rate: float | None = None
    stable_before: str | None = None
    """An exposition of the stable server taken when the canary's traffic started: counts start there."""
    canary_before: str | None = None
    threshold_of: ThresholdOf | None = None
    """Version → its recorded decision threshold, for the estimated-F1 check (:func:`mlops_serving.
    version_thresholds`); ``None``: ``delivery.tabular.canary_estimate_threshold``, else the legacy 0.5."""


def _tabular(look: CanaryLook) -> CanaryAnalysis:
    if look.stable_before is not None or look.canary_before is not None:
        raise MetricsError("--stable-before / --canary-before apply to a language model's canary; a tabular "
                           "model's is counted by Prometheus or from the predictors' whole /metrics")
    return analyze_canary_sources(look.delivery, look.root, look.log_uri, look.model, look.stable_source,
                                  look.canary_source, stable_version=look.stable_version,
                                  canary_version=look.canary_version, since=look.since,
                                  skew_mismatch_rate=look.skew_mismatch_rate, threshold_of=look.threshold_of)


def _hf_causal_lm(look: CanaryLook) -> LMCanaryAnalysis:
    from mlops_serving import PredictionLogError, read_prediction_log  # the log's one reader (docs/CONTRACTS.md)

    if (look.stable_source is None) != (look.canary_source is None):
        raise MetricsError("give both --stable-metrics and --canary-metrics (the LM servers' /metrics), or neither "
                           "(Prometheus, delivery.prometheus_url)")
    prometheus = look.stable_source is None
    if prometheus and not look.delivery.prometheus_url:
        raise MetricsError(f"{look.model!r} is a language model: its canary is read from Prometheus "
                           "(delivery.prometheus_url is not set) or from both LM servers' /metrics (give "
                           "--stable-metrics and --canary-metrics, URLs or saved expositions)")
    if prometheus and (look.stable_before is not None or look.canary_before is not None):
        raise MetricsError("--stable-before / --canary-before apply to the servers' expositions; Prometheus counts "
                           "over delivery.canary_rate_window")
    if look.skew_mismatch_rate is not None:
        raise MetricsError("--skew-report is a tabular model's feature replay; a language model has none")
    stable, canary = canary_versions(look.delivery, look.root, look.model, look.stable_version,
                                     look.canary_version)
    if stable == canary:
        raise MetricsError(f"stable and canary are both version {stable}: nothing to compare")
    try:
        log = read_prediction_log(look.log_uri, look.model, since=look.since, versions=[stable, canary])
    except PredictionLogError as exc:
        raise MetricsError(str(exc)) from None
    if prometheus:
        url = str(look.delivery.prometheus_url)
        counts = lm_version_counts(look.delivery, url, look.model)
        missing = [v for v in (stable, canary) if v not in counts]
        if missing:
            raise MetricsError(f"Prometheus at {url!r} holds no {look.model!r} series of version(s) {missing} in the "
                               f"last {look.delivery.canary_rate_window} (it has {sorted(counts)}): is the "
                               "canary's server scraped, and has it had traffic?")
        return analyze_lm_counts(look.delivery, counts[stable], counts[canary], log=log, stable_version=stable,
                                 canary_version=canary, stable_source=f"{url} v{stable}",
                                 canary_source=f"{url} v{canary}")
    assert look.stable_source is not None and look.canary_source is not None
    before = {side: None if src is None else read_metrics_text(src)
              for side, src in (("stable", look.stable_before), ("canary", look.canary_before))}
    return analyze_lm_canary(look.delivery, stable_metrics=read_metrics_text(look.stable_source),
                             canary_metrics=read_metrics_text(look.canary_source), log=log, stable_version=stable,
                             canary_version=canary, model=look.model, stable_source=look.stable_source,
                             canary_source=look.canary_source, stable_before=before["stable"],
                             canary_before=before["canary"])


CANARY_EVIDENCE: dict[ModelKind, Callable[[CanaryLook], CanaryVerdict]] = {
    ModelKind.TABULAR: _tabular,
    ModelKind.HF_CAUSAL_LM: _hf_causal_lm,
}
"""One look at the canary of each served family (a byte-level LM is not served, so it has no canary): the one place
delivery chooses by family."""


def canary_evidence(kind: ModelKind) -> Callable[[CanaryLook], CanaryVerdict]:
    """The family's canary look.

    Raises:
        MetricsError: no canary evidence is registered for ``kind``.
    """
    try:
        return CANARY_EVIDENCE[kind]
    except KeyError:
        raise MetricsError(f"no canary evidence for model kind {kind.value!r} (it is not served, so it has no "
                           f"canary); canary evidence exists for {[k.value for k in CANARY_EVIDENCE]}") from None


def analyze_until_decided(look: CanaryLook, *, kind: ModelKind = ModelKind.TABULAR, wait_s: float = 0.0,
                          interval_s: float = 30.0) -> CanaryVerdict:
    """Look at the canary, and while the answer is ``hold`` look again every ``interval_s`` for up to ``wait_s``.

    Returns the first ``promote`` or ``rollback``, or the last ``hold`` when the wait runs out.
    """
    analyze = canary_evidence(kind)
    deadline = time.monotonic() + wait_s
    while True:
        result = analyze(look)
        if result.decision != "hold" or time.monotonic() + interval_s > deadline:
            return result
        logger.info("canary analysis: hold (%s); again in %.0f s", "; ".join(result.reasons), interval_s)
        time.sleep(interval_s)
