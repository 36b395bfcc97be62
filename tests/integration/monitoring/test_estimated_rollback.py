"""Rollback and canary on the estimated performance drop, on the sample generator's transactions.

The model is a scikit-learn logistic regression fitted on one generated day (a calibrated model, as the estimate
requires); every window is another generated day of the same process, shifted by selecting rows on the model's
own score, so ``P(y | x)`` is untouched (a covariate shift) and the generator's labels give the realized F1 with
scikit-learn, independently of the estimate:

- **harmless:** 70 % of the rows below the median score dropped. The score's PSI is far past CRITICAL, so drift
  alone rolls back; realized F1 holds (checked), and so does the estimate: no rollback under ``estimate``.
- **harmful:** 60 % of the flagged rows (score ≥ threshold) dropped, a sliver of the window: every PSI stays
  below CRITICAL, drift alone does nothing; realized F1 falls by far more than the 10 % policy (checked), and the
  estimate sees it: CRITICAL and a rollback under ``estimate``.

The canary guard compares a canary's estimated F1 with the stable's on the same traffic: a canary fitted without
the informative columns is rolled back, one at least as good (another day's fit) is not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score

from mlops_config import DeliveryConfig, load_config
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

pytestmark = pytest.mark.integration

FRAUD_RATE = 0.1  # frauds enough that the flagged tail holds a few hundred rows a window
NUMERIC = ["amount"]
CATEGORICAL = ["currency", "category", "country", "device", "channel"]


def _day(tmp: Path, seed: int, n: int = 20_000) -> pd.DataFrame:
    from mlops_features import generate_transactions

    paths = generate_transactions(tmp / f"day-{seed}", rows=n, days=1, seed=seed, fraud_rate=FRAUD_RATE)
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)


def _design(df: pd.DataFrame, informative: bool = True) -> pd.DataFrame:
    x = pd.DataFrame({"night": (df["event_timestamp"].dt.hour < 5).astype(float)})
    if informative:
        x["log_amount"] = np.log(df["amount"])
    for col in ("category", "channel") + (("device", "country") if informative else ()):
        x = x.join(pd.get_dummies(df[col], prefix=col, dtype=float))
    return x


class Model:
    def __init__(self, df: pd.DataFrame, informative: bool = True) -> None:
        self.informative = informative
        x = _design(df, informative)
        self.columns = x.columns
        self.fit = LogisticRegression(max_iter=2000).fit(x, df["is_fraud"])

    def score(self, df: pd.DataFrame) -> np.ndarray:
        x = _design(df, self.informative).reindex(columns=self.columns, fill_value=0.0)
        return np.asarray(self.fit.predict_proba(x)[:, 1])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from mlops_core.profile import build_reference_profile

    tmp = tmp_path_factory.mktemp("estimate")
    train = _day(tmp, 1)
    model = Model(train)
    train = train.assign(score=model.score(train))
    (tmp / "profile.json").write_text(json.dumps(
        build_reference_profile(train, NUMERIC, CATEGORICAL, scores="score", labels="is_fraud")))
    day = _day(tmp, 2)
    day = day.assign(score=model.score(day))
    rng = np.random.default_rng(7)
    s = day["score"].to_numpy()
    harmless = day[(s >= np.median(s)) | (rng.random(len(s)) < 0.3)]
    harmful = day[(s < 0.5) | (rng.random(len(s)) < 0.4)]
    for name, frame in (("day", day), ("harmless", harmless), ("harmful", harmful)):
        frame.to_parquet(tmp / f"{name}.parquet")
    return {"tmp": tmp, "model": model, "train": train, "frames": {"day": day, "harmless": harmless,
                                                                     "harmful": harmful}}


def exposition(ok: int, version: str = "1") -> str:
    """A healthy predictor's /metrics, with the serving exporter's names: every request answered in 4 ms."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    r = CollectorRegistry()
    Counter("mlops_serving_requests", "answered", ["model", "version", "variant", "protocol"],
            registry=r).labels("fraud", version, "stable", "v1").inc(ok)
    Counter("mlops_serving_errors", "failed", ["model", "version", "type", "status"], registry=r)
    latency = Histogram("mlops_serving_request_seconds", "latency", ["model", "version", "variant"],
                        buckets=(0.005, 0.01, 0.05), registry=r)
    latency.labels("fraud", version, "stable").observe(0.004)
    return generate_latest(r).decode()


def _f1(frame: pd.DataFrame) -> float:
    return float(f1_score(frame["is_fraud"], frame["score"] >= 0.5))


def _monitor(world: dict[str, Any], config_dir: Path, name: str, signal: str) -> Any:
    from mlops_monitoring import MonitorRun, run_monitor

    loaded = load_config(profile="local", config_dir=config_dir, environ={}, check_secrets=False,
                         overrides=["monitoring.webhook_url=null", "monitoring.auto_rollback=false",
                                    f"monitoring.rollback_signal={signal}", "monitoring.engine=duckdb"])
    c = loaded.config
    return run_monitor(MonitorRun(c.monitoring, c.serving, c.tracking, c.project, loaded.root, "fraud",
                                  current=world["tmp"] / f"{name}.parquet", reference=world["tmp"] / "profile.json",
                                  html=False, contract=FRAUD_CONTRACT))


def test_a_shift_the_model_absorbs_rolls_back_on_drift_but_not_on_the_estimate(world: dict[str, Any],
                                                                                config_dir: Path) -> None:
    frames = world["frames"]
    assert _f1(frames["harmless"]) >= _f1(frames["day"]) * 0.95  # the labels say the model holds
    drift = _monitor(world, config_dir, "harmless", "drift")
    assert drift.report.level == "CRITICAL" and drift.report.columns["score"].severity == "CRITICAL"
    assert drift.calls_rollback and drift.level == "CRITICAL"
    est = _monitor(world, config_dir, "harmless", "estimate")
    assert est.estimate is not None and est.estimate.verdict == "holds", est.estimate
    assert est.level == "CRITICAL" and not est.calls_rollback  # alerted, not rolled back
    assert "estimated performance holds" in est.rollback_call
    assert any(r.startswith("rollback withheld") for r in est.reasons)
    doc = json.loads(Path(est.outputs["json"]).read_text())
    assert doc["estimate"]["verdict"] == "holds" and doc["calls_rollback"] is False


def test_a_harmful_shift_below_the_psi_thresholds_is_caught_by_the_estimate(world: dict[str, Any],
                                                                            config_dir: Path) -> None:
    frames = world["frames"]
    realized_drop = 1 - _f1(frames["harmful"]) / _f1(frames["day"])
    assert realized_drop > 0.3  # the labels say it hurts, far past the 10 % policy
    drift = _monitor(world, config_dir, "harmful", "drift")
    assert drift.report.level != "CRITICAL" and not drift.calls_rollback  # drift alone misses it
    est = _monitor(world, config_dir, "harmful", "estimate")
    assert est.estimate is not None and est.estimate.verdict == "drop", est.estimate
    assert est.level == "CRITICAL" and est.calls_rollback
    assert est.reasons[0].startswith("CRITICAL: estimated F1")
    # the estimate's drop against the reference tracks the realized one (same direction, same size class)
    assert est.estimate.drop == pytest.approx(realized_drop, abs=0.2)


def test_the_canary_guard_rolls_back_a_worse_canary_and_passes_a_good_one(world: dict[str, Any]) -> None:
    from mlops_delivery.estimate_guard import estimate_guard

    traffic = world["frames"]["day"]
    stable = world["model"].score(traffic)
    worse = Model(world["train"], informative=False).score(traffic)
    equal = Model(_day(world["tmp"], 3)).score(traffic)
    y = traffic["is_fraud"].to_numpy()
    f1 = {name: f1_score(y, s >= 0.5) for name, s in (("stable", stable), ("worse", worse), ("equal", equal))}
    assert f1["worse"] < 0.7 * f1["stable"] and f1["equal"] >= 0.95 * f1["stable"]  # the labels' verdicts
    half = len(traffic) // 2  # a random split: the arms see different rows of one process
    order = np.random.default_rng(3).permutation(len(traffic))
    a, b = order[:half], order[half:]
    decision, reasons = estimate_guard("promote", ["ok: error rate"], stable[a], worse[b], limit=0.1, threshold=0.5)
    assert decision == "rollback" and reasons[0].startswith("guard: estimated F1 canary")
    decision, reasons = estimate_guard("promote", ["ok: error rate"], stable[a], equal[b], limit=0.1, threshold=0.5)
    assert decision == "promote" and reasons[-1].startswith("ok: estimated F1 canary"), reasons
    assert estimate_guard("promote", [], stable[a], worse[b], limit=None, threshold=0.5) == ("promote", ())


def test_analyze_canary_applies_the_guard(world: dict[str, Any], tmp_path: Path) -> None:
    """Through the canary analysis itself: healthy serving metrics, a canary whose estimate dropped."""
    from mlops_delivery.canary import analyze_canary
    from mlops_serving import read_prediction_log, write_prediction_log

    traffic = world["frames"]["day"]
    stable = world["model"].score(traffic)[:8_000]
    worse = Model(world["train"], informative=False).score(traffic)[8_000:16_000]
    frame = pd.DataFrame({"model_version": ["1"] * len(stable) + ["2"] * len(worse),
                          "score": np.concatenate([stable, worse])})
    frame["ts"] = pd.Timestamp("2026-11-30T08:00:00Z")
    write_prediction_log(tmp_path, "fraud", frame)
    log = read_prediction_log(tmp_path, "fraud")
    args = (exposition(ok=8_000), exposition(ok=8_000, version="2"), log)
    off = DeliveryConfig(sequential={"verdict": "threshold"}, tabular={"max_prediction_psi": 10.0})
    assert analyze_canary(off, *args, stable_version=1, canary_version=2).decision == "promote"
    on = off.model_copy(update={"tabular": off.tabular.model_copy(update={"canary_max_estimated_f1_drop": 0.1})})
    result = analyze_canary(on, *args, stable_version=1, canary_version=2)
    assert result.decision == "rollback" and any(r.startswith("guard: estimated F1") for r in result.reasons)
