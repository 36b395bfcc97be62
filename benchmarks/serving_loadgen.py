"""The load generator of ``serving_load.py``: raw HTTP/1.1 keep-alive on loopback, closed or open loop, and the
CPU the servers spent over the measured window.

Only 200 answers count in req/s and latency; any other status or a broken connection is reported apart, as
``errors``, by kind in ``error_kinds`` (``http_<status>`` the server's, ``connection`` reset or closed,
``client_pool_full`` the open loop's own connection cap). CPU: ``utime + stime`` of every server process of the
arm from ``/proc/<pid>/stat``, read when the measured window opens and when it closes, divided by the 200
answers of the window (``cpu_ms_per_request``; all threads of each process, which is what a replica pays).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (all their threads)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces; fields after it do not
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of proc(5)
    return total / _TICK


class CpuWindow:
    """CPU seconds of the servers between :meth:`open` and :meth:`close` (the measured window)."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = list(pids)
        self._start: float | None = None
        self.seconds = 0.0

    async def track(self, opens_at: float, closes_at: float) -> None:
        """Read at ``opens_at`` and ``closes_at`` (``time.perf_counter()``), sleeping in between."""
        await asyncio.sleep(max(0.0, opens_at - time.perf_counter()))
        self._start = cpu_seconds(self.pids)
        await asyncio.sleep(max(0.0, closes_at - time.perf_counter()))
        self.seconds = cpu_seconds(self.pids) - self._start


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


def _summary(latencies: list[float], errors: int, elapsed: float, kinds: dict[str, int],
             cpu: CpuWindow) -> dict[str, Any]:
    """req/s, percentiles and CPU per request over the 200 answers only; everything else is in ``errors``."""
    lat = sorted(latencies)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000.0, 3) if lat else float("nan")

    return {"rps": round(len(lat) / elapsed, 1) if elapsed > 0 else 0.0, "p50_ms": pct(0.50), "p95_ms": pct(0.95),
            "p99_ms": pct(0.99), "errors": errors, "requests": len(lat), "error_kinds": dict(sorted(kinds.items())),
            "cpu_ms_per_request": round(cpu.seconds * 1000.0 / len(lat), 4) if lat else float("nan"),
            "cpu_s": round(cpu.seconds, 3)}


async def closed_loop(port: int, path: str, bodies: list[bytes], concurrency: int, duration: float,
                      max_requests: int, warmup: float, pids: Sequence[int]) -> dict[str, Any]:
    """Closed loop: ``concurrency`` connections, each sending its next request as soon as the last answered."""
    requests = _raw_requests(path, bodies)
    latencies: list[float] = []
    errors = 0
    kinds: dict[str, int] = {}
    measured = 0
    start = time.perf_counter()
    measure_from = start + warmup
    stop_at = measure_from + duration
    cpu = CpuWindow(pids)

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

    results = await asyncio.gather(cpu.track(measure_from, stop_at), *(worker(k) for k in range(concurrency)),
                                   return_exceptions=True)
    broken = sum(1 for r in results[1:] if isinstance(r, BaseException))
    if broken:
        errors += broken
        kinds["connection"] = broken
    return _summary(latencies, errors, min(time.perf_counter(), stop_at) - measure_from, kinds, cpu)


async def open_loop(port: int, path: str, bodies: list[bytes], rate: float, duration: float,
                    warmup: float, pids: Sequence[int], max_connections: int = 256) -> dict[str, Any]:
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
    cpu = CpuWindow(pids)
    tracker = asyncio.create_task(cpu.track(measure_from, measure_from + duration))

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
    await tracker
    for _, writer in idle:
        writer.close()
    summary = _summary(latencies, errors, duration, kinds, cpu)
    lags.sort()
    lag_p99 = round(lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000.0, 3) if lags else 0.0
    return {"rate": rate, **summary, "connections": opened, "send_lag_p99_ms": lag_p99}


