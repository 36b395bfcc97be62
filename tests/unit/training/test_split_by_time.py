"""``split_by_time``: training's train/validation cut orders rows by event time, ties by the contract's record id
(hand-built frames, expected rows by hand)."""

from __future__ import annotations

import pandas as pd
import pytest

from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_training.tabular_data import split_by_time
from tests.support.contracts import CHURN


def _frame(record_id: str) -> pd.DataFrame:
    """Six rows; four share 12:00 and sit in the file as r4, r1, r3, r2 (a sort by time alone keeps that order)."""
    times = ["2026-01-01 10:00", "2026-01-01 12:00", "2026-01-01 12:00", "2026-01-01 12:00", "2026-01-01 12:00",
             "2026-01-01 13:00"]
    return pd.DataFrame({record_id: ["r0", "r4", "r1", "r3", "r2", "r5"],
                         "event_timestamp": pd.to_datetime(times, utc=True), "y": [0, 1, 0, 1, 0, 1]})


def test_a_churn_contract_splits_ties_by_event_id() -> None:
    train, val = split_by_time(_frame("event_id"), 0.5, record_id=CHURN.record_id)  # int(6 * 0.5) = 3 train
    assert list(train["event_id"]) == ["r0", "r1", "r2"]
    assert list(val["event_id"]) == ["r3", "r4", "r5"]
    assert list(train.index) == [0, 1, 2] and list(val.index) == [0, 1, 2]


def test_fraud_still_splits_ties_by_transaction_id() -> None:
    train, val = split_by_time(_frame("transaction_id"), 0.5, record_id=FRAUD_CONTRACT.record_id)
    assert list(train["transaction_id"]) == ["r0", "r1", "r2"]
    assert list(val["transaction_id"]) == ["r3", "r4", "r5"]


def test_the_record_id_is_required() -> None:
    with pytest.raises(TypeError, match="record_id"):
        split_by_time(_frame("event_id"), 0.5)  # type: ignore[call-arg]
