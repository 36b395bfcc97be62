"""The LM latency gate's verdicts on made-up timings (no clock is read here): CPU time judged on the paired median
and on p90 with bootstrap CIs, three outcomes, a wall-clock backstop, more rounds while it cannot tell.

Expected figures are computed here with numpy from the same numbers, not taken from the gate."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from mlops_evaluation import EvaluationError
from mlops_evaluation.lm_latency import GenerationTiming, lm_latency_gate, lm_latency_rounds

GATE = {"tolerance": 0.10, "max_noise": 0.25, "reference": "champion", "warmup": 0, "wall_max_ratio": 1.5}


def _timings(ttft: Sequence[float], decode: Sequence[float], wall: Sequence[float] | None = None,
             tokens: int = 11) -> list[GenerationTiming]:
    """Generations of ``tokens`` tokens: CPU TTFT, CPU seconds per later token, and whole wall-clock seconds."""
    return [GenerationTiming(t, t + d * (tokens - 1), tokens,
                             wall_ttft_s=t if wall is not None else None,
                             wall_total_s=None if wall is None else w)
            for t, d, w in zip(ttft, decode, wall if wall is not None else [None] * len(ttft), strict=True)]


def _noise(seed: int, n: int = 48, sigma: float = 0.03) -> np.ndarray:
    return np.exp(np.random.default_rng(seed).normal(0.0, sigma, n))


def _runs(factor: float = 1.0, *, sigma: float = 0.03, wall_factor: float | None = None, n: int = 48
          ) -> tuple[list[GenerationTiming], ...]:
    """A, B, A′ series: 10 ms TTFT and 2 ms a token, times per-generation noise; B ``factor`` slower on CPU."""
    base_t, base_d = 0.010 * _noise(1, n, sigma), 0.002 * _noise(2, n, sigma)
    wall = (base_t + base_d * 10) * 1.2  # some waiting for a core on top of the compute
    a = _timings(base_t, base_d, wall)
    b = _timings(base_t * factor * _noise(3, n, sigma), base_d * factor * _noise(4, n, sigma),
                 wall * (wall_factor or factor) * _noise(5, n, sigma))
    a2 = _timings(base_t * _noise(6, n, sigma), base_d * _noise(7, n, sigma), wall * _noise(8, n, sigma))
    return a, b, a2


def test_equal_models_pass_and_a_1_5x_slower_one_fails() -> None:
    a, b, a2 = _runs(1.0)
    same = lm_latency_gate(a, b, a2, **GATE)
    assert same.passed and same.verdict == "pass", same.reason
    ttft_a, ttft_b = np.array([t.ttft_s for t in a]), np.array([t.ttft_s for t in b])
    assert same.evidence["judged"]["ttft"]["centre"] == pytest.approx(np.median(ttft_b / ttft_a) - 1)
    tail = np.percentile(ttft_b, 90) / np.percentile(ttft_a, 90) - 1
    assert same.evidence["judged"]["ttft"]["tail"] == pytest.approx(tail)
    slow = lm_latency_gate(*_runs(1.5), **GATE)
    assert not slow.passed and not slow.inconclusive and slow.reason.startswith("slower than allowed")
    for part in ("ttft centre", "ttft tail", "decode centre", "decode tail"):
        assert part in slow.reason
    assert slow.evidence["judged"]["decode"]["centre"] == pytest.approx(0.5, abs=0.05)


def test_a_tail_regression_fails_where_the_medians_agree() -> None:
    """One generation in five twice as slow: the median of paired ratios is unmoved, p90 doubles. The old gate
    judged medians only and passed it."""
    a, _, a2 = _runs(1.0, sigma=0.0)
    b = [GenerationTiming(t.ttft_s * (2 if i % 5 == 0 else 1), t.ttft_s * (2 if i % 5 == 0 else 1)
                          + (t.total_s - t.ttft_s) * (2 if i % 5 == 0 else 1), t.new_tokens, t.wall_ttft_s,
                          t.wall_total_s) for i, t in enumerate(a)]
    gate = lm_latency_gate(a, b, a2, **GATE)
    assert gate.evidence["judged"]["ttft"]["centre"] == pytest.approx(0.0)
    assert gate.evidence["judged"]["ttft"]["tail"] == pytest.approx(1.0)
    assert not gate.passed and not gate.inconclusive and "ttft tail (CI" in gate.reason \
        and "ttft centre (CI" not in gate.reason


def test_waiting_inside_generate_fails_the_wall_clock_backstop() -> None:
    """Same CPU time, three times the wall-clock (a lock or a sleep inside generate): CPU time cannot see it."""
    a, b, a2 = _runs(1.0, wall_factor=3.0)
    gate = lm_latency_gate(a, b, a2, **GATE)
    wall_a, wall_b = np.array([t.wall_total_s for t in a]), np.array([t.wall_total_s for t in b])
    assert gate.evidence["wall"]["ratio"] == pytest.approx(np.median(wall_b / wall_a))
    assert not gate.passed and "wall-clock backstop" in gate.reason and "centre (CI" not in gate.reason
    unbounded = lm_latency_gate(a, b, a2, **{**GATE, "wall_max_ratio": None})
    assert unbounded.passed and "reported, no bound configured" in unbounded.reason
    # a bound at the measured ratio itself: its CI straddles it, so the backstop cannot tell: not a pass
    a, b, a2 = _runs(1.0, wall_factor=1.5)
    at = float(np.median(np.array([t.wall_total_s for t in b]) / np.array([t.wall_total_s for t in a])))
    near = lm_latency_gate(a, b, a2, **{**GATE, "wall_max_ratio": at})
    assert near.inconclusive and near.evidence["wall"]["verdict"] == "undecided", near.reason


def test_a_regression_at_the_tolerance_is_inconclusive_then_fails_as_such() -> None:
    a, b, a2 = _runs(1.05, sigma=0.10)
    # the tolerance at the largest of the four point estimates: that one's CI straddles it, no lower end is above it
    points = []
    for get in (lambda t: t.ttft_s, lambda t: t.decode_s_per_token):
        xa, xb = np.array([get(t) for t in a]), np.array([get(t) for t in b])
        points += [np.median(xb / xa) - 1, np.percentile(xb, 90) / np.percentile(xa, 90) - 1]
    gate_args = {**GATE, "tolerance": float(max(points)), "max_noise": 1.0}
    gate = lm_latency_gate(a, b, a2, **gate_args)
    assert gate.inconclusive and not gate.passed and gate.reason.startswith("undecided"), gate.reason
    calls: list[int] = []

    def measure() -> tuple[list[GenerationTiming], ...]:
        calls.append(1)
        return a, b, a2

    rounds = lm_latency_rounds(measure, max_rounds=2, **gate_args)
    assert len(calls) == 2 and rounds.inconclusive and not rounds.passed
    assert rounds.reason.startswith("inconclusive: could not tell within 2 rounds")
    assert [r["requests"] for r in rounds.evidence["rounds"]] == [48, 96]
    decided = lm_latency_rounds(lambda: _runs(1.5), max_rounds=3, **GATE)
    assert not decided.passed and len(decided.evidence["rounds"]) == 1  # decided in the first round


def test_a_noisy_reference_cannot_pass_and_pairing_cancels_drifting_load() -> None:
    a, b, _ = _runs(1.0)
    noisy = lm_latency_gate(a, b, [GenerationTiming(t.ttft_s * 2, t.total_s * 2, t.new_tokens) for t in a], **GATE)
    assert not noisy.passed and noisy.reason.startswith("too noisy")
    assert noisy.evidence["aa_noise"] == pytest.approx(1.0)
    # load doubles halfway through the run for all three series alike: paired ratios stay 1, the gate passes
    drift = [2.0 if i >= 24 else 1.0 for i in range(48)]
    ta = [GenerationTiming(t.ttft_s * k, t.total_s * k, t.new_tokens, t.wall_ttft_s, (t.wall_total_s or 0) * k)
          for t, k in zip(a, drift, strict=True)]
    assert lm_latency_gate(ta, ta, ta, **GATE).passed
    with pytest.raises(EvaluationError, match="paired"):
        lm_latency_gate(a, a[:-1], a, **GATE)


def test_a_configured_wall_bound_that_was_not_measured_does_not_pass() -> None:
    a, b, a2 = (_timings([t.ttft_s for t in s], [(t.total_s - t.ttft_s) / 10 for t in s]) for s in _runs(1.0))
    gate = lm_latency_gate(a, b, a2, **GATE)  # wall_max_ratio 1.5, and no wall-clock timings
    assert not gate.passed and gate.verdict == "inconclusive", gate.reason
    assert "backstop not measured" in gate.reason
    unbounded = lm_latency_gate(a, b, a2, **{**GATE, "wall_max_ratio": None})
    assert unbounded.passed and "backstop holds" not in unbounded.reason, unbounded.reason
