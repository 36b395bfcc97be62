"""Load test: our server (Feast lookup on Redis + model) vs a plain KServe ModelServer with the same model.

Everything runs on loopback in separate processes: a redis-server of its own on a free port, the server
under test, and a load generator (asyncio, raw HTTP/1.1 keep-alive). Both servers run side by side and the
closed-loop runs alternate, baseline then ours, ``--repeats`` times: on a noisy machine both of a pair see
the same noise, and the pair with the median p50 ratio is the one reported (every pair's ratio beside it).

(a) ours: ``mlops_serving`` with ``mlops_features.OnlineFeatures`` on Redis, V1 requests carrying entity
    keys + request-time fields; prediction log on.
(b) baseline: ``kserve.ModelServer``'s REST server (bound to 127.0.0.1) with the same exported weights,
    V1 requests carrying the already-encoded vector: no lookup, no validation, no log.

Fair by construction: both servers log the same way (uvicorn's access log off, KServe's per-request latency
trace off; ``--logging on`` turns both on for both), and only 200 answers count in req/s and latency; any
other status or a broken connection is reported apart, as ``errors``, by kind in ``error_kinds`` (whose side:
``http_<status>`` the server's, ``client_pool_full`` the generator's own connection cap); the open loop adds the
server's own 503 count by reason (``shed_by_server``, warm-up included) and how late the generator itself sent
(``send_lag_p99_ms``), so a generator falling behind is told apart from a server shedding.

Two load shapes on ours: closed loop (``--concurrency`` connections, each sends its next request when the last
answer arrives; the baseline runs the same) and open loop (requests arrive at a fixed ``--rate`` whatever the
server does, latency measured from the scheduled send time, so a slow answer cannot hide the queue behind it).

Targets (this 2-core machine): closed loop at concurrency 16 ≥ 2,000 req/s, p99 ≤ 15 ms, zero errors, p50 ≤
1.3 × the baseline's p50; open loop at 1,000 req/s: p99 ≤ 20 ms. Prints one JSON object on its last line.
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

    # the Feast repository's sources are relative to it: a copy beside the benchmark's data, as a checkout has
    if not (root / "feature_repo").exists():
        import shutil

        shutil.copytree(REPO / "feature_repo", root / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))
    return FeaturesConfig(repo_path="feature_repo", online_store="redis",
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


def run_ours(root: Path, redis_port: int, port: int, folder: Path, logging_on: bool) -> None:
    from mlops_config import ServingConfig
    from mlops_features import OnlineFeatures
    from mlops_serving.server import run_app
    from mlops_serving.service import create_app, folder_loader

    features = features_section(root, redis_port)
    serving = ServingConfig(port=port, prediction_log_uri=str(root / "predlog"))
    app = create_app(serving, model_name="fraud", loader=folder_loader("fraud", folder),
                     source=OnlineFeatures(features, root), log_dir=root / "predlog")
    if logging_on:
        _log_like_kserve(app.state.model)
    run_app(app, "127.0.0.1", port, access_log=logging_on)


def _log_like_kserve(model: Any) -> None:
    """KServe's logging defaults on our server: the per-request latency trace of KServe's Model call path (which
    our server uses) and, with ``run_app(access_log=True)``, uvicorn's access log, both to stderr."""
    from kserve.logging import configure_logging

    configure_logging()  # what ModelServer does by default (the baseline's setting)
    model.enable_latency_logging = True


def run_baseline(port: int, folder: Path, logging_on: bool) -> None:
    sys.argv = sys.argv[:1]  # kserve.model_server parses sys.argv at import
    import kserve
    import numpy as np
    import torch
    from kserve.constants.constants import FASTAPI_APP_IMPORT_STRING
    from kserve.logging import KSERVE_TRACE_LOGGER_NAME
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
    server = ModelServer(http_port=port, enable_grpc=False, enable_latency_logging=logging_on)
    model = Plain()
    server.register_model(model)
    rest = RESTServer(FASTAPI_APP_IMPORT_STRING, server.dataplane, server.model_repository_extension, port)
    rest.config.host = "127.0.0.1"  # ModelServer binds 0.0.0.0 and has no host option: keep it on loopback
    # the same logging as ours: uvicorn's access log (on by default here) and KServe's per-request trace (its
    # TimingMiddleware's PrintTimings and the model's latency line, both to the kserve.trace logger)
    rest.config.access_log = logging_on
    if not logging_on:
        import logging

        logging.getLogger(KSERVE_TRACE_LOGGER_NAME).setLevel(logging.WARNING)
    rest.run()


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    """Send one request, read its whole answer; its HTTP status (0: no status line)."""
    writer.write(request)
    status_line = await reader.readline()
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    await reader.readexactly(length)
    parts = status_line.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _raw_requests(path: str, bodies: list[bytes]) -> list[bytes]:
    return [(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             f"Content-Length: {len(b)}\r\n\r\n").encode() + b for b in bodies]


def _summary(latencies: list[float], errors: int, elapsed: float, kinds: dict[str, int]) -> dict[str, Any]:
    """req/s and percentiles over the 200 answers only; everything else is counted in ``errors``, and by kind
    in ``error_kinds``: ``http_<status>`` (the server answered), ``connection`` (reset or closed by the server),
    ``client_pool_full`` (the open loop's own connection cap: the generator, not the server)."""
    lat = sorted(latencies)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000.0, 3) if lat else float("nan")

    return {"rps": round(len(lat) / elapsed, 1) if elapsed > 0 else 0.0, "p50_ms": pct(0.50), "p95_ms": pct(0.95),
            "p99_ms": pct(0.99), "errors": errors, "requests": len(lat), "error_kinds": dict(sorted(kinds.items()))}


async def _load(port: int, path: str, bodies: list[bytes], concurrency: int, duration: float,
                max_requests: int, warmup: float) -> dict[str, Any]:
    """Closed loop: ``concurrency`` connections, each sending its next request as soon as the last answered."""
    requests = _raw_requests(path, bodies)
    latencies: list[float] = []
    errors = 0
    kinds: dict[str, int] = {}
    measured = 0
    start = time.perf_counter()
    measure_from = start + warmup
    stop_at = measure_from + duration

    async def worker(offset: int) -> None:
        nonlocal errors, measured
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        i = offset
        try:
            while time.perf_counter() < stop_at and measured < max_requests:
                t0 = time.perf_counter()
                status = await _exchange(reader, writer, requests[i % len(requests)])
                t1 = time.perf_counter()
                i += concurrency
                if t0 >= measure_from:
                    measured += 1
                    if status == 200:
                        latencies.append(t1 - t0)
                    else:
                        errors += 1
                        kinds[f"http_{status}"] = kinds.get(f"http_{status}", 0) + 1
        finally:
            writer.close()

    results = await asyncio.gather(*(worker(k) for k in range(concurrency)), return_exceptions=True)
    broken = sum(1 for r in results if isinstance(r, BaseException))
    if broken:
        errors += broken
        kinds["connection"] = broken
    return _summary(latencies, errors, min(time.perf_counter(), stop_at) - measure_from, kinds)


async def _open_loop(port: int, path: str, bodies: list[bytes], rate: float, duration: float,
                     warmup: float, max_connections: int = 256) -> dict[str, Any]:
    """Open loop: request *i* is due at ``i / rate`` s whatever the server does; latency counts from that moment.

    A due request takes an idle keep-alive connection or opens one (up to ``max_connections``), as many
    independent clients would, so a slow answer delays no later arrival (no coordinated omission).
    """
    requests = _raw_requests(path, bodies)
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    latencies: list[float] = []
    errors = 0
    kinds: dict[str, int] = {}
    lags: list[float] = []
    opened = 0
    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    measure_from = start + warmup
    total = int((warmup + duration) * rate)

    def fail(due: float, kind: str) -> None:
        nonlocal errors
        if due >= measure_from:
            errors += 1
            kinds[kind] = kinds.get(kind, 0) + 1

    async def one(i: int, due: float) -> None:
        nonlocal opened
        if due >= measure_from:
            lags.append(time.perf_counter() - due)  # how late the generator itself sends
        if idle:
            conn = idle.pop()
        elif opened < max_connections:
            opened += 1
            conn = await asyncio.open_connection("127.0.0.1", port)
        else:
            fail(due, "client_pool_full")  # more requests in flight than any client pool would hold: never wait
            return
        try:
            status = await _exchange(*conn, requests[i % len(requests)])
        except (OSError, asyncio.IncompleteReadError):
            opened -= 1
            fail(due, "connection")
            return
        done = time.perf_counter()
        idle.append(conn)
        if status != 200:
            fail(due, f"http_{status}")
        elif due >= measure_from:
            latencies.append(done - due)

    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, due)))
    await asyncio.gather(*tasks)
    for _, writer in idle:
        writer.close()
    summary = _summary(latencies, errors, duration, kinds)
    lags.sort()
    lag_p99 = round(lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000.0, 3) if lags else 0.0
    return {"rate": rate, **summary, "connections": opened, "send_lag_p99_ms": lag_p99}


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


def start_server(role: str, port: int, args: argparse.Namespace, path: str) -> subprocess.Popen[bytes]:
    """Start a server process (its log, on with --logging on, goes to ``<role>.err``) and wait until it is ready."""
    err = (args.root_dir / f"{role}.err").open("w")
    server = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--role", role, "--root",
                               str(args.root_dir), "--port", str(port), "--redis-port", str(args.redis_port),
                               "--logging", args.logging], stdout=subprocess.DEVNULL, stderr=err)
    err.close()
    try:
        wait_ready(port, path, timeout=300.0)
    except RuntimeError:
        sys.stderr.write((args.root_dir / f"{role}.err").read_text()[-3000:])
        stop_server(server)
        raise
    return server


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    server.wait(30)


def run_load(port: int, bodies_file: Path, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """One load run (closed loop, or open loop with ``--rate``) in a process of its own; its JSON summary."""
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--role", "load", "--port", str(port),
                          "--path", "/v1/models/fraud:predict", "--bodies", str(bodies_file),
                          "--duration", str(args.duration), "--warmup", str(args.warmup), *extra],
                         capture_output=True, text=True, check=True, timeout=args.duration + args.warmup + 60)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def compare(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Both servers up side by side; closed-loop runs alternate baseline, ours, ``--repeats`` times (a noisy
    machine then slows both of a pair alike); then the open loop on ours."""
    tmp = args.root_dir
    closed = ["--concurrency", str(args.concurrency), "--max-requests", str(args.max_requests)]
    baseline_port, ours_port = free_port(), free_port()
    baseline = start_server("baseline", baseline_port, args, "/v1/models/fraud")
    try:
        ours = start_server("ours", ours_port, args, "/v2/health/ready")
        try:
            pairs_b, pairs_o = [], []
            for _ in range(args.repeats):
                pairs_b.append(run_load(baseline_port, tmp / "baseline.json", args, closed))
                pairs_o.append(run_load(ours_port, tmp / "ours.json", args, closed))
            shed_before = shed_counts(ours_port)
            open_loop = run_load(ours_port, tmp / "ours.json", args, ["--rate", str(args.rate)])
            shed_after = shed_counts(ours_port)
            open_loop["shed_by_server"] = {k: shed_after[k] - shed_before.get(k, 0) for k in shed_after}
        finally:
            stop_server(ours)
    finally:
        stop_server(baseline)
    return pairs_b, pairs_o, open_loop


def shed_counts(port: int) -> dict[str, float]:
    """Our server's own count of the predict requests it refused with 503, by reason (inflight | deadline)."""
    import httpx

    counts: dict[str, float] = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines():
        if line.startswith("mlops_serving_shed_requests_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            counts[reason] = float(line.rsplit(" ", 1)[1])
    return counts


def _median_pair(pairs_b: list[dict[str, Any]], pairs_o: list[dict[str, Any]]) -> tuple[int, list[float | None]]:
    """The index of the pair with the median p50 ratio (ours / baseline), and every pair's ratio."""
    ratios = [round(o["p50_ms"] / b["p50_ms"], 3) if b["p50_ms"] else None for b, o in zip(pairs_b, pairs_o,
                                                                                            strict=True)]
    ranked = sorted(range(len(ratios)), key=lambda i: float("inf") if (r := ratios[i]) is None else r)
    return ranked[len(ranked) // 2], ratios


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=["main", "ours", "baseline", "load"], default="main")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rate", type=float, default=1000.0, help="Open loop: requests per second, fixed arrivals.")
    p.add_argument("--duration", type=float, default=10.0, help="Measured seconds per run.")
    p.add_argument("--repeats", type=int, default=3,
                   help="Closed-loop pairs (baseline then ours); the pair with the median p50 ratio is reported.")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--max-requests", type=int, default=100_000)
    p.add_argument("--logging", choices=["off", "on"], default="off",
                   help="Access log and KServe's per-request latency trace, on both servers alike.")
    p.add_argument("--rows", type=int, default=6000, help="Transactions generated for the feature store.")
    p.add_argument("--root", dest="root_dir", type=Path)
    p.add_argument("--port", type=int)
    p.add_argument("--redis-port", type=int)
    p.add_argument("--path")
    p.add_argument("--bodies", type=Path)
    args = p.parse_args()
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    logging_on = args.logging == "on"
    if args.role == "ours":
        run_ours(args.root_dir, args.redis_port, args.port, args.root_dir / "model" / "1", logging_on)
        return
    if args.role == "baseline":
        run_baseline(args.port, args.root_dir / "model" / "1", logging_on)
        return
    if args.role == "load":
        bodies = [b.encode() for b in json.loads(args.bodies.read_text())]
        if "--rate" in sys.argv:
            result = asyncio.run(_open_loop(args.port, args.path, bodies, args.rate, args.duration, args.warmup))
        else:
            result = asyncio.run(_load(args.port, args.path, bodies, args.concurrency, args.duration,
                                       args.max_requests, args.warmup))
        print(json.dumps(result))
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
        pairs_b, pairs_o, open_loop = compare(args)
    finally:
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    mid, ratios = _median_pair(pairs_b, pairs_o)
    ours, baseline, ratio = pairs_o[mid], pairs_b[mid], ratios[mid]
    targets = {"rps_min": 2000, "p99_ms_max": 15.0, "errors": 0, "p50_vs_baseline_max": 1.3,
               "open_loop_rate": 1000, "open_loop_p99_ms_max": 20.0}
    met = {"rps": ours["rps"] >= 2000, "p99": ours["p99_ms"] <= 15.0,
           "errors": all(o["errors"] == 0 for o in pairs_o),
           "p50_vs_baseline": ratio is not None and ratio <= 1.3,
           "open_loop_p99": open_loop["p99_ms"] <= 20.0 and open_loop["errors"] == 0}
    print(json.dumps({"ours": ours, "baseline": baseline,
                      "open_loop": {k: open_loop[k] for k in ("rate", "rps", "p50_ms", "p99_ms", "errors",
                                                              "error_kinds", "shed_by_server", "connections",
                                                              "send_lag_p99_ms")},
                      "p50_ratio": ratio, "p50_ratios": ratios, "repeats": args.repeats,
                      "ours_p50s": [o["p50_ms"] for o in pairs_o], "baseline_p50s": [b["p50_ms"] for b in pairs_b],
                      "targets": targets, "met": met, "concurrency": args.concurrency,
                      "duration_s": args.duration, "logging": args.logging, "setup_s": round(setup_s, 1),
                      "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}))

if __name__ == "__main__":
    main()
