"""Online feature latency (SQLite, Redis, batch of 100) and materialization throughput of the fraud_v1 service.

Builds a store from the default sample data (60,000 transactions) in a temp folder, then times
``OnlineFeatures.get`` (one Feast ``get_online_features`` call on the FeatureService, what serving does):
single entity on SQLite and on Redis (``--rounds`` rounds of >= 2,000 calls after a warm-up; the median
round is reported, with every round's p99) and batches of 100 entities on Redis.

Materialization is timed twice: on the sample store (``materialize_rows_per_s``: source rows of both
feature tables per second; Feast keeps each entity's latest row, so far fewer are written) and on a table
of ``--mat-rows`` distinct users, one row each, so every row is written (``materialize_written_rows_per_s``,
SQLite and Redis). Redis is ``$MLOPS_BENCH_REDIS_URL`` or 127.0.0.1:6379/0, under a throw-away Feast
project that is torn down afterwards. Prints one JSON object on its last line.

Targets on the reference machine: Redis single-entity p99 <= 2 ms; materialization >= 50,000 rows/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import OnlineFeatures, apply_repo, materialize, open_store, prepare_local_data
from mlops_features.schema import RAW_SCHEMA

REPO_ROOT = Path(__file__).resolve().parents[1]


def _percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 4), "p99_ms": round(float(np.percentile(ms, 99)), 4),
            "mean_ms": round(float(ms.mean()), 4), "calls": len(samples)}


def _time_calls(online: OnlineFeatures, batches: list[list[dict[str, str]]], warmup: int) -> dict[str, float]:
    for rows in batches[:warmup]:
        online.get(rows)
    samples = []
    for rows in batches[warmup:]:
        t0 = time.perf_counter()
        online.get(rows)
        samples.append(time.perf_counter() - t0)
    return _percentiles(samples)


def _rounds(online: OnlineFeatures, batches: list[list[dict[str, str]]], warmup: int, rounds: int) -> dict:
    """``rounds`` back-to-back measurements; the headline is the median round (a shared 2-core machine has
    bursts of load from other work that land in one round's tail), every round's p99 is kept."""
    runs = [_time_calls(online, batches, warmup) for _ in range(rounds)]
    runs.sort(key=lambda r: r["p99_ms"])
    return {**runs[len(runs) // 2], "rounds": rounds, "p99_ms_rounds": [r["p99_ms"] for r in runs]}


def _entity_rows(root: Path, features: FeaturesConfig, n: int, size: int, seed: int) -> list[list[dict[str, str]]]:
    users = pd.read_parquet(root / features.source_dir / "user_transactions.parquet", columns=["user_id"])
    merchants = pd.read_parquet(root / features.source_dir / "merchant_risk.parquet", columns=["merchant_id"])
    rng = np.random.default_rng(seed)
    u = rng.choice(users["user_id"].unique(), size=(n, size))
    m = rng.choice(merchants["merchant_id"].unique(), size=(n, size))
    pairs = zip(u, m, strict=True)
    return [[{"user_id": a, "merchant_id": b} for a, b in zip(ur, mr, strict=True)] for ur, mr in pairs]


def _source_rows(root: Path, features: FeaturesConfig) -> int:
    """Rows the views' udfs read (the raw transactions, read once per view)."""
    return 2 * pq.read_metadata(root / features.source_dir / "transactions.parquet").num_rows


def _materialize_rate(features: FeaturesConfig, root: Path, rows: int) -> float:
    """Rows/s computing and writing ``rows`` distinct users (one transaction each) into the online store: the
    views' udfs run in Feast's compute engine, then the online write."""
    src = root / features.source_dir
    src.mkdir(parents=True, exist_ok=True)
    _copy_repo(root)
    ts = pd.Timestamp("2026-11-01", tz="UTC") + pd.to_timedelta(np.arange(rows) % 86_400, unit="s")
    rng = np.random.default_rng(0)
    tx = pd.DataFrame({"transaction_id": [f"T{i:08d}" for i in range(rows)],
                       "user_id": [f"B{i:08d}" for i in range(rows)], "merchant_id": "M00001",
                       "event_timestamp": ts, "created": ts, "amount": rng.random(rows) * 100, "currency": "EUR",
                       "category": "grocery", "country": "DE", "device": "ios", "channel": "online",
                       "is_fraud": np.zeros(rows, dtype=np.int8)})
    pq.write_table(pa.Table.from_pandas(tx, schema=RAW_SCHEMA, preserve_index=False), src / "transactions.parquet")
    apply_repo(features, root)
    t0 = time.perf_counter()
    materialize(features, root)
    return rows / (time.perf_counter() - t0)


def _copy_repo(root: Path) -> None:
    """``root/feature_repo``: the repository's relative source paths then resolve under ``root``."""
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3_000, help="Timed single-entity calls per store (>= 2000).")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of single-entity calls; median reported.")
    parser.add_argument("--batch-calls", type=int, default=500, help="Timed calls of 100 entities on Redis.")
    parser.add_argument("--mat-rows", type=int, default=50_000, help="Distinct rows for the materialization run.")
    args = parser.parse_args()
    redis_url = os.environ.get("MLOPS_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    repo = "feature_repo"
    project = f"bench_{uuid.uuid4().hex[:8]}"
    result: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="bench-features-") as tmp:
        root = Path(tmp)
        _copy_repo(root)
        sqlite = FeaturesConfig(repo_path=repo)
        t0 = time.perf_counter()
        prepared = prepare_local_data(DataConfig(), sqlite, root)
        result["prepare_local_data_s"] = round(time.perf_counter() - t0, 2)
        result["prepare_steps_s"] = {k: round(v, 2) for k, v in prepared.seconds.items()}
        source_rows = _source_rows(root, sqlite)
        t0 = time.perf_counter()
        materialize(sqlite, root)
        result["materialize_rows_per_s"] = round(source_rows / (time.perf_counter() - t0))
        result["materialize_source_rows"] = source_rows
        singles = _entity_rows(root, sqlite, args.calls + 200, 1, seed=1)
        result["sqlite"] = _rounds(OnlineFeatures(sqlite, root), singles, 200, args.rounds)

        redis_cfg = FeaturesConfig(repo_path=repo, online_store="redis", redis_url=redis_url, feast_project=project,
                                   registry=".mlops/feast/registry-redis.db")
        try:
            apply_repo(redis_cfg, root)
            t0 = time.perf_counter()
            materialize(redis_cfg, root)
            result["redis_materialize_sample_s"] = round(time.perf_counter() - t0, 2)
            online = OnlineFeatures(redis_cfg, root)
            result["redis"] = _rounds(online, singles, 200, args.rounds)
            batches = _entity_rows(root, redis_cfg, args.batch_calls + 20, 100, seed=2)
            result["redis_batch100"] = _time_calls(online, batches, warmup=20)
        finally:
            open_store(redis_cfg, root).teardown()

        mat_root = root / "mat"
        mat_sqlite = FeaturesConfig(repo_path=repo)
        written = {"sqlite": round(_materialize_rate(mat_sqlite, mat_root, args.mat_rows))}
        result["materialize_written_rows_per_s"] = written
        mat_redis = FeaturesConfig(repo_path=repo, online_store="redis", redis_url=redis_url,
                                   feast_project=f"{project}_m", registry=".mlops/feast/registry-redis.db")
        try:
            written["redis"] = round(_materialize_rate(mat_redis, mat_root, args.mat_rows))
        finally:
            open_store(mat_redis, mat_root).teardown()
        result["materialize_written_rows"] = args.mat_rows
    result["targets"] = {"redis_p99_ms_max": 2.0, "materialize_rows_per_s_min": 50_000}
    # Context for the tails: the machine is shared; p99 on 2 cores follows the load.
    result["load_avg_1m_5m"] = [round(x, 2) for x in os.getloadavg()[:2]]
    result["cpus"] = os.cpu_count()
    result["meets_targets"] = bool(result["redis"]["p99_ms"] <= 2.0  # type: ignore[index]
                                   and result["materialize_rows_per_s"] >= 50_000)  # type: ignore[operator]
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
