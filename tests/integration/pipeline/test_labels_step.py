"""The loop's labels step: every served prediction's label arrives a week later, through the labels gate (the
batch path and the CronJob's landing path), and realized F1 per version equals scikit-learn's on the same rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import f1_score

from mlops_config import MonitoringConfig
from mlops_model import DEFAULT_CONTRACT as FRAUD  # equal to configs/models/fraud.yaml's (test_contract_config)
from mlops_pipeline.labels_step import labels_a_week_later, performance_of, version_figures
from tests.support.contracts import CHURN

pytestmark = pytest.mark.integration
# Yesterday at noon: the served rows span NOW - 30 min to NOW - 17 min and performance_of scores whole days
# (monitoring's performance_window "1D"); with NOW read from the clock, a run importing this module between 00:17
# and 00:30 UTC put the rows in two windows and the report gave the later window's F1 (CI failed so).
NOW = (datetime.now(UTC) - timedelta(days=1)).replace(hour=12, minute=0, second=0, microsecond=0)


def _served(uri: str) -> pd.DataFrame:
    from mlops_serving import write_prediction_log

    rng = np.random.default_rng(5)
    n = 400
    log = pd.DataFrame({"request_id": [f"r{i}" for i in range(2 * n)],
                        "ts": [NOW - timedelta(minutes=30) + timedelta(seconds=i) for i in range(2 * n)],
                        "model_name": "fraud", "model_version": ["1"] * n + ["2"] * n,
                        "transaction_id": [f"t{i}" for i in range(2 * n)], "score": rng.beta(0.8, 2.0, 2 * n)})
    write_prediction_log(uri, "fraud", log)
    return log.assign(is_fraud=(rng.random(2 * n) < log["score"]).astype(int))


@pytest.mark.parametrize("landed", [False, True])
def test_labels_a_week_late_give_each_versions_realized_f1(tmp_path: Path, landed: bool) -> None:
    uri = str(tmp_path / "log")
    truth = _served(uri)
    unknown = pd.DataFrame({"transaction_id": ["never-served"], "is_fraud": [1]})  # not served: not labelled
    gated = labels_a_week_later(uri, "fraud", pd.concat([truth, unknown]), tmp_path / "work",
                                landing_uri=str(tmp_path / "landing") if landed else None, contract=FRAUD)
    assert (gated["input_rows"], gated["accepted_rows"], gated["quarantined_rows"]) == (800, 800, 0)
    arrived = datetime.fromisoformat(gated["arrived"])
    assert arrived - truth["ts"].max() == timedelta(days=7, minutes=1)  # the last label, a minute before the gate
    report = performance_of(uri, "fraud", MonitoringConfig(), fallback_f1=0.5, contract=FRAUD)
    figures = version_figures(report["windows"])
    for version in ("1", "2"):
        mine = truth[truth["model_version"] == version]
        assert figures[f"v{version}"]["realized_f1"] == pytest.approx(f1_score(mine["is_fraud"], mine["score"] >= 0.5))
        assert figures[f"v{version}"]["labelled"] == 400
    delay = report["windows"][0]["label_delay_hours"]["p50"]
    assert delay == pytest.approx(7 * 24, abs=0.01)


def test_each_version_is_compared_with_its_validation_f1_at_its_threshold_not_val_f1(tmp_path: Path) -> None:
    """v1 records a threshold of 0.3 and the validation F1 there; the trainer's val_f1 (raw scores at 0.5) is another
    figure. Realized F1 at 0.3 is 20 % below the recorded F1 (a drop) and level with val_f1: judged against val_f1
    (the old reference) v1 would pass. v2 records no threshold (legacy): it falls back to val_f1, and says so."""
    from mlops_model import resolve_threshold

    uri = str(tmp_path / "log")
    truth = _served(uri)
    labels_a_week_later(uri, "fraud", truth, tmp_path / "work", contract=FRAUD)
    v1, v2 = (truth[truth["model_version"] == v] for v in ("1", "2"))
    realized_1 = f1_score(v1["is_fraud"], v1["score"] >= 0.3)
    realized_2 = f1_score(v2["is_fraud"], v2["score"] >= 0.5)
    val_f1 = realized_1  # the trainer's figure at 0.5 on raw scores: v1's realized F1 sits right on it
    metas = {"1": {"decision_threshold": {"value": 0.3, "criterion": "f1", "f1": realized_1 / 0.8}}, "2": {}}

    def threshold_of(version: str):  # what mlops_serving.version_thresholds gives from each model.json
        return resolve_threshold(metas[version], None, override_key="monitoring.decision_threshold",
                                 model=f"v{version}")

    report = performance_of(uri, "fraud", MonitoringConfig(performance_min_labelled=50), val_f1, threshold_of,
                            contract=FRAUD)
    one, two = report["verdicts"]["1"], report["verdicts"]["2"]
    assert one["verdict"] == "drop" and one["realized_drop"] == pytest.approx(0.2)
    assert one["reference_f1"] == pytest.approx(realized_1 / 0.8)
    assert f"at threshold 0.3 vs v1's validation F1 {realized_1 / 0.8:.4f} at its recorded threshold 0.3" \
        in one["reason"]
    assert two["reference_f1"] == pytest.approx(val_f1)
    assert two["realized_drop"] == pytest.approx(1 - realized_2 / val_f1)
    assert ("v2 records no validation F1 at a decision threshold (exported before per-version thresholds): "
            f"falling back to the candidate's training val_f1 (raw scores at 0.5) {val_f1:.4f}") in two["reason"]


def test_the_week_late_batch_reads_the_contracts_record_id_and_label(tmp_path: Path) -> None:
    """A churn model's log holds ``event_id``; its truth ``event_id, churned``: the batch carries those ids under
    ``event_id`` (the label batch format keyed by the contract's record id) and the labels, a week after each
    prediction."""
    from mlops_pipeline.labels_step import land_week_late_labels
    from mlops_serving import write_prediction_log

    uri = str(tmp_path / "log")
    log = pd.DataFrame({"request_id": ["r0", "r1", "r2"], "ts": [NOW, NOW + timedelta(minutes=1), NOW],
                        "model_name": "churn", "model_version": "1", "event_id": ["e0", "e1", "e2"],
                        "score": [0.1, 0.7, 0.4]})
    write_prediction_log(uri, "churn", log)
    truth = pd.DataFrame({"event_id": ["e1", "e0", "e9"], "churned": [1, 0, 1]})  # e2 unknown, e9 never served
    path, arrived = land_week_late_labels(uri, "churn", truth, tmp_path / "batch", contract=CHURN)
    batch = pd.read_parquet(path).sort_values("event_id").reset_index(drop=True)
    assert list(batch.columns) == ["event_id", "label", "label_time"]
    assert batch["event_id"].tolist() == ["e0", "e1"] and batch["label"].tolist() == [0, 1]
    assert (batch["label_time"] - pd.Series([NOW, NOW + timedelta(minutes=1)])).tolist() == [timedelta(days=7)] * 2
    assert arrived == pd.Timestamp(NOW + timedelta(days=7, minutes=2))


@pytest.mark.parametrize("landed", [False, True])
def test_a_churn_models_labels_are_gated_and_joined_on_its_record_id(tmp_path: Path, landed: bool) -> None:
    """A churn model (record id ``event_id``, label ``churned``) served 300 predictions, logged under its contract
    (no ``transaction_id`` anywhere): its week-late labels pass the gate and join the log on ``event_id``, and each
    version's realized F1 is scikit-learn's on the same rows."""
    from mlops_features import read_labels
    from mlops_serving import write_prediction_log

    rng = np.random.default_rng(11)
    n = 300
    uri = str(tmp_path / "log")
    log = pd.DataFrame({"request_id": [f"r{i}" for i in range(n)],
                        "ts": [NOW - timedelta(minutes=30) + timedelta(seconds=i) for i in range(n)],
                        "model_name": "churn", "model_version": ["1"] * (n // 2) + ["2"] * (n // 2),
                        "event_id": [f"e{i}" for i in range(n)], "customer_id": [f"c{i % 7}" for i in range(n)],
                        "score": rng.beta(0.8, 2.0, n)})
    write_prediction_log(uri, "churn", log)
    truth = log[["event_id"]].assign(churned=(rng.random(n) < log["score"]).astype(int))
    gated = labels_a_week_later(uri, "churn", truth, tmp_path / "work", contract=CHURN,
                                landing_uri=str(tmp_path / "landing") if landed else None)
    assert (gated["input_rows"], gated["accepted_rows"], gated["quarantined_rows"]) == (n, n, 0)
    stored = read_labels(uri, "churn", record_id="event_id")
    assert sorted(stored["event_id"]) == sorted(truth["event_id"])
    report = performance_of(uri, "churn", MonitoringConfig(), fallback_f1=0.5, contract=CHURN)
    figures = version_figures(report["windows"])
    expected = log.merge(truth, on="event_id")
    for version in ("1", "2"):
        mine = expected[expected["model_version"] == version]
        assert figures[f"v{version}"]["labelled"] == n // 2
        assert figures[f"v{version}"]["realized_f1"] == pytest.approx(f1_score(mine["churned"], mine["score"] >= 0.5))
