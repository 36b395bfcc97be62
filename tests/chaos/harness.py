"""Fault injection against real processes: each scenario SIGKILLs (or stops) a real process at a point drawn
from a seed, recovers the way an operator or the next run would, and checks what survived.

Each scenario returns one record ``{"fault", "injected", "survived", "lost_rows", "lost_versions", "recovery_s",
"detail"}``: ``injected`` says the fault really hit (the process died at the drawn point), ``lost_rows`` counts
rows that had been acknowledged as durable (written by a step that returned, answered to a client) and are
missing after recovery, ``lost_versions`` registered model versions missing, ``recovery_s`` the time from the
fault to the verified recovered state. Used by ``tests/chaos`` (few seeds) and ``benchmarks/chaos.py`` (more).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support import RedisServer, free_port, python_module

REPO = Path(__file__).resolve().parents[2]
LOCK_TTL_S = 2.0  # the registry lock's TTL in these scenarios (60 s by default): a dead holder's lock expires fast


def record(fault: str, *, injected: bool, survived: bool, lost_rows: int = 0, lost_versions: int = 0,
           recovery_s: float = 0.0, detail: str = "") -> dict[str, Any]:
    return {"fault": fault, "injected": injected, "survived": survived, "lost_rows": lost_rows,
            "lost_versions": lost_versions, "recovery_s": round(recovery_s, 3), "detail": detail}


def kill_point(scenario: str, seed: int, points: int) -> int:
    """The kill point (1..``points``) of ``seed``: seeds 1..points take every point once, in an order drawn at
    random per scenario, so a few seeds cover every step and any seed count stays reproducible."""
    order = list(range(1, points + 1))
    random.Random(scenario).shuffle(order)
    return order[(seed - 1) % points]


# ---------------------------------------------------------------------------------------------- registry
# In the worker, every registry write of the move is a step: the ledger entry written pending, each alias set
# or deleted, the entry marked applied. The worker SIGKILLs itself right after step ``kill_after``.
REGISTRY_WORKER = textwrap.dedent(
    """
    import functools, os, signal, sys
    from pathlib import Path
    from mlflow.tracking import MlflowClient
    import mlops_core.lifecycle as lc
    from mlops_config import TrackingConfig
    from mlops_core.ledger import TAG_PREFIX
    from mlops_core.registry_lock import registry_lock

    root, op, kill_after, ttl = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    lc.registry_lock = functools.partial(registry_lock, ttl_s=ttl)
    steps = 0

    def step(fn, counts):
        def wrapped(self, *args, **kwargs):
            global steps
            out = fn(self, *args, **kwargs)
            if counts(args):
                steps += 1
                print(f"step {steps}", flush=True)
                if steps == kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)
            return out
        return wrapped

    MlflowClient.set_registered_model_tag = step(MlflowClient.set_registered_model_tag,
                                                 lambda a: a[0] == "fraud" and str(a[1]).startswith(TAG_PREFIX))
    MlflowClient.set_registered_model_alias = step(MlflowClient.set_registered_model_alias, lambda a: a[0] == "fraud")
    MlflowClient.delete_registered_model_alias = step(MlflowClient.delete_registered_model_alias,
                                                      lambda a: a[0] == "fraud")
    tracking = TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="mlartifacts")
    if op == "promote":
        lc.promote(tracking, root, "fraud", "2", "champion", reason="chaos", actor="chaos", required_gates={})
    else:
        lc.restore_champion(tracking, root, "fraud", reason="chaos", actor="chaos", replacing="2", to_version="1")
    print("done", flush=True)
    """
)
REGISTRY_STEPS = {"promote": 5, "rollback": 4}
"""Registry writes of each move: promote canary → champion (pending, champion, fallback, canary deleted, applied);
rollback (pending, champion, fallback deleted, applied)."""


def _tracking() -> Any:
    from mlops_config import TrackingConfig

    return TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="mlartifacts")


def _short_lock() -> Callable[[], None]:
    """Give this process's lifecycle moves the scenario's lock TTL; returns the undo."""
    import mlops_core.lifecycle as lc
    from mlops_core.registry_lock import registry_lock

    original = lc.registry_lock
    lc.registry_lock = functools.partial(registry_lock, ttl_s=LOCK_TTL_S)

    def undo() -> None:
        lc.registry_lock = original

    return undo


def _seed_registry(root: Path, op: str) -> None:
    """v1 champion and v2 canary (promote), or v2 champion with v1 fallback (rollback), every move journalled."""
    from mlops_core import lifecycle as lc
    from mlops_core.tracking import mlflow_client

    tracking = _tracking()
    client = mlflow_client(tracking, root)
    client.create_registered_model("fraud")
    for v in (1, 2):
        client.create_model_version("fraud", source=(root / f"model-{v}").as_uri())
    for to in ("candidate", "staging", "canary", "champion"):
        lc.promote(tracking, root, "fraud", "1", to, reason="seed", actor="chaos", required_gates={})
    for to in ("candidate", "staging", "canary", *(("champion",) if op == "rollback" else ())):
        lc.promote(tracking, root, "fraud", "2", to, reason="seed", actor="chaos", required_gates={})


def registry_fault(op: str, seed: int, workdir: Path) -> dict[str, Any]:
    """SIGKILL a promotion (v2 canary → champion) or a rollback (champion v2 → v1) after a random registry write.

    Recovery is the operator's retry of the same command: it waits out the dead holder's lock, rolls the
    pending entry forward, and either finds the move done or makes it. Survived: exactly the intended champion,
    no pending entry, the ledger's replay equals the live aliases, both versions still registered.
    """
    from mlops_core import lifecycle as lc
    from mlops_core.ledger import aliases_at, read_entries
    from mlops_core.tracking import mlflow_client

    kill_after = kill_point(op, seed, REGISTRY_STEPS[op])
    root = workdir / f"registry-{op}-{seed}"
    root.mkdir(parents=True)
    cwd = os.getcwd()
    os.chdir(root)  # the sqlite URI is relative to the working directory, for the worker and for us
    undo = _short_lock()
    try:
        _seed_registry(root, op)
        proc = subprocess.run([sys.executable, "-c", REGISTRY_WORKER, str(root), op, str(kill_after), str(LOCK_TTL_S)],
                              cwd=root, capture_output=True, text=True, timeout=300)
        killed = proc.returncode == -signal.SIGKILL
        steps = proc.stdout.count("step ")
        t0 = time.monotonic()
        tracking = _tracking()
        try:
            if op == "promote":
                lc.promote(tracking, root, "fraud", "2", "champion", reason="chaos retry", actor="chaos",
                           required_gates={})
            else:
                lc.restore_champion(tracking, root, "fraud", reason="chaos retry", actor="chaos", replacing="2",
                            to_version="1")
        except lc.LifecycleError as exc:
            if "already is 'champion'" not in str(exc):
                raise
        recovery_s = time.monotonic() - t0
        client = mlflow_client(tracking, root)
        registered = client.get_registered_model("fraud")
        live = {a: str(v) for a, v in registered.aliases.items()}
        entries = read_entries(registered.tags)
        versions = {str(v.version) for v in client.search_model_versions("name = 'fraud'")}
        want = {"champion": "2", "fallback": "1"} if op == "promote" else {"champion": "1"}
        problems = []
        if {a: live.get(a) for a in ("champion", "fallback")} != {a: want.get(a) for a in ("champion", "fallback")}:
            problems.append(f"aliases {live}, expected {want}")
        if any(e.status != "applied" for e in entries):
            problems.append("a ledger entry is still pending")
        if aliases_at(entries, None) != live:
            problems.append(f"ledger replay {aliases_at(entries, None)} != live {live}")
        lost = len({"1", "2"} - versions)
        return record(f"sigkill_{op}", injected=killed and steps == kill_after, survived=not problems and not lost,
                      lost_versions=lost, recovery_s=recovery_s,
                      detail=f"killed after write {kill_after}/{REGISTRY_STEPS[op]}; " + "; ".join(problems))
    finally:
        undo()
        os.chdir(cwd)


# ---------------------------------------------------------------------------------------------- data gate
# The worker validates the batches and SIGKILLs itself inside its ``kill_at``-th parquet write, half of the
# temporary file on disk: a crash in the middle of writing a file readers trust.
GATE_WORKER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import pyarrow.parquet as pq
    from mlops_config import DataConfig
    from mlops_features.gate import validate_batches
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

    root, kill_at = Path(sys.argv[1]), int(sys.argv[2])
    original, calls = pq.write_table, 0

    def dying_write(table, where, *args, **kwargs):
        global calls
        calls += 1
        original(table, where, *args, **kwargs)
        if calls == kill_at:
            size = os.path.getsize(where)
            with open(where, "r+b") as f:
                f.truncate(size // 2)
            print("killing", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    pq.write_table = dying_write
    data = DataConfig(validated_dir="data/validated", quarantine_dir="data/quarantine")
    validate_batches(sorted((root / "raw").glob("*.parquet")), data, root, contract=FRAUD_CONTRACT)
    print("done", flush=True)
    """
)


def _raw_batches(root: Path, seed: int) -> int:
    """Raw batches, some rows broken (negative amounts, unknown currency), one batch truncated; input rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mlops_features import generate_transactions

    raw = root / "raw"
    paths = generate_transactions(raw, rows=600, days=3, seed=seed, users=60, merchants=20)
    rng = random.Random(seed)
    total = 0
    for p in paths[:2]:
        table = pq.read_table(p)
        amounts = table.column("amount").to_pylist()
        for i in rng.sample(range(len(amounts)), 5):
            amounts[i] = -1.0
        table = table.set_column(table.schema.get_field_index("amount"), "amount",
                                 pa.array(amounts, table.schema.field("amount").type))
        pq.write_table(table, p)
        total += table.num_rows
    broken = paths[2]
    rows = pq.read_metadata(broken).num_rows
    broken.write_bytes(broken.read_bytes()[: broken.stat().st_size // 3])
    return total + (rows if _footer_rows(broken) else 0)


def _footer_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    try:
        return int(pq.read_metadata(path).num_rows)
    except Exception:  # a truncated file has no footer: the gate counts it as 0 rows
        return 0


def gate_fault(seed: int, workdir: Path) -> dict[str, Any]:
    """SIGKILL the validation gate inside a random one of its parquet writes, then rerun it.

    Survived: every ``*.parquet`` a reader globs in the accepted and quarantine areas opens whole (before the
    rerun too), and after the rerun accepted + quarantined rows = input rows, per the files themselves.
    """
    import pyarrow.parquet as pq

    from mlops_config import DataConfig
    from mlops_features.gate import validate_batches
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

    root = workdir / f"gate-{seed}"
    root.mkdir(parents=True)
    expected = _raw_batches(root, seed)
    kill_at = kill_point("gate", seed, 4)  # two accepted files and two quarantined-row files are written
    proc = subprocess.run([sys.executable, "-c", GATE_WORKER, str(root), str(kill_at)], capture_output=True,
                          text=True, timeout=600)
    killed = proc.returncode == -signal.SIGKILL
    t0 = time.monotonic()
    problems = []
    visible = [*(root / "data/validated").glob("*.parquet"), *(root / "data/quarantine").glob("*.parquet")]
    for p in visible:
        try:
            pq.read_table(p)
        except Exception as exc:  # anything unreadable that a reader would pick up is the failure looked for
            problems.append(f"torn file visible: {p.name}: {exc}")
    data = DataConfig(validated_dir="data/validated", quarantine_dir="data/quarantine")
    summary = validate_batches(sorted((root / "raw").glob("*.parquet")), data, root, contract=FRAUD_CONTRACT)
    accepted = sum(pq.read_metadata(p).num_rows for p in (root / "data/validated").glob("*.parquet"))
    quarantined = sum(pq.read_metadata(p).num_rows for p in (root / "data/quarantine").glob("*.rows.parquet"))
    rejected_whole = sum(b.input_rows for b in summary.batches if b.batch_rejected)
    lost = expected - (accepted + quarantined + rejected_whole)
    if lost:
        problems.append(f"accepted {accepted} + quarantined {quarantined} + rejected {rejected_whole} != {expected}")
    return record("sigkill_validation", injected=killed, survived=not problems, lost_rows=abs(lost),
                  recovery_s=time.monotonic() - t0, detail=f"killed in write {kill_at}; " + "; ".join(problems))


# ---------------------------------------------------------------------------------------------- prediction log
# The worker appends request rows and flushes; each flush that returns prints its rows (acknowledged as durable).
# It SIGKILLs itself in the middle of a random part write (half the temporary file on disk).
LOG_WORKER = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    import pyarrow.parquet as pq
    from mlops_serving.prediction_log import PredictionLogWriter, log_rows

    store, kill_at = Path(sys.argv[1]), int(sys.argv[2])
    original, calls = pq.write_table, 0

    def dying_write(table, where, *args, **kwargs):
        global calls
        calls += 1
        original(table, where, *args, **kwargs)
        if calls == kill_at:
            name = getattr(where, "name", where)
            if isinstance(name, str) and os.path.exists(name):
                with open(name, "r+b") as f:
                    f.truncate(os.path.getsize(name) // 2)
            os.kill(os.getpid(), signal.SIGKILL)

    pq.write_table = dying_write
    writer = PredictionLogWriter(store, "fraud", flush_s=3600, max_queue=100000)
    for batch in range(12):
        ids = []
        for i in range(25):
            rid = f"r{batch}-{i}"
            ids.append(rid)
            writer.append(log_rows(request_id=rid, ts=time.time(), model_name="fraud", model_version="1",
                                   variant="stable", rows=[{"user_id": "u", "merchant_id": "m", "amount": 1.0}],
                                   features=[{}], scores=[0.5], degraded=False, latency_ms=1.0))
        writer.flush()
        print("acked " + " ".join(ids), flush=True)
    print("done", flush=True)
    """
)


def prediction_log_fault(seed: int, workdir: Path) -> dict[str, Any]:
    """SIGKILL the prediction-log writer in the middle of a random part write.

    Survived: the log reads back (no torn part visible) and holds every row of every flush that returned. The
    rows of the flush that was killed were never acknowledged: the documented loss bound (at most one flush
    interval, ``serving.prediction_log_flush_s``), reported in ``detail``, not counted as lost.
    """
    from mlops_serving import read_prediction_log

    store = workdir / f"predlog-{seed}"
    kill_at = kill_point("log", seed, 12)
    proc = subprocess.run([sys.executable, "-c", LOG_WORKER, str(store), str(kill_at)], capture_output=True,
                          text=True, timeout=300)
    killed = proc.returncode == -signal.SIGKILL
    acked = {rid for line in proc.stdout.splitlines() if line.startswith("acked ") for rid in line.split()[1:]}
    t0 = time.monotonic()
    problems = []
    try:
        frame = read_prediction_log(store, "fraud")
        present = set(frame["request_id"]) if len(frame) else set()
    except Exception as exc:  # a torn part would make the reader fail: that is the failure looked for
        problems.append(f"log unreadable after the kill: {exc}")
        present = set()
    lost = len(acked - present)
    if lost:
        problems.append(f"{lost} acknowledged rows missing")
    return record("sigkill_prediction_log_flush", injected=killed, survived=not problems, lost_rows=lost,
                  recovery_s=time.monotonic() - t0,
                  detail=f"killed in part write {kill_at}; the killed flush's 25 rows were never acknowledged (the "
                         "documented loss bound); " + "; ".join(problems))


# ---------------------------------------------------------------------------------------------- redis under load
def _serving_kit() -> Any:
    path = REPO / "tests/integration/serving/conftest.py"
    if "chaos_serving_kit" not in sys.modules:
        spec = importlib.util.spec_from_file_location("chaos_serving_kit", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["chaos_serving_kit"] = module
        spec.loader.exec_module(module)
    return sys.modules["chaos_serving_kit"]


def redis_fault(seed: int, workdir: Path) -> dict[str, Any]:
    """SIGKILL the online store (a redis-server of our own) under a steady request load, restart it after a
    random outage, re-materialise, keep the load on.

    Survived: every request answered (200: degraded while the store is down, as documented), answers are
    undegraded again after the restart, and the prediction log holds one row per answered request (nothing
    lost). ``recovery_s``: from the restart to the first undegraded answer.
    """
    import httpx

    from mlops_serving import read_prediction_log

    kit = _serving_kit()
    rng = random.Random(seed)
    root = workdir / f"redis-{seed}"
    root.mkdir(parents=True)
    own = RedisServer(root)
    own.start()
    source = kit.RedisHashFeatures(own.url, "f:")
    source.write()
    server = kit.start_server(kit.make_app(root, source), root / "predlog")
    answers: list[tuple[int, bool, float]] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            i = 0
            while not stop.is_set():
                r = client.post("/v1/models/fraud:predict", json={"instances": [kit.instance(i)]})
                degraded = r.status_code == 200 and bool(r.json()["degraded"])
                answers.append((r.status_code, degraded, time.monotonic()))
                i += 1
                time.sleep(0.01)

    threads = [threading.Thread(target=load, daemon=True) for _ in range(2)]
    recovery_s = float("nan")
    try:
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.3, 1.5))
        own.kill()
        time.sleep(rng.uniform(0.5, 2.0))
        own.start()
        restarted = time.monotonic()
        source.write()
        deadline = restarted + 20
        while time.monotonic() < deadline:
            if any(t >= restarted and not d and s == 200 for s, d, t in list(answers)):
                recovery_s = min(t for s, d, t in list(answers) if t >= restarted and not d and s == 200) - restarted
                break
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        server.stop()
        own.kill()
    statuses = [s for s, _, _ in answers]
    degraded = sum(1 for _, d, _ in answers if d)
    ok = statuses.count(200)
    logged = len(read_prediction_log(root / "predlog", "fraud"))
    problems = []
    if ok != len(statuses):
        problems.append(f"non-200 answers: {sorted(set(statuses) - {200})}")
    if not degraded:
        problems.append("no degraded answer: the outage was not seen")
    if recovery_s != recovery_s:
        problems.append("no undegraded answer within 20 s of the restart")
    if logged != ok:
        problems.append(f"prediction log holds {logged} rows for {ok} answers")
    return record("redis_killed_under_load", injected=degraded > 0, survived=not problems,
                  lost_rows=max(0, ok - logged), recovery_s=0.0 if recovery_s != recovery_s else recovery_s,
                  detail=f"{ok} answered, {degraded} degraded; " + "; ".join(problems))


# ---------------------------------------------------------------------------------------------- overload
OVERLOAD_SERVER = textwrap.dedent(
    """
    import importlib.util, sys
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("serving_kit", sys.argv[1])
    kit = sys.modules["serving_kit"] = importlib.util.module_from_spec(spec); spec.loader.exec_module(kit)
    from mlops_serving.server import run_app
    root = Path(sys.argv[2])
    source = kit.RedisHashFeatures(sys.argv[3], "f:")
    source.write()
    run_app(kit.make_app(root, source), "127.0.0.1", int(sys.argv[4]))
    """
)


async def _closed_loop(port: int, body: bytes, clients: int, seconds: float, *, honour: bool = False
                       ) -> list[tuple[int, float, bool]]:
    """``clients`` keep-alive connections sending back to back: (status, latency s, Retry-After present).

    ``honour``: a client told 503 + Retry-After waits that long before its next request (a well-behaved client
    or proxy); otherwise it retries at once (a retry storm)."""
    import asyncio

    request = (f"POST /v1/models/fraud:predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    out: list[tuple[int, float, bool]] = []
    stop = time.monotonic() + seconds

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.monotonic() < stop:
                t0 = time.monotonic()
                writer.write(request)
                status = int((await reader.readline()).split()[1])
                length, retry, wait = 0, False, 0.0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    low = line.lower()
                    if low.startswith(b"content-length:"):
                        length = int(line[15:])
                    if low.startswith(b"retry-after:"):
                        retry = True
                        wait = float(line[12:])
                await reader.readexactly(length)
                out.append((status, time.monotonic() - t0, retry))
                if honour and status == 503 and retry:
                    await asyncio.sleep(min(wait, max(0.0, stop - time.monotonic())))
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(clients)), return_exceptions=True)
    return out


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(p * len(values)))] * 1000, 1) if values else float("nan")


def _admitted_within(port: int, objective_s: float, since: Any = None) -> tuple[float, Any]:
    """Share of admitted requests the server answered within ``objective_s`` (its admitted-latency histogram),
    counting from the histogram state ``since`` (as returned before); returns the share and the state."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    buckets = {}
    for family in text_string_to_metric_families(text):
        if family.name == "mlops_serving_admitted_seconds":
            buckets = {float(s.labels["le"]): s.value for s in family.samples if s.name.endswith("_bucket")}
    base = since or {}
    total = buckets.get(float("inf"), 0.0) - base.get(float("inf"), 0.0)
    inside = buckets.get(objective_s, 0.0) - base.get(objective_s, 0.0)
    return (inside / total if total else 0.0), buckets


def overload_fault(seed: int, workdir: Path, *, seconds: float = 20.0, clients: int = 512) -> dict[str, Any]:
    """``clients`` closed-loop connections (far past the capacity measured at 16) against a server process for
    ``seconds``: admitted answers within the latency objective (``serving.request_deadline_ms``, 250 ms), the
    rest 503 + Retry-After, memory bounded, and full throughput again within 5 s of the load stopping."""
    import asyncio

    import httpx
    import psutil

    from mlops_config import ServingConfig

    objective_ms = ServingConfig().request_deadline_ms
    root = workdir / f"overload-{seed}"
    root.mkdir(parents=True)
    own = RedisServer(root)
    own.start()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", OVERLOAD_SERVER, str(REPO / "tests/integration/serving/conftest.py"),
                             str(root), own.url, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("overload server did not get ready")
            time.sleep(0.2)
        kit = _serving_kit()
        body = json.dumps({"instances": [kit.instance(seed)]}).encode()
        base = asyncio.run(_closed_loop(port, body, 16, 3.0))
        base_rps = sum(1 for s, _, _ in base if s == 200) / 3.0
        rss0 = psutil.Process(proc.pid).memory_info().rss
        storm = asyncio.run(_closed_loop(port, body, clients, seconds / 2))
        storm_within, _ = _admitted_within(port, objective_ms / 1000.0)
        _, before = _admitted_within(port, objective_ms / 1000.0)
        over = asyncio.run(_closed_loop(port, body, clients, seconds / 2, honour=True))
        rss1 = psutil.Process(proc.pid).memory_info().rss
        stopped = time.monotonic()
        within, _ = _admitted_within(port, objective_ms / 1000.0, since=before)
        recovery_s = float("nan")
        while time.monotonic() - stopped < 30:
            window = asyncio.run(_closed_loop(port, body, 16, 1.0))
            if sum(1 for s, _, _ in window if s == 200) >= 0.8 * base_rps and all(s == 200 for s, _, _ in window):
                recovery_s = time.monotonic() - stopped
                break
    finally:
        proc.terminate()
        proc.wait(20)
        own.kill()
    ok = [lat for s, lat, _ in over if s == 200]
    storm_ok = [lat for s, lat, _ in storm if s == 200]
    storm_shed = sum(1 for s, _, _ in storm if s == 503)
    over = over + storm
    shed = [lat for s, lat, _ in over if s == 503]
    problems = []
    if any(s not in (200, 503) for s, _, _ in over):
        problems.append(f"other statuses: {sorted({s for s, _, _ in over} - {200, 503})}")
    if not all(r for s, _, r in over if s == 503):
        problems.append("a 503 without Retry-After")
    if within < 0.99:
        problems.append(f"only {within:.1%} of admitted requests answered within the {objective_ms} ms objective")
    if rss1 - rss0 > 200 * 2**20:
        problems.append(f"memory grew {(rss1 - rss0) / 2**20:.0f} MiB under overload")
    if not recovery_s <= 5.0:
        problems.append(f"throughput not back within 5 s ({recovery_s})")
    half = seconds / 2
    admitted_n = int(sum(1 for _ in ok))
    detail = (f"capacity {base_rps:.0f} req/s at 16 clients (p99 {_pct([lat for s, lat, _ in base if s == 200], 0.99)}"
              f" ms); {clients} clients ignoring Retry-After for {half:.0f} s: {len(storm_ok) / half:.0f} admitted "
              f"req/s, client p99 {_pct(storm_ok, 0.99)} ms, {storm_within:.1%} within {objective_ms:.0f} ms in the "
              f"server, {storm_shed} shed; {clients} clients honouring it for {half:.0f} s: "
              f"{admitted_n / half:.0f} admitted req/s, client p99 {_pct(ok, 0.99)} ms, {within:.2%} within the "
              f"objective in the server; {len(shed)} shed in all (503 + Retry-After), p50 {_pct(shed, 0.5)} ms; RSS "
              f"{(rss1 - rss0) / 2**20:+.0f} MiB; " + "; ".join(problems))
    return record("serving_overload", injected=bool(shed), survived=not problems and bool(shed),
                  recovery_s=0.0 if recovery_s != recovery_s else recovery_s, detail=detail)


# ---------------------------------------------------------------------------------------------- training
TINY = ("training.batch_size=16", "training.eval_every=0", "training.warmup_steps=2",
        "training.causal_lm.corpus_max_bytes=300000", "training.causal_lm.seq_len=64",
        "training.max_steps=24", "training.checkpoint.every_steps=4")
MLOPS = str(Path(sys.executable).with_name("mlops"))


def _train(root: Path, run: str, tag: str) -> subprocess.Popen[bytes]:
    """``mlops train run`` in a process group of its own, every process of it tagged in its environment."""
    args = [MLOPS, "train", "run", "--model", "llm-tiny", "--run-name", run, "--no-track"]
    for item in TINY:
        args += ["--set", item]
    env = {**os.environ, "MLOPS_TEST_TAG": tag, "MLOPS_CONFIG_DIR": str(root / "configs")}
    with open(root / f"{run}-{tag}.log", "wb") as out:
        return subprocess.Popen(args, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _tagged(tag: str, module: str | None = None) -> list[int]:
    """Live, non-zombie processes whose environment holds ``MLOPS_TEST_TAG=tag`` (optionally ``-m module``)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if f"MLOPS_TEST_TAG={tag}".encode() not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            argv = (proc / "cmdline").read_bytes().decode().split("\0")
            if module is None or python_module(argv) == module:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _weights(root: Path, run: str) -> str:
    return str(json.loads((root / ".mlops/checkpoints" / run / "result.json").read_text())["weights_sha256"])


def training_fault(kind: str, seed: int, root: Path, reference: str) -> dict[str, Any]:
    """SIGKILL one rank, the launcher or its process group at a drawn checkpoint, either while the checkpoint
    is being written (as soon as its folder appears) or just after; then rerun the same command.

    Survived: every process of the killed run gone within 10 s (no orphan), the rerun resumes from a complete
    checkpoint and ends with weights bit-identical to an uninterrupted run (``reference``).
    """
    rng = random.Random(f"{seed}-{kind}")
    step = rng.choice((4, 8, 12, 16))
    mid = rng.random() < 0.5
    run, tag = f"chaos-{kind}-{seed}", f"chaos{seed}{kind}{os.getpid()}"
    proc = _train(root, run, tag)
    folder = root / ".mlops/checkpoints" / run / f"step_{step:08d}"
    ready = folder / ("" if mid else "manifest.json")
    deadline = time.monotonic() + 600
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    injected = proc.poll() is None
    if injected:
        if kind == "rank":
            ranks = _tagged(tag, "mlops_training.worker")
            os.kill(rng.choice(ranks), signal.SIGKILL) if ranks else None
            injected = bool(ranks)
        elif kind == "launcher":
            os.kill(proc.pid, signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    t0 = time.monotonic()
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
    while _tagged(tag) and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    orphans = _tagged(tag)
    for pid in orphans:  # our own leftovers: never let them outlive the scenario
        os.kill(pid, signal.SIGKILL)
    rerun = _train(root, run, f"{tag}r")
    rerun.wait(timeout=900)
    problems = []
    if orphans:
        problems.append(f"orphans left 10 s after the kill: {orphans}")
    if rerun.returncode != 0:
        problems.append(f"rerun exited {rerun.returncode}")
    else:
        result = json.loads((root / ".mlops/checkpoints" / run / "result.json").read_text())
        if result["weights_sha256"] != reference:
            problems.append("rerun weights differ from the uninterrupted run's")
        if result.get("resumed_from_step") is None and step > 4:
            problems.append("the rerun did not resume")
    return record(f"sigkill_training_{kind}", injected=injected, survived=not problems,
                  recovery_s=time.monotonic() - t0,
                  detail=f"at checkpoint {step} ({'mid-write' if mid else 'after'}); " + "; ".join(problems))


def run_training(seeds: list[int], workdir: Path, kinds: tuple[str, ...] = ("rank", "launcher", "group")
                 ) -> list[dict[str, Any]]:
    """An uninterrupted reference run, then each kind of kill for each seed (each rerun compared with it)."""
    root = workdir / "training"
    root.mkdir(parents=True)
    shutil.copytree(REPO / "configs", root / "configs")
    straight = _train(root, "chaos-straight", f"chaos-straight{os.getpid()}")
    if straight.wait(timeout=900) != 0:
        raise RuntimeError(f"the reference run failed: {(root / 'chaos-straight').with_suffix('.log')}")
    reference = _weights(root, "chaos-straight")
    return [training_fault(kind, seed, root, reference) for seed in seeds for kind in kinds]


def run_all(seeds: list[int], workdir: Path, only: set[str] | None = None) -> list[dict[str, Any]]:
    """Every scenario for every seed (``only``: a subset of fault names' scenario keys)."""
    scenarios: dict[str, Callable[[int, Path], dict[str, Any]]] = {
        "promote": functools.partial(registry_fault, "promote"),
        "rollback": functools.partial(registry_fault, "rollback"),
        "validation": gate_fault,
        "prediction_log": prediction_log_fault,
        "redis": redis_fault,
    }
    out = []
    for seed in seeds:
        for key, scenario in scenarios.items():
            if only is None or key in only:
                out.append(scenario(seed, workdir))
    return out


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The benchmark's line: per fault kind, how often injected and survived, losses and worst recovery."""
    faults: dict[str, dict[str, Any]] = {}
    for r in records:
        f = faults.setdefault(r["fault"], {"fault": r["fault"], "injected": 0, "survived": 0, "lost_rows": 0,
                                           "lost_versions": 0, "recovery_s": 0.0})
        f["injected"] += int(r["injected"])
        f["survived"] += int(r["survived"] and r["injected"])
        f["lost_rows"] += r["lost_rows"]
        f["lost_versions"] += r["lost_versions"]
        f["recovery_s"] = max(f["recovery_s"], r["recovery_s"])
    lost = sum(f["lost_rows"] + f["lost_versions"] for f in faults.values())
    return {"faults": list(faults.values()), "lost_total": lost}


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))
