"""``split_off_holdout``: the one cut training and evaluation both make (hand-built frames, expected rows by hand)."""

from __future__ import annotations

import pandas as pd
import pytest

from mlops_features import DataError, row_key, split_off_holdout


def _frame() -> pd.DataFrame:
    """Ten rows, shuffled; three share 12:00 and are told apart by transaction id."""
    times = ["2026-01-01 10:00", "2026-01-01 11:00", "2026-01-01 12:00", "2026-01-01 12:00", "2026-01-01 12:00",
             "2026-01-01 13:00", "2026-01-01 14:00", "2026-01-01 15:00", "2026-01-01 16:00", "2026-01-01 17:00"]
    ids = ["t00", "t01", "t04", "t02", "t03", "t05", "t06", "t07", "t08", "t09"]
    df = pd.DataFrame({"event_timestamp": pd.to_datetime(times, utc=True), "transaction_id": ids,
                       "is_fraud": [0, 1, 0, 1, 0, 0, 1, 0, 1, 0]})
    return df.iloc[[7, 2, 9, 0, 4, 3, 8, 1, 6, 5]]


def test_the_newest_fraction_is_the_holdout_and_ties_go_by_transaction_id() -> None:
    rest, holdout = split_off_holdout(_frame(), 0.75)  # int(10 * 0.25) = 2 rows stay: t00, t01
    assert list(rest["transaction_id"]) == ["t00", "t01"]
    assert list(holdout["transaction_id"]) == ["t02", "t03", "t04", "t05", "t06", "t07", "t08", "t09"]
    rest, holdout = split_off_holdout(_frame(), 0.7)  # int(10 * 0.3) = 3: the cut falls inside the 12:00 tie
    assert list(rest["transaction_id"]) == ["t00", "t01", "t02"]
    assert list(holdout["transaction_id"])[:2] == ["t03", "t04"]
    assert row_key(holdout) == {"event_timestamp": "2026-01-01T12:00:00+00:00", "transaction_id": "t03"}
    assert list(rest.index) == [0, 1, 2] and list(holdout.index) == list(range(7))


def test_fraction_edges() -> None:
    rest, holdout = split_off_holdout(_frame(), 0.2)  # the default: 8 | 2
    assert (len(rest), len(holdout)) == (8, 2) and list(holdout["transaction_id"]) == ["t08", "t09"]
    rest, holdout = split_off_holdout(_frame(), 0.01)  # int(10 * 0.99) = 9: the newest row alone
    assert list(holdout["transaction_id"]) == ["t09"] and len(rest) == 9
    rest, holdout = split_off_holdout(_frame(), 0.99)  # int(10 * 0.01) = 0: nothing left to train on
    assert len(rest) == 0 and len(holdout) == 10
    rest, holdout = split_off_holdout(_frame().iloc[:0], 0.2)
    assert len(rest) == len(holdout) == 0 and row_key(holdout) is None


@pytest.mark.parametrize("bad", [0, 1, 0.0, 1.0, -0.2, 1.5, float("nan"), "0.2", None, True])
def test_a_fraction_outside_zero_to_one_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(DataError) as caught:
        split_off_holdout(_frame(), bad)  # type: ignore[arg-type]
    assert f"holdout fraction {bad!r} must be a number between 0 and 1 (exclusive)" in str(caught.value)
