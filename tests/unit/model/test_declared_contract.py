"""The encoder follows the contract it is given: a second use case's fields, label, log-scaled and derived
columns, none of the reference model's names."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_model import EncoderSpec
from tests.support.contracts import CHURN


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame({
        "customer_id": ["c1", "c2", "c3", "c4"],
        "usual_charges": [30.0, 50.0, 20.0, 90.0],  # a feature-store column, before the fields in frame order
        "region": ["north", "south", "north", None],
        "plan": ["pro", "basic", "basic", "pro"],
        "monthly_charges": [29.0, 60.0, 18.5, 400.0],
        "tenure_months": [3, 40, 12, 7],
        "amount": [10.0, 1000.0, 100.0, 10_000.0],  # the reference model's log-scaled name: here a plain column
        "churned": [0, 1, 0, 1],
    })


def test_fit_reads_the_columns_the_contract_declares(frame: pd.DataFrame) -> None:
    spec = EncoderSpec.fit(frame, contract=CHURN)
    # the contract's numeric fields in declared order, then the frame's other numeric columns; label and key skipped
    assert [(c.name, c.log) for c in spec.numeric] == [
        ("tenure_months", False), ("monthly_charges", True), ("usual_charges", False), ("amount", False)]
    assert [(d.name, d.args) for d in spec.derived] == [("charges_vs_usual", ("monthly_charges", "usual_charges"))]
    assert [(c.name, c.vocab) for c in spec.categorical] == [("plan", ("basic", "pro")), ("region", ("north", "south"))]
    assert spec.input_dim == 4 + 1 + 3 + 3


def test_the_moments_are_those_of_the_declared_transforms(frame: pd.DataFrame) -> None:
    spec = EncoderSpec.fit(frame, contract=CHURN)
    charges = np.array([29.0, 60.0, 18.5, 400.0])
    logged = np.log1p(charges)  # all positive: sign(x) * log1p(|x|) is log1p(x)
    assert spec.numeric[1].mean == pytest.approx(logged.mean(), rel=1e-12)
    assert spec.numeric[1].std == pytest.approx(logged.std(), rel=1e-12)
    amount = np.array([10.0, 1000.0, 100.0, 10_000.0])
    assert spec.numeric[3].mean == pytest.approx(amount.mean(), rel=1e-12)  # raw: not a churn log prefix
    ratio = np.log((charges + 1) / (np.array([30.0, 50.0, 20.0, 90.0]) + 1))
    assert spec.derived[0].mean == pytest.approx(ratio.mean(), rel=1e-12)
    assert spec.derived[0].std == pytest.approx(ratio.std(), rel=1e-12)
    row = spec.encode_frame(frame.iloc[[3]])[0]
    assert row[1] == pytest.approx((np.log1p(400.0) - logged.mean()) / logged.std(), rel=1e-6)
    assert row[4] == pytest.approx((ratio[3] - ratio.mean()) / ratio.std(), rel=1e-6)
    assert list(row[5:8]) == [0.0, 1.0, 0.0]  # plan "pro"
    assert list(row[8:11]) == [0.0, 0.0, 1.0]  # region missing: the "other" slot


def test_the_same_frame_under_fraud_s_contract_is_encoded_differently(frame: pd.DataFrame) -> None:
    """What changed the columns above is the contract, not the frame."""
    default = EncoderSpec.fit(frame, contract=FRAUD_CONTRACT)
    assert [c.name for c in default.numeric if c.log] == ["amount"]
    assert default.derived == ()
    assert [c.name for c in default.categorical] == []  # none of the default contract's categoricals is here


def test_a_fit_without_a_contract_fails_at_the_call(frame: pd.DataFrame) -> None:
    """No silent fallback to the reference model's contract: the caller must pass its model's."""
    with pytest.raises(TypeError, match="contract"):
        EncoderSpec.fit(frame)  # type: ignore[call-arg]
    from mlops_model.encoder import default_numeric

    with pytest.raises(TypeError, match="contract"):
        default_numeric(frame)  # type: ignore[call-arg]
    assert default_numeric(frame, contract=CHURN)[:2] == ["tenure_months", "monthly_charges"]
