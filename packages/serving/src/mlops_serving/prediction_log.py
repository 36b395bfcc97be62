"""The prediction log: rows queued on the request path, written as parquet parts by a background thread.

Layout: ``<log_dir>/<model>/part-<UTC time>-<pid>-<seq>.parquet``; a part is written to a ``.tmp`` name and
renamed, so readers never see half a file. Columns are those of docs/CONTRACTS.md (request_id, ts, model_name,
model_version, variant, transaction_id, user_id, merchant_id, request-time fields, feature columns, score,
degraded, latency_ms).

Loss bound: rows live in memory until the next flush, every ``flush_s`` seconds (and at a clean stop), so a
killed process loses at most the last ``flush_s`` of predictions. The queue is bounded (``max_queue`` rows);
when it is full, rows are counted as dropped in ``mlops_serving_prediction_log_dropped`` and a warning is
logged: the request path never blocks on the log.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

PART_GLOB = "part-*.parquet"


class PredictionLogWriter:
    """Append rows without blocking; a daemon thread flushes them to parquet parts every ``flush_s``."""

    def __init__(
        self,
        log_dir: str | Path,
        model: str,
        *,
        flush_s: float = 2.0,
        max_queue: int = 100_000,
        on_written: Callable[[int], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self.folder = Path(log_dir) / model
        self._flush_s = flush_s
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=max_queue)
        self._on_written = on_written or (lambda n: None)
        self._on_dropped = on_dropped or (lambda n: None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seq = 0
        self._dropped_since_warning = 0

    def start(self) -> None:
        """Create the folder and start the flusher thread."""
        self.folder.mkdir(parents=True, exist_ok=True)
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
        """Flush what is queued and stop the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def flush(self) -> int:
        """Write everything queued now as one part; returns the number of rows written."""
        rows: list[dict[str, Any]] = []
        while True:
            try:
                rows.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if not rows:
            return 0
        self._write(rows)
        return len(rows)

    def _run(self) -> None:
        while not self._stop.wait(self._flush_s):
            self._flush_safely()
        self._flush_safely()

    def _flush_safely(self) -> None:
        try:
            n = self.flush()
        except Exception:  # a full disk must not kill the thread; the next flush tries again
            log.exception("prediction log flush to %s failed", self.folder)
            return
        if n:
            self._on_written(n)
        if self._dropped_since_warning:
            log.warning("prediction log queue full: %d rows dropped", self._dropped_since_warning)
            self._dropped_since_warning = 0

    def _write(self, rows: list[dict[str, Any]]) -> None:
        # pyarrow straight from the dicts: ~6x cheaper than a DataFrame, and the GIL is the request path's too
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._seq += 1
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        final = self.folder / f"part-{stamp}-{os.getpid()}-{self._seq:06d}.parquet"
        tmp = final.with_suffix(".parquet.tmp")
        self.folder.mkdir(parents=True, exist_ok=True)  # also when someone removed it while serving
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        tmp.replace(final)


def read_prediction_log(log_dir: str | Path, model: str, since: datetime | None = None) -> pd.DataFrame:
    """All logged predictions of ``model`` (oldest first), optionally only those at or after ``since`` (UTC).

    Returns an empty frame with no columns when nothing was logged yet.
    """
    import pandas as pd

    folder = Path(log_dir) / model
    parts = sorted(folder.glob(PART_GLOB)) if folder.is_dir() else []
    if not parts:
        return pd.DataFrame()
    frame = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    if since is not None:
        cutoff = pd.Timestamp(since if since.tzinfo else since.replace(tzinfo=UTC))
        frame = frame[frame["ts"] >= cutoff]
    return frame.sort_values("ts", kind="stable").reset_index(drop=True)


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
