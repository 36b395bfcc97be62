"""The sequential canary verdict: the mixture SPRT against independent computations, its error rates by
simulation, and the decisions it reaches.

Expected values come from numerical integration (scipy.integrate.quad over the mixture), root finding
(scipy.optimize.brentq), arithmetic by hand, and seeded simulations judged by a binomial interval.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from mlops_config import DeliveryConfig, SequentialCanaryConfig, TabularSequentialConfig
from mlops_delivery import MetricsError
from mlops_delivery.sequential import (
    HOLD,
    PROMOTE,
    ROLLBACK,
    arm_counts,
    band_counts,
    confidence_bound,
    difference_of_proportions,
    guarded_decision,
    mixture_log_lr,
    proportion_test,
    run_tests,
    sequential_verdict,
    slow_count,
    verdict_codes,
)

CFG = SequentialCanaryConfig()
TAB = TabularSequentialConfig()


def quad_lr(estimate: float, variance: float, null: float, tau: float, direction: int) -> float:
    """The mixture ratio by brute force: the Gaussian likelihood ratio of each alternative, averaged over a
    half-normal prior on the alternatives beyond ``null``."""
    def integrand(u: float) -> float:
        theta = null + direction * u
        lr = math.exp(((estimate - null) ** 2 - (estimate - theta) ** 2) / (2 * variance))
        return lr * 2 * stats.norm.pdf(u, scale=tau)
    return integrate.quad(integrand, 0, math.inf)[0]


def test_closed_form_matches_the_integral_and_a_hand_case() -> None:
    # V = 1, tau = 1, d = 2: symmetric mixture sqrt(1/2) e^{4/4} = 1.9221; one-sided 2 * 1.9221 * Phi(2/sqrt 2)
    hand = 2 * math.sqrt(0.5) * math.e * stats.norm.cdf(math.sqrt(2))
    assert math.exp(float(mixture_log_lr(2.0, 1.0, 0.0, 1.0, +1))) == pytest.approx(hand, rel=1e-12)
    assert hand == pytest.approx(3.5418, abs=1e-4)
    for est, var, null, tau, direction in [(0.03, 2e-4, 0.0, 0.01, +1), (0.001, 1e-5, 0.005, 0.005, -1),
                                           (-0.02, 3e-4, 0.05, 0.05, -1), (0.0, 1e-3, 0.0, 0.02, +1)]:
        got = math.exp(float(mixture_log_lr(est, var, null, tau, direction)))
        assert got == pytest.approx(quad_lr(est, var, null, tau, direction), rel=1e-6)


def test_confidence_bound_is_where_the_integrated_ratio_meets_one_over_alpha() -> None:
    est, var, tau, alpha = 0.004, 4e-6, 0.005, 0.05
    upper = confidence_bound(est, var, tau, alpha, +1)
    # the null value above the estimate whose ratio (alternatives below it) equals 1/alpha, found by brentq
    root = optimize.brentq(lambda t: quad_lr(est, var, t, tau, -1) - 1 / alpha, est, est + 0.03)
    assert upper == pytest.approx(root, rel=1e-6)
    lower = confidence_bound(est, var, tau, alpha, -1)
    assert est - lower == pytest.approx(upper - est, rel=1e-9)


def test_plug_in_variance_by_hand() -> None:
    est, var = difference_of_proportions(3, 100, 9, 900)
    # 3/100 - 9/900 = 0.02; smoothed 4/102 and 10/902
    p_c, p_s = 4 / 102, 10 / 902
    assert float(est) == pytest.approx(0.02)
    assert float(var) == pytest.approx(p_c * (1 - p_c) / 100 + p_s * (1 - p_s) / 900)


def test_gaussian_null_crossing_rate_stays_below_alpha_however_often_one_looks() -> None:
    # exact setting of the mSPRT: a Gaussian running mean, known variance, a look after every observation
    rng = np.random.default_rng(0)
    sims, looks, alpha, tau = 4000, 400, 0.05, 0.5
    means = np.cumsum(rng.standard_normal((sims, looks)), axis=1) / np.arange(1, looks + 1)
    crossed = (mixture_log_lr(means, 1.0 / np.arange(1, looks + 1), 0.0, tau, +1) >= math.log(1 / alpha)).any(axis=1)
    ci = stats.binomtest(int(crossed.sum()), sims).proportion_ci(0.99)
    assert ci.low <= alpha, crossed.mean()
    # a fixed-sample z-test at every look crosses far more often: the problem the mixture solves
    naive = (means * np.sqrt(np.arange(1, looks + 1)) >= stats.norm.ppf(1 - alpha)).any(axis=1)
    assert naive.mean() > 3 * alpha


def _simulate_aa(cfg: SequentialCanaryConfig, seed: int, sims: int = 1000, looks: int = 60) -> tuple[int, int]:
    """A/A canaries (10 % traffic), a look every 100 canary requests: (rolled back, promoted) counts."""
    rng = np.random.default_rng(seed)
    n_bands = len(TAB.score_edges) + 1
    shares = np.array([0.5, 0.25, 0.15, 0.08, 0.02])
    cum = {s: np.zeros((sims, 4 + n_bands)) for s in ("stable", "canary")}
    code = np.full(sims, HOLD)
    for _ in range(looks):
        open_ = code == HOLD
        for side, n in (("canary", 100), ("stable", 900)):
            errors = rng.binomial(n, 0.01, sims)
            slow = rng.binomial(n - errors, 0.03)
            bands = rng.multinomial(n - errors, shares)
            cum[side] += np.column_stack([np.full(sims, n), errors, n - errors, slow, bands]) * open_[:, None]
        arms = {s: arm_counts(requests=c[:, 0], errors=c[:, 1], answered=c[:, 2], slow=c[:, 3], bands=c[:, 4:])
                for s, c in cum.items()}
        now = verdict_codes(run_tests(cfg, TAB, arms["stable"], arms["canary"]), arms["canary"].requests, 100)
        code = np.where(open_, now, code)
    return int((code == ROLLBACK).sum()), int((code == PROMOTE).sum())


def test_aa_canaries_are_rarely_rolled_back_and_mostly_promoted() -> None:
    rolled_back, promoted = _simulate_aa(CFG, seed=1)
    ci = stats.binomtest(rolled_back, 1000).proportion_ci(0.99)
    assert ci.low <= CFG.alpha, rolled_back
    assert promoted > 500  # 6,000 canary requests suffice for most equal canaries


def test_a_canary_worse_by_the_margin_is_rarely_promoted() -> None:
    # the boundary case of non-inferiority: error rate exactly error_margin above stable's, looked at 60 times
    rng = np.random.default_rng(2)
    sims, alpha = 1000, CFG.alpha
    x_c = np.cumsum(rng.binomial(100, 0.01 + TAB.error_margin, (sims, 60)), axis=1)
    x_s = np.cumsum(rng.binomial(900, 0.01, (sims, 60)), axis=1)
    n_c, n_s = 100 * np.arange(1, 61), 900 * np.arange(1, 61)
    r = proportion_test(x_c, n_c, x_s, n_s, margin=TAB.error_margin, tau=TAB.error_margin, alpha=alpha,
                        alpha_rollback=alpha / 3, shift=False)
    promoted = int(r.promote_ok.any(axis=1).sum())
    assert stats.binomtest(promoted, sims).proportion_ci(0.99).low <= alpha, promoted


def _arm(requests: int, errors: int, slow: int, bands: list[int]):
    return arm_counts(requests=requests, errors=errors, answered=requests - errors, slow=slow, bands=bands)


def test_clearly_worse_canary_rolls_back_with_its_evidence() -> None:
    stable = _arm(9000, 45, 200, [4500, 2250, 1350, 720, 180])
    canary = _arm(1000, 60, 22, [500, 250, 150, 80, 20])  # 6 % errors against 0.5 %
    verdict = sequential_verdict(CFG, TAB, stable, canary, min_requests=100)
    assert verdict.decision == "rollback"
    err = next(t for t in verdict.tests if t.metric == "error_rate")
    assert err.outcome == "worse" and err.rollback_statistic is not None
    assert err.rollback_statistic >= err.rollback_boundary == pytest.approx(math.log(3 / CFG.alpha))
    assert (err.canary_seen, err.canary_events, err.stable_seen) == (1000, 60, 9000)
    assert err.rollback_interval is not None and err.rollback_interval[0] > 0
    assert verdict.reasons[0].startswith("WORSE: error_rate")
    json.dumps(verdict.to_dict())


def test_equal_canary_promotes_only_with_enough_requests() -> None:
    shares = [0.5, 0.25, 0.15, 0.08, 0.02]
    big = sequential_verdict(CFG, TAB, _arm(90000, 450, 2700, [int(90000 * s) for s in shares]),
                             _arm(10000, 50, 300, [int(10000 * s) for s in shares]), min_requests=100)
    assert big.decision == "promote", big.reasons
    assert all(t.outcome == "non_inferior" for t in big.tests)
    assert all(t.promote_interval is not None and t.promote_interval[1] < t.margin for t in big.tests)
    small = sequential_verdict(CFG, TAB, _arm(900, 4, 27, [450, 225, 135, 72, 18]),
                               _arm(100, 0, 3, [50, 25, 15, 8, 2]), min_requests=100)
    assert small.decision == "hold"
    few = sequential_verdict(CFG, TAB, _arm(90000, 450, 2700, [int(90000 * s) for s in shares]),
                             _arm(10000, 50, 300, [int(10000 * s) for s in shares]), min_requests=20000)
    assert few.decision == "hold"
    assert few.reasons[0] == "insufficient: only 10000 canary requests, need 20000 to promote"


def test_shifted_scores_roll_back_and_a_small_shift_still_promotes() -> None:
    stable = _arm(90000, 0, 0, [45000, 22500, 13500, 7200, 1800])
    shifted = sequential_verdict(CFG, TAB, stable, _arm(10000, 0, 0, [2000, 3000, 2500, 2000, 500]), min_requests=100)
    assert shifted.decision == "rollback"
    assert any(t.metric == "score_band(-inf,0.05]" and t.outcome == "worse" for t in shifted.tests)
    nudged = sequential_verdict(CFG, TAB, stable, _arm(10000, 0, 0, [4900, 2600, 1350, 720, 430]), min_requests=100)
    assert nudged.decision == "promote", nudged.reasons


def test_threshold_guard_only_vetoes_a_promotion() -> None:
    shares = [0.5, 0.25, 0.15, 0.08, 0.02]
    promote = sequential_verdict(CFG, TAB, _arm(90000, 450, 2700, [int(90000 * s) for s in shares]),
                                 _arm(10000, 50, 300, [int(10000 * s) for s in shares]), min_requests=100)
    assert guarded_decision(promote, "rollback", ["FAILED: p99"], guard=True)[0] == "hold"
    assert guarded_decision(promote, "rollback", ["FAILED: p99"], guard=False)[0] == "promote"
    hold = sequential_verdict(CFG, TAB, _arm(900, 4, 27, [450, 225, 135, 72, 18]), _arm(100, 0, 3, [50, 25, 15, 8, 2]))
    decision, reasons = guarded_decision(hold, "rollback", ["FAILED: p99"], guard=True)
    assert decision == "hold" and "threshold: FAILED: p99" in reasons


def test_band_and_slow_counts_follow_the_histogram_le_rule_and_bad_input_is_named() -> None:
    assert band_counts(np.array([0.05, 0.0500001, 0.1, 0.7, 0.0]), (0.05, 0.1, 0.2, 0.5)).tolist() == [2, 2, 0, 0, 1]
    buckets = [(0.05, 90.0), (0.1, 95.0), (0.25, 99.0), (math.inf, 100.0)]
    assert slow_count(buckets, 0.1) == 5.0
    with pytest.raises(MetricsError, match=r"slow_ms = 120 is not an upper bound .* \[50.0, 100.0, 250.0\]"):
        slow_count(buckets, 0.12)
    with pytest.raises(MetricsError, match="errors count"):
        arm_counts(requests=10, errors=11, answered=0, slow=0, bands=[0, 0, 0, 0, 0])
    with pytest.raises(MetricsError, match="need 5 bands"):
        run_tests(CFG, TAB, _arm(10, 0, 0, [1, 2]), _arm(10, 0, 0, [1, 2]))


def test_config_rejects_bad_edges_and_alpha() -> None:
    with pytest.raises(ValueError, match="score_edges must strictly increase"):
        TabularSequentialConfig(score_edges=(0.5, 0.2))
    with pytest.raises(ValueError, match="alpha"):
        DeliveryConfig(sequential={"alpha": 0.7})


def test_analyze_canary_decides_by_the_sequential_verdict_and_reports_both(tmp_path) -> None:
    """Real expositions (prometheus_client) and a parquet log: enough equal traffic promotes; the same canary
    with 15 slow requests in 2,000 (stable: none) is rolled back by the slow-share test, although its p99
    still passes the thresholds (15 < 1 % of 2,000: p99 stays in the 5 ms bucket)."""
    import pandas as pd
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from mlops_delivery.canary import analyze_canary

    def expo(ok: int, version: str, slow: int = 0) -> str:
        r = CollectorRegistry()
        Counter("mlops_serving_requests", "", ["model", "version"], registry=r).labels("fraud", version).inc(ok)
        Counter("mlops_serving_errors", "", ["model", "version", "status"], registry=r)
        h = Histogram("mlops_serving_request_seconds", "", ["model", "version"],
                      buckets=(0.005, 0.05, 0.1, 0.25, 1.0), registry=r).labels("fraud", version)
        for i in range(ok):
            h.observe(0.2 if i < slow else 0.004)
        return generate_latest(r).decode()

    rng = np.random.default_rng(3)
    log = pd.DataFrame({"model_version": ["1"] * 20000 + ["2"] * 2000,
                        "score": rng.beta(1, 12, 22000)})
    log.to_parquet(tmp_path / "log.parquet")
    log = pd.read_parquet(tmp_path / "log.parquet")
    cfg = DeliveryConfig()
    good = analyze_canary(cfg, expo(20000, "1"), expo(2000, "2"), log, stable_version=1, canary_version=2)
    assert good.decision == "promote", good.reasons
    assert good.threshold_decision == "promote" and good.sequential is not None
    doc = json.loads(json.dumps(good.to_dict()))
    assert doc["sequential"]["decision"] == "promote" and len(doc["sequential"]["tests"]) == 7
    slow = analyze_canary(cfg, expo(20000, "1"), expo(2000, "2", slow=15), log, stable_version=1, canary_version=2)
    assert slow.decision == "rollback", slow.reasons
    assert slow.threshold_decision == "promote"
    assert slow.reasons[0].startswith("WORSE: slow_share(>100ms)")
    assert slow.canary.slow_requests == 15 and slow.canary.latency_count == 2000


def test_required_skew_replay_only_holds_a_promotion() -> None:
    from mlops_delivery.sequential import skew_guard

    assert skew_guard("promote", ["ok: x"], None, None) == ("promote", ("ok: x",))
    decision, reasons = skew_guard("promote", ["ok: x"], None, 0.01)
    assert decision == "hold" and reasons[0].startswith("insufficient: a skew replay is required")
    decision, reasons = skew_guard("promote", ["ok: x"], 0.2, 0.01)
    assert decision == "hold" and reasons[0] == "guard: skew replay mismatch rate 0.2000 > 0.01"
    assert skew_guard("rollback", ["WORSE: y"], 0.2, 0.01)[0] == "rollback"
    assert skew_guard("promote", ["ok: x"], 0.005, 0.01) == (
        "promote", ("ok: x", "ok: skew replay mismatch rate 0.0050 <= 0.01"))
