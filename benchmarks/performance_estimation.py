"""Performance before labels: how well CBPE tracks realized F1/AUC, and how fast each signal flags a drop.

Simulation (seeded, no files): two features ``x ~ N(0, I)``, labels ``y ~ Bernoulli(sigmoid(-2.5 + 1.5 x1 + x2))``;
the model is scikit-learn's LogisticRegression fitted on 20,000 reference rows, so its scores are calibrated
there. Each scenario is ``--clean`` unshifted windows then ``--shifted`` shifted ones, ``--rows`` each:

- ``covariate``: ``x1``'s mean moves by ``-m`` (P(y | x) unchanged: the model stays calibrated);
- ``concept``: the true ``x1`` coefficient shrinks by the factor ``1 - m`` (inputs unchanged: it does not).

Per window: realized F1/AUC at threshold 0.5 (from the simulated labels), the CBPE estimate
(:func:`mlops_monitoring.estimate_performance`), PSI of ``x1`` and of the score against the reference
(:func:`mlops_model.statistics.psi`, 10 quantile bins). A window is flagged by

- ``estimate``: estimated F1 more than ``--margin`` below the reference's estimated F1;
- ``realized``: realized F1 more than ``--margin`` below the reference's realized F1, known ``--label-delay``
  windows later (its labels arrive then);
- ``drift``: PSI of ``x1`` or of the score >= 0.25 (monitoring.psi_critical).

``windows_to_flag``: windows from the shift's onset to the flag being raised (0: in the first shifted window;
``null``: never), for scenarios whose realized F1 dropped by at least 10 points; for ``realized`` also counted
in labelled windows (0: the first labelled shifted window). The baseline, measured in the same run: the
estimator's error and each signal's false alarms on unshifted windows (``--null-windows`` more of them).
Targets: |F1 error| <= 0.03 under covariate shift; concept shift flagged by realized performance within one
labelled window; false alarms of the estimate on unshifted windows <= 5 %. Prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

from mlops_model import statistics
from mlops_monitoring import estimate_performance

COEF = np.array([1.5, 1.0])
INTERCEPT = -2.5
THRESHOLD = 0.5
PSI_CRITICAL = 0.25


def _window(rng: np.random.Generator, n: int, kind: str, m: float) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((n, 2))
    coef = COEF.copy()
    if kind == "covariate":
        x[:, 0] -= m
    elif kind == "concept":
        coef[0] *= 1 - m
    y = rng.random(n) < 1 / (1 + np.exp(-(INTERCEPT + x @ coef)))
    return x, y


def _measure(model: LogisticRegression, x: np.ndarray, y: np.ndarray, ref: dict[str, Any]) -> dict[str, Any]:
    s = model.predict_proba(x)[:, 1]
    est = estimate_performance(s, THRESHOLD, draws=50)
    real = statistics.threshold_metrics(y, s, THRESHOLD)
    psi = max(statistics.psi(*statistics.quantile_bin_counts(ref["x1"], x[:, 0])),
              statistics.psi(*statistics.quantile_bin_counts(ref["score"], s)))
    return {"f1": real["f1"], "auc": statistics.roc_auc(y, s), "f1_est": est.f1, "auc_est": est.auc or 0.0,
            "psi": psi}


def _flags(w: dict[str, Any], ref: dict[str, Any], margin: float) -> dict[str, bool]:
    return {"estimate": w["f1_est"] < ref["f1_est"] - margin, "realized": w["f1"] < ref["f1"] - margin,
            "drift": w["psi"] >= PSI_CRITICAL}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--clean", type=int, default=6)
    p.add_argument("--shifted", type=int, default=6)
    p.add_argument("--null-windows", type=int, default=20)
    p.add_argument("--label-delay", type=int, default=2, help="Windows until a window's labels arrive.")
    p.add_argument("--margin", type=float, default=0.05, help="F1 drop (absolute) that flags a window.")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    xr, yr = _window(rng, 20_000, "none", 0.0)
    model = LogisticRegression().fit(xr, yr)
    ref_x, ref_y = _window(rng, args.rows * 4, "none", 0.0)
    ref_s = model.predict_proba(ref_x)[:, 1]
    ref = {"x1": ref_x[:, 0], "score": ref_s, "f1": statistics.threshold_metrics(ref_y, ref_s, THRESHOLD)["f1"],
           "f1_est": estimate_performance(ref_s, THRESHOLD, draws=10).f1}
    null = [_measure(model, *_window(rng, args.rows, "none", 0.0), ref) for _ in range(args.null_windows)]
    scenarios = []
    for kind, magnitudes in (("covariate", (0.5, 1.0, 1.5)), ("concept", (0.3, 0.6, 0.9))):
        for m in magnitudes:
            windows = [_measure(model, *_window(rng, args.rows, kind if i >= args.clean else "none", m), ref)
                       for i in range(args.clean + args.shifted)]
            null += windows[: args.clean]
            shifted = windows[args.clean:]
            drop = ref["f1"] - float(np.mean([w["f1"] for w in shifted]))
            row: dict[str, Any] = {
                "shift": kind, "magnitude": m, "realized_f1_drop": round(drop, 4),
                "f1_abs_error": round(float(np.mean([abs(w["f1_est"] - w["f1"]) for w in shifted])), 4),
                "f1_abs_error_max": round(float(max(abs(w["f1_est"] - w["f1"]) for w in shifted)), 4),
                "auc_abs_error": round(float(np.mean([abs(w["auc_est"] - w["auc"]) for w in shifted])), 4),
            }
            if drop >= 0.10:
                to_flag: dict[str, int | None] = {}
                for signal in ("estimate", "realized", "drift"):
                    hit = next((i for i, w in enumerate(shifted) if _flags(w, ref, args.margin)[signal]), None)
                    delay = args.label_delay if signal == "realized" else 0
                    to_flag[signal] = None if hit is None else hit + delay
                    if signal == "realized":
                        row["realized_labelled_windows_to_flag"] = hit
                row["windows_to_flag"] = to_flag
            scenarios.append(row)
    false_alarms = {s: round(float(np.mean([_flags(w, ref, args.margin)[s] for w in null])), 4)
                    for s in ("estimate", "realized", "drift")}
    covariate = [s for s in scenarios if s["shift"] == "covariate"]
    concept_big = [s for s in scenarios if s["shift"] == "concept" and "windows_to_flag" in s]
    result = {
        "benchmark": "performance_estimation", "rows_per_window": args.rows, "label_delay_windows": args.label_delay,
        "margin": args.margin, "reference_f1": round(ref["f1"], 4), "reference_f1_estimated": round(ref["f1_est"], 4),
        "baseline_unshifted": {
            "windows": len(null),
            "f1_abs_error": round(float(np.mean([abs(w["f1_est"] - w["f1"]) for w in null])), 4),
            "auc_abs_error": round(float(np.mean([abs(w["auc_est"] - w["auc"]) for w in null])), 4),
            "false_alarm_rate": false_alarms},
        "scenarios": scenarios,
        "targets": {
            "covariate_f1_abs_error_max": max(s["f1_abs_error_max"] for s in covariate),
            "covariate_f1_error_le_0.03": all(s["f1_abs_error_max"] <= 0.03 for s in covariate),
            "concept_flagged_by_realized_within_one_labelled_window": bool(concept_big) and all(
                s["realized_labelled_windows_to_flag"] is not None and s["realized_labelled_windows_to_flag"] <= 0
                for s in concept_big),
            "estimate_false_alarms_le_5pct": false_alarms["estimate"] <= 0.05,
        },
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
