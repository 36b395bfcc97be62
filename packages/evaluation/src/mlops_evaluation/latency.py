"""Latency of two predictors measured in one interleaved run, with an A/A control for noise.

Each round calls the champion (A), the candidate (B) and the champion again (A′) on the same request, in
an order that rotates every round, so slow drifts of the machine (another process, thermal, GC) hit all
three alike. Warm-up rounds are discarded. The A/A pair measures how much p99 moves between two runs of
the *same* model here and now; the candidate is allowed that noise on top of the configured tolerance.

A p99 over a few hundred samples rests on its top two or three values, so one scheduler hiccup that lands on
the candidate's series moves the point estimate by tens of percent (a CI run saw +45 % between two identical
tails). The regression therefore comes with a paired bootstrap confidence interval: rounds are resampled
together, keeping A, B and A′ of one round side by side, and the gate judges the interval's lower end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlops_evaluation.errors import EvaluationError

Predict = Callable[[Any], Any]
QUANTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
ORDERS = ((0, 1, 2), (1, 2, 0), (2, 0, 1), (0, 2, 1), (1, 0, 2), (2, 1, 0))


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / p99 (linear interpolation, numpy's default) and the mean of latencies in ms."""
    x = np.asarray(samples_ms, dtype=np.float64)
    if x.size == 0:
        raise EvaluationError("no latency samples: expected at least one timed request")
    out = {k: float(np.quantile(x, q)) for k, q in QUANTILES.items()}
    out["mean"] = float(x.mean())
    return out


@dataclass(frozen=True)
class LatencyRun:
    """Timed samples (ms) of champion (A), candidate (B) and the champion's control series (A′)."""

    a_ms: list[float]
    b_ms: list[float]
    a2_ms: list[float]
    warmup: int
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self, *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
        """Percentiles per series, the candidate's p99 regression with its bootstrap CI, and the A/A noise.

        Regression and noise are ratios (0.1 = 10 % slower). ``p99_regression_ci`` is the two-sided
        ``confidence`` percentile interval of ``p99(B) / p99(A) - 1`` over ``resamples`` paired resamples of
        the rounds (seeded, so a report is reproducible).
        """
        a, b, a2 = percentiles(self.a_ms), percentiles(self.b_ms), percentiles(self.a2_ms)
        return {
            "champion": a, "candidate": b, "champion_control": a2,
            "p99_regression": b["p99"] / a["p99"] - 1.0,
            "p99_regression_ci": p99_ratio_ci(self.a_ms, self.b_ms, confidence=confidence, resamples=resamples,
                                              seed=seed),
            "confidence": confidence,
            "aa_noise": abs(a2["p99"] / a["p99"] - 1.0),
            "requests": len(self.b_ms), "warmup": self.warmup, **self.extra,
        }


def p99_ratio_ci(a_ms: Sequence[float], b_ms: Sequence[float], *, confidence: float, resamples: int,
                 seed: int) -> list[float]:
    """Percentile bootstrap CI of ``p99(b) / p99(a) - 1`` resampling the paired rounds ``(a[i], b[i])``."""
    a, b = np.asarray(a_ms, dtype=np.float64), np.asarray(b_ms, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise EvaluationError(f"paired latency series must be non-empty and of equal length, got {a.size} and "
                              f"{b.size} samples")
    if not 0.0 < confidence < 1.0:
        raise EvaluationError(f"confidence={confidence!r}: expected a fraction strictly between 0 and 1")
    idx = np.random.default_rng(seed).integers(0, a.size, size=(resamples, a.size))
    ratio = np.quantile(b[idx], 0.99, axis=1) / np.quantile(a[idx], 0.99, axis=1) - 1.0
    tail = (1.0 - confidence) / 2.0
    return [float(np.quantile(ratio, tail)), float(np.quantile(ratio, 1.0 - tail))]


def measure_interleaved(champion: Predict, candidate: Predict, requests: Sequence[Any], *, timed: int,
                        warmup: int, repeats: int = 1) -> LatencyRun:
    """Call A, B, A′ round-robin (rotating order) over ``requests`` cycled; drop the first ``warmup`` rounds.

    Args:
        champion: the reference predictor (A and A′). candidate: the predictor under test (B).
        requests: request payloads, used in turn. timed: rounds kept. warmup: rounds discarded first.
        repeats: back-to-back calls per sample; the sample is their median latency.
    """
    if not requests:
        raise EvaluationError("latency run needs at least one request payload")
    if timed < 1 or warmup < 0 or repeats < 1:
        raise EvaluationError(f"timed={timed!r} and repeats={repeats!r} must be ≥ 1, warmup={warmup!r} ≥ 0")
    fns = (champion, candidate, champion)
    series: tuple[list[float], list[float], list[float]] = ([], [], [])
    clock = time.perf_counter_ns
    for i in range(warmup + timed):
        payload = requests[i % len(requests)]
        for k in ORDERS[i % len(ORDERS)]:
            times = []
            for _ in range(repeats):
                t0 = clock()
                fns[k](payload)
                times.append((clock() - t0) / 1e6)
            if i >= warmup:
                series[k].append(float(np.median(times)))
    return LatencyRun(series[0], series[1], series[2], warmup, {"repeats": repeats})
