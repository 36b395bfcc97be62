"""The prediction log by column: a scored batch handed over as one block of columns writes the same parquet
parts (schema, values, row order, partitions) as the same requests handed over as row dicts, and both hold the
hand-built rows; a block that does not fit the queue is cut at the queue's room, the rest counted as dropped."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mlops_serving.prediction_log import PredictionLogWriter, batch_log_columns, log_rows

TS = [datetime(2026, 3, 1, 9, 59, 59, 999_000, tzinfo=UTC).timestamp(), datetime(2026, 3, 1, 10, 0, 1,
                                                                                  tzinfo=UTC).timestamp()]
REQUESTS = [  # (request id, version, variant, latency ms, user ids of its rows)
    ("r1", "1", "stable", 3.25, ["u1", "u2"]),
    ("r2", "2", "canary", 4.5, ["u3"]),
    ("r3", "1", "stable", 5.0, ["u4", "u1", "u9"]),
]
FEATURES = {"user_txn_count_1h": [2, 0, 7, 1, 2, 0], "user_amount_mean_7d": [40.0, None, 12.5, 3.0, 40.0, 20.0],
            "merchant_risk": [0.1, 0.1, 0.2, 0.1, 0.1, 0.3]}
SCORES = [0.125, 0.5, 0.875, 0.25, 0.0625, 0.75]


def _rows(batch: int) -> list[dict[str, Any]]:
    users = [u for *_, us in REQUESTS for u in us]
    return [{"user_id": u, "merchant_id": f"m{batch}", "currency": "EUR", "category": "grocery", "country": "DE",
             "device": "ios", "channel": "online", "amount": 10.0 * (k + 1), "transaction_id": None if k == 2
             else f"t{batch}-{k}"} for k, u in enumerate(users)]


def _old(writer: PredictionLogWriter, batch: int) -> None:
    """The row path: one dict per request row (log_rows), appended per request."""
    rows, start = _rows(batch), 0
    for request_id, version, variant, latency, users in REQUESTS:
        stop = start + len(users)
        writer.append(log_rows(
            request_id=request_id, ts=TS[batch], model_name="fraud", model_version=version, variant=variant,
            rows=rows[start:stop], features=[{k: v[i] for k, v in FEATURES.items()} for i in range(start, stop)],
            scores=SCORES[start:stop], degraded=batch == 1, latency_ms=latency))
        start = stop


def _new(writer: PredictionLogWriter, batch: int) -> None:
    """The column path: the batch's rows in one block."""
    writer.append_columns(batch_log_columns(
        ts=TS[batch], model_name="fraud", request_ids=[r[0] for r in REQUESTS], versions=[r[1] for r in REQUESTS],
        variants=[r[2] for r in REQUESTS], latencies_ms=[r[3] for r in REQUESTS],
        sizes=[len(r[4]) for r in REQUESTS], rows=_rows(batch), features=FEATURES, scores=SCORES,
        degraded=batch == 1))


def _expected(batch: int, version: str) -> list[dict[str, Any]]:
    """The rows of one partition, written out by hand in the contract's column order."""
    out, k = [], 0
    for request_id, v, variant, latency, users in REQUESTS:
        for user in users:
            if v == version:
                out.append({"request_id": request_id, "ts": datetime.fromtimestamp(TS[batch], UTC),
                            "model_name": "fraud", "model_version": v, "variant": variant, "user_id": user,
                            "merchant_id": f"m{batch}", "currency": "EUR", "category": "grocery", "country": "DE",
                            "device": "ios", "channel": "online", "amount": 10.0 * (k + 1),
                            "transaction_id": None if k == 2 else f"t{batch}-{k}",
                            "user_txn_count_1h": FEATURES["user_txn_count_1h"][k],
                            "user_amount_mean_7d": FEATURES["user_amount_mean_7d"][k],
                            "merchant_risk": FEATURES["merchant_risk"][k], "score": SCORES[k],
                            "degraded": batch == 1, "latency_ms": latency})
            k += 1
    return out


def _parts(root: Path) -> dict[str, pa.Table]:
    """Each partition's one part, by its folder below the store."""
    parts = sorted(root.rglob("*.parquet"))
    assert len({p.parent for p in parts}) == len(parts)  # one part per partition and flush
    return {str(p.parent.relative_to(root)): pq.read_table(p) for p in parts}


def test_a_batch_by_column_writes_the_parts_the_rows_did(tmp_path: Path) -> None:
    old, new = PredictionLogWriter(tmp_path / "old", "fraud"), PredictionLogWriter(tmp_path / "new", "fraud")
    for batch in (0, 1):  # 09:59:59.999 and 10:00:01: two hours
        _old(old, batch)
        _new(new, batch)
    assert old.flush() == new.flush() == 12
    got, want = _parts(tmp_path / "new"), _parts(tmp_path / "old")
    assert sorted(got) == sorted(want) == [f"model=fraud/version={v}/hour=2026-03-01T{h}" for v in ("1", "2")
                                           for h in ("09", "10")]
    for folder, table in got.items():
        assert table.schema.equals(want[folder].schema, check_metadata=True), folder
        assert table.equals(want[folder]), folder
        batch = 0 if folder.endswith("T09") else 1
        expected = _expected(batch, folder.split("/")[1].removeprefix("version="))
        assert table.to_pylist() == expected and table.column_names == list(expected[0])
    assert got["model=fraud/version=1/hour=2026-03-01T09"].schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert got["model=fraud/version=1/hour=2026-03-01T09"].schema.field("user_txn_count_1h").type == pa.int64()


def test_a_block_past_the_queues_room_is_cut_there(tmp_path: Path) -> None:
    dropped: list[int] = []
    writer = PredictionLogWriter(tmp_path, "fraud", max_queue=4, on_dropped=dropped.append)
    _new(writer, 0)  # 6 rows, room for 4
    assert dropped == [2]
    assert writer.flush() == 4
    written = [row for t in _parts(tmp_path).values() for row in t.to_pylist()]
    assert sorted((r["request_id"], r["user_id"]) for r in written) == [("r1", "u1"), ("r1", "u2"), ("r2", "u3"),
                                                                         ("r3", "u4")]
