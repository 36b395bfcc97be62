"""The LM canary's sequential verdict on expositions written by the LM server's own metrics class.

Expected statistics come from an independent route: the one-sided normal mixture's likelihood ratio integrated
numerically with scipy (``quad`` over the half-normal mixture of Gaussian likelihood ratios), not the closed form
that ``mlops_delivery.sequential`` uses; the counts behind them are worked out by hand from the traffic.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from prometheus_client import generate_latest
from scipy import integrate, stats

from mlops_config import DeliveryConfig, LMDeliveryConfig, LMSequentialConfig
from mlops_delivery.checks import Check, decide_checks
from mlops_delivery.errors import MetricsError
from mlops_delivery.lm_canary import analyze_lm_canary
from mlops_serving.lm_api import LMMetrics

MARGIN = 0.1
DELIVERY = DeliveryConfig(min_canary_requests=40, lm=LMDeliveryConfig(
    sequential=LMSequentialConfig(error_margin=MARGIN, ttft_margin=MARGIN, decode_margin=MARGIN)))
ALPHA = DELIVERY.sequential.alpha


def _lm_sequential(**update: float) -> DeliveryConfig:
    """``DELIVERY`` with ``delivery.lm.sequential`` updated."""
    sequential = DELIVERY.lm.sequential.model_copy(update=update)
    return DELIVERY.model_copy(update={"lm": DELIVERY.lm.model_copy(update={"sequential": sequential})})


def mixture_log_lr(x_c: int, n_c: int, x_s: int, n_s: int, *, null: float, direction: int) -> float:
    """log of the one-sided mixture ratio, by quadrature: estimate d ~ N(theta, V), V the plug-in variance of
    smoothed proportions, theta - null mixed over a half-normal of scale tau = MARGIN on the ``direction`` side."""
    d = x_c / n_c - x_s / n_s
    p_c, p_s = (x_c + 1) / (n_c + 2), (x_s + 1) / (n_s + 2)
    v = p_c * (1 - p_c) / n_c + p_s * (1 - p_s) / n_s
    z = direction * (d - null)

    def integrand(u: float) -> float:
        return math.exp(z * u / v - u * u / (2 * v)) * 2 / MARGIN * stats.norm.pdf(u / MARGIN)

    value, _ = integrate.quad(integrand, 0, math.inf)
    return math.log(value)


def exposition(version: str, *, n: int, errors: int = 0, ttft_s: float = 0.03, rate: float = 60.0,
               one_token: int = 0, metrics: LMMetrics | None = None) -> str:
    """``n`` answered requests (first token after ``ttft_s``; the last ``one_token`` of them end there, the others
    decode 10 tokens at ``rate`` tokens/s, as the LM server records them), ``errors`` requests failed with 500."""
    m = metrics or LMMetrics()
    for i in range(n):
        m.requests.labels("llm", version, "stable", "completions").inc()
        m.ttft.labels("llm", version).observe(ttft_s)
        if i < n - one_token:
            m.tokens_per_s.labels("llm", version).observe(rate)
            m.decode_tokens.labels("llm", version).inc(10)
            m.decode_seconds.labels("llm", version).inc(10 / rate)
    for _ in range(errors):
        m.errors.labels("llm", version, "RuntimeError", "500").inc()
    return generate_latest(m.registry).decode()


def timed(rows: list[dict]) -> pd.DataFrame:
    """The rows with the timings the LM server logs: first token after 30 ms, the rest decoded at 60 tokens/s."""
    return pd.DataFrame([{**r, "ttft_ms": 30.0, "latency_ms": 30.0 + (r["completion_tokens"] - 1) / 60 * 1000}
                         for r in rows])


def log(n_stable: int, n_canary: int, canary_length: int = 12) -> pd.DataFrame:
    lengths = [4, 8, 12, 16]
    rows = [{"model_version": "1", "completion_tokens": lengths[i % 4]} for i in range(n_stable)]
    rows += [{"model_version": "2", "completion_tokens": canary_length if canary_length != 12 else lengths[i % 4]}
             for i in range(n_canary)]
    return timed(rows)


def analyze(stable: str, canary: str, frame: pd.DataFrame, delivery: DeliveryConfig = DELIVERY, **kw: str):  # type: ignore[no-untyped-def]
    return analyze_lm_canary(delivery, stable_metrics=stable, canary_metrics=canary, log=frame, stable_version=1,
                             canary_version=2, model="llm", **kw)


def test_canary_failing_clearly_more_stops_early_with_rollback() -> None:
    """11 of 30 canary requests fail, none of stable's 30: log Lambda(above 0) = 4.36 >= log(3 / alpha) = 4.09
    (the rollback level is alpha / 3 per test), below the 40 requests the thresholds wait for. With 10 failures
    (3.82) the same look holds."""
    boundary = math.log(3 / ALPHA)
    assert mixture_log_lr(11, 30, 0, 30, null=0.0, direction=+1) >= boundary
    assert mixture_log_lr(10, 30, 0, 30, null=0.0, direction=+1) < boundary
    result = analyze(exposition("1", n=30), exposition("2", n=19, errors=11), log(30, 19))
    assert result.decision == "rollback", result.reasons
    assert result.threshold_decision == "hold"  # only 30 canary requests: the thresholds alone could not stop
    assert result.sequential is not None
    error = next(t for t in result.sequential.tests if t.metric == "error_rate")
    assert (error.canary_events, error.canary_seen, error.stable_events, error.stable_seen) == (11, 30, 0, 30)
    assert error.outcome == "worse" and error.rollback_boundary == pytest.approx(boundary)
    assert error.rollback_statistic == pytest.approx(mixture_log_lr(11, 30, 0, 30, null=0.0, direction=+1), rel=1e-6)
    assert result.reasons[0].startswith("WORSE: error_rate: canary-stable +0.3667 (11/30 vs 0/30)")
    almost = analyze(exposition("1", n=30), exposition("2", n=20, errors=10), log(30, 20))
    assert almost.decision == "hold", almost.reasons


def test_equal_canary_promotes_only_after_enough_evidence() -> None:
    """Two clean, equally fast variants: promotion needs log Lambda(below the margin) >= log(1 / alpha) on each
    test. The first n where that holds is found by quadrature; one request per side fewer holds."""
    n_star = next(n for n in range(2, 500)
                  if mixture_log_lr(0, n, 0, n, null=MARGIN, direction=-1) >= math.log(1 / ALPHA))
    assert n_star == 38  # by the quadrature above: log Lambda 2.72 at n = 36, 3.06 at 38 (boundary 3.00)
    delivery = DELIVERY.model_copy(update={"min_canary_requests": 10})
    early = analyze(exposition("1", n=n_star - 1), exposition("2", n=n_star - 1), log(n_star - 1, n_star - 1),
                    delivery)
    assert early.decision == "hold" and early.threshold_decision == "promote", early.reasons
    assert early.sequential is not None
    assert {t.outcome for t in early.sequential.tests} == {"undecided"}
    enough = analyze(exposition("1", n=n_star), exposition("2", n=n_star), log(n_star, n_star), delivery)
    assert enough.decision == "promote", enough.reasons
    assert enough.sequential is not None
    for test in enough.sequential.tests:  # errors 0/n, slow first tokens 0/n, slow decodes 0/n: one statistic
        assert test.outcome == "non_inferior" and (test.canary_seen, test.stable_seen) == (n_star, n_star)
        assert test.promote_statistic == pytest.approx(mixture_log_lr(0, n_star, 0, n_star, null=MARGIN,
                                                                      direction=-1), rel=1e-6)


def test_slow_first_tokens_and_slow_decoding_roll_back_from_the_histograms() -> None:
    """A first token after 300 ms lies above the 250 ms bound; 5 tokens/s lies in the (1, 5] bucket, under 10."""
    delivery = _lm_sequential(ttft_slow_ms=250.0)
    late = analyze(exposition("1", n=40), exposition("2", n=40, ttft_s=0.3), log(40, 40), delivery)
    assert (late.canary.slow_first_tokens, late.canary.first_tokens) == (40, 40)
    assert (late.stable.slow_first_tokens, late.stable.first_tokens) == (0, 40)
    assert late.decision == "rollback" and late.reasons[0].startswith("WORSE: slow_first_token(>250ms)")
    slow = analyze(exposition("1", n=40), exposition("2", n=40, rate=5.0), log(40, 40))
    assert (slow.canary.slow_decodes, slow.canary.decoded_requests, slow.stable.slow_decodes) == (40, 40, 0)
    assert slow.decision == "rollback" and slow.reasons[0].startswith("WORSE: slow_decode(<=10tok/s)")


def test_one_token_answers_are_not_slow_decodes_but_count_as_trials() -> None:
    """Short answers have no decode rate; the slow-decode share is over every answered request, so 20 one-token
    answers of 40 leave the test 0/40 vs 0/40 (as the other two) rather than 0/20, which could not promote yet."""
    result = analyze(exposition("1", n=40, one_token=20), exposition("2", n=40, one_token=20), log(40, 40))
    assert (result.canary.decoded_requests, result.canary.first_tokens, result.canary.slow_decodes) == (20, 40, 0)
    assert result.sequential is not None
    decode = next(t for t in result.sequential.tests if t.metric.startswith("slow_decode"))
    assert (decode.canary_events, decode.canary_seen, decode.stable_events, decode.stable_seen) == (0, 40, 0, 40)
    assert decode.promote_statistic == pytest.approx(mixture_log_lr(0, 40, 0, 40, null=MARGIN, direction=-1),
                                                     rel=1e-6)
    assert result.decision == "promote", result.reasons


def test_longer_answers_veto_a_promotion_but_do_not_roll_back() -> None:
    """Response length is a threshold (PSI) only: failing it turns the verdict's promote into a hold."""
    result = analyze(exposition("1", n=60), exposition("2", n=60), log(60, 60, canary_length=64))
    assert result.sequential is not None and result.sequential.decision == "promote"
    assert result.threshold_decision == "rollback" and result.decision == "hold"
    assert result.reasons[0] == "guard: the thresholds answer rollback, so the promotion waits"
    assert any(r.startswith("threshold: FAILED: response-length PSI") for r in result.reasons)
    doc = result.to_dict()
    assert doc["sequential"]["decision"] == "promote" and doc["threshold_decision"] == "rollback"


def test_counts_are_windowed_and_a_bound_off_the_buckets_is_refused() -> None:
    """Ten slow first tokens before the window (model warm-up) do not count against the canary."""
    m = LMMetrics()
    before = exposition("2", n=10, ttft_s=2.0, metrics=m)
    after = exposition("2", n=40, metrics=m)
    windowed = analyze(exposition("1", n=40), after, log(40, 40), canary_before=before)
    assert (windowed.canary.slow_first_tokens, windowed.canary.first_tokens) == (0, 40)
    assert windowed.canary.requests == 40 and windowed.decision == "promote", windowed.reasons
    whole = analyze(exposition("1", n=40), after, log(40, 40))
    assert (whole.canary.slow_first_tokens, whole.canary.first_tokens) == (10, 50)
    # windows swapped, as after a counter reset: 10 - 50 = -40 requests
    with pytest.raises(MetricsError, match=r"canary v2: 5xx count 0.0 must lie in \[0, -40.0\]; did the server"):
        analyze(exposition("1", n=40), before, log(40, 40), canary_before=after)
    off = _lm_sequential(ttft_slow_ms=300.0)
    with pytest.raises(MetricsError, match=r"delivery\.lm\.sequential\.ttft_slow_ms = 300 is not an upper bound"):
        analyze(exposition("1", n=40), exposition("2", n=40), log(40, 40), off)
    off_rate = _lm_sequential(slow_decode_tokens_per_s=7.0)
    with pytest.raises(MetricsError, match=r"slow_decode_tokens_per_s = 7 is not an upper bound .*\(tokens/s\)"):
        analyze(exposition("1", n=40), exposition("2", n=40), log(40, 40), off_rate)


def test_one_threshold_rule_orders_missing_failed_passed() -> None:
    checks = [Check("a", False), None, Check("b", True), Check("c", None)]
    assert decide_checks(checks) == ("hold", ("insufficient: c", "FAILED: b", "ok: a"))
    assert decide_checks(checks[:3]) == ("rollback", ("FAILED: b", "ok: a"))
    assert decide_checks([Check("a", False)]) == ("promote", ("ok: a",))
    # a check that was made and cannot tell yet holds a promotion, and does not stop another check's rollback
    pending = Check("d", None, undecided=True)
    assert decide_checks([Check("a", False), pending]) == ("hold", ("undecided: d", "ok: a"))
    assert decide_checks([pending, Check("b", True)]) == ("rollback", ("FAILED: b", "undecided: d"))
    assert decide_checks([pending, Check("c", None)]) == ("hold", ("insufficient: c", "undecided: d"))


def truncating_log(n_stable: int, n_canary: int, *, stable_cut: int, canary_cut: int) -> pd.DataFrame:
    """Log rows as the LM server writes them: the first ``*_cut`` answers of each side ran to ``max_tokens``."""
    rows = [{"model_version": v, "completion_tokens": 8 if i < cut else 3,
             "finish_reason": "length" if i < cut else "stop"}
            for v, n, cut in (("1", n_stable, stable_cut), ("2", n_canary, canary_cut)) for i in range(n)]
    return timed(rows)


def test_a_canary_that_truncates_more_is_rolled_back_by_the_sequential_test() -> None:
    """Truncated answers (finish_reason length) are a fourth always-valid test, its margin max_truncated_increase;
    alpha is split in quarters. The fewest canary truncations of 30 (stable: none of 30) that reach the rollback
    level log(4 / alpha) are found by quadrature: that look rolls back, one fewer holds; neither is a threshold
    rollback (30 canary requests are below the 40 the thresholds wait for)."""
    delivery = DELIVERY.model_copy(update={"lm": DELIVERY.lm.model_copy(update={
        "max_truncated_increase": MARGIN, "max_response_length_psi": None})})
    boundary = math.log(4 / ALPHA)
    k_star = next(k for k in range(31) if mixture_log_lr(k, 30, 0, 30, null=0.0, direction=+1) >= boundary)
    assert 5 <= k_star <= 20, k_star
    worse = analyze(exposition("1", n=30), exposition("2", n=30), truncating_log(30, 30, stable_cut=0,
                                                                                  canary_cut=k_star), delivery)
    assert worse.decision == "rollback" and worse.threshold_decision == "hold", worse.reasons
    assert worse.sequential is not None and len(worse.sequential.tests) == 4
    cut = next(t for t in worse.sequential.tests if t.metric.startswith("truncated_answer"))
    assert (cut.canary_events, cut.canary_seen, cut.stable_events, cut.stable_seen) == (k_star, 30, 0, 30)
    assert cut.outcome == "worse" and cut.rollback_boundary == pytest.approx(boundary)
    assert cut.rollback_statistic == pytest.approx(mixture_log_lr(k_star, 30, 0, 30, null=0.0, direction=+1),
                                                   rel=1e-6)
    assert worse.reasons[0].startswith(f"WORSE: truncated_answer(finish_reason=length): canary-stable "
                                       f"{k_star / 30:+.4f} ({k_star}/30 vs 0/30)")
    assert all(t.rollback_boundary == pytest.approx(boundary) for t in worse.sequential.tests)  # quarters
    fewer = analyze(exposition("1", n=30), exposition("2", n=30), truncating_log(30, 30, stable_cut=0,
                                                                                  canary_cut=k_star - 1), delivery)
    assert fewer.decision == "hold", fewer.reasons


def test_an_equally_truncating_canary_is_not_rolled_back_and_promotes_once_shown_within_the_margin() -> None:
    """Both sides cut 10 % of their answers: never worse; promotion needs the rise shown below the margin by
    quadrature, the same n as the other tests would need at that variance, and not before."""
    delivery = DELIVERY.model_copy(update={"lm": DELIVERY.lm.model_copy(update={"max_truncated_increase": MARGIN}),
                                           "min_canary_requests": 10})
    n_star = next(n for n in range(10, 2000, 10)
                  if mixture_log_lr(n // 10, n, n // 10, n, null=MARGIN, direction=-1) >= math.log(1 / ALPHA))
    for n in (10, n_star - 10, n_star):
        result = analyze(exposition("1", n=n), exposition("2", n=n),
                         truncating_log(n, n, stable_cut=n // 10, canary_cut=n // 10), delivery)
        assert result.sequential is not None
        cut = next(t for t in result.sequential.tests if t.metric.startswith("truncated_answer"))
        assert cut.outcome != "worse" and result.decision != "rollback", (n, result.reasons)
        assert cut.promote_statistic == pytest.approx(mixture_log_lr(n // 10, n, n // 10, n, null=MARGIN,
                                                                     direction=-1), rel=1e-6)
        assert (cut.outcome == "non_inferior") == (n == n_star), (n, cut)
