"""The reference profile leaves a set's ids and label out by a contract, never by fraud's: a churn set that
records no contract (prepared before sets recorded one) is read under the model config's; with none it is refused."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlops_training import TrainingError
from mlops_training import publish as publish_module
from tests.support.contracts import CHURN


def _task(tmp_path: Path, contract: Any) -> Any:
    n = 40
    frame = pd.DataFrame({
        "event_id": [f"e{i}" for i in range(n)], "customer_id": [f"c{i % 7}" for i in range(n)],
        "event_timestamp": pd.date_range("2026-01-01", periods=n, freq="h", tz="UTC"),
        "tenure_months": np.arange(n) % 24, "monthly_charges": np.linspace(10.0, 90.0, n),
        "plan": ["basic", "pro"] * (n // 2), "churned": [0, 1, 0, 0] * (n // 4)})
    path = tmp_path / "train.parquet"
    frame.to_parquet(path, index=False)
    return SimpleNamespace(data=SimpleNamespace(train_x=np.zeros((n, 1)), frame_path=path, contract=contract))


@pytest.fixture(autouse=True)
def _scores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publish_module, "_served", lambda outcome, x, calibration: np.linspace(0.0, 1.0, len(x)))


def test_a_set_without_a_recorded_contract_is_profiled_under_the_configs(tmp_path: Path) -> None:
    profile = publish_module.reference_profile(_task(tmp_path, None), None, 5, declared=CHURN)  # type: ignore[arg-type]
    assert profile is not None
    assert list(profile["numeric"]) == ["tenure_months", "monthly_charges"]  # no ids, no label
    assert list(profile["categorical"]) == ["plan"]  # not event_id / customer_id


def test_a_set_without_a_contract_under_a_config_without_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="records no contract and the model config declares none"):
        publish_module.reference_profile(_task(tmp_path, None), None, 5, declared=None)  # type: ignore[arg-type]
