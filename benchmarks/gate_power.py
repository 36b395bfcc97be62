"""How often the tabular latency gate passes, fails or stays inconclusive, on simulated interleaved runs.

Prints one JSON line: ``{"latency": {case: {factor: {"pass", "fail", "inconclusive"}}}, "targets", "met", ...}``
with the share of ``--runs`` simulated A/B/A′ runs per case and slowdown factor that ended each way, each run
judged by :func:`mlops_evaluation.gates.latency_rounds` with the shipped defaults (tolerance, max noise, rounds,
requests per round) exactly as the evaluation runs it. No clock is read: every timing is drawn from a seeded
model of the shared machine, so the figures are reproducible.

The simulated sample (ms) of one request: ``--repeats`` back-to-back calls, each ``base × factor × lognormal(0,
σ)``, the sample their median (what ``latency_repeats`` does); then per case

* ``clean``: nothing more;
* ``hiccups``: 1 % of samples inflated 1.5-2× (a neighbour holding the core through all the calls);
* ``hiccups+delays``: those, and 5 % of calls delayed by 20-300 µs (a wake-up late) before the median;
* ``heavy``: hiccups and delays on a per-call noise of σ = 0.3 instead of 0.1 (the spread the tabular gate
  measured between identical models on the loaded 2-core machine: a p95 CI ±12 % wide at 200 requests).

Targets: an A/A candidate (factor 1.0) wrongly failed (fail or inconclusive) at most 5 % of runs, a 1.3×
slower one passed at most 5 %, a 1.5× slower one at most 1 %; ``met`` says which held in every case.

``latency_real`` (:mod:`gate_power_real`, skipped with ``--no-real``) times real models on this machine: the fraud
model (the configured architecture, its encoder fitted on the real point-in-time training set) against a wider and
deeper network at least 1.5× slower per batch end to end, and against itself, ``--real-runs`` gates each, through
:func:`mlops_evaluation.runner.check_latency` (what ``mlops evaluate`` runs). Targets: the slower candidate never
passes; the model against itself passes at least 9 of 10. This arm reads the clock: run it on a quiet machine
(the load average is in the line).

``quality`` (:mod:`gate_power_quality`) runs the ΔF1 quality gate (:func:`mlops_evaluation.gates.quality_gate`,
shipped defaults: +0.02 F1 required, bootstrap CI lower bound too) on simulated holdouts of the configured size,
for candidates whose true F1 differs from the champion's by -0.02, 0, +0.06 and +0.10.

    python benchmarks/gate_power.py [--runs 200] [--seed 0] [--real-runs 10] [--quality-runs 200] [--no-real]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mlops_config import DataConfig, EvaluationConfig
from mlops_evaluation import LatencyRun
from mlops_evaluation.gates import latency_rounds

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gate_power_quality  # a sibling module of this script, not a package
import gate_power_real

CASES = ("clean", "hiccups", "hiccups+delays", "heavy")
FACTORS = (1.0, 1.2, 1.3, 1.5)
TARGETS = {"aa_wrongly_failed_max": 0.05, "1.3x_passed_max": 0.05, "1.5x_passed_max": 0.01}


def simulate(rng: np.random.Generator, n: int, factor: float, case: str, *, repeats: int = 5,
             base_ms: float = 0.05, sigma: float = 0.1) -> LatencyRun:
    """One round: ``n`` interleaved requests of A (champion), B (``factor`` × slower compute) and A′."""
    series = []
    for f in (1.0, factor, 1.0):
        calls = base_ms * f * rng.lognormal(0.0, 0.3 if case == "heavy" else sigma, (n, repeats))
        if case in ("hiccups+delays", "heavy"):
            calls = calls + (rng.random((n, repeats)) < 0.05) * rng.uniform(0.020, 0.300, (n, repeats))
        samples = np.median(calls, axis=1)
        if case in ("hiccups", "hiccups+delays", "heavy"):
            samples = np.where(rng.random(n) < 0.01, samples * rng.uniform(1.5, 2.0, n), samples)
        series.append([float(x) for x in samples])
    return LatencyRun(series[0], series[1], series[2], warmup=0)


def rates(case: str, factor: float, runs: int, section: EvaluationConfig, seed: int) -> dict[str, float]:
    counts = {"pass": 0, "fail": 0, "inconclusive": 0}
    for run in range(runs):
        rng = np.random.default_rng([seed, CASES.index(case), int(factor * 100), run])
        measure: Callable[[], LatencyRun] = functools.partial(simulate, rng, section.latency_requests, factor, case,
                                                              repeats=section.latency_repeats)
        gate = latency_rounds(measure, section.latency_tolerance, section.latency_max_noise,
                              max_rounds=section.latency_max_rounds, confidence=section.confidence, seed=run)
        counts[gate.verdict] += 1
    return {k: round(v / runs, 4) for k, v in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="simulated runs per case and factor")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--real-runs", type=int, default=10, help="real-model gates per arm (slower, itself)")
    parser.add_argument("--quality-runs", type=int, default=200, help="simulated quality gates per case")
    parser.add_argument("--no-real", action="store_true", help="skip the real-model arm (it reads the clock)")
    parser.add_argument("--no-simulated", action="store_true",
                        help="skip the simulated latency arm (seeded, no clock: its figures do not change between "
                             "runs of the same code; ~5 CPU-minutes)")
    args = parser.parse_args()
    for flag in ("runs", "real_runs", "quality_runs"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: expected at least 1")
    section = EvaluationConfig()
    started = time.perf_counter()
    table: dict[str, Any] | None = None
    worst: dict[str, float] | None = None
    met: dict[str, bool] = {}
    if not args.no_simulated:
        table = {case: {str(f): rates(case, f, args.runs, section, args.seed) for f in FACTORS} for case in CASES}
        worst = {"aa_wrongly_failed": max(1.0 - table[c]["1.0"]["pass"] for c in CASES),
                 "1.3x_passed": max(table[c]["1.3"]["pass"] for c in CASES),
                 "1.5x_passed": max(table[c]["1.5"]["pass"] for c in CASES)}
        met = {"aa_wrongly_failed_max": worst["aa_wrongly_failed"] <= TARGETS["aa_wrongly_failed_max"],
               "1.3x_passed_max": worst["1.3x_passed"] <= TARGETS["1.3x_passed_max"],
               "1.5x_passed_max": worst["1.5x_passed"] <= TARGETS["1.5x_passed_max"]}
    targets: dict[str, float] = dict(TARGETS)
    quality = gate_power_quality.power(section, DataConfig(), runs=args.quality_runs,
                                       seed=args.seed)
    targets.update(gate_power_quality.TARGETS)
    met.update(quality.pop("met"))
    real = None
    if not args.no_real:
        real = gate_power_real.power(section, runs=args.real_runs, seed=args.seed)
        targets.update(gate_power_real.TARGETS)
        met.update(real.pop("met"))
    print(json.dumps({"latency": table, "latency_real": real, "quality": quality, "targets": targets, "met": met,
                      "all_met": all(met.values()),
                      "worst": worst,
                      "runs_per_cell": args.runs,
                      "settings": {k: getattr(section, k) for k in ("latency_tolerance", "latency_max_noise",
                                                                    "latency_max_rounds", "latency_requests",
                                                                    "latency_repeats", "confidence")},
                      "seconds": round(time.perf_counter() - started, 1)}, sort_keys=True))


if __name__ == "__main__":
    main()
