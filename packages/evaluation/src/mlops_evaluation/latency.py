"""Latency of two predictors measured in one interleaved run, with an A/A control for noise.

Each round calls the champion (A), the candidate (B) and the champion again (A′) on the same request, in
an order that rotates every round, so slow drifts of the machine (another process, thermal, GC) hit all
three alike. Warm-up rounds are discarded. The A/A pair measures how much p99 moves between two runs of
the *same* model here and now; the candidate is allowed that noise on top of the configured tolerance.
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

    def summary(self) -> dict[str, Any]:
        """Percentiles per series, the candidate's p99 regression and the A/A noise (both as ratios)."""
        a, b, a2 = percentiles(self.a_ms), percentiles(self.b_ms), percentiles(self.a2_ms)
        return {
            "champion": a, "candidate": b, "champion_control": a2,
            "p99_regression": b["p99"] / a["p99"] - 1.0,
            "aa_noise": abs(a2["p99"] / a["p99"] - 1.0),
            "requests": len(self.b_ms), "warmup": self.warmup, **self.extra,
        }


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
