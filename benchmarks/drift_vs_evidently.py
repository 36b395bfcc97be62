"""Drift check: our ``mlops_monitoring.drift.compare`` vs Evidently 0.7.23 on the same data.

Data: ``--ref-rows`` (1,000,000) reference and ``--cur-rows`` (200,000) current rows × 20 numeric + 5
categorical columns; 6 numeric and 1 categorical columns drifted by different amounts, the rest not.

(a) ours: ``compare(reference, current)``: per numeric column KS (= scipy.stats.ks_2samp) + PSI on the
    reference's deciles, per categorical column chi² (= scipy.stats.chi2_contingency) + PSI.
(b) Evidently: one ``Report`` holding ``DataDriftPreset(num_method="ks", cat_method="chisquare")`` plus a
    ``ValueDrift(column, method="psi")`` per column: the same tests, PSI and KS, on the same frames.

Each side runs in a subprocess of its own, twice: once timed (wall seconds; plus the ``ru_maxrss`` growth
over the process' RSS after loading the data, ``rss_peak_delta_mb``), once under ``tracemalloc`` for
``peak_mb`` (peak traced allocation during the comparison: Python objects + numpy/pandas buffers; the
input frames, loaded before, are not counted). Data loading is outside both measures.

Agreement, column by column, where the definitions match: KS p-value < 0.05 on the numeric columns
(both call scipy's KS: the p-values must agree) and PSI ≥ 0.1 on the categorical columns.
``verdict_agreement`` is the share of those verdicts that agree; ``by_test`` adds numeric PSI and chi²,
whose definitions differ (see ``agreement``).

Targets: speedup ≥ 20, memory_ratio ≥ 5. Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

N_NUMERIC, N_CATEGORICAL = 20, 5
NUM_SHIFT = {0: 0.5, 1: 0.2, 2: 0.1, 3: 0.05, 4: 0.02, 5: 0.01}  # mean shift in std units
CAT_SHIFT = {0: 0.3}  # share of probability moved to the last category
P_THRESHOLD, PSI_THRESHOLD = 0.05, 0.1


def make_frames(ref_rows: int, cur_rows: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Reference and current frames; numeric columns of varied shapes, categoricals of 4–12 levels."""
    rng = np.random.default_rng(seed)

    def frame(n: int, drifted: bool) -> pd.DataFrame:
        cols: dict[str, Any] = {}
        for i in range(N_NUMERIC):
            shift = NUM_SHIFT.get(i, 0.0) if drifted else 0.0
            kind = i % 4
            if kind == 0:
                cols[f"num_{i}"] = rng.normal(shift, 1.0, n)
            elif kind == 1:
                cols[f"num_{i}"] = rng.lognormal(shift, 1.0, n)
            elif kind == 2:
                cols[f"num_{i}"] = rng.exponential(1.0, n) + shift
            else:
                cols[f"num_{i}"] = rng.poisson(3.0 + 3 * shift, n).astype(np.float64)
        for j in range(N_CATEGORICAL):
            levels = np.array([f"c{j}_{k}" for k in range(4 + 2 * j)], dtype=object)
            p = np.linspace(2.0, 1.0, len(levels))
            p /= p.sum()
            move = CAT_SHIFT.get(j, 0.0) if drifted else 0.0
            if move:
                p = p * (1 - move)
                p[-1] += move
            cols[f"cat_{j}"] = levels[rng.choice(len(levels), size=n, p=p)]
        return pd.DataFrame(cols)

    return frame(ref_rows, False), frame(cur_rows, True)


def run_ours(ref: pd.DataFrame, cur: pd.DataFrame) -> dict[str, dict[str, Any]]:
    from mlops_monitoring.drift import compare

    numeric = [c for c in ref.columns if c.startswith("num_")]
    categorical = [c for c in ref.columns if c.startswith("cat_")]
    report = compare(ref, cur, numeric=numeric, categorical=categorical, score=None)
    return {name: {"method": col.method, "p_value": col.p_value, "psi": col.psi, "statistic": col.statistic}
            for name, col in report.columns.items()}


def run_evidently(ref: pd.DataFrame, cur: pd.DataFrame) -> dict[str, dict[str, Any]]:
    from evidently import DataDefinition, Dataset, Report
    from evidently.metrics import ValueDrift
    from evidently.presets import DataDriftPreset

    numeric = [c for c in ref.columns if c.startswith("num_")]
    categorical = [c for c in ref.columns if c.startswith("cat_")]
    definition = DataDefinition(numerical_columns=numeric, categorical_columns=categorical)
    report = Report([
        DataDriftPreset(num_method="ks", cat_method="chisquare"),
        *[ValueDrift(column=c, method="psi") for c in [*numeric, *categorical]],
    ])
    snapshot = report.run(Dataset.from_pandas(cur, data_definition=definition),
                          Dataset.from_pandas(ref, data_definition=definition))
    out: dict[str, dict[str, Any]] = {c: {} for c in [*numeric, *categorical]}
    for metric in snapshot.dict()["metrics"]:
        config = metric.get("config", {})
        if not str(config.get("type", "")).endswith("ValueDrift"):
            continue
        method = str(config["method"]).lower()
        key = "psi" if method == "psi" else "p_value"
        out[config["column"]][key] = float(metric["value"])
        if key == "p_value":
            out[config["column"]]["method"] = method
    return out


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(side: str, mode: str, data: Path) -> None:
    ref = pd.read_parquet(data / "ref.parquet")
    cur = pd.read_parquet(data / "cur.parquet")
    fn = run_ours if side == "ours" else run_evidently
    if side == "evidently":  # import outside the measure, like ours (already imported with pandas)
        import evidently.presets  # noqa: F401
    else:  # scipy.stats too: both sides call it, and Evidently's import above has loaded it for that side
        import scipy.stats  # noqa: F401

        import mlops_monitoring.drift  # noqa: F401
    result: dict[str, Any] = {}
    if mode == "time":
        base_rss = _rss_mb()
        started = time.perf_counter()
        columns = fn(ref, cur)
        result["seconds"] = time.perf_counter() - started
        result["rss_peak_delta_mb"] = max(0.0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base_rss)
        result["columns"] = columns
    else:
        tracemalloc.start()
        fn(ref, cur)
        result["peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    print(json.dumps(result))


def _spawn(side: str, mode: str, data: Path, timeout: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", side, "--mode", mode, "--data", str(data)],
        capture_output=True, text=True, timeout=timeout, check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{side}/{mode} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def agreement(ours: dict[str, dict], theirs: dict[str, dict]) -> dict[str, Any]:
    """Agreement of drifted / not-drifted verdicts, column by column.

    Counted in ``verdict_agreement`` (same definition on both sides): KS p < 0.05 on numeric columns (both
    are scipy's KS: the p-values must be equal too) and PSI ≥ 0.1 on categorical columns (both bin by
    category). Reported apart, because the definitions differ: numeric PSI (ours: reference deciles;
    Evidently: Sturges equal-width bins over both samples, or one bin per value under 21 distinct values)
    and chi² (ours: contingency test; Evidently: goodness-of-fit against the reference's shares).
    """
    same: dict[str, list[bool]] = {"ks": [], "psi_categorical": [], "psi_numeric": [], "chi2": []}
    max_ks_p_diff = 0.0
    disagreements = []

    def note(test: str, name: str, mine: bool, other: bool, detail: str) -> None:
        same[test].append(mine == other)
        if mine != other:
            disagreements.append(f"{name}:{test} {detail}")

    for name, mine in ours.items():
        other = theirs[name]
        if mine["method"] == "ks":
            max_ks_p_diff = max(max_ks_p_diff, abs(mine["p_value"] - other["p_value"]))
            note("ks", name, mine["p_value"] < P_THRESHOLD, other["p_value"] < P_THRESHOLD,
                 f"ours p={mine['p_value']:.3g} evidently p={other['p_value']:.3g}")
            note("psi_numeric", name, mine["psi"] >= PSI_THRESHOLD, other["psi"] >= PSI_THRESHOLD,
                 f"ours={mine['psi']:.4f} evidently={other['psi']:.4f}")
        else:
            note("psi_categorical", name, mine["psi"] >= PSI_THRESHOLD, other["psi"] >= PSI_THRESHOLD,
                 f"ours={mine['psi']:.4f} evidently={other['psi']:.4f}")
            note("chi2", name, mine["p_value"] < P_THRESHOLD, other["p_value"] < P_THRESHOLD,
                 f"ours p={mine['p_value']:.3g} evidently p={other['p_value']:.3g}")
    matched = same["ks"] + same["psi_categorical"]
    return {
        "verdict_agreement": round(sum(matched) / len(matched), 4) if matched else None,
        "verdicts_compared": len(matched),
        "by_test": {k: round(sum(v) / len(v), 4) if v else None for k, v in same.items()},
        "max_ks_p_value_diff": max_ks_p_diff,
        "disagreements": disagreements,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ref-rows", type=int, default=1_000_000)
    parser.add_argument("--cur-rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="Seconds allowed per subprocess.")
    parser.add_argument("--repeat", type=int, default=1,
                        help="Timed runs per side, each in a fresh subprocess; the fastest counts (same for both).")
    parser.add_argument("--child", choices=["ours", "evidently"])
    parser.add_argument("--mode", choices=["time", "memory"])
    parser.add_argument("--data", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.mode, args.data)
        return
    with tempfile.TemporaryDirectory(prefix="drift-bench-") as tmp:
        data = Path(tmp)
        ref, cur = make_frames(args.ref_rows, args.cur_rows, args.seed)
        ref.to_parquet(data / "ref.parquet")
        cur.to_parquet(data / "cur.parquet")
        del ref, cur
        figures: dict[str, dict[str, Any]] = {}
        columns: dict[str, dict] = {}
        load_before = os.getloadavg()[0]
        for side in ("ours", "evidently"):
            runs = [_spawn(side, "time", data, args.timeout) for _ in range(max(1, args.repeat))]
            timed = min(runs, key=lambda r: r["seconds"])
            print(f"{side}: {[round(r['seconds'], 2) for r in runs]} s", file=sys.stderr)
            memory = _spawn(side, "memory", data, args.timeout)
            figures[side] = {"seconds": round(timed["seconds"], 3), "peak_mb": round(memory["peak_mb"], 1),
                             "rss_peak_delta_mb": round(timed["rss_peak_delta_mb"], 1)}
            columns[side] = timed["columns"]
    agreed = agreement(columns["ours"], columns["evidently"])
    result = {
        "rows": {"reference": args.ref_rows, "current": args.cur_rows, "numeric": N_NUMERIC,
                 "categorical": N_CATEGORICAL},
        "ours": figures["ours"],
        "evidently": figures["evidently"],
        "speedup": round(figures["evidently"]["seconds"] / figures["ours"]["seconds"], 1),
        "memory_ratio": round(figures["evidently"]["peak_mb"] / figures["ours"]["peak_mb"], 1),
        "memory_measure": "tracemalloc peak during the comparison, each side in its own subprocess",
        "repeat": max(1, args.repeat),
        "load_average_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2),
                            "cpus": os.cpu_count()},
        **agreed,
        "targets": {"speedup": 20, "memory_ratio": 5},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
