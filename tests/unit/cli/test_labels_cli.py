"""`mlops data labels ingest` and `mlops monitor performance` as a user runs them (a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import f1_score

from mlops_features import label_schema
from mlops_serving import write_prediction_log

FRAUD_LABELS = label_schema("transaction_id")  # fraud's contract record_id (configs/models/fraud.yaml)

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
    return subprocess.run([sys.executable, "-m", "mlops_cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180, check=False)


def test_ingest_then_performance(config_dir: Path, tmp_path: Path) -> None:
    root = config_dir.parent
    log_dir = tmp_path / "log"
    n = 200
    scores = [((i * 37) % 100) / 100 for i in range(n)]
    log = pd.DataFrame({"request_id": [f"r{i}" for i in range(n)], "ts": [T0 + timedelta(minutes=i) for i in range(n)],
                        "model_name": "fraud", "model_version": "3", "transaction_id": [f"t{i}" for i in range(n)],
                        "score": scores})
    write_prediction_log(str(log_dir), "fraud", log)
    labels = [int(s > 0.3) if i % 5 else int(s < 0.5) for i, s in enumerate(scores)]
    pq.write_table(pa.Table.from_pydict({
        "transaction_id": [*log["transaction_id"], "ghost", "t0"], "label": [*labels, 1, 1 - labels[0]],
        "label_time": [T0 + timedelta(days=3)] * (n + 2)}, schema=FRAUD_LABELS), tmp_path / "b1.parquet")
    sets = ["--set", f"serving.prediction_log_uri={log_dir}"]
    res = _run(["data", "labels", "ingest", str(tmp_path / "b1.parquet"), "--json", *sets], cwd=root)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    # "ghost" was never served; t0 is labelled twice with two different labels: both of its rows are held
    assert (doc["input_rows"], doc["accepted_rows"], doc["quarantined_rows"]) == (n + 2, n - 1, 3)
    assert doc["batches"][0]["row_failures"] == {"conflicting_label": 2, "unknown_transaction_id": 1}

    res = _run(["monitor", "performance", "--json", "--reference-f1", "0.99", *sets], cwd=root)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    [window] = report["windows"]
    y = labels[1:]
    assert window["n_labelled"] == n - 1
    assert window["realized"]["f1"] == pytest.approx(f1_score(y, [s >= 0.5 for s in scores[1:]]))
    assert report["verdicts"]["3"]["verdict"] == "drop"
    assert (root / "reports" / "monitoring" / "performance.prom").read_text().count("mlops_performance{") >= 8

    res = _run(["monitor", "performance", "--window", "fortnight", *sets], cwd=root)
    assert res.returncode != 0
    assert "'fortnight' is not a pandas frequency" in res.stderr


def test_ingest_from_the_landing_area_takes_each_batch_once(config_dir: Path, tmp_path: Path) -> None:
    """The labels CronJob's form: no batch arguments, the batches under data.labels_landing_uri."""
    root, log_dir, landing = config_dir.parent, tmp_path / "log", tmp_path / "landing"
    n = 50
    log = pd.DataFrame({"request_id": [f"r{i}" for i in range(n)], "ts": [T0 + timedelta(minutes=i) for i in range(n)],
                        "model_name": "fraud", "model_version": "3", "transaction_id": [f"t{i}" for i in range(n)],
                        "score": [i / n for i in range(n)]})
    write_prediction_log(str(log_dir), "fraud", log)
    (landing / "2026-11-08").mkdir(parents=True)
    for name, ids in (("a", range(0, 20)), ("b", range(20, 50))):
        pq.write_table(pa.Table.from_pydict({
            "transaction_id": [f"t{i}" for i in ids], "label": [i % 2 for i in ids],
            "label_time": [T0 + timedelta(days=3)] * len(ids)}, schema=FRAUD_LABELS),
            landing / "2026-11-08" / f"{name}.parquet")
    sets = ["--set", f"serving.prediction_log_uri={log_dir}", "--set", f"data.labels_landing_uri={landing.as_uri()}"]
    first = _run(["data", "labels", "ingest", "--json", *sets], cwd=root)
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert (doc["input_rows"], doc["accepted_rows"], doc["skipped"]) == (50, 50, [])
    assert sorted(b["batch"] for b in doc["batches"]) == ["a", "b"]
    again = json.loads(_run(["data", "labels", "ingest", "--json", *sets], cwd=root).stdout)
    assert (again["input_rows"], len(again["skipped"])) == (0, 2)  # both gated before: nothing twice
    none = _run(["data", "labels", "ingest", "--set", f"serving.prediction_log_uri={log_dir}"], cwd=root)
    assert none.returncode != 0 and "data.labels_landing_uri is not set" in none.stderr
