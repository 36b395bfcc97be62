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
from mlops_pipeline.labels_step import labels_a_week_later, performance_of, version_figures

pytestmark = pytest.mark.integration
NOW = datetime.now(UTC).replace(microsecond=0)


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
                                landing_uri=str(tmp_path / "landing") if landed else None)
    assert (gated["input_rows"], gated["accepted_rows"], gated["quarantined_rows"]) == (800, 800, 0)
    arrived = datetime.fromisoformat(gated["arrived"])
    assert arrived - truth["ts"].max() == timedelta(days=7, minutes=1)  # the last label, a minute before the gate
    report = performance_of(uri, "fraud", MonitoringConfig(), reference_f1=0.5)
    figures = version_figures(report["windows"])
    for version in ("1", "2"):
        mine = truth[truth["model_version"] == version]
        assert figures[f"v{version}"]["realized_f1"] == pytest.approx(f1_score(mine["is_fraud"], mine["score"] >= 0.5))
        assert figures[f"v{version}"]["labelled"] == 400
    delay = report["windows"][0]["label_delay_hours"]["p50"]
    assert delay == pytest.approx(7 * 24, abs=0.01)
