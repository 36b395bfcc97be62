"""The labels gate: each kind of bad label batch is quarantined with its reason, rows are conserved."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mlops_features import DataError, ingest_labels, label_schema, read_labels

RID = "transaction_id"  # fraud's contract record_id (configs/models/fraud.yaml)
FRAUD_LABELS = label_schema(RID)

T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)
NOW = datetime(2026, 11, 20, tzinfo=UTC)


@pytest.fixture
def served() -> pd.DataFrame:
    return pd.DataFrame({"transaction_id": [f"t{i}" for i in range(10)],
                         "ts": [T0 + timedelta(hours=i) for i in range(10)]})


def _batch(path: Path, rows: list[tuple[str | None, int | None, datetime | None]]) -> Path:
    table = pa.Table.from_pydict({"transaction_id": [r[0] for r in rows], "label": [r[1] for r in rows],
                                  "label_time": [r[2] for r in rows]}, schema=FRAUD_LABELS)
    pq.write_table(table, path)
    return path


def _late(i: int, days: float = 7) -> datetime:
    return T0 + timedelta(hours=i, days=days)


def test_good_batch_is_stored_by_label_date_and_read_back(tmp_path: Path, served: pd.DataFrame) -> None:
    store = tmp_path / "log"
    batch = _batch(tmp_path / "b1.parquet", [("t0", 1, _late(0, 2)), ("t1", 0, _late(1, 3)), ("t2", 0, _late(2, 3))])
    summary = ingest_labels([batch], str(store), "fraud", served, record_id=RID, now=NOW)
    assert (summary.input_rows, summary.accepted_rows, summary.quarantined_rows) == (3, 3, 0)
    dates = sorted(p.name for p in (store / "labels" / "model=fraud").iterdir())
    assert dates == ["label_date=2026-11-03", "label_date=2026-11-04"]
    labels = read_labels(str(store), "fraud", record_id=RID)
    assert labels["transaction_id"].tolist() == ["t0", "t1", "t2"]
    assert labels["label"].tolist() == [1, 0, 0]
    # re-ingesting the same batch replaces its own rows: nothing duplicated, nothing quarantined
    again = ingest_labels([batch], str(store), "fraud", served, record_id=RID, now=NOW)
    assert (again.accepted_rows, again.quarantined_rows) == (3, 0)
    assert len(read_labels(str(store), "fraud", record_id=RID)) == 3


@pytest.mark.parametrize(("rows", "bad", "reason"), [
    ([("t0", 1, _late(0)), ("nope", 1, _late(0))], {1}, "unknown_transaction_id"),
    ([("t0", 1, _late(0)), ("t1", 0, _late(1)), ("t1", 0, _late(1, 8))], {2}, "duplicate_label"),
    ([("t0", 1, _late(0)), ("t1", 0, _late(1)), ("t1", 1, _late(1, 8))], {1, 2}, "conflicting_label"),
    ([("t0", 1, _late(0)), ("t3", 1, T0 + timedelta(hours=2))], {1}, "label_before_prediction"),
    ([("t0", 1, _late(0)), ("t4", 1, NOW + timedelta(days=1))], {1}, "label_time_in_future"),
    ([("t0", 1, _late(0)), ("t4", 2, _late(4))], {1}, "label_in_set"),
    ([("t0", 1, _late(0)), ("t4", None, _late(4)), (None, 1, _late(4))], {1, 2}, "not_null"),
])
def test_each_bad_row_is_quarantined_with_its_reason(
    tmp_path: Path, served: pd.DataFrame, rows: list, bad: set[int], reason: str
) -> None:
    store = tmp_path / "log"
    summary = ingest_labels([_batch(tmp_path / "b.parquet", rows)], str(store), "fraud", served, record_id=RID, now=NOW)
    result = summary.batches[0]
    assert result.input_rows == len(rows)
    assert result.accepted_rows + result.quarantined_rows == len(rows)
    assert result.quarantined_rows == len(bad)
    assert result.row_failures[reason] == len(bad)
    held = pq.read_table(result.quarantine_path).to_pandas()
    assert all(reason in f for f in held["failed_expectations"])
    accepted = set(read_labels(str(store), "fraud", record_id=RID)["transaction_id"])
    assert accepted == {rows[i][0] for i in range(len(rows)) if i not in bad}
    report = json.loads(Path(result.report_path).read_text())
    assert report["quarantined_rows"] == len(bad)


def test_labels_across_batches_duplicate_or_conflict(tmp_path: Path, served: pd.DataFrame) -> None:
    store = str(tmp_path / "log")
    ingest_labels([_batch(tmp_path / "b1.parquet", [("t0", 1, _late(0)), ("t1", 0, _late(1))])], store, "fraud",
                  served, record_id=RID, now=NOW)
    second = _batch(tmp_path / "b2.parquet", [("t0", 1, _late(0, 8)), ("t1", 1, _late(1, 8)), ("t2", 0, _late(2))])
    result = ingest_labels([second], store, "fraud", served, record_id=RID, now=NOW).batches[0]
    assert result.row_failures == {"conflicting_label": 1, "duplicate_label": 1}
    assert (result.accepted_rows, result.quarantined_rows) == (1, 2)
    assert sorted(read_labels(store, "fraud", record_id=RID)["transaction_id"]) == ["t0", "t1", "t2"]


@pytest.mark.parametrize("kind", ["missing_column", "wrong_type", "not_parquet", "empty"])
def test_broken_batch_is_rejected_whole(tmp_path: Path, served: pd.DataFrame, kind: str) -> None:
    path = tmp_path / "bad.parquet"
    if kind == "missing_column":
        pq.write_table(pa.table({"transaction_id": ["t0", "t1"], "label": [1, 0]}), path)
        expected_rows, needle = 2, "missing columns ['label_time']"
    elif kind == "wrong_type":
        pq.write_table(pa.table({"transaction_id": ["t0"], "label": ["yes"], "label_time": [_late(0)]}), path)
        expected_rows, needle = 1, "label: string (expected int64)"
    elif kind == "not_parquet":
        path.write_text("transaction_id,label\nt0,1\n")
        expected_rows, needle = 0, "unreadable parquet"
    else:
        path.write_bytes(b"")
        expected_rows, needle = 0, "empty file"
    result = ingest_labels([path], str(tmp_path / "log"), "fraud", served, record_id=RID, now=NOW).batches[0]
    assert result.batch_rejected
    assert (result.input_rows, result.quarantined_rows, result.accepted_rows) == (expected_rows, expected_rows, 0)
    assert needle in result.reasons[0]
    assert Path(result.quarantine_path).read_bytes() == path.read_bytes()


def test_predictions_without_ids_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"\['transaction_id'\]"):
        ingest_labels([], str(tmp_path), "fraud", pd.DataFrame({"ts": []}), record_id=RID)


def test_a_churn_models_labels_are_gated_by_its_record_id(tmp_path: Path) -> None:
    """Under the churn contract (record id ``event_id``) a batch is keyed by ``event_id``: good rows are stored
    under it, an unknown id, a duplicate and a conflict are held with reasons naming it, rows are conserved; a
    batch in fraud's shape (``transaction_id``) is rejected, the message naming the column expected."""
    from tests.support.contracts import CHURN

    rid = CHURN.record_id
    served = pd.DataFrame({rid: [f"e{i}" for i in range(5)], "ts": [T0 + timedelta(hours=i) for i in range(5)]})
    rows = {rid: ["e0", "e1", "e2", "e2", "e3", "e3", "zz"], "label": [1, 0, 1, 1, 0, 1, 0],
            "label_time": [_late(i) for i in range(7)]}  # e2 twice (same label), e3 twice (labels differ)
    batch = tmp_path / "churn.parquet"
    pq.write_table(pa.Table.from_pydict(rows, schema=label_schema(rid)), batch)
    store = str(tmp_path / "log")
    result = ingest_labels([batch], store, "churn", served, record_id=rid, now=NOW).batches[0]
    assert (result.input_rows, result.accepted_rows, result.quarantined_rows) == (7, 3, 4)
    assert result.row_failures == {"conflicting_label": 2, "duplicate_label": 1, "unknown_event_id": 1}
    held = pq.read_table(result.quarantine_path).to_pandas()
    assert dict(zip(held[rid], held["failed_expectations"], strict=True)) == {
        "e2": "duplicate_label", "e3": "conflicting_label", "zz": "unknown_event_id"}
    stored = read_labels(store, "churn", record_id=rid)
    assert list(stored.columns) == [rid, "label", "label_time"]
    assert stored[rid].tolist() == ["e0", "e1", "e2"] and stored["label"].tolist() == [1, 0, 1]

    fraud_shaped = tmp_path / "fraud-shaped.parquet"
    pq.write_table(pa.table({"transaction_id": ["e0"], "label": [1], "label_time": [_late(0)]}), fraud_shaped)
    rejected = ingest_labels([fraud_shaped], store, "churn", served, record_id=rid, now=NOW).batches[0]
    assert rejected.batch_rejected and (rejected.input_rows, rejected.quarantined_rows) == (1, 1)
    assert "missing columns ['event_id'], unexpected ['transaction_id']" in rejected.reasons[0]
    with pytest.raises(DataError, match=r"lack columns \['event_id'\] \(the contract's record_id"):
        ingest_labels([], store, "churn", pd.DataFrame({"transaction_id": [], "ts": []}), record_id=rid)
