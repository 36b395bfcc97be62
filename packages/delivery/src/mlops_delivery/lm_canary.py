"""Canary analysis for a language model: is the canary LM as healthy as the stable one?

Evidence per variant, from its LM server's ``/metrics`` (``mlops_serving.lm_api``'s series) and from the
prediction log's rows of its version (``completion_tokens``):

- **error rate**: 5xx over requests, canary at most ``delivery.max_error_rate_increase`` above stable;
- **time to first token**: p99 from the TTFT histogram, at most ``max_p99_ratio`` × stable's + a slack of the
  width of the bucket stable's p99 lies in (at least ``p99_slack_ms``): a p99 read from buckets is only as exact
  as the bucket (25-50 ms wide around an LM's TTFT; a healthy canary failed a 2 ms slack at 95 vs 72.5 ms);
- **tokens/s**: the decode rate over all the variant's tokens (``mlops_serving_lm_decode_tokens`` ÷
  ``mlops_serving_lm_decode_seconds``, reported: exact, where a median read from the rate histogram's buckets
  moved by ±30 % between runs of the same two models; and not a mean of per-request rates, which the shortest
  answers rule: two tokens that arrive together "decode" at thousands of tokens/s, so a stable version that
  answers shorter looked 5× faster than an equally fast canary), at least stable's ÷ ``max_p99_ratio``. Judged on
  the ratio canary ÷ stable of the decode rates over the logged answers, with its bootstrap interval
  (``delivery.lm.decode_rate_interval``, requests resampled): failed only when the interval lies wholly below the
  floor, passed only when wholly at or above it, and otherwise it cannot tell yet (``hold``). The rates are
  tokens over the decoding thread's CPU time (``decode_steps`` over ``decode_cpu_ms``, logged by the server) where
  both sides logged it, else over wall-clock time (``completion_tokens − 1`` over ``latency_ms − ttft_ms``). Wall
  time is what a user waits, and it is the machine's load as much as the weights: identical weights decoded at 509
  vs 798 tokens/s side by side on a loaded CI runner, and a 120-answer interval straddled the floor (up to 0.980) for
  two equally fast versions; a thread's CPU time leaves out the time it waited for a core, so it compares the weights;
- **response length**: the distribution of completion tokens, PSI over quantile bins of stable's (the one PSI of
  :mod:`mlops_model.statistics`) at most ``max_response_length_psi``; the KS statistic and p-value are reported.

Requests, errors, time to first token and decode figures are counted from a ``*_before`` exposition on when one
is given (the window of the canary's traffic): a server's own readiness probes during start-up answer 503 and
count as 5xx errors otherwise.

The thresholds answer as the tabular canary's (:func:`mlops_delivery.checks.decide_checks`): too few canary
requests or a side without observations → ``hold``; any check failed with enough evidence → ``rollback``; all
passed → ``promote``.

Under ``delivery.sequential.verdict: sequential`` (the default) the decision is the sequential verdict instead
(:mod:`mlops_delivery.sequential`'s always-valid tests, safe however often the canary is looked at), on these
differences of proportions, canary minus stable, with ``delivery.lm.sequential``'s margins:

- **error rate**: 5xx per request;
- **slow first token**: the share of time-to-first-token observations above ``ttft_slow_ms`` (exact from the
  histogram's cumulative buckets; ``ttft_slow_ms`` must be a bucket bound);
- **slow decode**: the share of answered requests (those with a first token) that decoded at
  ``slow_decode_tokens_per_s`` or fewer (from the per-request tokens/s histogram, exact likewise). A one-token
  answer has no decode phase, so it is not slow: its trial still counts, or short answers would starve the test
  (the loop's toy model answered 110 requests with 31 decode rates). A share of slow requests, not the decode
  rate over all tokens: a ratio of two sums has no simple variance.
- **truncated answers**: the share of logged answers cut off at ``max_tokens`` (``finish_reason: length``), with
  ``delivery.lm.max_truncated_increase`` as its margin (the rise the threshold check tolerates). A canary that rambles
  to the limit where stable stopped is rolled back by this test, not only vetoed by the threshold; one that stops
  where stable rambled is not worse. Made whenever the prediction log records ``finish_reason`` (the LM server
  always does).

Rollback splits ``alpha`` evenly over the tests made (quarters; thirds without ``finish_reason``), as the tabular
canary splits it over its error, slow and score tests. The response length stays a threshold (PSI): a distance has
no martingale form, and a retrained LM legitimately answers at other lengths. The thresholds then only veto a
promotion (``threshold_guard``), as in the tabular canary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import DeliveryConfig, LMSequentialConfig, SequentialCanaryConfig
from mlops_delivery.checks import Check, decide_checks, error_rate_check, requests_check
from mlops_delivery.errors import MetricsError
from mlops_delivery.metrics import counter_total, histogram_buckets, histogram_quantile, parse_samples
from mlops_delivery.sequential import (
    Decision,
    MetricTest,
    SequentialVerdict,
    guarded_decision,
    metric_test,
    slow_count,
    verdict_from_tests,
)
from mlops_model import StatisticsError, statistics

TTFT_METRIC = "mlops_serving_lm_time_to_first_token_seconds"
RATE_METRIC = "mlops_serving_lm_tokens_per_second"
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
    first_tokens: float | None = None
    """Time-to-first-token observations in the window (sequential verdict only)..."""
    slow_first_tokens: float | None = None
    """... of which later than ``delivery.lm.sequential.ttft_slow_ms``."""
    decoded_requests: float | None = None
    """Requests with a decode rate (two or more tokens) in the window (sequential verdict only)."""
    slow_decodes: float | None = None
    """Requests decoding at ``delivery.lm.sequential.slow_decode_tokens_per_s`` or fewer (out of ``first_tokens``:
    a one-token answer is not slow)."""
    truncated_responses: int | None = None
    """Logged answers cut off at ``max_tokens`` (``finish_reason == "length"``), out of ``responses_logged``
    (``None`` when the log has no ``finish_reason``)."""

    @property
    def truncated_share(self) -> float | None:
        if self.truncated_responses is None or not self.responses_logged:
            return None
        return self.truncated_responses / self.responses_logged


@dataclass(frozen=True)
class DecodeRateRatio:
    """The canary's decode rate over stable's, from the logged answers, and its bootstrap interval."""

    stable_tokens_per_s: float
    canary_tokens_per_s: float
    ratio: float
    low: float
    high: float
    level: float
    stable_answers: int
    """Logged answers with a decode phase (two or more tokens) the rates are over."""
    canary_answers: int
    clock: str = "cpu"
    """What the seconds are: ``cpu`` (the decoding thread's CPU time) or ``wall`` (latency less time to first
    token, where a side's log holds no CPU time)."""


MIN_DECODED_ANSWERS = 5
"""Fewer logged answers with a decode phase on a side and the rate check cannot tell (a bootstrap of a handful
of units only repeats them)."""


@dataclass(frozen=True)
class LMCanaryAnalysis:
    """The decision, every reason for it, and the evidence."""

    decision: Decision
    reasons: tuple[str, ...]
    stable: LMVariantEvidence
    canary: LMVariantEvidence
    length_psi: float | None
    length_ks: dict[str, float] | None
    thresholds: dict[str, float | None]
    decode_rate: DecodeRateRatio | None = None
    """Canary ÷ stable decode rate from the logged answers, with its interval (``None``: no timings logged)."""
    threshold_decision: Decision | None = None
    """What the fixed thresholds alone answer (the guard), when the sequential verdict decides."""
    sequential: SequentialVerdict | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "reasons": list(self.reasons), "stable": asdict(self.stable),
                "canary": asdict(self.canary), "response_length_psi": self.length_psi,
                "response_length_ks": self.length_ks, "thresholds": self.thresholds,
                "threshold_decision": self.threshold_decision,
                "decode_rate": asdict(self.decode_rate) if self.decode_rate else None,
                "sequential": self.sequential.to_dict() if self.sequential else None}


def truncated_responses(log: pd.DataFrame, version: int) -> int | None:
    """Log rows of ``version`` whose answer ran to ``max_tokens`` (``finish_reason == "length"``), or ``None``
    when the log does not record why answers ended."""
    if log.empty or "finish_reason" not in log.columns or "model_version" not in log.columns:
        return None
    rows = log[log["model_version"].astype(str) == str(version)]
    return int((rows["finish_reason"].astype(str) == "length").sum())


def decode_timings(log: pd.DataFrame, version: int, clock: str = "cpu"
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """Tokens and seconds of the decode phase of each logged answer of ``version`` that has one, as the server
    counts them: on ``clock="cpu"`` the decoding thread's (``decode_steps``, ``decode_cpu_ms``), on ``"wall"``
    the request's (``completion_tokens − 1`` after the first token, ``latency_ms − ttft_ms``); ``None`` when the
    log records no such timings."""
    if clock not in ("cpu", "wall"):
        raise ValueError(f"clock must be 'cpu' or 'wall', got {clock!r}")
    num, den = ("decode_steps", "decode_cpu_ms") if clock == "cpu" else ("completion_tokens", "latency_ms")
    needed = ("model_version", num, den) + (() if clock == "cpu" else ("ttft_ms",))
    if log.empty or any(col not in log.columns for col in needed):
        return None
    rows = log[log["model_version"].astype(str) == str(version)]
    tokens = pd.to_numeric(rows[num], errors="coerce").to_numpy(dtype=float)
    ms = pd.to_numeric(rows[den], errors="coerce")
    if clock == "wall":
        tokens, ms = tokens - 1, ms - pd.to_numeric(rows["ttft_ms"], errors="coerce")
    seconds = ms.to_numpy(dtype=float) / 1000.0
    keep = np.isfinite(tokens) & np.isfinite(seconds) & (tokens >= 1) & (seconds > 0)
    return tokens[keep], seconds[keep]


def decode_rate_ratio(delivery: DeliveryConfig, log: pd.DataFrame, stable_version: int,
                      canary_version: int) -> DecodeRateRatio | None:
    """Canary ÷ stable decode rate over the logged answers with its ``delivery.lm.decode_rate_interval`` bootstrap
    interval, on the decoding threads' CPU time where both sides logged it for at least
    :data:`MIN_DECODED_ANSWERS` answers, else on wall-clock time (one clock for both sides); ``None`` when a side
    has fewer decoded answers with timings than that."""
    for clock in ("cpu", "wall"):
        stable, canary = decode_timings(log, stable_version, clock), decode_timings(log, canary_version, clock)
        if stable is not None and canary is not None and min(stable[0].size, canary[0].size) >= MIN_DECODED_ANSWERS:
            break
    else:
        return None
    try:
        ratio, low, high = statistics.rate_ratio_interval(*stable, *canary, level=delivery.lm.decode_rate_interval)
    except StatisticsError as exc:
        raise MetricsError(f"decode-rate ratio: {exc}") from None
    return DecodeRateRatio(stable_tokens_per_s=float(stable[0].sum() / stable[1].sum()),
                           canary_tokens_per_s=float(canary[0].sum() / canary[1].sum()), ratio=ratio, low=low,
                           high=high, level=delivery.lm.decode_rate_interval, stable_answers=int(stable[0].size),
                           canary_answers=int(canary[0].size), clock=clock)


def decode_rate_check(delivery: DeliveryConfig, stable: LMVariantEvidence, canary: LMVariantEvidence,
                      rate: DecodeRateRatio | None) -> Check:
    """The canary decodes at least stable's rate ÷ ``max_p99_ratio``: failed when the ratio's whole interval lies
    below that floor, passed when it lies wholly at or above it, undecided otherwise (it holds a promotion, and
    does not stop another check's rollback)."""
    floor = 1 / delivery.max_p99_ratio
    if stable.tokens_per_s_mean is None or canary.tokens_per_s_mean is None:
        return Check("no tokens/s observations on one side", None)
    counted = f"tokens/s canary {canary.tokens_per_s_mean:.1f} vs stable {stable.tokens_per_s_mean:.1f}"
    if rate is None:
        return Check(f"{counted}: the prediction log holds fewer than {MIN_DECODED_ANSWERS} answers with a decode "
                     "phase and its timings (decode_steps, decode_cpu_ms; or latency_ms, ttft_ms) on one side; "
                     "cannot compare decode rates", None, undecided=True)
    clock = "the decoding threads' CPU time" if rate.clock == "cpu" else "wall-clock time (no CPU time logged)"
    text = (f"{counted}; logged ratio canary/stable on {clock} {rate.ratio:.3f}, {rate.level:.0%} interval "
            f"[{rate.low:.3f}, {rate.high:.3f}] over {rate.canary_answers}/{rate.stable_answers} decoded answers "
            f"(floor 1/{delivery.max_p99_ratio} = {floor:.3f})")
    if rate.high < floor:
        return Check(text, True)
    if rate.low >= floor:
        return Check(text, False)
    return Check(f"{text}: cannot tell yet, the interval straddles the floor", None, undecided=True)


def completion_lengths(log: pd.DataFrame, version: int) -> np.ndarray:
    """``completion_tokens`` of the log rows of ``version``."""
    if log.empty:
        return np.empty(0)
    for col in ("model_version", "completion_tokens"):
        if col not in log.columns:
            raise MetricsError(f"LM prediction log lacks column {col!r}; columns: {sorted(log.columns)}")
    rows = log[log["model_version"].astype(str) == str(version)]
    return rows["completion_tokens"].to_numpy(dtype=float)


@dataclass(frozen=True)
class LMCounts:
    """One LM variant's counts over the canary's window, wherever they were read (two servers' expositions, or
    Prometheus): what :func:`lm_evidence` turns into evidence."""

    answered: float
    errors: float
    """5xx answers."""
    ttft: list[tuple[float, float]]
    """Cumulative ``(le, count)`` buckets of the time-to-first-token histogram."""
    rate: list[tuple[float, float]]
    """Cumulative ``(le, count)`` buckets of the per-request tokens/s histogram."""
    decode_tokens: float
    decode_seconds: float


def lm_counts(delivery: DeliveryConfig, metrics_text: str, version: int, *, source: str, model: str | None = None,
              before: str | None = None) -> LMCounts:
    """``version``'s counts from one LM server's exposition (counted from the ``before`` exposition on, when
    given)."""
    samples = parse_samples(metrics_text, source=source)
    prior = parse_samples(before, source=f"{source} (before)") if before is not None else []
    labels = {"model": model} if model else {}
    if any(s.labels.get("version") == str(version) for s in samples):
        labels["version"] = str(version)
    if not any(s.name == f"{TTFT_METRIC}_bucket" for s in samples):
        raise MetricsError(f"{source!r} has no {TTFT_METRIC!r} series: is it an LM server (mlops serve on an "
                           "hf_causal_lm folder)?")

    def total(metric: str, **prefix: str) -> float:
        return (counter_total(samples, metric, labels=labels, label_prefix=prefix or None)
                - counter_total(prior, metric, labels=labels, label_prefix=prefix or None))

    return LMCounts(answered=total(delivery.requests_metric), errors=total(delivery.errors_metric, status="5"),
                    ttft=_windowed(samples, prior, TTFT_METRIC, labels),
                    rate=_windowed(samples, prior, RATE_METRIC, labels),
                    decode_tokens=total(DECODE_TOKENS_METRIC), decode_seconds=total(DECODE_SECONDS_METRIC))


def lm_evidence(delivery: DeliveryConfig, counts: LMCounts, lengths: np.ndarray, version: int, *, source: str,
                truncated: int | None = None) -> LMVariantEvidence:
    """Requests, 5xx, TTFT p99 and the decode rate of one variant's counts, its log rows' lengths, and the slow
    counts of the sequential verdict."""
    requests = counts.answered + counts.errors
    ttft = counts.ttft
    seen = bool(ttft) and ttft[-1][1] > 0
    p99 = histogram_quantile(0.99, ttft) if seen else None
    slow: dict[str, float | None] = dict.fromkeys(("first_tokens", "slow_first_tokens", "decoded_requests",
                                                   "slow_decodes"))
    if delivery.sequential.verdict == "sequential":
        slow = _slow_counts(delivery.lm.sequential, ttft, counts.rate, source)
    return LMVariantEvidence(
        version=version, requests=requests, errors=counts.errors,
        error_rate=counts.errors / requests if requests else None,
        ttft_p99_s=p99, ttft_p99_bucket_s=_bucket_width(ttft, p99),
        tokens_per_s_mean=counts.decode_tokens / counts.decode_seconds if counts.decode_seconds > 0 else None,
        responses_logged=int(lengths.size), completion_tokens_mean=float(lengths.mean()) if lengths.size else None,
        truncated_responses=truncated, **slow)


def lm_version_counts(delivery: DeliveryConfig, prometheus_url: str, model: str) -> dict[int, LMCounts]:
    """Every version's counts over ``delivery.canary_rate_window`` from Prometheus (``delivery.prometheus_url``):
    the LM servers' series carry ``model`` and ``version``, so one query answers for both variants wherever
    they run, as for the tabular canary (:mod:`mlops_delivery.prometheus`).

    Raises:
        MetricsError: a query fails, or Prometheus holds no time-to-first-token series of ``model``.
    """
    from mlops_delivery.prometheus import FIVE_XX, window_counts

    w = delivery.canary_rate_window
    totals, buckets = window_counts(
        prometheus_url, model, w,
        counters={"answered": (delivery.requests_metric, ""), "errors": (delivery.errors_metric, FIVE_XX),
                  "decode_tokens": (DECODE_TOKENS_METRIC, ""), "decode_seconds": (DECODE_SECONDS_METRIC, "")},
        histograms={"ttft": TTFT_METRIC, "rate": RATE_METRIC})
    if not buckets["ttft"]:
        raise MetricsError(f"Prometheus at {prometheus_url!r} holds no {TTFT_METRIC!r} series for model {model!r} "
                           f"in the last {w}: is it scraping the LM servers (mlops serve on an hf_causal_lm folder)?")
    out: dict[int, LMCounts] = {}
    for version in buckets["ttft"]:
        if not version.isdigit():
            continue
        out[int(version)] = LMCounts(
            answered=totals["answered"].get(version, 0.0), errors=totals["errors"].get(version, 0.0),
            ttft=buckets["ttft"][version], rate=buckets["rate"].get(version, []),
            decode_tokens=totals["decode_tokens"].get(version, 0.0),
            decode_seconds=totals["decode_seconds"].get(version, 0.0))
    return out


def _windowed(samples: list[Any], prior: list[Any], metric: str, labels: dict[str, str]) -> list[tuple[float, float]]:
    """Cumulative ``(le, count)`` buckets of ``metric`` since the ``prior`` exposition."""
    before = dict(histogram_buckets(prior, metric, labels=labels)) if prior else {}
    return [(le, count - before.get(le, 0.0)) for le, count in histogram_buckets(samples, metric, labels=labels)]


def _slow_counts(cfg: LMSequentialConfig, ttft: list[tuple[float, float]], rate: list[tuple[float, float]],
                 source: str) -> dict[str, float | None]:
    """First tokens later than ``ttft_slow_ms`` and requests decoding at ``slow_decode_tokens_per_s`` or fewer,
    each out of its histogram's count, read exactly from the cumulative buckets."""
    rate_total = rate[-1][1] if rate else 0.0
    fast = slow_count(rate, cfg.slow_decode_tokens_per_s, source=f"{source} {RATE_METRIC}",
                      setting="delivery.lm.sequential.slow_decode_tokens_per_s", scale=1.0, unit="tokens/s")
    return {"first_tokens": ttft[-1][1] if ttft else 0.0,
            "slow_first_tokens": slow_count(ttft, cfg.ttft_slow_ms / 1000, source=f"{source} {TTFT_METRIC}",
                                            setting="delivery.lm.sequential.ttft_slow_ms"),
            "decoded_requests": rate_total, "slow_decodes": rate_total - fast}


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
              psi: float | None, rate: DecodeRateRatio | None = None) -> tuple[Decision, tuple[str, ...]]:
    """Apply the thresholds; one reason per check, passed or not."""
    checks = [requests_check(delivery, canary.requests),
              error_rate_check(delivery, stable.error_rate, canary.error_rate)]
    if stable.ttft_p99_s is None or canary.ttft_p99_s is None:
        checks.append(Check("no time-to-first-token observations on one side", None))
    else:
        slack = max(delivery.p99_slack_ms / 1000, stable.ttft_p99_bucket_s or 0.0)
        limit = stable.ttft_p99_s * delivery.max_p99_ratio + slack
        checks.append(Check(
            f"TTFT p99 canary {canary.ttft_p99_s * 1000:.1f} ms vs stable {stable.ttft_p99_s * 1000:.1f} ms "
            f"(limit x{delivery.max_p99_ratio} + {slack * 1000:g} ms, the bucket's width = {limit * 1000:.1f} ms)",
            canary.ttft_p99_s > limit))
    checks.append(decode_rate_check(delivery, stable, canary, rate))
    if delivery.lm.max_response_length_psi is not None:
        if psi is None:
            checks.append(Check("no logged responses on one side: cannot compare response lengths", None))
        else:
            checks.append(Check(f"response-length PSI {psi:.4f} (max {delivery.lm.max_response_length_psi})",
                                psi > delivery.lm.max_response_length_psi))
    checks.append(truncation_check(delivery, stable, canary))
    return decide_checks(checks)


def truncation_check(delivery: DeliveryConfig, stable: LMVariantEvidence, canary: LMVariantEvidence) -> Check | None:
    """More answers cut off at ``max_tokens`` than stable's, by more than ``delivery.lm.max_truncated_increase``
    (absolute share): the harmful direction of a change in response length (an answer that rambles to the limit,
    and costs the most tokens). A canary that stops where stable rambled passes. Not made when the log does not
    record ``finish_reason``."""
    s_share, c_share = stable.truncated_share, canary.truncated_share
    if s_share is None or c_share is None:
        return None
    delta = c_share - s_share
    return Check(f"answers cut at max_tokens canary {canary.truncated_responses}/{canary.responses_logged} vs stable "
                 f"{stable.truncated_responses}/{stable.responses_logged} ({delta:+.4f}, max "
                 f"+{delivery.lm.max_truncated_increase})", delta > delivery.lm.max_truncated_increase)


def lm_sequential_tests(cfg: SequentialCanaryConfig, lm: LMSequentialConfig, stable: LMVariantEvidence,
                        canary: LMVariantEvidence, *, truncation_margin: float | None = None) -> list[MetricTest]:
    """The LM's always-valid tests: error rate, slow first token, slow decode (margins and signals from ``lm``,
    ``delivery.lm.sequential``; ``alpha`` and the mixture from ``cfg``, ``delivery.sequential``) and, with
    ``truncation_margin`` and a log that records ``finish_reason`` on both sides, truncated answers (``alpha``
    split evenly to roll back)."""
    counts = [(v.slow_first_tokens, v.first_tokens, v.slow_decodes) for v in (stable, canary)]
    if any(c is None for pair in counts for c in pair):
        raise MetricsError("the sequential verdict needs the slow first-token and decode counts: evidence read "
                           "with delivery.sequential.verdict = 'threshold' has none")
    truncation = (truncation_margin is not None and stable.truncated_responses is not None
                  and canary.truncated_responses is not None)
    for side, v in (("stable", stable), ("canary", canary)):
        checked = [("5xx", v.errors, v.requests), ("slow first-token", v.slow_first_tokens, v.first_tokens),
                   ("slow decode", v.slow_decodes, v.first_tokens)]
        if truncation:
            checked.append(("truncated answer", v.truncated_responses, v.responses_logged))
        for name, events, trials in checked:
            if not 0 <= events <= trials:  # type: ignore[operator]
                raise MetricsError(f"{side} v{v.version}: {name} count {events!r} must lie in [0, {trials!r}]; did "
                                   "the server restart after the before exposition (counters reset)?")
    share = cfg.alpha / (4.0 if truncation else 3.0)
    tests = [
        metric_test(cfg, "error_rate", shift=False, margin=lm.error_margin, alpha_rollback=share,
                    canary_events=canary.errors, canary_trials=canary.requests, stable_events=stable.errors,
                    stable_trials=stable.requests),
        metric_test(cfg, f"slow_first_token(>{lm.ttft_slow_ms:g}ms)", shift=False, margin=lm.ttft_margin,
                    alpha_rollback=share, canary_events=canary.slow_first_tokens, canary_trials=canary.first_tokens,
                    stable_events=stable.slow_first_tokens, stable_trials=stable.first_tokens),
        metric_test(cfg, f"slow_decode(<={lm.slow_decode_tokens_per_s:g}tok/s)", shift=False,
                    margin=lm.decode_margin, alpha_rollback=share, canary_events=canary.slow_decodes,
                    canary_trials=canary.first_tokens, stable_events=stable.slow_decodes,
                    stable_trials=stable.first_tokens),
    ]
    if truncation:
        assert truncation_margin is not None  # for the type checker: ``truncation`` implies it
        tests.append(metric_test(cfg, "truncated_answer(finish_reason=length)", shift=False, margin=truncation_margin,
                                 alpha_rollback=share, canary_events=canary.truncated_responses,
                                 canary_trials=canary.responses_logged, stable_events=stable.truncated_responses,
                                 stable_trials=stable.responses_logged))
    return tests


def analyze_lm_canary(delivery: DeliveryConfig, *, stable_metrics: str, canary_metrics: str, log: pd.DataFrame,
                      stable_version: int, canary_version: int, model: str | None = None,
                      stable_source: str = "stable", canary_source: str = "canary",
                      stable_before: str | None = None, canary_before: str | None = None) -> LMCanaryAnalysis:
    """Compare the two LM variants from their expositions (text; ``*_before``: taken when traffic started) and
    the prediction log (rows of both)."""
    stable = lm_counts(delivery, stable_metrics, stable_version, source=stable_source, model=model,
                       before=stable_before)
    canary = lm_counts(delivery, canary_metrics, canary_version, source=canary_source, model=model,
                       before=canary_before)
    return analyze_lm_counts(delivery, stable, canary, log=log, stable_version=stable_version,
                             canary_version=canary_version, stable_source=stable_source, canary_source=canary_source)


def analyze_lm_counts(delivery: DeliveryConfig, stable_counts: LMCounts, canary_counts: LMCounts, *,
                      log: pd.DataFrame, stable_version: int, canary_version: int, stable_source: str = "stable",
                      canary_source: str = "canary") -> LMCanaryAnalysis:
    """Compare the two LM variants from their counts (:func:`lm_counts`, or Prometheus's
    :func:`mlops_delivery.prometheus.lm_version_counts`) and the prediction log (rows of both)."""
    s_len, c_len = completion_lengths(log, stable_version), completion_lengths(log, canary_version)
    stable = lm_evidence(delivery, stable_counts, s_len, stable_version, source=stable_source,
                         truncated=truncated_responses(log, stable_version))
    canary = lm_evidence(delivery, canary_counts, c_len, canary_version, source=canary_source,
                         truncated=truncated_responses(log, canary_version))
    psi, ks = length_shift(s_len, c_len, delivery)
    rate = decode_rate_ratio(delivery, log, stable_version, canary_version)
    decision, reasons = decide_lm(delivery, stable, canary, psi, rate)
    threshold_decision, verdict = None, None
    seq = delivery.sequential
    if seq.verdict == "sequential":
        tests = lm_sequential_tests(seq, delivery.lm.sequential, stable, canary,
                                    truncation_margin=delivery.lm.max_truncated_increase)
        verdict = verdict_from_tests(seq, tests, canary_requests=canary.requests, stable_requests=stable.requests,
                                     min_requests=delivery.min_canary_requests)
        threshold_decision = decision
        decision, reasons = guarded_decision(verdict, decision, reasons, guard=seq.threshold_guard)
    thresholds = {"max_error_rate_increase": delivery.max_error_rate_increase, "max_p99_ratio": delivery.max_p99_ratio,
                  "p99_slack_ms": delivery.p99_slack_ms,
                  "max_response_length_psi": delivery.lm.max_response_length_psi,
                  "max_truncated_increase": delivery.lm.max_truncated_increase,
                  "min_canary_requests": float(delivery.min_canary_requests)}
    thresholds["decode_rate_interval"] = delivery.lm.decode_rate_interval
    return LMCanaryAnalysis(decision, reasons, stable, canary, psi, ks, thresholds, rate, threshold_decision, verdict)
