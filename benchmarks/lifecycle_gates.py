"""Lifecycle and gate costs: alias moves, rollback (in-process and as one `mlops registry rollback` command),
ledger queries, and the gate statistics (paired bootstrap, interleaved latency harness).

Builds a throw-away MLflow (SQLite) registry in a temp repo root with two versions, walks both to champion
``--cycles`` times (so the ledger grows), then times a rollback in-process and through the CLI (a fresh
interpreter: what an operator or the monitoring CronJob pays). Prints one JSON object on its last line.

Target (issue 5): rollback in one command under 5 s. The CLI figure includes interpreter start, importing
the whole CLI and MLflow, and opening the SQLite store (schema check); ``rollback_cli_cpu_s`` is the CPU it
used, which is what the wall time approaches on an idle machine (``load_avg_1m`` says how idle this one was).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mlops_config import load_config
from mlops_core import lifecycle
from mlops_core.ledger import now_iso
from mlops_evaluation import measure_interleaved, paired_bootstrap_f1

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=5, help="champion hand-overs before timing the rollback")
    parser.add_argument("--rows", type=int, default=12000, help="holdout rows for the bootstrap timing")
    args = parser.parse_args()

    from mlops_core import mlflow_client

    with tempfile.TemporaryDirectory(prefix="bench-lifecycle-") as tmp:
        root = Path(tmp) / "repo"
        shutil.copytree(REPO / "configs", root / "configs")
        loaded = load_config(config_dir=root / "configs", environ={})
        tracking = loaded.config.tracking
        client = mlflow_client(tracking, root)
        client.create_registered_model("fraud")
        for _ in range(2):
            client.create_model_version("fraud", source=str(root))
        moves: list[float] = []
        for cycle in range(args.cycles):
            for version in ("1", "2"):
                for to in lifecycle.LIFECYCLE:
                    t0 = time.perf_counter()
                    lifecycle.promote(tracking, root, "fraud", version, to, reason=f"bench {cycle}", actor="bench",
                                      required_gates={})
                    moves.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        lifecycle.restore_champion(tracking, root, "fraud", reason="bench in-process", actor="bench")
        rollback_s = time.perf_counter() - t0
        for to in lifecycle.LIFECYCLE:  # 2 → champion again, so there is a fallback for the CLI rollback
            lifecycle.promote(tracking, root, "fraud", "2", to, reason="bench", actor="bench", required_gates={})
        env = {**os.environ, "MLOPS_CONFIG_DIR": str(root / "configs")}
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run([str(Path(sys.executable).with_name("mlops")), "registry", "rollback", "-r", "bench cli",
                               "--json"], env=env, capture_output=True, text=True, check=False)
        cli_s = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cli_cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        if proc.returncode != 0:
            raise SystemExit(f"mlops registry rollback failed: {proc.stderr}")
        t0 = time.perf_counter()
        entries = lifecycle.history(tracking, root, "fraud")
        history_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        champion_then = lifecycle.aliases(tracking, root, "fraud", at=now_iso()).get("champion")
        at_s = time.perf_counter() - t0

    rng = np.random.default_rng(0)
    y = (rng.random(args.rows) < 0.02).astype(int)
    a, b = np.where(rng.random(args.rows) < 0.9, y, 1 - y), np.where(rng.random(args.rows) < 0.85, y, 1 - y)
    t0 = time.perf_counter()
    paired_bootstrap_f1(y, a, b, samples=1000)
    bootstrap_s = time.perf_counter() - t0
    run = measure_interleaved(lambda _: None, lambda _: None, [0], timed=2000, warmup=100, repeats=5)
    overhead_us = statistics.median(run.a_ms) * 1000

    print(json.dumps({
        "benchmark": "lifecycle_gates",
        "promote_p50_s": round(statistics.median(moves), 4), "promote_max_s": round(max(moves), 4),
        "moves": len(moves), "ledger_entries": len(entries),
        "rollback_inprocess_s": round(rollback_s, 4), "rollback_cli_s": round(cli_s, 3),
        "rollback_cli_cpu_s": round(cli_cpu_s, 3), "rollback_under_5s": cli_s < 5.0,
        "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(), "history_read_s": round(history_s, 4),
        "aliases_at_s": round(at_s, 4), "champion_now": champion_then,
        "bootstrap_1000x_rows": args.rows, "bootstrap_s": round(bootstrap_s, 3),
        "latency_harness_overhead_us": round(overhead_us, 2),
    }))


if __name__ == "__main__":
    main()
