"""The quality arm of ``gate_power.py``: how often the ΔF1 quality gate passes candidates of known true quality.

A simulated holdout has the configured size (``data.rows × evaluation.tabular.holdout_fraction``) and fraud rate.
Each row has a signal ``s = μ·y + N(0, 1)`` that both models see (so their errors are correlated, as two trainings
on one data set are); a model flags the row when ``s + N(0, σ_model) > τ``. The champion's ``σ`` is fixed; the
candidate's is solved so that its *population* F1 differs from the champion's by exactly ``delta`` (closed form: the
flag rate among frauds is ``Φ((μ - τ) / √(1 + σ²))``, among the rest ``Φ(-τ / √(1 + σ²))``). Every run draws a fresh
holdout and judges it with :func:`mlops_evaluation.gates.quality_gate` at the shipped defaults.

What the gate promises, and so the targets: it is a *superiority* gate. A candidate passes only when it beats the
champion by ``min_improvement`` (+0.02 F1), point estimate and the bootstrap CI's lower end. So an equal model
must be blocked (passes at most 5 %: no promotion without the required gain), a 0.02 worse one almost always (at
most 1 %), and a clearly better one (+0.10 F1) must pass at least 80 % of runs, or the gate would block
everything. +0.06 sits just above the margin plus the CI's half-width here; its rate is reported, not targeted.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from mlops_config import DataConfig, EvaluationConfig
from mlops_evaluation.gates import quality_gate

DELTAS = (-0.02, 0.0, 0.06, 0.10)
MU, SIGMA_CHAMPION, TAU = 2.7, 1.0, 2.5
"""Signal strength, the champion's own noise and the flag threshold: a champion F1 near the fraud model's 0.38."""
TARGETS = {"quality_equal_passed_max": 0.05, "quality_0.02_worse_passed_max": 0.01,
           "quality_0.10_better_passed_min": 0.80}


def _rates(sigma: float) -> tuple[float, float]:
    scale = math.sqrt(1.0 + sigma**2)
    return float(norm.sf((TAU - MU) / scale)), float(norm.sf(TAU / scale))


def population_f1(sigma: float, fraud_rate: float) -> float:
    """F1 of a model with noise ``sigma`` on an infinite holdout (2·TP / (2·TP + FP + FN), per row)."""
    tpr, fpr = _rates(sigma)
    tp, fp, fn = fraud_rate * tpr, (1 - fraud_rate) * fpr, fraud_rate * (1 - tpr)
    return 2 * tp / (2 * tp + fp + fn)


def candidate_sigma(delta: float, fraud_rate: float) -> float:
    """The candidate's noise for a population F1 ``delta`` above the champion's."""
    target = population_f1(SIGMA_CHAMPION, fraud_rate) + delta
    if delta == 0:
        return SIGMA_CHAMPION
    lo, hi = (1e-6, SIGMA_CHAMPION) if delta > 0 else (SIGMA_CHAMPION, 50.0)
    return float(brentq(lambda s: population_f1(s, fraud_rate) - target, lo, hi, xtol=1e-10))


def simulate(rng: np.random.Generator, n: int, fraud_rate: float, sigma_c: float) -> tuple[np.ndarray, ...]:
    """One holdout: labels, the candidate's and the champion's 0/1 flags (as scores the gate thresholds)."""
    y = (rng.random(n) < fraud_rate).astype(np.int64)
    signal = MU * y + rng.standard_normal(n)
    ref = signal + SIGMA_CHAMPION * rng.standard_normal(n) > TAU
    cand = signal + sigma_c * rng.standard_normal(n) > TAU
    return y, cand.astype(np.float64), ref.astype(np.float64)


def power(section: EvaluationConfig, data: DataConfig, *, runs: int, seed: int) -> dict[str, Any]:
    """Pass rates of the quality gate per true F1 difference, with the setting and whether each target held."""
    n = int(data.rows * section.tabular.holdout_fraction)
    table: dict[str, Any] = {}
    for delta in DELTAS:
        sigma = candidate_sigma(delta, data.fraud_rate)
        passed, estimates = 0, []
        for run in range(runs):
            rng = np.random.default_rng([seed, 7, round(delta * 1000) + 1000, run])
            y, cand, ref = simulate(rng, n, data.fraud_rate, sigma)
            gate = quality_gate(y, cand, ref, {}, section, seed=run)
            passed += gate.passed
            estimates.append(gate.evidence["bootstrap"]["estimate"])
        table[f"{delta:+.2f}"] = {"pass": round(passed / runs, 4), "fail": round(1 - passed / runs, 4),
                                  "inconclusive": 0.0, "candidate_sigma": round(sigma, 4),
                                  "true_delta_f1": round(population_f1(sigma, data.fraud_rate)
                                                         - population_f1(SIGMA_CHAMPION, data.fraud_rate), 4),
                                  "mean_observed_delta_f1": round(float(np.mean(estimates)), 4)}
    met = {"quality_equal_passed_max": table["+0.00"]["pass"] <= TARGETS["quality_equal_passed_max"],
           "quality_0.02_worse_passed_max": table["-0.02"]["pass"] <= TARGETS["quality_0.02_worse_passed_max"],
           "quality_0.10_better_passed_min": table["+0.10"]["pass"] >= TARGETS["quality_0.10_better_passed_min"]}
    return {"cases": table, "runs_per_case": runs, "holdout_rows": n, "fraud_rate": data.fraud_rate,
            "champion_f1": round(population_f1(SIGMA_CHAMPION, data.fraud_rate), 4),
            "settings": {k: getattr(section, k) for k in ("min_improvement", "improvement_mode", "bootstrap_samples",
                                                          "confidence", "require_ci_above_threshold")},
            "met": met}
