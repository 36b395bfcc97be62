"""Feast materialization as the feature tables grow: the local engine vs Feast's Spark compute engine.

The repository's own feature views (``feature_repo/``) read their parquet sources; this benchmark writes those
sources with DuckDB (no pandas) at ``--sizes`` total source rows (split between the views by their share in a
real build: 90 % user rows, 10 % merchant rows; one entity per 20 rows), with the schema taken from the views
themselves (entity keys, ``event_timestamp``, every feature with its Feast type). Each measurement runs in a
fresh subprocess: ``feast apply`` + a full ``materialize`` into the real Redis under a project of its own
(deleted after), with ``features.batch_engine`` = ``local`` or ``spark`` (``spark_master`` = ``local[*]``).

Reported per size and engine: ``rows_per_s`` (source rows / materialize seconds), ``seconds``,
``online_rows`` (entities written), ``peak_rss_mb`` of our (Python driver) process and, for Spark,
``peak_rss_children_mb`` (the JVM it starts). A run whose time, extrapolated linearly from the previous size,
would exceed ``--max-run-s``, or whose peak RSS extrapolated the same way would exceed ``--max-rss-gib``, is
skipped, and says so. Needs Redis (``MLOPS_TEST_REDIS_URL`` or
127.0.0.1:6379) and, for Spark, ``java``.

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
SHARES = {"user_transactions": 0.9, "merchant_risk": 0.1}
ROWS_PER_ENTITY = 20


def _sql_value(dtype: str, i: int) -> str:
    if "Int" in dtype:
        return f"CAST(floor(random() * {20 + i}) AS BIGINT)"
    if "Bool" in dtype:
        return "random() < 0.1"
    if "String" in dtype:
        return "chr(65 + CAST(floor(random() * 8) AS INTEGER))"
    return "round(random() * 100, 2)"


def generate(root: Path, rows: int) -> None:
    """Every view's source parquet, ``rows`` rows in all, from the views' own schemas."""
    import duckdb

    from mlops_config import FeaturesConfig
    from mlops_features.store import feast_objects

    features = FeaturesConfig()
    objects = feast_objects(features, root)
    views = [o for o in objects if type(o).__name__ == "FeatureView"]
    join_key = {o.name: o.join_key for o in objects if type(o).__name__ == "Entity"}
    with duckdb.connect(config={"memory_limit": "1GB", "preserve_insertion_order": False}) as con:
        for view in views:
            n = max(1, int(rows * SHARES.get(view.name, 1 / len(views))))
            entities = max(1, n // ROWS_PER_ENTITY)
            keys = [f"'{k[0].upper()}' || lpad(CAST(range % {entities} AS VARCHAR), 9, '0') AS {k}"
                    for k in (join_key[e] for e in view.entities)]
            cols = [f"{_sql_value(str(f.dtype), i)} AS {f.name}" for i, f in enumerate(view.features)]
            ts, created = view.batch_source.timestamp_field, view.batch_source.created_timestamp_column
            at = "TIMESTAMPTZ '2026-11-01 00:00:00+00' + to_microseconds(CAST(random() * 2.6e12 AS BIGINT))"
            stamp = f"{at} AS {ts}" + (f", {at} AS {created}" if created else "")
            path = Path(view.batch_source.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            con.execute(f"COPY (SELECT {', '.join([*keys, stamp, *cols])} FROM range({n})) TO '{path}' "
                        "(FORMAT parquet)")


def worker(root: Path, engine: str) -> dict[str, Any]:
    from mlops_config import FeaturesConfig
    from mlops_features import apply_repo, materialize, open_store

    cfg = FeaturesConfig(online_store="redis", redis_url=REDIS_URL, feast_project=f"bench_{uuid.uuid4().hex[:10]}",
                         registry=f".mlops/feast/registry-{engine}.db", batch_engine=engine)
    apply_repo(cfg, root)
    try:
        done = materialize(cfg, root)
        children = _children_peak_rss_mb()  # Spark's JVM (and its Python workers) while they still run
    finally:
        open_store(cfg, root).teardown()
    return {"seconds": done["seconds"],
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "peak_rss_children_mb": children}


def _children_peak_rss_mb() -> float:
    """Sum of the peak RSS (``VmHWM``) of this process's live descendants, plus those already reaped."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            status = Path(f"/proc/{child.pid}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0) / 1024
    return round(total + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)


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
        out.pop("peak_rss_children_mb")
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
    print(json.dumps({"benchmark": "materialize_scale", "sizes": out, "cpus": os.cpu_count(),
                      "spark_master": "local[*]", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))


if __name__ == "__main__":
    main()
