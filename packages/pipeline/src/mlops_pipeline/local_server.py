"""Start `mlops serve` as a real subprocess for the demo, wait until ready, send bounded traffic, stop it."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mlops_config import ContractConfig
from mlops_pipeline.errors import PipelineError
from mlops_pipeline.servers import ProcessHarness, ServerSpec, free_port, http_ready


@dataclass(frozen=True)
class Endpoint:
    """A model served over HTTP: where to send requests, and the log of the process answering them."""

    url: str
    model: str
    log_path: Path

    def metrics_text(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text


@contextmanager
def run_server(root: Path, model: str, log_path: Path, args: Sequence[str] = (), *,
               ready_timeout_s: float = 120.0) -> Iterator[Endpoint]:
    """`mlops serve` on a free loopback port, started and stopped by the one process harness
    (:class:`~mlops_pipeline.servers.ProcessHarness`: its own process group, SIGTERM first so the prediction log
    flushes, the log quoted when it exits or is not ready in time)."""
    with run_servers(root, model, [(log_path, args)], ready_timeout_s=ready_timeout_s) as (endpoint,):
        yield endpoint


def loopback_url(port: int) -> str:
    """The URL of a server this process starts on ``port``."""
    return f"http://127.0.0.1:{port}"


def serving_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (a server's URL can then be known before it starts)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


@contextmanager
def run_servers(root: Path, model: str, servers: Sequence[tuple[Path, Sequence[str]]], *,
                ports: Sequence[int] | None = None, ready_timeout_s: float = 120.0) -> Iterator[list[Endpoint]]:
    """Several `mlops serve` processes (``(log_path, args)`` each, the logs in one folder) launched side by side,
    then waited for, then stopped together: start-up (importing torch, loading the model) overlaps. ``ports``: the
    ports to serve on, in order (from :func:`serving_ports`, when one server's args name another's URL)."""
    folders = {log_path.parent for log_path, _ in servers}
    if len(folders) != 1:
        raise PipelineError(f"the servers' logs must share one folder, got {sorted(map(str, folders))}")
    chosen = list(ports) if ports is not None else serving_ports(len(servers))
    if len(chosen) != len(servers) or len(set(chosen)) != len(chosen):
        raise PipelineError(f"ports {chosen} must be {len(servers)} distinct ports, one per server")
    specs = []
    for (log_path, args), port in zip(servers, chosen, strict=True):
        url = loopback_url(port)
        argv = [sys.executable, "-m", "mlops_cli", "serve", "--model", model, "--host", "127.0.0.1", "--port",
                str(port), *args]
        specs.append((url, ServerSpec(log_path.stem, argv, ready=http_ready(f"{url}/v2/models/{model}/ready"),
                                      cwd=root, ready_timeout_s=ready_timeout_s, stop_timeout_s=30.0)))
    with ProcessHarness(folders.pop()) as harness:
        for _, spec in specs:
            harness.launch(spec)
        yield [Endpoint(url, model, harness.wait_ready(spec.name).log_path) for url, spec in specs]


SHED_RETRIES = 3
"""Retries of a request before its status counts: one the server shed (503 + ``Retry-After``), or one whose body
it did not get within the request's deadline (408)."""


def post_retrying(client: httpx.Client, url: str, body: bytes | str, headers: dict[str, str] | None = None,
                  ) -> tuple[httpx.Response, Counter[int]]:
    """POST ``body`` to ``url`` as a client of the shedding server; the final response and the retries by status.

    A 503 with ``Retry-After`` (overload, or a missed deadline) is retried after that wait, a 408 at once on a new
    connection (RFC 9110 15.5.9: the server timed out on the request's body and closed the connection; nothing was
    scored, so the request may be repeated): up to ``SHED_RETRIES`` times, then the last status counts. A 408 is
    the sender's lateness, not the model's: a client process starved between writing the headers and the body (a
    loaded 2-core machine) gets it; every other status, 4xx and 5xx alike, counts at once.
    """
    retried: Counter[int] = Counter()
    while True:
        resp = client.post(url, content=body, headers=headers)
        wait = resp.headers.get("retry-after") if resp.status_code == 503 else "0" if resp.status_code == 408 else None
        if wait is None or retried.total() >= SHED_RETRIES:
            return resp, retried
        retried[resp.status_code] += 1
        time.sleep(min(float(wait), 5.0))


def send_traffic(server: Endpoint, rows: list[dict[str, Any]], *, batch: int = 1,
                 concurrency: int = 4) -> dict[str, Any]:
    """POST ``rows`` as V1 requests (``batch`` instances each); bounded by the row count. Returns tallies.

    Each request is sent by :func:`post_retrying`; the final status counts, the retries are tallied by status in
    ``retries`` (``shed_retries`` counts the 503s among them).
    """
    endpoint = f"{server.url}/v1/models/{server.model}:predict"
    chunks = [rows[i : i + batch] for i in range(0, len(rows), batch)]
    statuses: dict[int, int] = {}
    retries: Counter[int] = Counter()
    degraded = 0
    latencies: list[float] = []
    with httpx.Client(timeout=30) as client:

        def one(chunk: list[dict[str, Any]]) -> tuple[int, bool, float, Counter[int]]:
            started = time.perf_counter()
            resp, retried = post_retrying(client, endpoint, json.dumps({"instances": chunk}),
                                          {"content-type": "application/json"})
            ok_degraded = resp.status_code == 200 and bool(resp.json().get("degraded"))
            return resp.status_code, ok_degraded, (time.perf_counter() - started) * 1000, retried

        with ThreadPoolExecutor(concurrency) as pool:
            for status, was_degraded, ms, retried in pool.map(one, chunks):
                statuses[status] = statuses.get(status, 0) + 1
                degraded += was_degraded
                retries.update(retried)
                latencies.append(ms)
    return {"requests": len(chunks), "instances": len(rows), "statuses": statuses, "degraded": degraded,
            "shed_retries": retries[503], "retries": dict(retries), "latency_ms": latencies}


def request_rows(frame: Any, n: int, seed: int, contract: ContractConfig) -> list[dict[str, Any]]:
    """``n`` request instances sampled from a raw-batch frame: what ``contract`` says a request holds (the entity
    keys and request fields, then the record id)."""
    sample = frame.sample(n=min(n, len(frame)), random_state=seed)
    numeric = set(contract.numeric_fields)
    out = []
    for rec in sample[[*contract.required_fields, contract.record_id]].to_dict("records"):
        out.append({k: (float(v) if k in numeric else str(v)) for k, v in rec.items()})
    return out
