"""A whole monitoring run against real parts: a prediction log on disk, a real MLflow registry (SQLite) with
champion + fallback, a real HTTP webhook receiver, Evidently's HTML and the Prometheus text file."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mlops_config import MonitoringConfig, ProjectConfig, ServingConfig, TrackingConfig
from mlops_core.profile import build_reference_profile
from mlops_features.sample import generate_transactions
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_monitoring import MonitoringError
from mlops_monitoring.exporter import metric_values
from mlops_monitoring.monitor import MonitorRun, run_monitor
from mlops_serving import write_prediction_log
from tests.support.webhook import alert_receiver

pytestmark = pytest.mark.integration

NUMERIC = ["amount"]
CATEGORICAL = ["currency", "category", "country", "device", "channel"]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _score(df: pd.DataFrame) -> np.ndarray:
    """A fixed stand-in model: riskier with larger amounts and at night."""
    z = 0.8 * (np.log(df["amount"].to_numpy()) - 4.0) + 1.0 * (df["event_timestamp"].dt.hour < 5).to_numpy()
    return 1 / (1 + np.exp(-(z - 3.0)))


def _rows(tmp: Path, seed: int, drift: str, n: int) -> pd.DataFrame:
    paths = generate_transactions(tmp / f"{drift}-{seed}", rows=n, days=1, seed=seed, drift=drift)
    df = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    return df.assign(score=_score(df))


def _log(log_dir: Path, rows: pd.DataFrame, ts_end: datetime, part: str, *, degraded: bool = False) -> None:
    """Write rows as a prediction-log part (contract columns), spread over the 50 minutes before ``ts_end``."""
    offsets = np.linspace(50 * 60, 1, len(rows))
    frame = rows.drop(columns=["is_fraud", "event_timestamp", "created"]).assign(
        request_id=[f"r{i}" for i in range(len(rows))],
        ts=[ts_end - timedelta(seconds=float(s)) for s in offsets],
        model_name="fraud", model_version="2", variant="stable", degraded=degraded, latency_ms=3.0,
    )
    frame["ts"] = pd.to_datetime(frame["ts"], utc=True)
    write_prediction_log(log_dir, "fraud", frame)


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict]]]:
    """A real HTTP server on 127.0.0.1 that records every POST (and Pushgateway's PUTs)."""
    with alert_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, dict]:
    tmp = tmp_path_factory.mktemp("ref")
    train = _rows(tmp, 1, "none", 30_000)
    return train, build_reference_profile(train, NUMERIC, CATEGORICAL, scores="score", labels="is_fraud")


@pytest.fixture
def sections(tmp_path: Path, webhook: tuple[str, list[dict]], monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("MLOPS_TEST_WEBHOOK_TOKEN", "s3cret")
    return {
        "monitoring": MonitoringConfig(webhook_url=webhook[0], webhook_token_env="MLOPS_TEST_WEBHOOK_TOKEN"),
        "serving": ServingConfig(prediction_log_uri="log"),
        "tracking": TrackingConfig(uri="sqlite:///mlflow.db", artifact_location="mlartifacts"),
        "project": ProjectConfig(reports_dir="reports"),
        "contract": FRAUD_CONTRACT,  # the model config's (the log is fraud's)
    }


def _register(sections: dict, root: Path, profile: dict, model_json: dict | None = None) -> None:
    """Two registered versions whose runs logged the profile (and ``model_json`` as the export's ``model.json``);
    v2 champion, v1 fallback (through the ledger)."""
    from mlops_core import lifecycle, mlflow_client
    from mlops_core.tracking import ensure_experiment

    tracking = sections["tracking"]
    experiment = ensure_experiment(tracking, root)
    client = mlflow_client(tracking, root)
    client.create_registered_model("fraud")
    for _ in range(2):
        run = client.create_run(experiment)
        client.log_dict(run.info.run_id, profile, "reference_profile.json")
        if model_json is not None:
            client.log_dict(run.info.run_id, model_json, "model/model.json")
        mv = client.create_model_version("fraud", f"{run.info.artifact_uri}/model", run.info.run_id)
        for to in ("candidate", "staging", "canary", "champion"):
            lifecycle.promote(tracking, root, "fraud", mv.version, to, reason="test setup", actor="test",
                              required_gates={})
    assert lifecycle.aliases(tracking, root, "fraud") == {"champion": "2", "fallback": "1"}


def test_clean_window_no_alert_outputs_written(tmp_path: Path, sections: dict, reference: tuple,
                                               webhook: tuple) -> None:
    root = tmp_path
    _, profile = reference
    (root / "profile.json").write_text(json.dumps(profile))
    _log(root / "log", _rows(tmp_path, 2, "none", 3000), NOW, "clean")
    _log(root / "log", _rows(tmp_path, 3, "covariate", 3000), NOW - timedelta(hours=3), "old")  # outside 1h
    _log(root / "log", _rows(tmp_path, 4, "covariate", 400), NOW, "degraded", degraded=True)  # store outage
    result = run_monitor(MonitorRun(**sections, root=root, model="fraud", window="1h", reference=root / "profile.json",
                         html=True, now=NOW))
    assert result.level in ("OK", "INFO"), result.reasons
    assert result.report.n_current == 3000  # the old part is outside the window, degraded rows are left out
    assert result.report.window["degraded_rows_excluded"] == 400
    assert webhook[1] == []
    assert [a.action for a in result.actions] in ([], ["log"])
    doc = json.loads(Path(result.outputs["json"]).read_text())
    assert doc["level"] == result.level and set(doc["columns"]) == {*NUMERIC, *CATEGORICAL, "score"}
    assert doc["window"]["since"] == (NOW - timedelta(hours=1)).isoformat()
    html = Path(result.outputs["html"]).read_text()
    assert "Drift Summary" in html and all(f"{c} (" in html or f"\"{c}\"" in html for c in ("amount", "channel"))
    metrics = metric_values(Path(result.outputs["metrics"]).read_text())
    assert metrics[("mlops_drift_alert_level", (("model", "fraud"),))] == (1 if result.level == "INFO" else 0)
    for name, col in result.report.columns.items():
        assert metrics[("mlops_drift_psi", (("feature", name), ("model", "fraud")))] == pytest.approx(col.psi)
    assert metrics[("mlops_drift_last_run_timestamp_seconds", (("model", "fraud"),))] > 1.7e9


def test_warning_is_posted_with_evidence(tmp_path: Path, sections: dict, reference: tuple, webhook: tuple,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_TEST_WEBHOOK_TOKEN", "s3cret")
    train, _ = reference
    train.to_parquet(tmp_path / "ref.parquet")
    _rows(tmp_path, 4, "category", 3000).to_parquet(tmp_path / "cur.parquet")
    result = run_monitor(MonitorRun(**sections, root=tmp_path, model="fraud", current=tmp_path / "cur.parquet",
                         reference=tmp_path / "ref.parquet", html=False, now=NOW))
    assert result.level == "WARNING", result.reasons
    assert len(webhook[1]) == 1
    posted = webhook[1][0]
    assert posted["path"] == "/alerts" and posted["auth"] == "Bearer s3cret"
    assert posted["body"]["level"] == "WARNING" and posted["body"]["model"] == "fraud"
    assert posted["body"]["evidence"]["category"]["psi"] == pytest.approx(result.report.columns["category"].psi)
    assert [a.action for a in result.actions] == ["log", "webhook"]


def test_critical_rolls_back_to_fallback_in_the_ledger(tmp_path: Path, sections: dict, reference: tuple,
                                                       webhook: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlops_core import lifecycle

    monkeypatch.setenv("MLOPS_TEST_WEBHOOK_TOKEN", "s3cret")
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlops_config import DeliveryConfig
    from mlops_pipeline import fallback_executor

    _, profile = reference
    # without an executor the monitor only decides (it never deploys by itself)
    _register(sections, tmp_path, profile)
    _log(tmp_path / "log", _rows(tmp_path, 5, "covariate", 3000), NOW, "drifted")
    decided = run_monitor(MonitorRun(**sections, root=tmp_path, model="fraud", window="1h", html=False, now=NOW))
    assert decided.decision is not None and (decided.decision.from_version, decided.decision.to_version) == ("2", "1")
    assert next(a for a in decided.actions if a.action == "rollback").detail.startswith("decided, not carried out")
    assert lifecycle.aliases(sections["tracking"], tmp_path, "fraud")["champion"] == "2"
    # no --reference: the profile comes from the run of the served champion (v2); no gitops_repo: registry only
    execute = fallback_executor(DeliveryConfig(), sections["tracking"], tmp_path)
    result = run_monitor(MonitorRun(**sections, root=tmp_path, model="fraud", window="1h", html=False, now=NOW,
                                    execute=execute))
    assert result.level == "CRITICAL" and any("amount PSI" in r for r in result.reasons)
    rollback = next(a for a in result.actions if a.action == "rollback")
    assert rollback.ok, rollback.detail
    assert lifecycle.aliases(sections["tracking"], tmp_path, "fraud")["champion"] == "1"
    last = lifecycle.history(sections["tracking"], tmp_path, "fraud")[-1]
    assert (last.action, last.actor, last.version) == ("rollback", "monitoring", "1")
    assert "amount PSI" in last.reason
    assert webhook[1][0]["body"]["level"] == "CRITICAL"
    metrics = metric_values(Path(result.outputs["metrics"]).read_text())
    assert metrics[("mlops_drift_rollback", (("model", "fraud"),))] == 1
    assert metrics[("mlops_drift_alert_level", (("model", "fraud"),))] == 3


def test_delayed_labels_give_realized_quality(tmp_path: Path, sections: dict, reference: tuple) -> None:
    # webhook_url is unset below, so its token env var is not needed
    train, _ = reference
    rows = _rows(tmp_path, 6, "none", 3000)
    rows.drop(columns=["is_fraud"]).to_parquet(tmp_path / "cur.parquet")
    labelled = rows.iloc[:2000]
    labelled[["transaction_id", "is_fraud"]].to_csv(tmp_path / "labels.csv", index=False)
    train.to_parquet(tmp_path / "ref.parquet")
    cfg = sections["monitoring"].model_copy(update={"decision_threshold": 0.2, "min_f1": 0.99, "webhook_url": None})
    result = run_monitor(MonitorRun(**{**sections, "monitoring": cfg}, root=tmp_path, model="fraud",
                         current=tmp_path / "cur.parquet", reference=tmp_path / "ref.parquet",
                         labels=tmp_path / "labels.csv", dry_run=True, html=False, now=NOW))
    pred, y = labelled["score"].to_numpy() >= 0.2, labelled["is_fraud"].to_numpy() == 1
    tp, fp, fn = int((pred & y).sum()), int((pred & ~y).sum()), int((~pred & y).sum())
    q = result.quality
    assert q is not None and (q.n_labelled, q.n_predictions, q.tp, q.fp, q.fn) == (2000, 3000, tp, fp, fn)
    assert q.f1 == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert result.level == "CRITICAL" and "realized F1" in result.reasons[0]
    assert next(a for a in result.actions if a.action == "rollback").detail.startswith("skipped: dry run")


def test_the_served_versions_recorded_threshold_decides_and_an_override_is_named(
        tmp_path: Path, sections: dict, reference: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    from sklearn.metrics import f1_score

    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    _, profile = reference
    _register(sections, tmp_path, profile, {"kind": "tabular_mlp", "decision_threshold": {"value": 0.15,
                                                                                         "criterion": "f1"}})
    rows = _rows(tmp_path, 6, "none", 3000)
    _log(tmp_path / "log", rows, NOW, "clean")
    rows[["transaction_id", "is_fraud"]].to_csv(tmp_path / "labels.csv", index=False)
    quiet = sections["monitoring"].model_copy(update={"webhook_url": None})
    result = run_monitor(MonitorRun(**{**sections, "monitoring": quiet}, root=tmp_path, model="fraud", window="1h",
                                    labels=tmp_path / "labels.csv", dry_run=True, html=False, now=NOW))
    q, y, s = result.quality, rows["is_fraud"].to_numpy(), rows["score"].to_numpy()
    assert q is not None and q.threshold == 0.15 and q.f1 == pytest.approx(f1_score(y, s >= 0.15))
    assert result.decision_threshold == {"value": 0.15, "source": "model", "recorded": 0.15,
                                         "note": "served v2's recorded threshold 0.15"}
    assert result.estimate is not None and "at threshold 0.15" in result.estimate.reason
    assert not any("decision threshold" in r for r in result.reasons)
    over = quiet.model_copy(update={"decision_threshold": 0.5})
    result = run_monitor(MonitorRun(**{**sections, "monitoring": over}, root=tmp_path, model="fraud", window="1h",
                                    labels=tmp_path / "labels.csv", dry_run=True, html=False, now=NOW))
    assert result.quality is not None and result.quality.f1 == pytest.approx(f1_score(y, s >= 0.5))
    assert ("decision threshold: monitoring.decision_threshold=0.5 overrides served v2's recorded threshold 0.15 "
            "(they disagree)") in result.reasons


def test_too_few_rows_and_a_missing_token_are_refused(tmp_path: Path, sections: dict,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _log(tmp_path / "log", _rows(tmp_path, 8, "none", 300).iloc[:50], NOW, "few")
    monkeypatch.delenv("MLOPS_TEST_WEBHOOK_TOKEN")
    with pytest.raises(MonitoringError, match="'MLOPS_TEST_WEBHOOK_TOKEN' is not set"):
        run_monitor(MonitorRun(**sections, root=tmp_path, model="fraud", window="1h", reference=Path("unused.json"),
                               now=NOW))
    monkeypatch.setenv("MLOPS_TEST_WEBHOOK_TOKEN", "s3cret")
    with pytest.raises(MonitoringError, match="holds 50 rows"):
        run_monitor(MonitorRun(**sections, root=tmp_path, model="fraud", window="1h", reference=Path("unused.json"),
                               now=NOW))


def test_cli_json_and_error_exit(tmp_path: Path, config_dir: Path, reference: tuple) -> None:
    from mlops_cli.app import app

    train, _ = reference
    train.to_parquet(tmp_path / "ref.parquet")
    _rows(tmp_path, 9, "covariate", 2000).to_parquet(tmp_path / "cur.parquet")
    env = {**os.environ, "MLOPS_CONFIG_DIR": str(config_dir)}
    runner = CliRunner()
    ok = runner.invoke(app, ["monitor", "run", "--current", str(tmp_path / "cur.parquet"), "--reference",
                             str(tmp_path / "ref.parquet"), "--json", "--no-html", "--dry-run"], env=env)
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.stdout)
    assert doc["level"] == "CRITICAL" and doc["columns"]["amount"]["drifted"] is True
    assert Path(doc["outputs"]["json"]).is_relative_to(config_dir.parent)
    bad = runner.invoke(app, ["monitor", "run", "--window", "soon", "--reference", str(tmp_path / "ref.parquet")],
                        env=env)
    assert bad.exit_code == 2
    assert "window 'soon' is not a duration" in bad.stderr


def test_metrics_are_pushed_to_a_pushgateway(tmp_path: Path, sections: dict, reference: tuple,
                                             webhook: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_TEST_WEBHOOK_TOKEN", "s3cret")
    train, _ = reference
    train.to_parquet(tmp_path / "ref.parquet")
    _rows(tmp_path, 10, "none", 2000).to_parquet(tmp_path / "cur.parquet")
    base = webhook[0].rsplit("/", 1)[0]
    cfg = sections["monitoring"].model_copy(update={"pushgateway_url": base})
    result = run_monitor(MonitorRun(**{**sections, "monitoring": cfg}, root=tmp_path, model="fraud",
                         current=tmp_path / "cur.parquet", reference=tmp_path / "ref.parquet", html=False, now=NOW))
    pushed = [r for r in webhook[1] if r.get("method") == "PUT"]
    assert [r["path"] for r in pushed] == ["/metrics/job/mlops-drift/model/fraud"]
    assert metric_values(pushed[0]["body"]) == metric_values(Path(result.outputs["metrics"]).read_text())
    assert next(a for a in result.actions if a.action == "pushgateway").ok
