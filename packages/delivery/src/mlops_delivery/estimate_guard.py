"""The canary's estimated-performance guard: CBPE F1 of the canary's scores against the stable's, same traffic.

Both arms answer the same randomly split traffic, so their inputs are alike and a difference in their estimated
F1 (the expected confusion matrix of calibrated scores, :func:`mlops_model.statistics.expected_confusion`) is
a difference of the models, measured before any label arrives. The interval is a paired draw: each arm's labels
drawn from its own scores (``y ~ Bernoulli(s)``), the relative drop of the canary's F1 recomputed per draw.

With ``delivery.tabular.canary_max_estimated_f1_drop`` set:

- the interval's lower end above the limit → **rollback** (the canary is worse beyond label noise), whatever
  the other checks say;
- its upper end at or below the limit → the decision stands (``ok:`` reason);
- otherwise a promotion is held (``insufficient:``), never rolled back, until more traffic narrows it.

Trust it only for calibrated models (the calibration gate): an uncalibrated canary's estimate says nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from mlops_model import statistics

Decision = Literal["promote", "hold", "rollback"]


def estimated_f1(scores: Any, threshold: float) -> float:
    """CBPE F1 of calibrated ``scores`` at ``threshold``."""
    c = statistics.expected_confusion(scores, threshold)
    return float(statistics.f1_counts(c["tp"], c["fp"], c["fn"]))


def _drawn_f1(rng: np.random.Generator, s: np.ndarray, flagged: np.ndarray) -> float:
    y = rng.random(len(s)) < s
    return float(statistics.f1_counts(np.sum(y & flagged), np.sum(~y & flagged), np.sum(y & ~flagged)))


def estimated_drop_interval(stable: Any, canary: Any, threshold: float, *, interval: float = 0.9, draws: int = 200,
                            seed: int = 0, canary_threshold: float | None = None) -> tuple[float, float, float]:
    """``(drop, low, high)``: the canary's relative estimated F1 drop against the stable's, with its interval;
    the stable decides at ``threshold``, the canary at ``canary_threshold`` (default: the same)."""
    ct = threshold if canary_threshold is None else canary_threshold
    s, c = np.asarray(stable, dtype=np.float64).ravel(), np.asarray(canary, dtype=np.float64).ravel()
    ref, est = estimated_f1(s, threshold), estimated_f1(c, ct)
    drop = 1 - est / ref if ref > 0 else 0.0
    rng = np.random.default_rng(seed)
    fs, fc = s >= threshold, c >= ct
    drops = []
    for _ in range(draws):
        a, b = _drawn_f1(rng, s, fs), _drawn_f1(rng, c, fc)
        drops.append(1 - b / a if a > 0 else 0.0)
    tail = (1 - interval) / 2 * 100
    return drop, float(np.percentile(drops, tail)), float(np.percentile(drops, 100 - tail))


def estimate_guard(decision: Decision, reasons: Sequence[str], stable_scores: Any, canary_scores: Any, *,
                   limit: float | None, threshold: float, interval: float = 0.9, min_scores: int = 200,
                   seed: int = 0, canary_threshold: float | None = None,
                   notes: Sequence[str] = ()) -> tuple[Decision, tuple[str, ...]]:
    """The decision after the estimated-F1 check (``limit`` ``None``: unchanged, nothing checked).

    Each arm's estimate is at its own decision threshold: the stable's ``threshold``, the canary's
    ``canary_threshold`` (default: the same); ``notes`` (an override that disagrees with a recorded threshold,
    a legacy fallback) are added to the figures.
    """
    ct = threshold if canary_threshold is None else canary_threshold
    if limit is None:
        return decision, tuple(reasons)
    n_s, n_c = np.asarray(stable_scores).size, np.asarray(canary_scores).size
    if min(n_s, n_c) < min_scores:
        note = (f"insufficient: estimated F1 needs {min_scores} logged scores per arm (stable {n_s}, "
                f"canary {n_c})")
        return ("hold" if decision == "promote" else decision), (note, *reasons)
    drop, low, high = estimated_drop_interval(stable_scores, canary_scores, threshold, interval=interval, seed=seed,
                                              canary_threshold=ct)
    figures = (f"estimated F1 canary {estimated_f1(canary_scores, ct):.4f} (at {ct:.4g}) vs stable "
               f"{estimated_f1(stable_scores, threshold):.4f} (at {threshold:.4g}): drop {drop:+.1%} "
               f"({interval:.0%} interval [{low:+.1%}, {high:+.1%}]; limit {limit:.0%})"
               + "".join(f"; {n}" for n in notes))
    if low > limit:
        return "rollback", (f"guard: {figures}", *reasons)
    if high <= limit:
        return decision, (*reasons, f"ok: {figures}")
    return ("hold" if decision == "promote" else decision), (f"insufficient: {figures}", *reasons)
