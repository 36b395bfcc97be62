"""Realized performance per window and version, and the CBPE estimate; expected values from scikit-learn / by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import f1_score, precision_score, recall_score, roc_auc_score

from mlops_features import label_schema
from mlops_model.statistics import expected_calibration_error
from mlops_monitoring import (
    MonitoringError,
    estimate_performance,
    expected_auc,
    expected_confusion,
    ingest_label_batches,
    performance_metrics_text,
    performance_report,
)
from mlops_serving import write_prediction_log

RID = "transaction_id"  # fraud's contract record_id (configs/models/fraud.yaml)
FRAUD_LABELS = label_schema(RID)

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_ece_by_hand() -> None:
    # bins of width 0.5: [0.2, 0.4] -> mean 0.3 vs rate 0.5; [0.6, 0.8] -> mean 0.7 vs rate 1.0
    ece = expected_calibration_error([0, 1, 1, 1], [0.2, 0.4, 0.6, 0.8], bins=2)
    assert ece == pytest.approx(0.5 * 0.2 + 0.5 * 0.3)


def test_expected_confusion_and_auc_by_hand() -> None:
    c = expected_confusion([0.9, 0.6, 0.3, 0.1], 0.5)
    assert c == pytest.approx({"tp": 1.5, "fp": 0.5, "fn": 0.4, "tn": 1.6})
    s = np.array([0.9, 0.6, 0.6, 0.3, 0.1])
    num = den = 0.0
    for i in range(len(s)):
        for j in range(len(s)):
            if i != j:
                w = s[i] * (1 - s[j])
                den += w
                num += w * (1.0 if s[i] > s[j] else 0.5 if s[i] == s[j] else 0.0)
    assert expected_auc(s) == pytest.approx(num / den)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_expected_auc_with_many_ties_equals_the_pairwise_sum(seed: int) -> None:
    s = np.round(np.random.default_rng(seed).beta(0.8, 2.0, 300), 1)  # 11 distinct scores: ties everywhere
    w = s[:, None] * (1 - s[None, :])
    np.fill_diagonal(w, 0.0)
    right = (s[:, None] > s[None, :]) + 0.5 * (s[:, None] == s[None, :])
    assert expected_auc(s) == pytest.approx(float((w * right).sum() / w.sum()), rel=1e-12)


def test_cbpe_matches_realized_on_calibrated_scores() -> None:
    rng = np.random.default_rng(7)
    s = rng.beta(0.6, 3.0, 40_000)
    y = rng.random(len(s)) < s  # calibrated by construction
    est = estimate_performance(s, 0.5)
    assert est.f1 == pytest.approx(f1_score(y, s >= 0.5), abs=0.015)
    assert est.auc == pytest.approx(roc_auc_score(y, s), abs=0.01)
    low, high = est.intervals["f1"]
    assert low < est.f1 < high


def test_cbpe_refuses_non_probabilities() -> None:
    with pytest.raises(MonitoringError, match=r"score 1\.5 is not a probability"):
        estimate_performance([0.2, 1.5], 0.5)


def _log_and_labels(tmp_path: Path) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(3)
    n = 400
    ts = [T0 + timedelta(minutes=7 * i) for i in range(n)]  # two days
    score = rng.random(n)
    log = pd.DataFrame({"request_id": [f"r{i}" for i in range(n)], "ts": ts, "model_name": "fraud",
                        "model_version": ["1" if i % 2 else "2" for i in range(n)],
                        "transaction_id": [f"t{i}" for i in range(n)], "score": score})
    uri = str(tmp_path / "log")
    write_prediction_log(uri, "fraud", log)
    labelled = log.iloc[: 300].copy()  # the last 100 predictions have no label yet
    labelled["label"] = (rng.random(300) < labelled["score"]).astype(int)
    labelled["label_time"] = labelled["ts"] + pd.to_timedelta(rng.integers(1, 200, 300), unit="h")
    batch = tmp_path / "labels.parquet"
    pq.write_table(pa.Table.from_pandas(labelled[["transaction_id", "label", "label_time"]], schema=FRAUD_LABELS,
                                        preserve_index=False), batch)
    summary = ingest_label_batches([batch], uri, "fraud", record_id=RID, now=T0 + timedelta(days=30))
    assert (summary.accepted_rows, summary.quarantined_rows) == (300, 0)
    return uri, log, labelled


def test_report_per_window_and_version_matches_sklearn(tmp_path: Path) -> None:
    uri, log, labelled = _log_and_labels(tmp_path)
    report = performance_report(uri, "fraud", 0.5, record_id=RID, window="1D", reference_f1=0.9, min_labelled=20)
    keys = [(w.window_start[:10], w.version) for w in report.windows]
    assert keys == [("2026-11-01", "1"), ("2026-11-01", "2"), ("2026-11-02", "1"), ("2026-11-02", "2")]
    day = pd.to_datetime(log["ts"], utc=True).dt.strftime("%Y-%m-%d")
    for w in report.windows:
        rows = log[(day == w.window_start[:10]) & (log["model_version"] == w.version)]
        lab = labelled[labelled["transaction_id"].isin(rows["transaction_id"])]
        assert (w.n_predictions, w.n_labelled) == (len(rows), len(lab))
        assert w.label_coverage == pytest.approx(len(lab) / len(rows))
        pred = lab["score"] >= 0.5
        assert w.realized["precision"] == pytest.approx(precision_score(lab["label"], pred))
        assert w.realized["recall"] == pytest.approx(recall_score(lab["label"], pred))
        assert w.realized["f1"] == pytest.approx(f1_score(lab["label"], pred))
        assert w.realized["auc"] == pytest.approx(roc_auc_score(lab["label"], lab["score"]))
        hours = (lab["label_time"] - lab["ts"]).dt.total_seconds() / 3600
        assert w.label_delay_hours["p50"] == pytest.approx(float(np.quantile(hours, 0.5)))
        assert w.label_delay_hours["max"] == pytest.approx(hours.max())
        # the estimation error is reported only where every prediction of the window is labelled
        assert (w.estimation_error["f1"] is None) == (len(lab) < len(rows))
    assert {v["verdict"] for v in report.verdicts.values()} == {"drop"}  # F1 of random scores is far below 0.9
    text = performance_metrics_text(report)
    assert 'mlops_performance{metric="f1",model="fraud",source="realized",version="1"}' in text
    assert "mlops_performance_realized_drop" in text


def test_verdict_is_inconclusive_without_enough_labels_or_a_reference(tmp_path: Path) -> None:
    uri, _, _ = _log_and_labels(tmp_path)
    few = performance_report(uri, "fraud", 0.5, record_id=RID, window="1D", reference_f1=0.1, min_labelled=10_000)
    assert {v["verdict"] for v in few.verdicts.values()} == {"inconclusive"}
    none = performance_report(uri, "fraud", 0.5, record_id=RID, window="1D", min_labelled=1)
    assert {v["reason"] for v in none.verdicts.values()} == {
        "no reference F1 to compare with: no reference F1 was given"}
    ok = performance_report(uri, "fraud", 0.5, record_id=RID, window="1D", reference_f1=0.01, min_labelled=20)
    assert {v["verdict"] for v in ok.verdicts.values()} == {"ok"}


def test_labels_for_ids_never_served_are_quarantined(tmp_path: Path) -> None:
    uri, _, _ = _log_and_labels(tmp_path)
    batch = tmp_path / "late.parquet"
    pq.write_table(pa.Table.from_pydict({"transaction_id": ["t399", "ghost"], "label": [1, 1],
                                         "label_time": [T0 + timedelta(days=10)] * 2}, schema=FRAUD_LABELS), batch)
    result = ingest_label_batches([batch], uri, "fraud", record_id=RID, now=T0 + timedelta(days=30)).batches[0]
    assert result.row_failures == {"unknown_transaction_id": 1}
    assert result.accepted_rows == 1


def test_each_version_is_judged_against_its_own_reference_and_the_reason_names_it(tmp_path: Path) -> None:
    from mlops_model import ReferenceF1

    uri, _, labelled = _log_and_labels(tmp_path)
    last_day = labelled[labelled["ts"] >= T0 + timedelta(days=1)]
    realized = {v: f1_score(g["label"], g["score"] >= 0.5) for v, g in last_day.groupby("model_version")}
    refs = {"1": ReferenceF1(realized["1"] / 0.7, "model", 0.5, "v1's validation F1 at its recorded threshold"),
            "2": ReferenceF1(realized["2"] / 0.97, "model", 0.5, "v2's validation F1 at its recorded threshold")}
    report = performance_report(uri, "fraud", 0.5, record_id=RID, window="1D", min_labelled=20,
                                reference_of=refs.__getitem__)
    one, two = report.verdicts["1"], report.verdicts["2"]
    assert (one["verdict"], two["verdict"]) == ("drop", "ok")  # 30 % and 3 % below their own references
    assert one["realized_drop"] == pytest.approx(0.3) and two["realized_drop"] == pytest.approx(0.03)
    assert one["reference_f1"] == pytest.approx(realized["1"] / 0.7)
    assert "at threshold 0.5 vs v1's validation F1 at its recorded threshold" in one["reason"]
