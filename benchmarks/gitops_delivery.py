"""GitOps delivery: how long a promotion edit, a canary analysis and an offline manifest render take.

(a) ``promotion_edit_ms``: one ``plan_promotion`` / ``plan_revert`` + write of the model manifest (ruamel
    round trip), median and p95 over ``--rounds`` walks staging → canary 10% → 50% → production → rollback
    on a temp copy of infra/; ``round_trip_exact`` says whether rolling a canary back gave the same bytes.
(b) ``canary_analysis_s``: ``analyze_canary`` on two Prometheus expositions and a prediction log of
    ``--rows`` rows per side read back from parquet (PSI over 10 quantile bins).
(c) ``kustomize_render_s``: ``kubectl kustomize`` of each overlay (offline), one run each.

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from mlops_config import DeliveryConfig
from mlops_delivery import plan_promotion, plan_revert
from mlops_delivery.canary import analyze_canary
from mlops_delivery.promotion import apply_change

REPO = Path(__file__).resolve().parents[1]


def exposition(ok: int, errors: int, latency: np.ndarray) -> str:
    r = CollectorRegistry()
    Counter("mlops_serving_requests", "", ["model"], registry=r).labels("fraud").inc(ok)
    Counter("mlops_serving_errors", "", ["model", "status"], registry=r).labels("fraud", "500").inc(errors)
    h = Histogram("mlops_serving_request_seconds", "", ["model"], registry=r,
                  buckets=(0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)).labels("fraud")
    for v in latency:
        h.observe(float(v))
    return generate_latest(r).decode()


def bench_promotion(rounds: int) -> dict[str, object]:
    cfg = DeliveryConfig()
    timings: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "infra", root / "infra")
        prod = root / "infra/overlays/production/model-fraud.yaml"
        for i in range(rounds):
            version = 100 + i
            steps = [("staging", None), ("canary", 10), ("canary", 50)]
            for to, pct in steps:
                t0 = time.perf_counter()
                apply_change(plan_promotion(cfg, root, "fraud", version, to, percent=pct), cfg, root)
                timings.append(time.perf_counter() - t0)
            if i % 2:  # every other round the canary is rolled back instead of promoted
                t0 = time.perf_counter()
                apply_change(plan_revert(cfg, root, "fraud", "production"), cfg, root)
                timings.append(time.perf_counter() - t0)
            else:
                t0 = time.perf_counter()
                apply_change(plan_promotion(cfg, root, "fraud", version, "production"), cfg, root)
                timings.append(time.perf_counter() - t0)
        # exactness: a canary started and rolled back leaves the file as it was
        apply_change(plan_promotion(cfg, root, "fraud", 999, "staging"), cfg, root)
        before = prod.read_text()
        apply_change(plan_promotion(cfg, root, "fraud", 999, "canary", percent=10), cfg, root)
        apply_change(plan_revert(cfg, root, "fraud", "production"), cfg, root)
        exact = prod.read_text() == before
    ms = sorted(t * 1000 for t in timings)
    return {"edits": len(ms), "median_ms": round(statistics.median(ms), 3),
            "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 3), "round_trip_exact": exact}


def bench_canary(rows: int) -> dict[str, object]:
    rng = np.random.default_rng(0)
    stable_text = exposition(rows, rows // 500, rng.gamma(2.0, 0.002, rows))
    canary_text = exposition(rows, rows // 400, rng.gamma(2.0, 0.0021, rows))
    frame = pd.DataFrame({"model_version": np.repeat(["1", "2"], rows),
                          "score": np.concatenate([rng.beta(1, 12, rows), rng.beta(1, 11, rows)])})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "part-0.parquet"
        frame.to_parquet(path)
        log = pd.read_parquet(path)
    t0 = time.perf_counter()
    result = analyze_canary(DeliveryConfig(), stable_text, canary_text, log, stable_version=1, canary_version=2)
    elapsed = time.perf_counter() - t0
    return {"rows_per_side": rows, "seconds": round(elapsed, 4), "decision": result.decision,
            "psi": round(float(result.prediction_psi or 0.0), 5)}


def bench_render() -> dict[str, float]:
    kubectl = str(Path(sys.executable).with_name("kubectl"))
    out = {}
    for env in ("staging", "production"):
        t0 = time.perf_counter()
        subprocess.run([kubectl, "kustomize", f"infra/overlays/{env}"], cwd=REPO, check=True, capture_output=True)
        out[env] = round(time.perf_counter() - t0, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    print(json.dumps({"benchmark": "gitops_delivery", "promotion_edit_ms": bench_promotion(args.rounds),
                      "canary_analysis_s": bench_canary(args.rows), "kustomize_render_s": bench_render()}))


if __name__ == "__main__":
    main()
