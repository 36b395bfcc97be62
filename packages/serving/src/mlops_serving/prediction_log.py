"""The prediction log's writer: rows queued on the request path, written as parquet parts by a background thread.

Where the parts go and how they are laid out (partitioned by model / version / hour on a local folder or an
object store) is :mod:`mlops_serving.log_store`. Columns are those of docs/CONTRACTS.md (request_id, ts,
model_name, model_version, variant, the request's fields as the served model's contract names them (its record id,
entity keys and request-time fields: ``transaction_id, user_id, merchant_id, amount, …`` for fraud), feature
columns, score, degraded, latency_ms). The record id keeps the contract's name on disk, not a generic one: delayed
labels and the shadow log join on that name, and fraud's logs written before stay readable as they are.

Loss bound: rows live in memory until the next flush, every ``flush_s`` seconds (and at a clean stop), so a
killed process loses at most the last ``flush_s`` of predictions. A flush that fails (store unreachable, disk
full) keeps the rows it could not write and writes them first next time; they are bounded by ``max_queue``
rows in the queue plus ``max_queue`` rows held back. Beyond that, and for rows still unwritten when the
server stops, rows are counted in ``mlops_serving_prediction_log_dropped`` and logged: never lost silently,
and the request path never blocks on the log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mlops_serving.errors import PredictionLogError
from mlops_serving.log_store import LogColumns, PredictionLogStore, columns_table, partition_columns

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 3600.0
"""How often the writer deletes partitions past the retention (hour partitions: more often finds nothing)."""


class PredictionLogWriter:
    """Append rows without blocking; a daemon thread flushes them to the store every ``flush_s``.

    The queue holds blocks of rows by column (:class:`~mlops_serving.log_store.LogColumns`, one per scored
    batch, :meth:`append_columns`), bounded in rows; :meth:`append` takes row dicts for callers that have them.
    """

    def __init__(
        self,
        uri: str | Path,
        model: str,
        *,
        flush_s: float = 2.0,
        max_queue: int = 100_000,
        retention_hours: float | None = None,
        on_written: Callable[[int], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
        on_failed: Callable[[], None] | None = None,
    ) -> None:
        self.store = PredictionLogStore(uri, model)
        self._flush_s = flush_s
        self._max_pending = max_queue
        self._queue: deque[LogColumns] = deque()
        self._queued = 0  # rows in the queue (its bound is in rows, not blocks)
        self._queue_lock = threading.Lock()
        self._pending: list[LogColumns] = []  # rows a failed flush could not write: first in line
        self._retention = timedelta(hours=retention_hours) if retention_hours else None
        self._on_written = on_written or (lambda n: None)
        self._on_dropped = on_dropped or (lambda n: None)
        self._on_failed = on_failed or (lambda: None)
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dropped_since_warning = 0

    @property
    def pending(self) -> int:
        """Rows held back by failed flushes."""
        return sum(block.n for block in self._pending)

    def start(self) -> None:
        """Start the flusher thread (which also prunes past the retention, at start and once an hour)."""
        self._thread = threading.Thread(target=self._run, name="prediction-log", daemon=True)
        self._thread.start()

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Queue row dicts; never blocks. Rows that do not fit are counted as dropped."""
        self.append_columns(LogColumns.of_rows(rows))

    def append_columns(self, block: LogColumns) -> None:
        """Queue a block of rows by column; never blocks. The rows past the queue's room are counted as dropped."""
        with self._queue_lock:
            room = self._max_pending - self._queued
            if block.n > room:
                block, rest = block.split(room)
                dropped = rest.n
            else:
                dropped = 0
            if block.n:
                self._queue.append(block)
                self._queued += block.n
        if dropped:
            self._on_dropped(dropped)
            self._dropped_since_warning += dropped

    def stop(self, timeout: float = 10.0) -> None:
        """Flush what is queued and stop the thread; rows that still cannot be written are counted as dropped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)  # its last act is a final flush
            self._thread = None
        else:
            self._flush_safely()
        with self._flush_lock:
            lost = self.pending + self._queued
            if lost:
                self._pending = []
                self._drain(lost)
                self._on_dropped(lost)
                log.error("prediction log %s: %d row(s) could not be written before the stop and are dropped",
                          self.store.model_dir, lost)

    def flush(self) -> int:
        """Write the held-back rows and everything queued now, one part per partition; returns rows written.

        Raises:
            PredictionLogError: a part could not be written; its rows and the rest are kept for the next flush.
        """
        with self._flush_lock:
            self._pending.extend(self._drain(self._max_pending - self.pending))
            if not self._pending:
                return 0
            written = 0
            unwritten: list[LogColumns] = []
            error: Exception | None = None
            for (version, hour), blocks in partition_columns(self._pending).items():
                if error is None:
                    try:
                        self.store.write_part(version, hour, columns_table(blocks))
                        written += sum(block.n for block in blocks)
                        continue
                    except Exception as exc:  # filesystems and object stores raise many types
                        error = exc
                unwritten.extend(blocks)  # after one failure the store is likely down: keep the rest untried
            self._pending = unwritten
        if written:
            self._on_written(written)
        if error is not None:
            raise PredictionLogError(f"prediction log flush to {self.store.model_dir!r} failed; "
                                     f"{sum(block.n for block in unwritten)} "
                                     f"row(s) kept for the next flush: {type(error).__name__}: {error}") from error
        return written

    def _drain(self, limit: int) -> list[LogColumns]:
        """Up to ``limit`` queued rows, oldest first (a block larger than what is left is split)."""
        blocks: list[LogColumns] = []
        with self._queue_lock:
            while limit > 0 and self._queue:
                block = self._queue.popleft()
                if block.n > limit:
                    block, rest = block.split(limit)
                    self._queue.appendleft(rest)
                blocks.append(block)
                self._queued -= block.n
                limit -= block.n
        return blocks

    def _run(self) -> None:
        next_prune = time.monotonic()
        while True:
            if self._retention is not None and time.monotonic() >= next_prune:
                next_prune = time.monotonic() + PRUNE_EVERY_S
                self._prune_safely()
            if self._stop.wait(self._flush_s):
                break
            self._flush_safely()
        self._flush_safely()

    def _prune_safely(self) -> None:
        assert self._retention is not None
        try:
            self.store.prune(self._retention, datetime.now(UTC))
        except Exception:  # retention must not stop the log; the next hour tries again
            log.exception("prediction log %s: pruning past the retention failed", self.store.model_dir)

    def _flush_safely(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # a store outage must not kill the thread; the rows wait for the next flush
            self._on_failed()
            log.error("%s", exc)
        if self._dropped_since_warning:
            log.warning("prediction log queue full: %d rows dropped", self._dropped_since_warning)
            self._dropped_since_warning = 0


def log_rows(
    *,
    request_id: str,
    ts: float,
    model_name: str,
    model_version: str,
    variant: str,
    rows: Sequence[Mapping[str, Any]],
    features: Sequence[Mapping[str, Any]],
    scores: Sequence[float],
    degraded: bool,
    latency_ms: float,
) -> list[dict[str, Any]]:
    """Prediction-log rows of one request in the contract's columns."""
    when = datetime.fromtimestamp(ts, UTC)
    return [
        {
            "request_id": request_id,
            "ts": when,
            "model_name": model_name,
            "model_version": model_version,
            "variant": variant,
            **row,
            **feats,
            "score": float(score),
            "degraded": degraded,
            "latency_ms": latency_ms,
        }
        for row, feats, score in zip(rows, features, scores, strict=True)
    ]


def batch_log_columns(
    *,
    ts: float,
    model_name: str,
    request_ids: Sequence[str],
    versions: Sequence[str],
    variants: Sequence[str],
    latencies_ms: Sequence[float],
    sizes: Sequence[int],
    rows: Sequence[Mapping[str, Any]],
    features: Mapping[str, Sequence[Any]],
    scores: Sequence[float],
    degraded: bool,
) -> LogColumns:
    """Prediction-log rows of a scored batch by column: per request (``request_ids``, ``versions``, ``variants``,
    ``latencies_ms``, ``sizes`` rows each) its rows, one after the other; ``rows``, ``features`` (by column)
    and ``scores`` for all the batch's rows.

    The columns, their order and the values are those of :func:`log_rows` for each request in turn (a feature
    named like a request field takes its place, with the feature's value), for rows of one shape (the schema's).
    """
    n = len(rows)

    def per_request(values: Sequence[Any]) -> list[Any]:
        return [v for v, k in zip(values, sizes, strict=True) for _ in range(k)]

    columns: dict[str, list[Any]] = {
        "request_id": per_request(request_ids), "ts": [datetime.fromtimestamp(ts, UTC)] * n,
        "model_name": [model_name] * n, "model_version": per_request(versions), "variant": per_request(variants),
    }
    for name in dict.fromkeys(key for row in rows for key in row):
        columns[name] = [row.get(name) for row in rows]
    for name, values in features.items():
        columns[name] = list(values)
    columns["score"] = [float(s) for s in scores]
    columns["degraded"] = [degraded] * n
    columns["latency_ms"] = per_request(latencies_ms)
    return LogColumns(columns, n)


def now() -> float:
    """Wall-clock seconds (UTC epoch) for log timestamps."""
    return time.time()
