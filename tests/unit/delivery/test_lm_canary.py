"""LM canary analysis on expositions written by the LM server's own metrics class and hand-built log rows; the
expected TTFT p99 is worked out by hand from the histogram buckets (linear inside a bucket, as PromQL)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from prometheus_client import generate_latest

from mlops_config import DeliveryConfig, SequentialCanaryConfig
from mlops_delivery.errors import MetricsError
from mlops_delivery.lm_canary import analyze_lm_canary
from mlops_serving.lm_api import LMMetrics

DELIVERY = DeliveryConfig(min_canary_requests=20, sequential=SequentialCanaryConfig(verdict="threshold"))
"""The fixed thresholds alone (the sequential verdict's tests are in test_lm_canary_sequential.py)."""


def exposition(version: str, *, n: int, ttft_s: float, rate: float, errors: int = 0, decode_tokens: int = 10,
               short: int = 0) -> str:
    """``n`` answers decoding ``decode_tokens`` tokens at ``rate`` tokens/s, then ``short`` answers whose second
    (and last) token arrived 0.5 ms after the first (a per-request "rate" of 2,000 tokens/s)."""
    m = LMMetrics()
    for tokens, seconds in [(decode_tokens, decode_tokens / rate)] * n + [(1, 0.0005)] * short:
        m.requests.labels("llm", version, "stable", "completions").inc()
        m.ttft.labels("llm", version).observe(ttft_s)
        m.tokens_per_s.labels("llm", version).observe(tokens / seconds)
        m.decode_tokens.labels("llm", version).inc(tokens)
        m.decode_seconds.labels("llm", version).inc(seconds)
    for _ in range(errors):
        m.errors.labels("llm", version, "RuntimeError", "500").inc()
    m.errors.labels("llm", version, "BadRequestError", "400").inc()  # a 4xx is the client's fault: not counted
    return generate_latest(m.registry).decode()


def log(stable: list[int], canary: list[int]) -> pd.DataFrame:
    rows = [{"model_version": "1", "completion_tokens": n} for n in stable]
    rows += [{"model_version": "2", "completion_tokens": n} for n in canary]
    return pd.DataFrame(rows)


LENGTHS = [4, 8, 12, 16] * 10


def test_healthy_canary_is_promoted_with_hand_computed_figures() -> None:
    result = analyze_lm_canary(DELIVERY, stable_metrics=exposition("1", n=40, ttft_s=0.03, rate=60),
                               canary_metrics=exposition("2", n=40, ttft_s=0.03, rate=60), log=log(LENGTHS, LENGTHS),
                               stable_version=1, canary_version=2, model="llm")
    assert result.decision == "promote", result.reasons
    # TTFT 0.03 s lies in the (0.025, 0.05] bucket: p99 = 0.025 + 0.025 × 0.99.
    assert result.canary.ttft_p99_s == pytest.approx(0.025 + 0.025 * 0.99)
    assert result.canary.tokens_per_s_mean == pytest.approx(60.0)  # every request decoded at 60 tokens/s
    assert result.canary.requests == 40 and result.canary.error_rate == 0.0
    assert result.length_psi == pytest.approx(0.0) and result.length_ks == {"statistic": 0.0, "pvalue": 1.0}


def test_decode_rate_is_over_all_tokens_not_ruled_by_the_shortest_answers() -> None:
    """Stable answers 10 of its 40 requests with two tokens that arrive together: a mean of per-request rates
    makes it (30 × 100 + 10 × 2000) / 40 = 575 tokens/s and fails an equally fast canary (100 < 575 / 1.2).
    Over all tokens it decodes (30 × 30 + 10) / (30 × 0.3 + 10 × 0.0005) = 910 / 9.005 tokens/s."""
    result = analyze_lm_canary(
        DELIVERY, stable_metrics=exposition("1", n=30, ttft_s=0.03, rate=100, decode_tokens=30, short=10),
        canary_metrics=exposition("2", n=40, ttft_s=0.03, rate=100, decode_tokens=30), log=log(LENGTHS, LENGTHS),
        stable_version=1, canary_version=2, model="llm")
    assert result.stable.tokens_per_s_mean == pytest.approx(910 / 9.005)
    assert result.canary.tokens_per_s_mean == pytest.approx(100.0)
    assert result.decision == "promote", result.reasons


def test_slow_first_token_failing_requests_and_longer_answers_roll_back() -> None:
    slow = analyze_lm_canary(DELIVERY, stable_metrics=exposition("1", n=40, ttft_s=0.03, rate=60),
                             canary_metrics=exposition("2", n=40, ttft_s=0.3, rate=60), log=log(LENGTHS, LENGTHS),
                             stable_version=1, canary_version=2)
    assert slow.decision == "rollback" and any(r.startswith("FAILED: TTFT p99") for r in slow.reasons)
    # stable's p99 (49.75 ms) lies in the (25, 50] ms bucket: slack 25 ms, limit 49.75 × 1.2 + 25 = 84.7 ms
    assert slow.stable.ttft_p99_bucket_s == pytest.approx(0.025)
    assert any("= 84.7 ms" in r for r in slow.reasons)
    slow_decode = analyze_lm_canary(DELIVERY, stable_metrics=exposition("1", n=40, ttft_s=0.03, rate=60),
                                    canary_metrics=exposition("2", n=40, ttft_s=0.03, rate=40),
                                    log=log(LENGTHS, LENGTHS), stable_version=1, canary_version=2)
    assert slow_decode.decision == "rollback"  # 40 < 60 / 1.2 = 50
    assert "FAILED: tokens/s mean canary 40.0 vs stable 60.0 (min stable / 1.2 = 50.0)" in slow_decode.reasons
    failing = analyze_lm_canary(DELIVERY, stable_metrics=exposition("1", n=40, ttft_s=0.03, rate=60),
                                canary_metrics=exposition("2", n=36, ttft_s=0.03, rate=60, errors=4),
                                log=log(LENGTHS, LENGTHS), stable_version=1, canary_version=2)
    assert failing.canary.error_rate == pytest.approx(4 / 40) and failing.decision == "rollback"
    longer = analyze_lm_canary(DELIVERY, stable_metrics=exposition("1", n=40, ttft_s=0.03, rate=60),
                               canary_metrics=exposition("2", n=40, ttft_s=0.03, rate=60),
                               log=log(LENGTHS, [64] * 40), stable_version=1, canary_version=2)
    # Stable's quantile bins: edges 4, 8, 12, 16 (distinct inner deciles) → 4 equal bins of 10 + the top bin.
    # Every canary length (64) falls in the top bin [16, ∞): shares stable (0, .25, .25, .25, .25), canary (0,0,0,0,1);
    # empty shares floored at 1e-4.
    f = DELIVERY.psi_floor
    ref, cur = np.array([f, .25, .25, .25, .25]), np.array([f, f, f, f, 1.0])
    expected = float(np.sum((cur - ref) * np.log(cur / ref)))
    assert longer.length_psi == pytest.approx(expected) and longer.decision == "rollback"
    assert math.isclose(longer.length_ks["statistic"], 1.0)


def test_too_few_requests_hold_and_a_fraud_exposition_is_refused() -> None:
    few = analyze_lm_canary(DELIVERY, stable_metrics=exposition("1", n=40, ttft_s=0.03, rate=60),
                            canary_metrics=exposition("2", n=5, ttft_s=0.03, rate=60), log=log(LENGTHS, [8]),
                            stable_version=1, canary_version=2)
    assert few.decision == "hold" and "insufficient: only 5 canary requests, need 20" in few.reasons
    none_logged = analyze_lm_canary(DELIVERY, stable_metrics=exposition("1", n=40, ttft_s=0.03, rate=60),
                                    canary_metrics=exposition("2", n=40, ttft_s=0.03, rate=60), log=log(LENGTHS, []),
                                    stable_version=1, canary_version=2)
    assert none_logged.decision == "hold" and none_logged.length_psi is None
    with pytest.raises(MetricsError, match="no 'mlops_serving_lm_time_to_first_token_seconds'"):
        analyze_lm_canary(DELIVERY, stable_metrics="# empty\n", canary_metrics="", log=log(LENGTHS, LENGTHS),
                          stable_version=1, canary_version=2)


def test_readiness_503s_before_the_traffic_are_not_canary_errors() -> None:
    m = LMMetrics()
    for _ in range(10):  # the server answers its start-up readiness probes with 503 while the model loads
        m.errors.labels("llm", "2", "ModelNotReady", "503").inc()
    before = generate_latest(m.registry).decode()
    for _ in range(40):
        m.requests.labels("llm", "2", "stable", "completions").inc()
        m.ttft.labels("llm", "2").observe(0.03)
        m.tokens_per_s.labels("llm", "2").observe(60)
        m.decode_tokens.labels("llm", "2").inc(10)
        m.decode_seconds.labels("llm", "2").inc(10 / 60)
    after = generate_latest(m.registry).decode()
    stable = exposition("1", n=40, ttft_s=0.03, rate=60)
    whole = analyze_lm_canary(DELIVERY, stable_metrics=stable, canary_metrics=after, log=log(LENGTHS, LENGTHS),
                              stable_version=1, canary_version=2)
    assert whole.canary.error_rate == pytest.approx(10 / 50) and whole.decision == "rollback"
    window = analyze_lm_canary(DELIVERY, stable_metrics=stable, canary_metrics=after, log=log(LENGTHS, LENGTHS),
                               stable_version=1, canary_version=2, canary_before=before)
    assert window.canary.requests == 40 and window.canary.error_rate == 0.0 and window.decision == "promote"


def _log_ended(stable: list[tuple[int, str]], canary: list[tuple[int, str]]) -> pd.DataFrame:
    rows = [{"model_version": "1", "completion_tokens": n, "finish_reason": f} for n, f in stable]
    rows += [{"model_version": "2", "completion_tokens": n, "finish_reason": f} for n, f in canary]
    return pd.DataFrame(rows)


def test_a_canary_that_rambles_to_max_tokens_is_rolled_back_and_one_that_stops_is_not() -> None:
    """The loop's own case: the first champion ran to max_tokens (16) on 41 of 110 prompts, the candidate on none.
    The truncated share may rise by at most max_truncated_increase (0.05): 0/40 -> 10/40 is +0.25."""
    ok = exposition("1", n=40, ttft_s=0.03, rate=60), exposition("2", n=40, ttft_s=0.03, rate=60)
    stops = [(n, "stop") for n in LENGTHS]
    rambles = [(16, "length")] * 10 + [(n, "stop") for n in LENGTHS[10:]]
    worse = analyze_lm_canary(DELIVERY, stable_metrics=ok[0], canary_metrics=ok[1], log=_log_ended(stops, rambles),
                              stable_version=1, canary_version=2)
    assert (worse.canary.truncated_responses, worse.stable.truncated_responses) == (10, 0)
    assert worse.decision == "rollback"
    assert "FAILED: answers cut at max_tokens canary 10/40 vs stable 0/40 (+0.2500, max +0.05)" in worse.reasons
    # the other way round: stable rambled, the canary stops; the PSI of the lengths is large, but not checked
    no_psi = DELIVERY.model_copy(update={"max_response_length_psi": None})
    better = analyze_lm_canary(no_psi, stable_metrics=ok[0], canary_metrics=ok[1],
                               log=_log_ended(rambles, [(1, "stop")] * 40), stable_version=1, canary_version=2)
    assert better.decision == "promote", better.reasons
    assert better.length_psi is not None and better.length_psi > 1.0
    assert not any("response-length PSI" in r for r in better.reasons)
    assert "ok: answers cut at max_tokens canary 0/40 vs stable 10/40 (-0.2500, max +0.05)" in better.reasons
    # with the PSI checked (the default, 0.2), the same better canary is stopped: the distance is two-sided
    checked = analyze_lm_canary(DELIVERY, stable_metrics=ok[0], canary_metrics=ok[1],
                                log=_log_ended(rambles, [(1, "stop")] * 40), stable_version=1, canary_version=2)
    assert checked.decision == "rollback" and any(r.startswith("FAILED: response-length PSI") for r in checked.reasons)
