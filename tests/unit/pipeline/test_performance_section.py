"""The report's performance section, from a real PerformanceReport rendered into the HTML report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mlops_features import label_schema
from mlops_monitoring import ingest_label_batches, performance_report
from mlops_pipeline.performance_section import performance_section
from mlops_pipeline.report import render_report
from mlops_serving import write_prediction_log

RID = "transaction_id"  # fraud's contract record_id (configs/models/fraud.yaml)
FRAUD_LABELS = label_schema(RID)

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_section_lists_realized_and_estimated_f1_per_version(tmp_path: Path) -> None:
    n = 60
    log = pd.DataFrame({"request_id": [f"r{i}" for i in range(n)], "ts": [T0 + timedelta(minutes=i) for i in range(n)],
                        "model_name": "fraud", "model_version": ["4" if i % 3 else "3" for i in range(n)],
                        "transaction_id": [f"t{i}" for i in range(n)], "score": [(i % 10) / 10 for i in range(n)]})
    uri = str(tmp_path / "log")
    write_prediction_log(uri, "fraud", log)
    batch = tmp_path / "labels.parquet"
    pq.write_table(pa.Table.from_pydict({"transaction_id": list(log["transaction_id"]),
                                         "label": [int(i % 10 >= 6) for i in range(n)],
                                         "label_time": [T0 + timedelta(days=7)] * n}, schema=FRAUD_LABELS), batch)
    ingest_label_batches([batch], uri, "fraud", record_id=RID, now=T0 + timedelta(days=8))
    report = performance_report(uri, "fraud", 0.5, record_id=RID, window="1D", reference_f1=0.8, min_labelled=10)
    section = performance_section(SimpleNamespace(facts={"performance": report.to_dict()}))  # type: ignore[arg-type]
    assert section is not None
    assert [r[1] for r in section.table["rows"]] == ["v3", "v4"]
    # scores >= 0.5 flagged, labels on scores >= 0.6: per version F1 = 2tp / (2tp + fp) with fp the 0.5 scores
    for row, version in zip(section.table["rows"], ("3", "4"), strict=True):
        sub = log[log["model_version"] == version]
        tp = int((sub["score"] >= 0.6).sum())
        fp = int((sub["score"] == 0.5).sum())
        assert row[3] == f"{2 * tp / (2 * tp + fp):.3f}"
    html = render_report(tmp_path / "report", steps=[], sections=[section], profile="local", model="fraud")
    assert "F1 estimated" in html.read_text() and "v4" in html.read_text()
    assert performance_section(SimpleNamespace(facts={})) is None  # type: ignore[arg-type]
