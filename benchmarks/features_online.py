"""Online feature latency (SQLite, Redis, batch of 100) and materialization throughput of the fraud_v1 service.

Builds a store from the default sample data (60,000 transactions) in a temp folder, then times
``OnlineFeatures.get`` (what serving calls per batch): single entity on SQLite and on Redis (``--rounds`` rounds
of >= 2,000 calls after a warm-up; the median round is reported, with every round's p99) and batches of 100
entities on Redis. Values are served as of the day after the sample (``features.online_ttl_as_of``, as the
``local`` profile pins it): otherwise every value is past its view's TTL today and timed on the expiry path.

Readers on Redis (``readers``), 1 and 64 entities a call, rounds interleaved: Feast's SDK as users call it
(``FeatureStore.get_online_features(...).to_dict()``, ``feast_sdk``) and, where this checkout's config has
``features.online_reader``, ``OnlineFeatures`` with each reader (``direct``: the platform's Redis reader;
``feast``: through the SDK), with the direct reader's p50/p99 as a ratio of the SDK's.

Materialization is timed twice: on the sample store (``materialize_rows_per_s``: source rows of both
feature tables per second; Feast keeps each entity's latest row, so far fewer are written) and on a table
of ``--mat-rows`` distinct users, one row each, so every row is written (``materialize_written_rows_per_s``,
SQLite and Redis). Redis is ``$MLOPS_BENCH_REDIS_URL`` or 127.0.0.1:6379/0, under a throw-away Feast
project that is torn down afterwards. Prints one JSON object on its last line.

Targets on the reference machine: Redis single-entity p99 <= 2 ms; materialization >= 50,000 rows/s judged on
rows *written* to each online store (``materialize_written_rows_per_s``, SQLite and Redis): the sample store's
source rows/s (``materialize_rows_per_s``) counts rows Feast reads but never writes (it keeps each entity's latest
row), which flattered the figure.
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
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import OnlineFeatures, apply_repo, materialize, open_store, prepare_local_data
from mlops_features.schema import raw_schema
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # the reference model's: this bench reads fraud_v1

REPO_ROOT = Path(__file__).resolve().parents[1]
Getter = Callable[[list[dict[str, str]]], object]
_SAMPLE = DataConfig()
AS_OF = datetime.fromisoformat(_SAMPLE.start_date).replace(tzinfo=UTC) + timedelta(days=_SAMPLE.days)
"""The day after the sample data's last event: what ``features.online_ttl_as_of`` pins in the ``local`` profile."""
SERVICE = "fraud_v1"
"""The reference model's FeatureService (``features.feature_service`` in configs/base.yaml)."""


def _percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 4), "p99_ms": round(float(np.percentile(ms, 99)), 4),
            "mean_ms": round(float(ms.mean()), 4), "calls": len(samples)}


def _time_calls(get: Getter, batches: list[list[dict[str, str]]], warmup: int) -> dict[str, float]:
    for rows in batches[:warmup]:
        get(rows)
    samples = []
    for rows in batches[warmup:]:
        t0 = time.perf_counter()
        get(rows)
        samples.append(time.perf_counter() - t0)
    return _percentiles(samples)


def _median_round(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median round by p99 (a shared 2-core machine has bursts of load from other work that land in one
    round's tail), with every round's p99 kept."""
    ranked = sorted(runs, key=lambda r: r["p99_ms"])
    return {**ranked[len(ranked) // 2], "rounds": len(runs), "p99_ms_rounds": [r["p99_ms"] for r in ranked]}


def _rounds(get: Getter, batches: list[list[dict[str, str]]], warmup: int, rounds: int) -> dict[str, Any]:
    """``rounds`` back-to-back measurements; the median round."""
    return _median_round([_time_calls(get, batches, warmup) for _ in range(rounds)])


def _readers(features: FeaturesConfig, root: Path, calls: int, rounds: int) -> dict[str, Any]:
    """Feast's SDK as users call it and, where the config has ``features.online_reader``, each reader of
    ``OnlineFeatures``, at 1 and 64 entities a call; rounds interleaved across readers (noise hits all alike)."""
    store = open_store(features, root)
    service = store.get_feature_service(features.feature_service)
    getters: dict[str, Getter] = {
        "feast_sdk": lambda rows: store.get_online_features(features=service, entity_rows=rows).to_dict()}
    if "online_reader" in FeaturesConfig.model_fields:
        for reader in ("feast", "direct"):
            config = FeaturesConfig(**{**features.model_dump(), "online_reader": reader})
            getters[reader] = OnlineFeatures(config, root, contract=FRAUD_CONTRACT).get
    out: dict[str, Any] = {}
    for size in (1, 64):
        batches = _entity_rows(root, features, calls + 100, size, seed=3 + size)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in getters}
        for _ in range(rounds):
            for name, get in getters.items():
                runs[name].append(_time_calls(get, batches, 100))
        out[str(size)] = {name: _median_round(r) for name, r in runs.items()}
        if "direct" in getters:
            sdk, direct = out[str(size)]["feast_sdk"], out[str(size)]["direct"]
            out[str(size)]["direct_vs_feast_sdk"] = {k: round(direct[k] / sdk[k], 3) for k in ("p50_ms", "p99_ms")}
    return out


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
    pq.write_table(pa.Table.from_pandas(tx, schema=raw_schema(FRAUD_CONTRACT), preserve_index=False),
                   src / "transactions.parquet")
    apply_repo(features, root)
    t0 = time.perf_counter()
    materialize(features, root)
    return rows / (time.perf_counter() - t0)


def _copy_repo(root: Path) -> None:
    """``root/feature_repo``: the repository's relative source paths then resolve under ``root``."""
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))


def judge(result: Mapping[str, Any]) -> dict[str, bool]:
    """Each target's verdict; materialization on rows *written* to every online store, not the sample store's
    source rows (Feast writes only each entity's latest row: source rows/s counts work never done)."""
    written = result["materialize_written_rows_per_s"]
    return {"redis_p99": result["redis"]["p99_ms"] <= 2.0,
            "materialize_written_rows_per_s": bool(written) and min(written.values()) >= 50_000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3_000, help="Timed single-entity calls per store (>= 2000).")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of single-entity calls; median reported.")
    parser.add_argument("--batch-calls", type=int, default=500, help="Timed calls of 100 entities on Redis.")
    parser.add_argument("--reader-calls", type=int, default=1_000,
                        help="Timed calls per reader and batch size (1 and 64 entities) per round.")
    parser.add_argument("--mat-rows", type=int, default=50_000, help="Distinct rows for the materialization run.")
    args = parser.parse_args()
    redis_url = os.environ.get("MLOPS_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    repo = "feature_repo"
    project = f"bench_{uuid.uuid4().hex[:8]}"
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-features-") as tmp:
        root = Path(tmp)
        _copy_repo(root)
        sqlite = FeaturesConfig(repo_path=repo, feature_service=SERVICE, online_ttl_as_of=AS_OF)
        t0 = time.perf_counter()
        prepared = prepare_local_data(DataConfig(), sqlite, root, contract=FRAUD_CONTRACT)
        result["prepare_local_data_s"] = round(time.perf_counter() - t0, 2)
        result["prepare_steps_s"] = {k: round(v, 2) for k, v in prepared.seconds.items()}
        source_rows = _source_rows(root, sqlite)
        t0 = time.perf_counter()
        materialize(sqlite, root)
        result["materialize_rows_per_s"] = round(source_rows / (time.perf_counter() - t0))
        result["materialize_source_rows"] = source_rows
        singles = _entity_rows(root, sqlite, args.calls + 200, 1, seed=1)
        result["sqlite"] = _rounds(OnlineFeatures(sqlite, root, contract=FRAUD_CONTRACT).get, singles, 200, args.rounds)

        redis_cfg = FeaturesConfig(repo_path=repo, online_store="redis", redis_url=redis_url, feast_project=project,
                                   feature_service=SERVICE, registry=".mlops/feast/registry-redis.db",
                                   online_ttl_as_of=AS_OF)
        try:
            apply_repo(redis_cfg, root)
            t0 = time.perf_counter()
            materialize(redis_cfg, root)
            result["redis_materialize_sample_s"] = round(time.perf_counter() - t0, 2)
            online = OnlineFeatures(redis_cfg, root, contract=FRAUD_CONTRACT)
            result["redis"] = _rounds(online.get, singles, 200, args.rounds)
            batches = _entity_rows(root, redis_cfg, args.batch_calls + 20, 100, seed=2)
            result["redis_batch100"] = _time_calls(online.get, batches, warmup=20)
            result["readers"] = _readers(redis_cfg, root, args.reader_calls, args.rounds)
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
    result["targets"] = {"redis_p99_ms_max": 2.0, "materialize_written_rows_per_s_min": 50_000}
    # Context for the tails: the machine is shared; p99 on 2 cores follows the load.
    result["load_avg_1m_5m"] = [round(x, 2) for x in os.getloadavg()[:2]]
    result["cpus"] = os.cpu_count()
    result["met"] = judge(result)
    result["meets_targets"] = all(result["met"].values())
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
