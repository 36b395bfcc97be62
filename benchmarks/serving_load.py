"""Load test, four arms in one run: the floor, ours (one process), ours split (transformer → predictor), the glue.

Everything runs on loopback in separate processes: a redis-server of its own on a free port, the servers of the
four arms (:mod:`serving_arms`: what each one is and why it is the fair comparison), and a load generator in a
process of its own (:mod:`serving_loadgen`). Arms:

- ``floor``: KServe's bare ``ModelServer`` scoring a pre-encoded tensor (no lookup, no validation, no log);
- ``ours``: ``mlops_serving`` with ``serving.tabular.role: all``: online features on Redis + encode + forward +
  prediction log;
- ``ours_split``: ``serving.tabular.role: transformer`` calling ``serving.tabular.role: predictor`` over HTTP (the
  InferenceService);
- ``glue``: a ``kserve.Model`` transformer calling ``FeatureStore.get_online_features(...).to_dict()`` per request,
  encoding, and calling the same predictor process over HTTP: what users write today.

All servers are up side by side; the closed-loop runs (``--concurrency`` connections, each sends its next request
when the last answer arrives) go arm after arm, the order rotated each of ``--repeats`` rounds, so a noisy machine
slows every arm alike; each figure is the median over rounds, and each ratio the median of the rounds' paired
ratios. Then an open loop per arm (fixed arrivals, latency counted from the scheduled send, so a slow answer
cannot hide the queue behind it) at ``--load-factor`` (80 %) of the floor's measured closed-loop capacity.
CPU per request: ``utime + stime`` of every server process of the arm over the measured window (``/proc``).
All servers log the same way (access log and KServe's latency trace off; ``--logging on`` turns both on for all).

``features.online_reader`` (the direct Redis reader) is set with ``--online-reader`` when this checkout's config
schema has the key; without the flag the schema's default serves; the JSON says which.

Targets: ours p50 ≤ 1.15 × the floor's and CPU per request ≤ 1.15 × the floor's; ours split ≥ 1.5 × the glue's
req/s at a p99 no worse than the glue's; 0 errors in every closed loop; open-loop p99 of ours ≤ 2 × the floor's at
the same offered rate. ``ours_profile``: where ours' time went over the closed-loop rounds, from its own stage
histograms (:func:`stage_profile`). Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import serving_arms
import serving_loadgen

ARMS = ("floor", "ours", "ours_split", "glue")
SERVERS = {"floor": ("floor",), "ours": ("ours",), "ours_split": ("transformer", "predictor"),
           "glue": ("glue", "predictor")}
"""The server processes of each arm, entry point first (its CPU is the sum of theirs)."""
READY = {"floor": "/v1/models/fraud", "glue": "/v1/models/fraud", "ours": "/v2/health/ready",
         "transformer": "/v2/health/ready", "predictor": "/v2/health/ready"}
TARGETS = {"ours_p50_vs_floor_max": 1.15, "ours_cpu_per_request_vs_floor_max": 1.15,
           "ours_split_rps_vs_glue_min": 1.5, "ours_split_p99_vs_glue_max": 1.0, "closed_loop_errors": 0,
           "open_loop_ours_p99_vs_floor_max": 2.0}
FIGURES = ("rps", "p50_ms", "p95_ms", "p99_ms", "cpu_ms_per_request")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, path: str, server: subprocess.Popen[bytes], timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {server.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server on port {port} not ready after {timeout} s")


class Servers:
    """The server processes of a run, by role; each one's stderr goes to ``<root>/<role>.err``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ports = {role: free_port() for role in READY}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, *roles: str) -> None:
        """Start ``roles`` at once, then wait until each is ready (start-up dominates: imports of torch, feast)."""
        a = self.args
        for role in roles:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--role", role, "--root", str(a.root_dir),
                   "--port", str(self.ports[role]), "--redis-port", str(a.redis_port), "--logging", a.logging,
                   "--predictor-port", str(self.ports["predictor"]),
                   "--predictor-deadline-ms", str(a.predictor_deadline_ms)]
            if a.online_reader:
                cmd += ["--online-reader", a.online_reader]
            with (a.root_dir / f"{role}.err").open("w") as err:
                # os.environ passes on: PYTHONPATH keeps a worktree's packages in the server too
                self.procs[role] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=os.environ)
        for role in roles:
            try:
                wait_ready(self.ports[role], READY[role], self.procs[role], timeout=300.0)
            except RuntimeError:
                sys.stderr.write((a.root_dir / f"{role}.err").read_text()[-3000:])
                raise

    def pids(self, arm: str) -> list[int]:
        return [self.procs[role].pid for role in SERVERS[arm]]

    def port(self, arm: str) -> int:
        return self.ports[SERVERS[arm][0]]

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def run_load(servers: Servers, arm: str, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """One load run on ``arm`` (closed loop, or open loop with ``--rate``) in a process of its own; its summary."""
    bodies = args.root_dir / ("encoded.json" if arm == "floor" else "entity.json")
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--role", "load", "--port",
                          str(servers.port(arm)), "--path", "/v1/models/fraud:predict", "--bodies", str(bodies),
                          "--duration", str(args.duration), "--warmup", str(args.warmup),
                          "--pids", ",".join(map(str, servers.pids(arm))), *extra],
                         capture_output=True, text=True, timeout=args.duration + args.warmup + 120, env=os.environ)
    if out.returncode != 0:
        raise RuntimeError(f"load run on {arm} failed: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def shed_counts(port: int) -> dict[str, float]:
    """Our server's own count of the predict requests it refused with 503, by reason (inflight | deadline)."""
    import httpx

    counts: dict[str, float] = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines():
        if line.startswith("mlops_serving_shed_requests_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            counts[reason] = float(line.rsplit(" ", 1)[1])
    return counts


PROFILED = {"feature_lookup": "mlops_serving_feature_lookup_seconds", "predict": "mlops_serving_predict_seconds",
            "in_model": "mlops_serving_request_seconds"}
"""Our server's own stage histograms: the store call and encode + forward per micro-batch, the whole request
inside the model (validate, lookup, predict) per request."""


def stage_sums(port: int) -> dict[str, tuple[float, float]]:
    """``(sum of seconds, count)`` of each :data:`PROFILED` histogram, over every label set, from ``/metrics``."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {name: key for key, name in PROFILED.items()}
    out = {key: (0.0, 0.0) for key in PROFILED}
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        key = wanted.get(family.name)
        if key is None:
            continue
        for sample in family.samples:
            total, count = out[key]
            if sample.name.endswith("_sum"):
                out[key] = (total + sample.value, count)
            elif sample.name.endswith("_count"):
                out[key] = (total, count + sample.value)
    return out


def stage_profile(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Where a request's time went inside our one-process server over the closed-loop rounds: mean milliseconds
    per micro-batch of the store call and of encode + forward, mean requests per batch, and the mean time a
    request spent inside the model (what is left of the client's latency is HTTP, the event loop and queueing)."""
    delta = {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in PROFILED}
    batches, requests = delta["predict"][1], delta["in_model"][1]

    def mean_ms(key: str) -> float | None:
        total, count = delta[key]
        return round(1000.0 * total / count, 4) if count else None

    return {"batches": int(batches), "requests": int(requests),
            "requests_per_batch": round(requests / batches, 2) if batches else None,
            "feature_lookup_ms_per_batch": mean_ms("feature_lookup"), "predict_ms_per_batch": mean_ms("predict"),
            "in_model_ms_per_request": mean_ms("in_model")}


def measure(servers: Servers, args: argparse.Namespace
            ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], dict[str, Any]]:
    """Closed-loop rounds (arm order rotated each round), then one open loop per arm at the floor's load factor;
    also ours' :func:`stage_profile` over the closed-loop rounds."""
    closed = ["--concurrency", str(args.concurrency), "--max-requests", str(args.max_requests)]
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    before = stage_sums(servers.port("ours"))
    for r in range(args.repeats):
        for arm in ARMS[r % len(ARMS):] + ARMS[: r % len(ARMS)]:
            runs[arm].append(run_load(servers, arm, args, closed))
    # over the closed-loop rounds, warm-ups included (the server cannot tell them apart)
    profile = stage_profile(before, stage_sums(servers.port("ours")))
    capacity = statistics.median(run["rps"] for run in runs["floor"])
    rate = args.rate or round(args.load_factor * capacity, 1)
    open_loop: dict[str, Any] = {"rate": rate, "floor_capacity_rps": capacity, "load_factor": args.load_factor}
    for arm in ARMS:
        ours_kind = arm in ("ours", "ours_split")
        shed_before = shed_counts(servers.port(arm)) if ours_kind else {}
        result = run_load(servers, arm, args, ["--rate", str(rate)])
        if ours_kind:
            after = shed_counts(servers.port(arm))
            result["shed_by_server"] = {k: after[k] - shed_before.get(k, 0) for k in after}
        open_loop[arm] = {k: result[k] for k in ("rps", "p50_ms", "p99_ms", "errors", "error_kinds",
                                                 "cpu_ms_per_request", "connections", "send_lag_p99_ms",
                                                 "shed_by_server") if k in result}
    return runs, open_loop, profile


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b and a == a and b == b else None


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(statistics.median(kept), 3) if kept else None


def report(runs: dict[str, list[dict[str, Any]]], open_loop: dict[str, Any]) -> dict[str, Any]:
    """Medians per arm, paired ratios per round (their median), targets and verdicts."""
    arms = {}
    for arm, rs in runs.items():
        arms[arm] = {k: round(statistics.median(r[k] for r in rs), 4) for k in FIGURES}
        arms[arm].update(errors=sum(r["errors"] for r in rs), requests=sum(r["requests"] for r in rs),
                         error_kinds=[r["error_kinds"] for r in rs if r["error_kinds"]],
                         rounds={k: [r[k] for r in rs] for k in FIGURES})

    def paired(a: str, b: str, key: str) -> list[float | None]:
        return [_ratio(x[key], y[key]) for x, y in zip(runs[a], runs[b], strict=True)]

    rounds = {"ours_p50_vs_floor": paired("ours", "floor", "p50_ms"),
              "ours_cpu_per_request_vs_floor": paired("ours", "floor", "cpu_ms_per_request"),
              "ours_rps_vs_floor": paired("ours", "floor", "rps"),
              "ours_split_rps_vs_glue": paired("ours_split", "glue", "rps"),
              "ours_split_p99_vs_glue": paired("ours_split", "glue", "p99_ms"),
              "ours_split_cpu_per_request_vs_glue": paired("ours_split", "glue", "cpu_ms_per_request"),
              "glue_cpu_per_request_vs_floor": paired("glue", "floor", "cpu_ms_per_request")}
    ratios: dict[str, Any] = {k: _median(v) for k, v in rounds.items()}
    ratios["open_loop_ours_p99_vs_floor"] = _ratio(open_loop["ours"]["p99_ms"], open_loop["floor"]["p99_ms"])
    ratios["rounds"] = rounds

    def within(key: str, bound: float, *, at_least: bool = False) -> bool:
        value = ratios[key]
        return value is not None and (value >= bound if at_least else value <= bound)

    t = TARGETS
    met = {"ours_p50_vs_floor": within("ours_p50_vs_floor", t["ours_p50_vs_floor_max"]),
           "ours_cpu_per_request_vs_floor": within("ours_cpu_per_request_vs_floor",
                                                   t["ours_cpu_per_request_vs_floor_max"]),
           "ours_split_rps_vs_glue": within("ours_split_rps_vs_glue", t["ours_split_rps_vs_glue_min"], at_least=True),
           "ours_split_p99_vs_glue": within("ours_split_p99_vs_glue", t["ours_split_p99_vs_glue_max"]),
           "closed_loop_errors": all(a["errors"] == 0 for a in arms.values()),
           "open_loop_ours_p99_vs_floor": within("open_loop_ours_p99_vs_floor", t["open_loop_ours_p99_vs_floor_max"])
           and open_loop["ours"]["errors"] == 0}
    return {"arms": arms, "open_loop": open_loop, "ratios": ratios, "targets": TARGETS, "met": met}


def serve_role(args: argparse.Namespace) -> None:
    """Run one server (``--role``) in this process until terminated."""
    root, logging_on = args.root_dir, args.logging == "on"
    if args.role == "floor":
        serving_arms.run_floor(root, args.port, logging_on)
    elif args.role == "ours":
        serving_arms.run_ours(root, args.redis_port, args.port, logging_on, args.online_reader)
    elif args.role == "transformer":
        serving_arms.run_ours(root, args.redis_port, args.port, logging_on, args.online_reader, args.predictor_port)
    elif args.role == "predictor":
        serving_arms.run_predictor(root, args.port, logging_on, args.predictor_deadline_ms)
    elif args.role == "glue":
        serving_arms.run_glue(root, args.redis_port, args.port, args.predictor_port, logging_on)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=["main", "load", *READY], default="main")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration", type=float, default=10.0, help="Measured seconds per run.")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=3, help="Closed-loop rounds over the four arms; medians reported.")
    p.add_argument("--load-factor", type=float, default=0.8,
                   help="Open loop: offered rate as a share of the floor's median closed-loop req/s.")
    p.add_argument("--rate", type=float, default=0.0, help="Open loop: a fixed offered rate instead (req/s).")
    p.add_argument("--max-requests", type=int, default=100_000)
    p.add_argument("--logging", choices=["off", "on"], default="off",
                   help="Access log and KServe's per-request latency trace, on every server alike.")
    p.add_argument("--rows", type=int, default=6000, help="Transactions generated for the feature store.")
    p.add_argument("--online-reader", choices=["direct", "feast"],
                   help="features.online_reader of ours and ours_split (only where the config schema has the key).")
    p.add_argument("--predictor-deadline-ms", type=float, default=60_000.0,
                   help="serving.request_deadline_ms of the predictor behind ours_split and the glue (see "
                        "serving_arms.run_predictor; 250 is the platform's default).")
    p.add_argument("--keep", action="store_true", help="Keep the run's folder (the servers' logs) and print its path.")
    p.add_argument("--quick", action="store_true", help="Smoke run: 1 round of 1 s, 0.5 s warm-up, 2,000 rows.")
    p.add_argument("--root", dest="root_dir", type=Path)
    p.add_argument("--port", type=int)
    p.add_argument("--redis-port", type=int)
    p.add_argument("--predictor-port", type=int)
    p.add_argument("--path")
    p.add_argument("--bodies", type=Path)
    p.add_argument("--pids", default="")
    args = p.parse_args()
    if args.quick:
        args.repeats, args.duration, args.warmup, args.rows = 1, 1.0, 0.5, 2000
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    if not 0 < args.load_factor <= 2:
        p.error(f"--load-factor must be in (0, 2], got {args.load_factor}")
    if args.online_reader and args.role == "main" and not serving_arms.reader_key_exists():
        p.error(f"--online-reader {args.online_reader!r}: this checkout's config has no features.online_reader key")
    return args


def main() -> None:
    args = parse_args()
    if args.role == "load":
        bodies = [b.encode() for b in json.loads(args.bodies.read_text())]
        pids = [int(p) for p in args.pids.split(",") if p]
        if "--rate" in sys.argv:
            result = asyncio.run(serving_loadgen.open_loop(args.port, args.path, bodies, args.rate, args.duration,
                                                           args.warmup, pids))
        else:
            result = asyncio.run(serving_loadgen.closed_loop(args.port, args.path, bodies, args.concurrency,
                                                             args.duration, args.max_requests, args.warmup, pids))
        print(json.dumps(result))
        return
    if args.role != "main":
        serve_role(args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="serving-load-"))
    args.root_dir, args.redis_port = tmp, free_port()
    redis = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(args.redis_port),
                              "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp)],
                             stdout=subprocess.DEVNULL)
    servers = Servers(args)
    try:
        time.sleep(0.5)
        t0 = time.perf_counter()
        prepared = serving_arms.prepare(tmp, args.redis_port, args.rows)
        (tmp / "entity.json").write_text(json.dumps(prepared["entity"]))
        (tmp / "encoded.json").write_text(json.dumps(prepared["encoded"]))
        setup_s = time.perf_counter() - t0
        servers.start("floor", "ours", "predictor")
        servers.start("transformer", "glue")  # both read the predictor's model at load
        runs, open_loop, profile = measure(servers, args)
    finally:
        servers.stop()
        redis.terminate()
        redis.wait(10)
        if args.keep:
            sys.stderr.write(f"kept {tmp}\n")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    reader = args.online_reader or ("schema default" if serving_arms.reader_key_exists()
                                    else "feast (no features.online_reader key)")
    print(json.dumps({**report(runs, open_loop), "ours_profile": profile, "online_reader": reader,
                      "repeats": args.repeats,
                      "predictor_deadline_ms": args.predictor_deadline_ms,
                      "concurrency": args.concurrency, "duration_s": args.duration, "logging": args.logging,
                      "setup_s": round(setup_s, 1), "cpus": os.cpu_count(),
                      "load_avg_1m": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
