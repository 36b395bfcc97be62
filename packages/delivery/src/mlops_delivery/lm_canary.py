"""Canary analysis for a language model: is the canary LM as healthy as the stable one?

Evidence per variant, from its LM server's ``/metrics`` (``mlops_serving.lm_api``'s series) and from the
prediction log's rows of its version (``completion_tokens``):

- **error rate**: 5xx over requests, canary at most ``delivery.max_error_rate_increase`` above stable;
- **time to first token**: p99 from the TTFT histogram, at most ``max_p99_ratio`` × stable's + a slack of the
  width of the bucket stable's p99 lies in (at least ``p99_slack_ms``): a p99 read from buckets is only as exact
  as the bucket (25-50 ms wide around an LM's TTFT; a healthy canary failed a 2 ms slack at 95 vs 72.5 ms);
- **tokens/s**: the decode rate over all the variant's tokens (``mlops_serving_lm_decode_tokens`` ÷
  ``mlops_serving_lm_decode_seconds``: exact, where a median read from the rate histogram's buckets moved by
  ±30 % between runs of the same two models; and not a mean of per-request rates, which the shortest answers
  rule: two tokens that arrive together "decode" at thousands of tokens/s, so a stable version that answers
  shorter looked 5× faster than an equally fast canary), at least stable's ÷ ``max_p99_ratio``;
- **response length**: the distribution of completion tokens, PSI over quantile bins of stable's (the one PSI of
  :mod:`mlops_model.statistics`) at most ``max_response_length_psi``; the KS statistic and p-value are reported.

Requests and errors are counted from a ``*_before`` exposition on when one is given (the window of the canary's
traffic): a server's own readiness probes during start-up answer 503 and count as 5xx errors otherwise.

Same answers as the tabular canary: too few canary requests or a side without observations → ``hold``; any
check failed with enough evidence → ``rollback``; all passed → ``promote``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import DeliveryConfig
from mlops_delivery.canary import Decision
from mlops_delivery.errors import MetricsError
from mlops_delivery.metrics import counter_total, histogram_buckets, histogram_quantile, parse_samples
from mlops_model import StatisticsError, statistics

TTFT_METRIC = "mlops_serving_lm_time_to_first_token_seconds"
DECODE_TOKENS_METRIC = "mlops_serving_lm_decode_tokens"
DECODE_SECONDS_METRIC = "mlops_serving_lm_decode_seconds"


@dataclass(frozen=True)
class LMVariantEvidence:
    """What one LM variant's metrics and log rows say."""

    version: int
    requests: float
    """Requests seen: answered plus failed with 5xx."""
    errors: float
    error_rate: float | None
    ttft_p99_s: float | None
    ttft_p99_bucket_s: float | None
    """Width of the histogram bucket the TTFT p99 was read from (how exact it is)."""
    tokens_per_s_mean: float | None
    responses_logged: int
    completion_tokens_mean: float | None


@dataclass(frozen=True)
class LMCanaryAnalysis:
    """The decision, every reason for it, and the evidence."""

    decision: Decision
    reasons: tuple[str, ...]
    stable: LMVariantEvidence
    canary: LMVariantEvidence
    length_psi: float | None
    length_ks: dict[str, float] | None
    thresholds: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "reasons": list(self.reasons), "stable": asdict(self.stable),
                "canary": asdict(self.canary), "response_length_psi": self.length_psi,
                "response_length_ks": self.length_ks, "thresholds": self.thresholds}


def completion_lengths(log: pd.DataFrame, version: int) -> np.ndarray:
    """``completion_tokens`` of the log rows of ``version``."""
    if log.empty:
        return np.empty(0)
    for col in ("model_version", "completion_tokens"):
        if col not in log.columns:
            raise MetricsError(f"LM prediction log lacks column {col!r}; columns: {sorted(log.columns)}")
    rows = log[log["model_version"].astype(str) == str(version)]
    return rows["completion_tokens"].to_numpy(dtype=float)


def lm_variant_evidence(delivery: DeliveryConfig, metrics_text: str, lengths: np.ndarray, version: int, *,
                        source: str, model: str | None = None, before: str | None = None) -> LMVariantEvidence:
    """Requests, 5xx, TTFT p99 and mean tokens/s of ``version`` from one LM server's exposition (requests and 5xx
    counted from the ``before`` exposition on, when given)."""
    samples = parse_samples(metrics_text, source=source)
    prior = parse_samples(before, source=f"{source} (before)") if before is not None else []
    labels = {"model": model} if model else {}
    if any(s.labels.get("version") == str(version) for s in samples):
        labels["version"] = str(version)
    if not any(s.name == f"{TTFT_METRIC}_bucket" for s in samples):
        raise MetricsError(f"{source!r} has no {TTFT_METRIC!r} series: is it an LM server (mlops serve on an "
                           "hf_causal_lm folder)?")
    answered = (counter_total(samples, delivery.requests_metric, labels=labels)
                - counter_total(prior, delivery.requests_metric, labels=labels))
    errors = (counter_total(samples, delivery.errors_metric, labels=labels, label_prefix={"status": "5"})
              - counter_total(prior, delivery.errors_metric, labels=labels, label_prefix={"status": "5"}))
    requests = answered + errors
    ttft = histogram_buckets(samples, TTFT_METRIC, labels=labels)
    decoded = (counter_total(samples, DECODE_TOKENS_METRIC, labels=labels)
               - counter_total(prior, DECODE_TOKENS_METRIC, labels=labels))
    decode_s = (counter_total(samples, DECODE_SECONDS_METRIC, labels=labels)
                - counter_total(prior, DECODE_SECONDS_METRIC, labels=labels))
    seen = bool(ttft) and ttft[-1][1] > 0
    p99 = histogram_quantile(0.99, ttft) if seen else None
    return LMVariantEvidence(
        version=version, requests=requests, errors=errors, error_rate=errors / requests if requests else None,
        ttft_p99_s=p99, ttft_p99_bucket_s=_bucket_width(ttft, p99),
        tokens_per_s_mean=decoded / decode_s if decode_s > 0 else None,
        responses_logged=int(lengths.size), completion_tokens_mean=float(lengths.mean()) if lengths.size else None)


def _bucket_width(buckets: list[tuple[float, float]], value: float | None) -> float | None:
    if value is None:
        return None
    lower = 0.0
    for le, _ in buckets:
        if value <= le:
            return le - lower if le != float("inf") else None
        lower = le
    return None


def length_shift(stable: np.ndarray, canary: np.ndarray, delivery: DeliveryConfig
                 ) -> tuple[float | None, dict[str, float] | None]:
    """PSI (quantile bins of stable's lengths) and KS of the canary's response lengths against stable's."""
    if stable.size == 0 or canary.size == 0:
        return None, None
    try:
        psi = statistics.psi(*statistics.quantile_bin_counts(stable, canary, delivery.psi_bins),
                             floor=delivery.psi_floor)
        d, p = statistics.ks(stable, canary)
    except StatisticsError as exc:
        raise MetricsError(f"response-length shift: {exc}") from None
    return psi, {"statistic": d, "pvalue": p}


def decide_lm(delivery: DeliveryConfig, stable: LMVariantEvidence, canary: LMVariantEvidence,
              psi: float | None) -> tuple[Decision, tuple[str, ...]]:
    """Apply the thresholds; one reason per check, passed or not."""
    failed: list[str] = []
    passed: list[str] = []
    missing: list[str] = []
    if canary.requests < delivery.min_canary_requests:
        missing.append(f"only {canary.requests:.0f} canary requests, need {delivery.min_canary_requests}")
    if stable.error_rate is None or canary.error_rate is None:
        missing.append("no requests on one side: cannot compare error rates")
    else:
        delta = canary.error_rate - stable.error_rate
        text = (f"error rate canary {canary.error_rate:.4f} vs stable {stable.error_rate:.4f} "
                f"({delta:+.4f}, max +{delivery.max_error_rate_increase})")
        (failed if delta > delivery.max_error_rate_increase else passed).append(text)
    if stable.ttft_p99_s is None or canary.ttft_p99_s is None:
        missing.append("no time-to-first-token observations on one side")
    else:
        slack = max(delivery.p99_slack_ms / 1000, stable.ttft_p99_bucket_s or 0.0)
        limit = stable.ttft_p99_s * delivery.max_p99_ratio + slack
        text = (f"TTFT p99 canary {canary.ttft_p99_s * 1000:.1f} ms vs stable {stable.ttft_p99_s * 1000:.1f} ms "
                f"(limit x{delivery.max_p99_ratio} + {slack * 1000:g} ms, the bucket's width = {limit * 1000:.1f} ms)")
        (failed if canary.ttft_p99_s > limit else passed).append(text)
    if stable.tokens_per_s_mean is None or canary.tokens_per_s_mean is None:
        missing.append("no tokens/s observations on one side")
    else:
        floor = stable.tokens_per_s_mean / delivery.max_p99_ratio
        text = (f"tokens/s mean canary {canary.tokens_per_s_mean:.1f} vs stable {stable.tokens_per_s_mean:.1f} "
                f"(min stable / {delivery.max_p99_ratio} = {floor:.1f})")
        (failed if canary.tokens_per_s_mean < floor else passed).append(text)
    if psi is None:
        missing.append("no logged responses on one side: cannot compare response lengths")
    else:
        text = f"response-length PSI {psi:.4f} (max {delivery.max_response_length_psi})"
        (failed if psi > delivery.max_response_length_psi else passed).append(text)
    if missing:
        return "hold", tuple([*(f"insufficient: {m}" for m in missing), *(f"FAILED: {f}" for f in failed),
                              *(f"ok: {p}" for p in passed)])
    if failed:
        return "rollback", tuple([*(f"FAILED: {f}" for f in failed), *(f"ok: {p}" for p in passed)])
    return "promote", tuple(f"ok: {p}" for p in passed)


def analyze_lm_canary(delivery: DeliveryConfig, *, stable_metrics: str, canary_metrics: str, log: pd.DataFrame,
                      stable_version: int, canary_version: int, model: str | None = None,
                      stable_source: str = "stable", canary_source: str = "canary",
                      stable_before: str | None = None, canary_before: str | None = None) -> LMCanaryAnalysis:
    """Compare the two LM variants from their expositions (text; ``*_before``: taken when traffic started) and
    the prediction log (rows of both)."""
    s_len, c_len = completion_lengths(log, stable_version), completion_lengths(log, canary_version)
    stable = lm_variant_evidence(delivery, stable_metrics, s_len, stable_version, source=stable_source, model=model,
                                 before=stable_before)
    canary = lm_variant_evidence(delivery, canary_metrics, c_len, canary_version, source=canary_source, model=model,
                                 before=canary_before)
    psi, ks = length_shift(s_len, c_len, delivery)
    decision, reasons = decide_lm(delivery, stable, canary, psi)
    thresholds = {"max_error_rate_increase": delivery.max_error_rate_increase, "max_p99_ratio": delivery.max_p99_ratio,
                  "p99_slack_ms": delivery.p99_slack_ms, "max_response_length_psi": delivery.max_response_length_psi,
                  "min_canary_requests": float(delivery.min_canary_requests)}
    return LMCanaryAnalysis(decision, reasons, stable, canary, psi, ks, thresholds)
