"""The prediction-log writer under a failing store: rows a flush could not write wait for the next one; what
cannot be held is counted and logged, never lost silently."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from mlops_serving import read_prediction_log
from mlops_serving.prediction_log import PredictionLogWriter, log_rows


def _rows(first: int, n: int, version: str = "1") -> list[dict[str, Any]]:
    return log_rows(request_id="r", ts=time.time(), model_name="fraud", model_version=version, variant="stable",
                    rows=[{"user_id": "u", "merchant_id": "m", "amount": 1.0, "transaction_id": f"t{i}"}
                          for i in range(first, first + n)],
                    features=[{} for _ in range(n)], scores=[0.5] * n, degraded=False, latency_ms=1.0)


def _block(store: Path) -> None:
    """Make ``store`` unusable the way a missing mount is: a plain file where the folder should be."""
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text("not a folder")


def test_a_failed_flush_keeps_its_rows_and_the_next_one_writes_them(tmp_path: Path) -> None:
    store = tmp_path / "log"
    _block(store)
    writer = PredictionLogWriter(store, "fraud", flush_s=60)
    writer.append(_rows(0, 5) + _rows(5, 3, version="2"))
    with pytest.raises(Exception, match="fraud"):
        writer.flush()  # the store is not writable: nothing may be lost
    writer.append(_rows(8, 2))
    store.unlink()  # the store comes back
    assert writer.flush() == 10
    frame = read_prediction_log(store, "fraud")
    assert sorted(frame["transaction_id"], key=lambda t: int(t[1:])) == [f"t{i}" for i in range(10)]
    assert writer.flush() == 0  # written once, not again


def test_the_flusher_thread_retries_until_the_store_is_back_and_counts_failures(tmp_path: Path) -> None:
    store = tmp_path / "log"
    _block(store)
    written: list[int] = []
    failures: list[int] = []
    writer = PredictionLogWriter(store, "fraud", flush_s=0.05, on_written=written.append,
                                 on_failed=lambda: failures.append(1))
    writer.start()
    writer.append(_rows(0, 7))
    deadline = time.monotonic() + 5
    while len(failures) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(failures) >= 2 and writer.pending == 7
    store.unlink()
    deadline = time.monotonic() + 5
    while sum(written) < 7 and time.monotonic() < deadline:
        time.sleep(0.02)
    writer.stop()
    assert sum(written) == 7 and writer.pending == 0
    assert len(read_prediction_log(store, "fraud")) == 7


def test_overflow_while_the_store_is_down_is_bounded_counted_and_logged(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "log"
    _block(store)
    dropped: list[int] = []
    writer = PredictionLogWriter(store, "fraud", flush_s=60, max_queue=4, on_dropped=dropped.append)
    writer.append(_rows(0, 4))
    with pytest.raises(Exception, match="4 row"):
        writer.flush()  # 4 held back
    writer.append(_rows(4, 6))  # 4 fit in the queue, 2 do not
    assert dropped == [2]
    with pytest.raises(Exception, match="4 row"):
        writer.flush()  # the held-back rows are full: the queue is not drained into them
    assert writer.pending == 4
    with caplog.at_level(logging.ERROR, logger="mlops_serving.prediction_log"):
        writer.stop()  # the store is still down at the stop: what is left is counted as dropped, loudly
    assert dropped == [2, 8]
    assert any("8 row(s) could not be written" in r.getMessage() for r in caplog.records)
