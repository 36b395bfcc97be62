"""What the quick retrain adds to ``mlops features plan``: seconds of one ``quick_retrain`` on the sample data.

Generates the sample at ``--rows`` (default: ``data.rows`` of configs/base.yaml, what CI's features-plan job
generates), validates it and lays it down as the repository's source (``generate_transactions``,
``validate_batches``, ``ingest``; not timed), then times the quick retrain of ``fraud_rt_v1`` (the request-time
FeatureService) against ``fraud_v1``: both services' udfs over the sample, their point-in-time joins and two
logistic regressions. Reports the AUCs too. Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    from mlops_config import DataConfig, FeaturesConfig, load_config

    base = load_config(profile="local", config_dir=REPO / "configs", environ={}, check_secrets=False).config
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=base.data.rows)
    parser.add_argument("--days", type=int, default=base.data.days)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import pandas as pd

    from mlops_features import generate_transactions, ingest, validate_batches
    from mlops_features.repo import load_repo
    from mlops_features.retrain import Definitions, quick_retrain
    from mlops_model import DEFAULT_CONTRACT  # the reference model's contract: the bench retrains fraud's services

    root = Path(tempfile.mkdtemp(prefix="plan_retrain_"))
    try:
        shutil.copytree(REPO / "feature_repo", root / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))
        data = DataConfig(rows=args.rows, days=args.days)
        features = FeaturesConfig(feature_service="fraud_v1")  # configs/base.yaml's
        t0 = time.perf_counter()
        paths = generate_transactions(root / data.raw_dir, rows=args.rows, days=args.days, seed=42)
        validate_batches(paths, data, root, contract=DEFAULT_CONTRACT)
        ingest(root / data.validated_dir, root / features.source_dir, record_id=DEFAULT_CONTRACT.record_id)
        prepare_s = time.perf_counter() - t0
        raw = pd.read_parquet(root / features.source_dir / "transactions.parquet")
        defs = Definitions.of_repo(load_repo(features, root))
        times, row = [], {}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            row = quick_retrain(defs, "fraud_rt_v1", defs, "fraud_v1", raw, DEFAULT_CONTRACT)
            times.append(time.perf_counter() - t0)
        print(json.dumps({"benchmark": "features_plan_retrain", "rows": len(raw), "repeats": args.repeats,
                          "seconds_min": round(min(times), 3),
                          "seconds_median": round(sorted(times)[len(times) // 2], 3),
                          "prepare_s": round(prepare_s, 1), "auc": round(row["auc"], 4),
                          "champion_auc": round(row["champion_auc"], 4), "delta_auc": round(row["delta_auc"], 4),
                          "loadavg_1m": round(os.getloadavg()[0], 2)}))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
