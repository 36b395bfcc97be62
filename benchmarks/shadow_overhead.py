"""Cost of shadow traffic to the live path: the same server with shadow off and with ``serving.tabular.shadow.fraction``
1.0, measured in one run, alternating (off, on, off, on, ...) so drift of the machine hits both arms alike.

Processes on loopback, as in ``serving_load.py`` (whose data preparation and load generator this reuses): a
redis-server of its own, the live server (``mlops_serving`` with Feast online features on Redis, prediction log
on), a candidate predictor process (``--role predictor``, the same weights), and the closed-loop load generator
(``--concurrency`` keep-alive connections). With shadow on, every live request is also queued for the sender
thread, encoded with the candidate's encoder and sent to the candidate; the live answer never waits for it.

Both live servers (off and on) start once and stay up; the bursts alternate between them. Reported per arm: the
median over rounds of req/s, p50 and p99 of the live requests (200s only), and the ratios
on/off. With shadow on, the shadow counters from ``/metrics``: mirrored, dropped (queue full: drop-and-count is
the bound on what the live path can be made to carry), answered, errors. Note: on this machine the candidate
runs on the same cores as the live server and the load generator; in a cluster it has its own pods, so the
figures here are an upper bound. Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import serving_arms as arms  # noqa: E402  (data preparation and the feature section, shared with serving_load)
import serving_load as sl  # noqa: E402  (the sibling benchmark: load generator, readiness)

PATH = "/v1/models/fraud:predict"
LINGER = 1.0


def run_live(root: Path, redis_port: int, port: int, fraction: float, candidate_port: int, queue_size: int) -> None:
    from mlops_config import ServingConfig
    from mlops_features import OnlineFeatures
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # the reference model's: this bench serves fraud
    from mlops_serving.server import run_app
    from mlops_serving.service import create_app, folder_loader

    shadow = {"fraction": fraction, "url": f"127.0.0.1:{candidate_port}", "queue_size": queue_size}
    serving = ServingConfig(port=port, prediction_log_uri=str(root / "predlog"), tabular={"shadow": shadow})
    app = create_app(serving, model_name="fraud", loader=folder_loader("fraud", root / "model" / "1"),
                     source=OnlineFeatures(arms.features_section(root, redis_port), root, contract=FRAUD_CONTRACT),
                     log_dir=root / "predlog")
    run_app(app, "127.0.0.1", port)


def run_candidate(root: Path, port: int) -> None:
    from mlops_config import ServingConfig
    from mlops_serving.served import ModelRef, load_model
    from mlops_serving.server import run_app
    from mlops_serving.service import create_predictor_app

    ref = ModelRef("fraud", "2", root / "model" / "1")
    app = create_predictor_app(ServingConfig(tabular={"role": "predictor"}, port=port), model_name="fraud",
                               loader=lambda: load_model(ref))
    run_app(app, "127.0.0.1", port)


def shadow_counters(port: int) -> dict[str, float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"mlops_serving_shadow_mirrored_total": "shadow_mirrored",
              "mlops_serving_shadow_dropped_total": "shadow_dropped",
              "mlops_serving_shadow_answered_total": "shadow_answered",
              "mlops_serving_shadow_errors_total": "shadow_errors"}
    out = dict.fromkeys(wanted.values(), 0.0)
    for family in text_string_to_metric_families(httpx.get(f"http://127.0.0.1:{port}/metrics").text):
        for sample in family.samples:
            if sample.name in wanted:
                out[wanted[sample.name]] += sample.value
    return out


def start_live(args: argparse.Namespace, fraction: float, candidate_port: int) -> tuple[subprocess.Popen[bytes], int]:
    port = sl.free_port()
    err = (args.root_dir / f"live-{fraction}.err").open("w")
    server = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--role", "live", "--root",
                               str(args.root_dir), "--port", str(port), "--redis-port", str(args.redis_port),
                               "--fraction", str(fraction), "--candidate-port", str(candidate_port),
                               "--queue-size", str(args.queue_size)], stdout=subprocess.DEVNULL, stderr=err)
    return server, port


def load(args: argparse.Namespace, port: int) -> dict[str, Any]:
    """One closed-loop burst on ``port`` (serving_load's generator, in a process of its own)."""
    out = subprocess.run([sys.executable, str(HERE / "serving_load.py"), "--role", "load", "--port", str(port),
                          "--path", PATH, "--bodies", str(args.root_dir / "entity.json"), "--duration",
                          str(args.duration), "--warmup", str(args.warmup), "--concurrency", str(args.concurrency),
                          "--max-requests", "1000000"], capture_output=True, text=True, check=True,
                         timeout=args.duration + args.warmup + 60)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    med = {k: round(statistics.median(r[k] for r in runs), 3) for k in ("rps", "p50_ms", "p99_ms")}
    return {**med, "errors": sum(r["errors"] for r in runs), "requests": sum(r["requests"] for r in runs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=["main", "live", "candidate"], default="main")
    p.add_argument("--rounds", type=int, default=8, help="Alternating off/on bursts.")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--duration", type=float, default=2.0, help="Measured seconds per arm and round.")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--queue-size", type=int, default=1000)
    p.add_argument("--fraction", type=float, default=1.0)
    p.add_argument("--root", dest="root_dir", type=Path)
    p.add_argument("--port", type=int)
    p.add_argument("--redis-port", type=int)
    p.add_argument("--candidate-port", type=int)
    args = p.parse_args()
    if args.role == "live":
        run_live(args.root_dir, args.redis_port, args.port, args.fraction, args.candidate_port, args.queue_size)
        return
    if args.role == "candidate":
        run_candidate(args.root_dir, args.port)
        return
    tmp = Path(tempfile.mkdtemp(prefix="shadow-overhead-"))
    args.root_dir = tmp
    args.redis_port = sl.free_port()
    redis = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(args.redis_port),
                              "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp)],
                             stdout=subprocess.DEVNULL)
    candidate = None
    servers: dict[float, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        time.sleep(0.5)
        prepared = arms.prepare(tmp, args.redis_port, args.rows)
        (tmp / "entity.json").write_text(json.dumps(prepared["entity"]))
        candidate_port = sl.free_port()
        candidate = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--role", "candidate", "--root",
                                      str(tmp), "--port", str(candidate_port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        sl.wait_ready(candidate_port, "/v2/health/ready", candidate, timeout=300.0)
        servers = {f: start_live(args, f, candidate_port) for f in (0.0, 1.0)}
        for proc, port in servers.values():
            sl.wait_ready(port, "/v2/health/ready", proc, timeout=300.0)
        off, on = [], []
        for _ in range(args.rounds):  # alternating bursts: the machine's drift hits both arms alike
            off.append(load(args, servers[0.0][1]))
            on.append(load(args, servers[1.0][1]))
        time.sleep(LINGER)  # the sender drains what is queued
        counters = shadow_counters(servers[1.0][1])
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(30)
        if candidate is not None:
            candidate.terminate()
            candidate.wait(30)
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    a, b = summarize(off), summarize(on)
    offered = counters["shadow_mirrored"] + counters["shadow_dropped"]
    print(json.dumps({
        "shadow_off": a, "shadow_on": {**b, "fraction": 1.0, **counters},
        "p50_ratio": round(b["p50_ms"] / a["p50_ms"], 3), "p99_ratio": round(b["p99_ms"] / a["p99_ms"], 3),
        "rps_ratio": round(b["rps"] / a["rps"], 3),
        "dropped_share": round(counters["shadow_dropped"] / offered, 4) if offered else None,
        "rounds": args.rounds, "concurrency": args.concurrency, "duration_s": args.duration,
        "queue_size": args.queue_size, "candidate_on_same_host": True, "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
