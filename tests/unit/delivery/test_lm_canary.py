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
from mlops_delivery.lm_canary import analyze_lm_canary, decode_timings
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


def _row(version: str, tokens: int, rate: float, **extra: str) -> dict:
    """A logged answer of ``tokens`` tokens, the first after 30 ms, the rest decoded at ``rate`` tokens/s."""
    return {"model_version": version, "completion_tokens": tokens, "ttft_ms": 30.0,
            "latency_ms": 30.0 + (tokens - 1) / rate * 1000.0, **extra}


def log(stable: list[int], canary: list[int], *, stable_rate: float = 60.0, canary_rate: float = 60.0
        ) -> pd.DataFrame:
    return pd.DataFrame([_row("1", n, stable_rate) for n in stable] + [_row("2", n, canary_rate) for n in canary])


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
        canary_metrics=exposition("2", n=40, ttft_s=0.03, rate=100, decode_tokens=30),
        log=log(LENGTHS, LENGTHS, stable_rate=100, canary_rate=100),
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
                                    log=log(LENGTHS, LENGTHS, canary_rate=40), stable_version=1, canary_version=2)
    assert slow_decode.decision == "rollback"  # 40 / 60 = 0.667 < 1 / 1.2 = 0.833, every resample alike
    assert ("FAILED: tokens/s canary 40.0 vs stable 60.0; logged ratio canary/stable on wall-clock time (no CPU "
            "time logged) 0.667, 90% interval [0.667, 0.667] over 40/40 decoded answers (floor 1/1.2 = 0.833)"
            ) in slow_decode.reasons
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
    rows = [_row("1", n, 60.0, finish_reason=f) for n, f in stable]
    rows += [_row("2", n, 60.0, finish_reason=f) for n, f in canary]
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
    no_psi = DELIVERY.model_copy(update={"lm": DELIVERY.lm.model_copy(update={"max_response_length_psi": None})})
    better = analyze_lm_canary(no_psi, stable_metrics=ok[0], canary_metrics=ok[1],
                               log=_log_ended(rambles, [(2, "stop")] * 40), stable_version=1, canary_version=2)
    assert better.decision == "promote", better.reasons
    assert better.length_psi is not None and better.length_psi > 1.0
    assert not any("response-length PSI" in r for r in better.reasons)
    assert "ok: answers cut at max_tokens canary 0/40 vs stable 10/40 (-0.2500, max +0.05)" in better.reasons
    # with the PSI checked (the default, 0.2), the same better canary is stopped: the distance is two-sided
    checked = analyze_lm_canary(DELIVERY, stable_metrics=ok[0], canary_metrics=ok[1],
                                log=_log_ended(rambles, [(2, "stop")] * 40), stable_version=1, canary_version=2)
    assert checked.decision == "rollback" and any(r.startswith("FAILED: response-length PSI") for r in checked.reasons)


def _noisy(version: str, n: int, rate: float) -> list[dict]:
    """``n`` answers of 12 tokens whose decode rate swings with the machine's load: ``rate`` × ½, 1, 2 in turn
    (a loaded shared runner); over all of them the rate is 11 × 3 / (11 × 3.5 / rate) = rate / 1.1667."""
    return [_row(version, 12, rate * (0.5, 1.0, 2.0)[i % 3]) for i in range(n)]


def test_a_decode_rate_gap_inside_the_noise_holds_and_a_clear_one_rolls_back() -> None:
    """The CI failure's case: identical weights decoded at 509 vs 798 tokens/s side by side on a loaded runner,
    and the point comparison (509 < 798 / 1.2) vetoed the promotion. A gap the answers' spread cannot tell from
    noise holds for more traffic (the old check: rollback); a gap far outside it still rolls back."""
    ok = exposition("1", n=40, ttft_s=0.03, rate=60), exposition("2", n=40, ttft_s=0.03, rate=60)
    noisy = pd.DataFrame(_noisy("1", 12, 60.0) + _noisy("2", 12, 60.0 * 509 / 798))
    gap = exposition("2", n=40, ttft_s=0.03, rate=60 * 509 / 798)  # counted 38.3 vs 60 tokens/s: 38.3 < 60 / 1.2
    held = analyze_lm_canary(DELIVERY, stable_metrics=ok[0], canary_metrics=gap, log=noisy, stable_version=1,
                             canary_version=2)
    rate = held.decode_rate
    assert rate is not None and (rate.stable_answers, rate.canary_answers) == (12, 12)
    stable_t = 11 * 12 / sum((r["latency_ms"] - 30.0) / 1000 for r in noisy.to_dict("records")[:12])
    canary_t = 11 * 12 / sum((r["latency_ms"] - 30.0) / 1000 for r in noisy.to_dict("records")[12:])
    assert rate.ratio == pytest.approx(canary_t / stable_t) == pytest.approx(509 / 798)  # ratio of sums, by hand
    assert rate.low < 1 / 1.2 < rate.high
    assert held.decision == "hold", held.reasons
    assert any(r.startswith("undecided: tokens/s") and r.endswith("cannot tell yet, the interval straddles the "
                                                                      "floor") for r in held.reasons)
    clear = pd.DataFrame(_noisy("1", 198, 60.0) + _noisy("2", 198, 30.0))  # half as fast, 200 answers a side
    slow = analyze_lm_canary(DELIVERY, stable_metrics=ok[0], canary_metrics=ok[1], log=clear, stable_version=1,
                             canary_version=2)
    assert slow.decode_rate is not None and slow.decode_rate.high < 1 / 1.2 and slow.decision == "rollback"
    same = pd.DataFrame(_noisy("1", 399, 60.0) + _noisy("2", 399, 60.0))  # equal rates, enough answers
    fine = analyze_lm_canary(DELIVERY, stable_metrics=ok[0], canary_metrics=ok[1], log=same, stable_version=1,
                             canary_version=2)
    assert fine.decode_rate is not None and fine.decode_rate.low >= 1 / 1.2 and fine.decision == "promote"


def test_a_log_without_timings_cannot_compare_decode_rates() -> None:
    ok = exposition("1", n=40, ttft_s=0.03, rate=60), exposition("2", n=40, ttft_s=0.03, rate=60)
    bare = pd.DataFrame([{"model_version": v, "completion_tokens": n} for v in ("1", "2") for n in LENGTHS])
    result = analyze_lm_canary(DELIVERY, stable_metrics=ok[0], canary_metrics=ok[1], log=bare, stable_version=1,
                               canary_version=2)
    assert result.decode_rate is None and result.decision == "hold"
    assert any("timings (decode_steps, decode_cpu_ms; or latency_ms, ttft_ms)" in r and r.startswith("undecided: ")
               for r in result.reasons)


def _timed(version: str, n: int, wall_rate: float, cpu_rate: float | None) -> list[dict]:
    """``n`` answers of 8 tokens: the decode phase (7 tokens) at ``wall_rate`` tokens/s of wall time and, unless
    ``cpu_rate`` is None (an older server), at ``cpu_rate`` tokens/s of the decoding thread's CPU time."""
    rows = []
    for _ in range(n):
        row = _row(version, 8, wall_rate)
        if cpu_rate is not None:
            row.update(decode_steps=7, decode_cpu_ms=7 / cpu_rate * 1000.0)
        rows.append(row)
    return rows


def test_the_decode_rates_are_compared_on_cpu_time_where_both_sides_logged_it() -> None:
    """A loaded machine halves the canary's wall-clock rate while its CPU cost per token equals stable's: on CPU
    time that is a promotion (ratio 1 by arithmetic), where the wall clock alone rolled back (0.5 < 1/1.2). A
    canary whose weights cost twice the CPU per token rolls back although the wall clock saw them alike. A side
    without CPU timings (an older server) puts both on the wall clock."""
    ok = exposition("1", n=40, ttft_s=0.03, rate=60), exposition("2", n=40, ttft_s=0.03, rate=60)
    loaded = pd.DataFrame(_timed("1", 40, 60.0, 200.0) + _timed("2", 40, 30.0, 200.0))
    fine = analyze_lm_canary(DELIVERY, stable_metrics=ok[0], canary_metrics=ok[1], log=loaded, stable_version=1,
                             canary_version=2)
    assert fine.decode_rate is not None and fine.decode_rate.clock == "cpu"
    assert (fine.decode_rate.stable_tokens_per_s, fine.decode_rate.canary_tokens_per_s) == (
        pytest.approx(200.0), pytest.approx(200.0))
    assert fine.decode_rate.ratio == pytest.approx(1.0) and fine.decision == "promote", fine.reasons
    assert any("on the decoding threads' CPU time 1.000" in r for r in fine.reasons), fine.reasons
    heavy = pd.DataFrame(_timed("1", 40, 60.0, 200.0) + _timed("2", 40, 60.0, 100.0))
    slow = analyze_lm_canary(DELIVERY, stable_metrics=ok[0], canary_metrics=ok[1], log=heavy, stable_version=1,
                             canary_version=2)
    assert slow.decode_rate is not None and slow.decode_rate.ratio == pytest.approx(0.5)
    assert slow.decision == "rollback" and any(r.startswith("FAILED: tokens/s") for r in slow.reasons)
    mixed = pd.DataFrame(_timed("1", 40, 60.0, None) + _timed("2", 40, 30.0, 200.0))
    wall = analyze_lm_canary(DELIVERY, stable_metrics=ok[0], canary_metrics=ok[1], log=mixed, stable_version=1,
                             canary_version=2)
    assert wall.decode_rate is not None and wall.decode_rate.clock == "wall"
    assert wall.decode_rate.ratio == pytest.approx(0.5) and wall.decision == "rollback"


def test_decode_timings_refuses_an_unknown_clock() -> None:
    with pytest.raises(ValueError, match="'gpu'"):
        decode_timings(log(LENGTHS, LENGTHS), 1, "gpu")
