"""``split_off_holdout``: the one cut training and evaluation both make (hand-built frames, expected rows by hand)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from mlops_features import DataError, ingest, read_validated, row_key, split_off_holdout
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from tests.support.contracts import CHURN

TX = FRAUD_CONTRACT.record_id  # transaction_id


def _frame() -> pd.DataFrame:
    """Ten rows, shuffled; three share 12:00 and are told apart by transaction id."""
    times = ["2026-01-01 10:00", "2026-01-01 11:00", "2026-01-01 12:00", "2026-01-01 12:00", "2026-01-01 12:00",
             "2026-01-01 13:00", "2026-01-01 14:00", "2026-01-01 15:00", "2026-01-01 16:00", "2026-01-01 17:00"]
    ids = ["t00", "t01", "t04", "t02", "t03", "t05", "t06", "t07", "t08", "t09"]
    df = pd.DataFrame({"event_timestamp": pd.to_datetime(times, utc=True), "transaction_id": ids,
                       "is_fraud": [0, 1, 0, 1, 0, 0, 1, 0, 1, 0]})
    return df.iloc[[7, 2, 9, 0, 4, 3, 8, 1, 6, 5]]


def test_the_newest_fraction_is_the_holdout_and_ties_go_by_transaction_id() -> None:
    rest, holdout = split_off_holdout(_frame(), 0.75, record_id=TX)  # int(10 * 0.25) = 2 rows stay: t00, t01
    assert list(rest["transaction_id"]) == ["t00", "t01"]
    assert list(holdout["transaction_id"]) == ["t02", "t03", "t04", "t05", "t06", "t07", "t08", "t09"]
    rest, holdout = split_off_holdout(_frame(), 0.7, record_id=TX)  # int(10 * 0.3) = 3: the cut is inside the 12:00 tie
    assert list(rest["transaction_id"]) == ["t00", "t01", "t02"]
    assert list(holdout["transaction_id"])[:2] == ["t03", "t04"]
    assert row_key(holdout, record_id=TX) == {"event_timestamp": "2026-01-01T12:00:00+00:00", "transaction_id": "t03"}
    assert list(rest.index) == [0, 1, 2] and list(holdout.index) == list(range(7))


def test_fraction_edges() -> None:
    rest, holdout = split_off_holdout(_frame(), 0.2, record_id=TX)  # the default: 8 | 2
    assert (len(rest), len(holdout)) == (8, 2) and list(holdout["transaction_id"]) == ["t08", "t09"]
    rest, holdout = split_off_holdout(_frame(), 0.01, record_id=TX)  # int(10 * 0.99) = 9: the newest row alone
    assert list(holdout["transaction_id"]) == ["t09"] and len(rest) == 9
    rest, holdout = split_off_holdout(_frame(), 0.99, record_id=TX)  # int(10 * 0.01) = 0: nothing left to train on
    assert len(rest) == 0 and len(holdout) == 10
    rest, holdout = split_off_holdout(_frame().iloc[:0], 0.2, record_id=TX)
    assert len(rest) == len(holdout) == 0 and row_key(holdout, record_id=TX) is None


@pytest.mark.parametrize("bad", [0, 1, 0.0, 1.0, -0.2, 1.5, float("nan"), "0.2", None, True])
def test_a_fraction_outside_zero_to_one_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(DataError) as caught:
        split_off_holdout(_frame(), bad, record_id=TX)  # type: ignore[arg-type]
    assert f"holdout fraction {bad!r} must be a number between 0 and 1 (exclusive)" in str(caught.value)


def _churn_frame() -> pd.DataFrame:
    """Churn rows (record id ``event_id``, no ``transaction_id``): four share 12:00 and sit in the file in the order
    e05, e02, e04, e03, so a sort by time alone would keep that order."""
    times = ["2026-01-01 10:00", "2026-01-01 11:00", "2026-01-01 12:00", "2026-01-01 12:00", "2026-01-01 12:00",
             "2026-01-01 12:00", "2026-01-01 13:00", "2026-01-01 14:00"]
    ids = ["e00", "e01", "e05", "e02", "e04", "e03", "e06", "e07"]
    return pd.DataFrame({"event_id": ids, "event_timestamp": pd.to_datetime(times, utc=True),
                         "customer_id": [f"C{i}" for i in range(8)], "churned": [0, 1, 0, 1, 0, 1, 0, 1]})


def test_a_churn_contract_breaks_time_ties_by_its_record_id() -> None:
    rest, holdout = split_off_holdout(_churn_frame(), 0.5, record_id=CHURN.record_id)  # int(8 * 0.5) = 4 stay
    assert list(rest["event_id"]) == ["e00", "e01", "e02", "e03"]  # by (time, event_id), not file order
    assert list(holdout["event_id"]) == ["e04", "e05", "e06", "e07"]
    assert row_key(holdout, record_id=CHURN.record_id) == {"event_timestamp": "2026-01-01T12:00:00+00:00",
                                                           "event_id": "e04"}


def test_the_validated_area_is_read_and_ingested_in_time_then_record_id_order(tmp_path: Path) -> None:
    validated, source = tmp_path / "validated", tmp_path / "source"
    validated.mkdir()
    frame = _churn_frame()
    frame.iloc[4:].to_parquet(validated / "a.parquet", index=False)  # e04, e03, e06, e07
    frame.iloc[:4].to_parquet(validated / "b.parquet", index=False)  # e00, e01, e05, e02
    expected = ["e00", "e01", "e02", "e03", "e04", "e05", "e06", "e07"]
    assert list(read_validated(validated, record_id=CHURN.record_id)["event_id"]) == expected
    assert ingest(validated, source, record_id=CHURN.record_id) == {"transactions": 8}
    assert list(pd.read_parquet(source / "transactions.parquet")["event_id"]) == expected


def test_the_record_id_is_required() -> None:
    with pytest.raises(TypeError, match="record_id"):
        split_off_holdout(_churn_frame(), 0.5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="record_id"):
        read_validated("nowhere")  # type: ignore[call-arg]
