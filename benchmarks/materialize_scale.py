"""Feast materialization as the feature tables grow: the local engine vs Feast's Spark compute engine.

The repository's own feature views (``feature_repo/``: ``user_transactions`` and ``merchant_risk``, whose
pandas udfs compute the windows from the ``transactions`` source) materialize a ``transactions.parquet``
written by DuckDB (no pandas) at ``--sizes`` rows over 30 days (one user per 20 rows, one merchant per 1000).
Each measurement runs in a fresh subprocess: ``feast apply`` + a full ``materialize`` into the real Redis
under a project of its own (deleted after), with ``features.batch_engine`` = ``local`` or ``spark``
(``spark_master`` = ``local[*]``, the platform's Spark defaults: 4 GB driver, 8 shuffle partitions; Spark's
executors read the parquet source, see ``mlops_features.offline_spark``).

Reported per size and engine: ``rows_per_s`` (source rows / materialize seconds), ``seconds``,
``online_sample_found`` (of 200 source entities per view, how many the online store has), ``peak_rss_mb`` of
our (Python driver) process and, for Spark, ``peak_rss_jvm_mb`` (the JVM) and ``peak_rss_python_workers_mb``
(Spark's Python workers that run the udfs), all ``VmHWM``.
A run whose time, extrapolated linearly from the previous size, would exceed ``--max-run-s``, or whose peak
RSS extrapolated the same way would exceed ``--max-rss-gib``, is skipped, and says so. Needs Redis
(``MLOPS_TEST_REDIS_URL`` or 127.0.0.1:6379) and, for Spark, ``java``.

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("MLOPS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ROWS_PER_USER, ROWS_PER_MERCHANT, DAYS = 20, 1000, 30


def generate(root: Path, rows: int) -> None:
    """The ``transactions`` source (``<features.source_dir>/transactions.parquet``), ``rows`` rows over 30 days:
    the columns the views' udfs read, one user per 20 rows, one merchant per 1000, 3 % fraud."""
    import duckdb

    from mlops_config import FeaturesConfig

    path = root / FeaturesConfig().source_dir / "transactions.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    users, merchants = max(1, rows // ROWS_PER_USER), max(1, rows // ROWS_PER_MERCHANT)
    at = f"TIMESTAMPTZ '2026-11-01 00:00:00+00' + to_microseconds(CAST(random() * {DAYS * 86_400e6} AS BIGINT))"
    with duckdb.connect(config={"memory_limit": "1GB", "preserve_insertion_order": False}) as con:
        con.execute(f"""COPY (SELECT 't' || lpad(CAST(range AS VARCHAR), 10, '0') AS transaction_id,
                                     'U' || lpad(CAST(hash(range) % {users} AS VARCHAR), 9, '0') AS user_id,
                                     'M' || lpad(CAST(hash(range + 7) % {merchants} AS VARCHAR), 7, '0') AS merchant_id,
                                     ts AS event_timestamp, ts AS created,
                                     round(exp(3 + random()), 2) AS amount, random() < 0.03 AS is_fraud
                              FROM (SELECT range, {at} AS ts FROM range({rows})))
                        TO '{path}' (FORMAT parquet)""")


def worker(root: Path, engine: str) -> dict[str, Any]:
    from mlops_config import FeaturesConfig
    from mlops_features import apply_repo, materialize, open_store

    cfg = FeaturesConfig(online_store="redis", redis_url=REDIS_URL, feast_project=f"bench_{uuid.uuid4().hex[:10]}",
                         registry=f".mlops/feast/registry-{engine}.db", batch_engine=engine)
    apply_repo(cfg, root)
    try:
        done = materialize(cfg, root)
        children = _children_peak_rss_mb()  # Spark's JVM and its Python workers while they still run
        store = open_store(cfg, root)
        online = {v.name: len(store.get_online_features(
            [f"{v.name}:{v.features[0].name}"], [{v.join_keys[0]: k} for k in _sample_keys(root, v.join_keys[0])]
        ).to_df().dropna()) for v in store.list_feature_views()}
    finally:
        open_store(cfg, root).teardown()
    return {"seconds": done["seconds"],
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            **children, "online_sample_found": online}


def _sample_keys(root: Path, key: str, n: int = 200) -> list[str]:
    """``n`` entity keys of the source: each must be in the online store after the run."""
    import duckdb

    from mlops_config import FeaturesConfig

    path = root / FeaturesConfig().source_dir / "transactions.parquet"
    return [r[0] for r in duckdb.execute(f"SELECT DISTINCT {key} FROM '{path}' ORDER BY 1 LIMIT {n}").fetchall()]


def _children_peak_rss_mb() -> dict[str, float]:
    """Peak RSS (``VmHWM``) of this process's live descendants, per kind: the JVM(s) and Spark's Python workers
    (``pyspark.daemon`` and the workers it forks); plus the peak of those already reaped."""
    import psutil

    totals = {"peak_rss_jvm_mb": 0.0, "peak_rss_python_workers_mb": 0.0}
    for child in psutil.Process().children(recursive=True):
        try:
            status = Path(f"/proc/{child.pid}/status").read_text()
            name = child.name()
        except (OSError, psutil.Error):
            continue
        hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0) / 1024
        totals["peak_rss_jvm_mb" if name == "java" else "peak_rss_python_workers_mb"] += hwm
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {k: round(v, 1) for k, v in totals.items()} | {"peak_rss_reaped_child_mb": round(reaped, 1)}


def measure(root: Path, engine: str, rows: int, timeout_s: float) -> dict[str, Any]:
    try:
        proc = subprocess.run(["nice", "-n", "10", sys.executable, __file__, "--worker", str(root), engine],
                              capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"skipped": f"did not finish within {timeout_s:.0f}s"}
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return {"error": lines[-1] if lines else f"rc {proc.returncode}"}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["rows_per_s"] = round(rows / out["seconds"], 1)
    out["seconds"] = round(out["seconds"], 2)
    if engine == "local":
        for key in ("peak_rss_jvm_mb", "peak_rss_python_workers_mb", "peak_rss_reaped_child_mb"):
            out.pop(key)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,5000000,20000000")
    parser.add_argument("--engines", default="local,spark")
    parser.add_argument("--max-run-s", type=float, default=1200.0)
    parser.add_argument("--max-rss-gib", type=float, default=8.0)
    parser.add_argument("--worker", nargs=2, metavar=("ROOT", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(Path(args.worker[0]), args.worker[1])))
        return
    if "spark" in args.engines and shutil.which("java") is None:
        raise SystemExit("java is not installed; Spark needs a JVM: `make java`")
    sizes = [int(s) for s in args.sizes.split(",")]
    load_start = [round(x, 2) for x in os.getloadavg()]  # 1/5/15-min load: the machine may be shared
    engines = args.engines.split(",")
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="materialize-scale-") as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "feature_repo", root / "feature_repo")
        for n in sizes:
            generate(root, n)
            row: dict[str, Any] = {"rows": n}
            for engine in engines:
                prev = next((r[engine] for r in reversed(out) if "seconds" in r.get(engine, {})), None)
                prev_rows = next((r["rows"] for r in reversed(out) if "seconds" in r.get(engine, {})), None)
                estimate = prev["seconds"] * n / prev_rows if prev and prev_rows else 0.0
                # our process's RSS; Spark's JVM is capped by its own -Xmx (spark.driver.memory), not by the rows
                rss = prev["peak_rss_mb"] * n / prev_rows if prev and prev_rows else 0.0
                if estimate > args.max_run_s:
                    row[engine] = {"skipped": f"estimated {estimate:.0f}s (linear from {prev_rows} rows) > "
                                              f"--max-run-s {args.max_run_s:.0f} on {os.cpu_count()} CPUs"}
                elif rss > args.max_rss_gib * 1024:
                    row[engine] = {"skipped": f"estimated peak RSS {rss / 1024:.1f} GiB (linear from {prev_rows} "
                                              f"rows) > --max-rss-gib {args.max_rss_gib} on a shared machine"}
                else:
                    row[engine] = measure(root, engine, n, args.max_run_s * 1.5)
            print(json.dumps({"progress": row}), file=sys.stderr, flush=True)
            out.append(row)
    from mlops_config import SPARK_DEFAULTS

    print(json.dumps({"benchmark": "materialize_scale", "sizes": out, "cpus": os.cpu_count(),
                      "spark_master": "local[*]", "spark_driver_memory": SPARK_DEFAULTS["spark.driver.memory"],
                      "load_average": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
                      "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))


if __name__ == "__main__":
    main()
