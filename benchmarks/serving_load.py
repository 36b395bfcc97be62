"""Load test: our server (Feast lookup on Redis + model) vs a plain KServe ModelServer with the same model.

Everything runs on loopback in separate processes: a redis-server of its own on a free port, the server
under test, and a load generator (asyncio, raw HTTP/1.1 keep-alive, ``--concurrency`` connections),
bounded by ``--duration`` seconds and ``--max-requests``. The two servers are measured one after the other.

(a) ours: ``mlops_serving`` with ``mlops_features.OnlineFeatures`` on Redis, V1 requests carrying entity
    keys + request-time fields; prediction log on.
(b) baseline: ``kserve.ModelServer``'s REST server (bound to 127.0.0.1) with the same exported weights,
    V1 requests carrying the already-encoded vector: no lookup, no validation, no log.

Targets (this 2-core machine): ours ≥ 500 req/s, p99 ≤ 25 ms, zero errors; ours p50 ≤ 1.5 × baseline p50.
Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HIDDEN = [64, 32]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def features_section(root: Path, redis_port: int) -> Any:
    from mlops_config import FeaturesConfig

    return FeaturesConfig(repo_path=str(REPO / "feature_repo"), online_store="redis",
                          redis_url=f"redis://127.0.0.1:{redis_port}/0", online_store_path=".mlops/feast/online.db",
                          registry=".mlops/feast/registry.db", source_dir="data/features")


def prepare(root: Path, redis_port: int, rows: int) -> dict[str, Any]:
    """Data → Feast (Redis) → encoder → exported model → request bodies for both servers."""
    import numpy as np
    import torch

    from mlops_config import DataConfig
    from mlops_features import prepare_local_data, training_set
    from mlops_model import REQUIRED_FIELDS, EncoderSpec, build_tabular_mlp, save_exported

    features = features_section(root, redis_port)
    data = DataConfig(rows=rows, days=3, users=max(50, rows // 20), merchants=max(20, rows // 100))
    prepare_local_data(data, features, root, seed=11)
    df = training_set(features, data, root)
    encoder = EncoderSpec.fit(df)
    arch = {"input_dim": encoder.input_dim, "hidden_sizes": HIDDEN, "dropout": 0.0}
    torch.manual_seed(11)
    net = build_tabular_mlp(arch)
    folder = save_exported(root / "model" / "1", net.state_dict(), {
        "kind": "tabular_mlp", "architecture": arch, "lineage": {"seed": 11},
        "features": {"feature_service": features.feature_service, "encoder": encoder.to_dict()}})
    sample = df.sample(n=min(512, len(df)), random_state=0).reset_index(drop=True)
    fields = list(REQUIRED_FIELDS)
    ours = [json.dumps({"instances": [{**{k: (float(r[k]) if k == "amount" else str(r[k])) for k in fields},
                                       "transaction_id": str(r["transaction_id"])}]}) for _, r in sample.iterrows()]
    x = encoder.encode_frame(sample)
    baseline = [json.dumps({"instances": [row.tolist()]}) for row in np.asarray(x, dtype=np.float64)]
    return {"folder": str(folder), "ours": ours, "baseline": baseline}


def run_ours(root: Path, redis_port: int, port: int, folder: Path) -> None:
    from mlops_config import ServingConfig
    from mlops_features import OnlineFeatures
    from mlops_serving.server import run_app
    from mlops_serving.service import create_app, folder_loader

    features = features_section(root, redis_port)
    serving = ServingConfig(port=port, prediction_log_dir=str(root / "predlog"))
    app = create_app(serving, model_name="fraud", loader=folder_loader("fraud", folder),
                     source=OnlineFeatures(features, root), log_dir=root / "predlog")
    run_app(app, "127.0.0.1", port)


def run_baseline(port: int, folder: Path) -> None:
    sys.argv = sys.argv[:1]  # kserve.model_server parses sys.argv at import
    import kserve
    import numpy as np
    import torch
    from kserve.constants.constants import FASTAPI_APP_IMPORT_STRING
    from kserve.model_server import ModelServer
    from kserve.protocol.rest.server import RESTServer

    from mlops_model import build_tabular_mlp, load_exported

    class Plain(kserve.Model):
        def __init__(self) -> None:
            super().__init__("fraud")
            tensors, meta = load_exported(folder)
            self.net = build_tabular_mlp(meta["architecture"])
            self.net.load_state_dict(tensors)
            self.net.eval()
            self.ready = True

        async def predict(self, payload: Any, headers: Any = None) -> dict[str, Any]:
            x = torch.from_numpy(np.asarray(payload["instances"], dtype=np.float32))
            with torch.inference_mode():
                return {"predictions": torch.sigmoid(self.net(x)).reshape(-1).tolist()}

    torch.set_num_threads(1)  # as mlops_serving does: same model, same threading
    server = ModelServer(http_port=port, enable_grpc=False, enable_latency_logging=False)
    model = Plain()
    server.register_model(model)
    rest = RESTServer(FASTAPI_APP_IMPORT_STRING, server.dataplane, server.model_repository_extension, port)
    rest.config.host = "127.0.0.1"  # ModelServer binds 0.0.0.0 and has no host option: keep it on loopback
    rest.run()


async def _load(port: int, path: str, bodies: list[bytes], concurrency: int, duration: float,
                max_requests: int, warmup: float) -> dict[str, Any]:
    requests = [(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(b)}\r\n\r\n").encode() + b for b in bodies]
    latencies: list[float] = []
    errors = 0
    sent = 0
    start = time.perf_counter()
    measure_from = start + warmup
    stop_at = measure_from + duration

    async def worker(offset: int) -> None:
        nonlocal errors, sent
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        i = offset
        while True:
            now = time.perf_counter()
            if now >= stop_at or sent >= max_requests:
                break
            t0 = time.perf_counter()
            writer.write(requests[i % len(requests)])
            i += concurrency
            status_line = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            t1 = time.perf_counter()
            if t0 >= measure_from:
                sent += 1
                latencies.append(t1 - t0)
                if not status_line.startswith(b"HTTP/1.1 200"):
                    errors += 1
        writer.close()

    results = await asyncio.gather(*(worker(k) for k in range(concurrency)), return_exceptions=True)
    errors += sum(1 for r in results if isinstance(r, BaseException))
    elapsed = min(time.perf_counter(), stop_at) - measure_from
    lat = sorted(latencies)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000.0, 3) if lat else float("nan")

    return {"rps": round(len(lat) / elapsed, 1) if elapsed > 0 else 0.0, "p50_ms": pct(0.50), "p95_ms": pct(0.95),
            "p99_ms": pct(0.99), "errors": errors, "requests": len(lat)}


def wait_ready(port: int, path: str, timeout: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server on port {port} not ready after {timeout} s")


def measure(role: str, port: int, bodies_file: Path, args: argparse.Namespace, path: str) -> dict[str, Any]:
    """Start the server process, wait for readiness, run the load generator process, stop the server."""
    me = str(Path(__file__).resolve())
    server = subprocess.Popen([sys.executable, me, "--role", role, "--root", str(args.root_dir), "--port", str(port),
                               "--redis-port", str(args.redis_port)], stdout=subprocess.DEVNULL)
    try:
        wait_ready(port, "/v2/health/ready" if role == "ours" else "/v1/models/fraud")
        out = subprocess.run(
            [sys.executable, me, "--role", "load", "--port", str(port), "--path", path, "--bodies", str(bodies_file),
             "--concurrency", str(args.concurrency), "--duration", str(args.duration),
             "--max-requests", str(args.max_requests), "--warmup", str(args.warmup)],
            capture_output=True, text=True, check=True, timeout=args.duration + args.warmup + 60)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=["main", "ours", "baseline", "load"], default="main")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration", type=float, default=10.0, help="Measured seconds per server.")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--max-requests", type=int, default=50_000)
    p.add_argument("--rows", type=int, default=6000, help="Transactions generated for the feature store.")
    p.add_argument("--root", dest="root_dir", type=Path)
    p.add_argument("--port", type=int)
    p.add_argument("--redis-port", type=int)
    p.add_argument("--path")
    p.add_argument("--bodies", type=Path)
    args = p.parse_args()
    if args.role == "ours":
        run_ours(args.root_dir, args.redis_port, args.port, args.root_dir / "model" / "1")
        return
    if args.role == "baseline":
        run_baseline(args.port, args.root_dir / "model" / "1")
        return
    if args.role == "load":
        bodies = [b.encode() for b in json.loads(args.bodies.read_text())]
        print(json.dumps(asyncio.run(_load(args.port, args.path, bodies, args.concurrency, args.duration,
                                           args.max_requests, args.warmup))))
        return
    tmp = Path(tempfile.mkdtemp(prefix="serving-load-"))
    args.root_dir = tmp
    args.redis_port = free_port()
    redis = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(args.redis_port),
                              "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp)],
                             stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        t0 = time.perf_counter()
        prepared = prepare(tmp, args.redis_port, args.rows)
        setup_s = time.perf_counter() - t0
        (tmp / "ours.json").write_text(json.dumps(prepared["ours"]))
        (tmp / "baseline.json").write_text(json.dumps(prepared["baseline"]))
        baseline = measure("baseline", free_port(), tmp / "baseline.json", args, "/v1/models/fraud:predict")
        ours = measure("ours", free_port(), tmp / "ours.json", args, "/v1/models/fraud:predict")
    finally:
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    targets = {"rps_min": 500, "p99_ms_max": 25.0, "errors": 0, "p50_vs_baseline_max": 1.5}
    ratio = round(ours["p50_ms"] / baseline["p50_ms"], 3) if baseline["p50_ms"] else None
    met = {"rps": ours["rps"] >= 500, "p99": ours["p99_ms"] <= 25.0, "errors": ours["errors"] == 0,
           "p50_vs_baseline": ratio is not None and ratio <= 1.5}
    print(json.dumps({"ours": ours, "baseline": baseline, "p50_ratio": ratio, "targets": targets, "met": met,
                      "concurrency": args.concurrency, "duration_s": args.duration, "setup_s": round(setup_s, 1),
                      "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
