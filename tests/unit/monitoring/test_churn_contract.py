"""The monitor reads the label and the record id from the model's contract: a churn window (``event_id``,
``churned``) gets its realized quality and its reference label rate, in memory and in DuckDB, by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlops_config import MonitoringConfig
from mlops_monitoring.drift_duckdb import TableSource
from mlops_monitoring.monitor import assess
from mlops_monitoring.window_duckdb import assess_window
from tests.support.contracts import CHURN

SCORES = [0.9, 0.8, 0.7, 0.2, 0.1, 0.6, 0.3, 0.95]
CHURNED = [1, 0, 1, 1, 0, 0, 0]  # h unlabelled; predicted at 0.5: a b c f; actual: a c d → tp 2, fp 2, fn 1


def _frames() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    reference = pd.DataFrame({"monthly_charges": rng.normal(50, 10, 400), "churned": [1] * 100 + [0] * 300})
    current = pd.DataFrame({"monthly_charges": rng.normal(50, 10, 8), "event_id": list("abcdefgh"), "score": SCORES})
    labels = pd.DataFrame({"event_id": list("abcdefg"), "churned": CHURNED})
    return reference, current, labels


def _check(quality: object) -> None:
    assert quality is not None
    assert (quality.tp, quality.fp, quality.fn, quality.n_labelled) == (2, 2, 1, 7)  # type: ignore[attr-defined]
    assert quality.f1 == pytest.approx(4 / 7)  # type: ignore[attr-defined]


def test_assess_joins_churn_labels_on_the_contracts_record_id() -> None:
    reference, current, labels = _frames()
    cfg = MonitoringConfig(min_f1=0.1, min_rows=1, ignore_columns=["event_id", "churned"])
    _, _, _, quality = assess(reference, current, cfg, labels=labels, contract=CHURN)
    _check(quality)


def test_the_duckdb_window_reads_the_contracts_label_and_record_id(tmp_path: Path) -> None:
    reference, current, labels = _frames()
    reference.to_parquet(tmp_path / "ref.parquet", index=False)
    current.to_parquet(tmp_path / "cur.parquet", index=False)
    cfg = MonitoringConfig(min_f1=0.1, min_rows=1, ignore_columns=["event_id", "churned"])
    done = assess_window(cfg, TableSource.from_path(tmp_path / "ref.parquet", "ref"),
                         TableSource.from_path(tmp_path / "cur.parquet", "cur"), {"source": "t"}, labels=labels,
                         contract=CHURN)
    _check(done.quality)
    assert done.reference_metrics == {"positive_rate": pytest.approx(0.25)}  # 100 of 400 churned


def test_the_monitor_has_no_default_contract() -> None:
    """A caller that forgets the model's contract fails at the call, not silently joining on fraud's names."""
    from mlops_config import ProjectConfig, ServingConfig, TrackingConfig
    from mlops_monitoring import MonitoringError, MonitorRun
    from mlops_monitoring.quality import realized_quality

    reference, current, labels = _frames()
    cfg = MonitoringConfig(min_f1=0.1, min_rows=1, ignore_columns=["event_id", "churned"])
    with pytest.raises(TypeError, match="contract"):
        assess(reference, current, cfg, labels=labels)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="contract"):
        assess_window(cfg, {}, TableSource(()), {})  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="key"):
        realized_quality(current, labels, 0.5)  # type: ignore[call-arg]
    assert realized_quality(current, labels, 0.5, key=CHURN.record_id, label=CHURN.label).tp == 2
    sections = (cfg, ServingConfig(), TrackingConfig(), ProjectConfig(), Path("."), "churn")
    with pytest.raises(TypeError, match="contract"):
        MonitorRun(*sections)  # type: ignore[call-arg]
    assert MonitorRun(*sections, contract=CHURN).declared == CHURN
    with pytest.raises(MonitoringError, match=r"monitoring tabular model 'churn' needs the model config's contract "
                                              r".* expected a section contract in configs/models/churn.yaml"):
        _ = MonitorRun(*sections, contract=None).declared
