"""The one encoding: hand-computed values, JSON round trip, unknown categories, missing values, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from mlops_features import DataError, encode, fit_encoder

TRAIN = pd.DataFrame({
    "amount": [10.0, 100.0, 1000.0],
    "user_txn_count_1h": [1, 2, 6],
    "user_amount_mean_7d": [10.0, 10.0, 100.0],
    "category": ["grocery", "travel", "grocery"],
    "channel": ["online", "online", "card_present"],
})


def test_values_match_a_hand_computation() -> None:
    enc = fit_encoder(TRAIN)
    # 3 numeric + 1 derived + (2 + 1) category + (2 + 1) channel
    assert enc["input_dim"] == 3 + 1 + 3 + 3
    x = encode(TRAIN, enc)
    assert x.dtype == np.float32 and x.shape == (3, 10)
    log_amount = [math.log1p(a) for a in (10.0, 100.0, 1000.0)]
    mean, std = np.mean(log_amount), np.std(log_amount)
    assert x[:, 0] == pytest.approx([(v - mean) / std for v in log_amount], rel=1e-5)
    counts = np.array([1, 2, 6])
    assert x[:, 1] == pytest.approx((counts - counts.mean()) / counts.std(), rel=1e-5)
    ratio = [math.log(11 / 11), math.log(101 / 11), math.log(1001 / 101)]
    assert x[:, 3] == pytest.approx((np.array(ratio) - np.mean(ratio)) / np.std(ratio), rel=1e-5)
    # category vocabulary sorted: grocery, travel, <other>; channel: card_present, online, <other>
    assert x[:, 4:7].tolist() == [[1, 0, 0], [0, 1, 0], [1, 0, 0]]
    assert x[:, 7:10].tolist() == [[0, 1, 0], [0, 1, 0], [1, 0, 0]]


def test_the_spec_survives_json_and_encodes_the_same() -> None:
    enc = fit_encoder(TRAIN)
    again = json.loads(json.dumps(enc))
    np.testing.assert_array_equal(encode(TRAIN, enc), encode(TRAIN, again))


def test_unknown_category_and_missing_values_have_a_defined_encoding() -> None:
    enc = fit_encoder(TRAIN)
    row = pd.DataFrame({"amount": [np.nan], "user_txn_count_1h": [None], "user_amount_mean_7d": [10.0],
                        "category": ["jewelry"], "channel": [None]})
    x = encode(row, enc)[0]
    assert x[0] == 0.0 and x[1] == 0.0  # the training mean
    assert x[4:7].tolist() == [0, 0, 1]  # the "other" slot
    assert x[7:10].tolist() == [0, 0, 1]
    assert np.isfinite(x).all()


def test_column_order_of_the_frame_does_not_matter() -> None:
    enc = fit_encoder(TRAIN)
    np.testing.assert_array_equal(encode(TRAIN[TRAIN.columns[::-1]], enc), encode(TRAIN, enc))


def test_bad_input_is_named() -> None:
    enc = fit_encoder(TRAIN)
    with pytest.raises(DataError, match=r"columns \['channel'\] are missing"):
        encode(TRAIN.drop(columns=["channel"]), enc)
    with pytest.raises(DataError, match="'amount' must be numeric"):
        encode(TRAIN.assign(amount=["a", "b", "c"]), enc)
    with pytest.raises(DataError, match="empty"):
        fit_encoder(TRAIN.iloc[:0])
    with pytest.raises(DataError, match="version"):
        encode(TRAIN, {**enc, "version": 99})
