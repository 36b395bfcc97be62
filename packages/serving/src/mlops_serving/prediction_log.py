"""The prediction log's writer: rows queued on the request path, written as parquet parts by a background thread.

Where the parts go and how they are laid out (partitioned by model / version / hour on a local folder or an
object store) is :mod:`mlops_serving.log_store`. Columns are those of docs/CONTRACTS.md (request_id, ts,
model_name, model_version, variant, transaction_id, user_id, merchant_id, request-time fields, feature
columns, score, degraded, latency_ms).

Loss bound: rows live in memory until the next flush, every ``flush_s`` seconds (and at a clean stop), so a
killed process loses at most the last ``flush_s`` of predictions. A flush that fails (store unreachable, disk
full) keeps the rows it could not write and writes them first next time; they are bounded by ``max_queue``
rows in the queue plus ``max_queue`` rows held back. Beyond that, and for rows still unwritten when the
server stops, rows are counted in ``mlops_serving_prediction_log_dropped`` and logged: never lost silently,
and the request path never blocks on the log.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mlops_serving.errors import PredictionLogError
from mlops_serving.log_store import PredictionLogStore, partition_rows, rows_table

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 3600.0
"""How often the writer deletes partitions past the retention (hour partitions: more often finds nothing)."""


class PredictionLogWriter:
    """Append rows without blocking; a daemon thread flushes them to the store every ``flush_s``."""

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
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=max_queue)
        self._pending: list[Mapping[str, Any]] = []  # rows a failed flush could not write: first in line
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
        return len(self._pending)

    def start(self) -> None:
        """Start the flusher thread (which also prunes past the retention, at start and once an hour)."""
        self._thread = threading.Thread(target=self._run, name="prediction-log", daemon=True)
        self._thread.start()

    def append(self, rows: list[dict[str, Any]]) -> None:
        """Queue rows; never blocks. Rows that do not fit are counted as dropped."""
        for i, row in enumerate(rows):
            try:
                self._queue.put_nowait(row)
            except queue.Full:
                dropped = len(rows) - i
                self._on_dropped(dropped)
                self._dropped_since_warning += dropped
                return

    def stop(self, timeout: float = 10.0) -> None:
        """Flush what is queued and stop the thread; rows that still cannot be written are counted as dropped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)  # its last act is a final flush
            self._thread = None
        else:
            self._flush_safely()
        with self._flush_lock:
            lost = len(self._pending) + self._queue.qsize()
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
            self._pending.extend(self._drain(self._max_pending - len(self._pending)))
            if not self._pending:
                return 0
            written = 0
            unwritten: list[Mapping[str, Any]] = []
            error: Exception | None = None
            for (version, hour), rows in partition_rows(self._pending).items():
                if error is None:
                    try:
                        self.store.write_part(version, hour, rows_table(rows))
                        written += len(rows)
                        continue
                    except Exception as exc:  # filesystems and object stores raise many types
                        error = exc
                unwritten.extend(rows)  # after one failure the store is likely down: keep the rest untried
            self._pending = unwritten
        if written:
            self._on_written(written)
        if error is not None:
            raise PredictionLogError(f"prediction log flush to {self.store.model_dir!r} failed; {len(unwritten)} "
                                     f"row(s) kept for the next flush: {type(error).__name__}: {error}") from error
        return written

    def _drain(self, limit: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while len(rows) < limit:
            try:
                rows.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return rows

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


def now() -> float:
    """Wall-clock seconds (UTC epoch) for log timestamps."""
    return time.time()
