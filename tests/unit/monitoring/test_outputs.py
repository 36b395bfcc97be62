"""Exporter text format, the infra rules/dashboard against the exporter's names, windows, realized quality."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from mlops_config import MonitoringConfig
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_monitoring import MonitoringError, compare
from mlops_monitoring.exporter import METRIC_NAMES, build_registry, metric_values, write_metrics
from mlops_monitoring.policy import Level, quality_level
from mlops_monitoring.quality import realized_quality
from mlops_monitoring.source import parse_window

FRAUD_KEYS = {"key": FRAUD_CONTRACT.record_id, "label": FRAUD_CONTRACT.label}  # the join of fraud's log and labels
INFRA = Path(__file__).resolve().parents[3] / "infra" / "base" / "monitoring"


def test_metrics_file_holds_every_gauge(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ref = pd.DataFrame({"amount": rng.normal(0, 1, 2000), "c": rng.choice(["a", "b"], 2000)})
    cur = pd.DataFrame({"amount": rng.normal(1, 1, 500), "c": rng.choice(["a", "b"], 500)})
    report = compare(ref, cur)
    quality = realized_quality(pd.DataFrame({"transaction_id": [1, 2, 3], "score": [0.9, 0.1, 0.8]}),
                               pd.DataFrame({"transaction_id": [1, 2, 3], "is_fraud": [1, 1, 0]}), 0.5, **FRAUD_KEYS)
    path = write_metrics(build_registry("fraud", report, Level.CRITICAL, 1_800_000_000.0, quality,
                                        {"rollback": True}), tmp_path / "m" / "metrics.prom")
    values = metric_values(path.read_text())
    assert values[("mlops_drift_psi", (("feature", "amount"), ("model", "fraud")))] == report.columns["amount"].psi
    assert values[("mlops_drift_statistic", (("feature", "c"), ("method", "chi2"), ("model", "fraud")))] == \
        report.columns["c"].statistic
    assert values[("mlops_drift_alert_level", (("model", "fraud"),))] == 3
    assert values[("mlops_drift_last_run_timestamp_seconds", (("model", "fraud"),))] == 1_800_000_000.0
    assert values[("mlops_drift_rollback", (("model", "fraud"),))] == 1
    assert values[("mlops_realized_quality", (("metric", "f1"), ("model", "fraud")))] == pytest.approx(0.5)
    assert {name for name, _ in values} == set(METRIC_NAMES)


def test_infra_rules_and_dashboard_query_only_exported_names() -> None:
    rules = yaml.safe_load((INFRA / "prometheus-rules.yaml").read_text())
    exprs = [r["expr"] for g in rules["spec"]["groups"] for r in g["rules"]]
    dashboard = json.loads((INFRA / "grafana-dashboard-fraud.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\b(mlops_(?:drift|realized)_[a-z_]+)", e)}
    assert used and used <= set(METRIC_NAMES), used - set(METRIC_NAMES)
    assert {"mlops_drift_psi", "mlops_drift_alert_level", "mlops_drift_last_run_timestamp_seconds"} <= used
    defaults = MonitoringConfig()
    warning = next(r for g in rules["spec"]["groups"] for r in g["rules"] if r["alert"] == "FraudFeatureDriftWarning")
    assert warning["expr"].endswith(f">= {defaults.psi_warning}")


@pytest.mark.parametrize(("text", "expected"), [("30m", timedelta(minutes=30)), ("1h", timedelta(hours=1)),
                                                ("7d", timedelta(days=7)), ("2w", timedelta(weeks=2))])
def test_parse_window(text: str, expected: timedelta) -> None:
    assert parse_window(text) == expected


@pytest.mark.parametrize("text", ["", "0h", "1 hour", "h", "-1h", "1y"])
def test_bad_window_is_named(text: str) -> None:
    with pytest.raises(MonitoringError, match=re.escape(repr(text))):
        parse_window(text)


def test_realized_quality_by_hand_and_policy() -> None:
    preds = pd.DataFrame({"transaction_id": list("abcdefgh"), "score": [0.9, 0.8, 0.7, 0.2, 0.1, 0.6, 0.3, 0.95]})
    labels = pd.DataFrame({"transaction_id": list("abcdefg"), "is_fraud": [1, 0, 1, 1, 0, 0, 0]})  # h unlabelled
    q = realized_quality(preds, labels, 0.5, **FRAUD_KEYS)
    # predicted positive: a b c f (h has no label); actual positive: a c d → tp 2, fp 2, fn 1
    assert (q.tp, q.fp, q.fn, q.n_labelled, q.n_predictions) == (2, 2, 1, 7, 8)
    assert q.precision == 0.5 and q.recall == pytest.approx(2 / 3) and q.f1 == pytest.approx(4 / 7)
    assert q.positive_rate == pytest.approx(3 / 7)
    cfg = MonitoringConfig(min_f1=0.5)
    assert quality_level(q, cfg)[0] is Level.OK
    assert quality_level(q, cfg, {"f1": 0.7})[0] is Level.WARNING  # 18% below the reference
    assert quality_level(q, cfg, {"positive_rate": 0.1})[0] is Level.WARNING  # label rate 4.3x
    assert quality_level(q, MonitoringConfig(min_f1=0.6))[0] is Level.CRITICAL


def test_bad_labels_are_named() -> None:
    preds = pd.DataFrame({"transaction_id": ["a", "b"], "score": [0.9, 0.1]})
    with pytest.raises(MonitoringError, match="'is_fraud'"):
        realized_quality(preds, pd.DataFrame({"transaction_id": ["a"]}), 0.5, **FRAUD_KEYS)
    with pytest.raises(MonitoringError, match="'a' more than once"):
        realized_quality(preds, pd.DataFrame({"transaction_id": ["a", "a"], "is_fraud": [1, 0]}), 0.5, **FRAUD_KEYS)
    with pytest.raises(MonitoringError, match="holds 'yes'"):
        realized_quality(preds, pd.DataFrame({"transaction_id": ["a"], "is_fraud": ["yes"]}), 0.5, **FRAUD_KEYS)


def test_the_monitor_compares_realized_f1_with_the_served_versions_validation_f1_at_its_threshold() -> None:
    """The profile carries v4's model.json record (threshold 0.5, validation F1 0.8 there) and a metrics.f1 of 0.5
    (another figure): realized F1 4/7 is 29 % below the recorded 0.8 (WARNING) and above 0.5 (the old verdict, OK)."""
    from mlops_core import build_reference_profile
    from mlops_monitoring.monitor import assess

    rng = np.random.default_rng(0)
    rows = pd.DataFrame({"amount": rng.normal(size=400)})
    profile = build_reference_profile(rows, ["amount"], [], metrics={"f1": 0.5})
    profile["source"] = {"model": "fraud", "version": "4"}
    current = rows.iloc[:8].assign(transaction_id=list("abcdefgh"),
                                   score=[0.9, 0.8, 0.7, 0.2, 0.1, 0.6, 0.3, 0.95])
    labels = pd.DataFrame({"transaction_id": list("abcdefg"), "is_fraud": [1, 0, 1, 1, 0, 0, 0]})  # F1 4/7 at 0.5
    cfg = MonitoringConfig(min_f1=0.1, min_rows=1)
    legacy = assess(profile, current, cfg, labels=labels, contract=FRAUD_CONTRACT)
    assert not any("F1" in r for r in legacy[1])  # no record: metrics.f1 0.5 stands in, 4/7 is above it
    profile["decision_threshold"] = {"value": 0.5, "criterion": "f1", "f1": 0.8}
    # (8 rows: drift has its own say)
    _, reasons, _, quality = assess(profile, current, cfg, labels=labels, contract=FRAUD_CONTRACT)
    assert quality is not None and quality.f1 == pytest.approx(4 / 7)
    assert reasons[0] == (f"WARNING: realized F1 {4 / 7:.4f} at threshold 0.5 is {1 - (4 / 7) / 0.8:.1%} below served "
                          "v4's validation F1 0.8000 at its recorded threshold 0.5 (model.json decision_threshold.f1) "
                          "(max_f1_drop 10%)")


def test_a_legacy_profile_falls_back_to_its_metrics_f1_and_says_so() -> None:
    from mlops_monitoring.quality import validation_reference

    ref = validation_reference({"metrics": {"f1": 0.7}, "source": {"version": "2"}}, MonitoringConfig())
    assert (ref.value, ref.source) == (0.7, "fallback")
    assert ref.note == ("served v2 records no validation F1 at a decision threshold (exported before per-version "
                        "thresholds): falling back to the reference profile's metrics.f1 0.7000")
