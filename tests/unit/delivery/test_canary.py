"""Canary analysis on real Prometheus text exposition (written by prometheus_client) and real parquet logs.

Expected figures are worked out by hand in each test (bucket interpolation, PSI sums), never read back
from the code under test.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from mlops_config import DeliveryConfig
from mlops_delivery import MetricsError
from mlops_delivery.canary import analyze_canary
from mlops_delivery.metrics import (
    counter_total,
    histogram_buckets,
    histogram_quantile,
    parse_samples,
    population_stability_index,
)
from mlops_serving import read_prediction_log, write_prediction_log

BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 1.0)
# These tests pin down the fixed thresholds, so they decide alone here; the sequential verdict (the default)
# is tested in test_sequential.py and below.
CFG = DeliveryConfig(sequential={"verdict": "threshold"})


def exposition(*, ok: int, errors_5xx: int = 0, errors_4xx: int = 0, latency_s: list[float] | None = None,
               version: str = "1") -> str:
    """A predictor's /metrics as the serving exporter writes it (same metric and label names)."""
    r = CollectorRegistry()
    requests = Counter("mlops_serving_requests", "answered", ["model", "version", "variant", "protocol"], registry=r)
    errors = Counter("mlops_serving_errors", "failed", ["model", "version", "type", "status"], registry=r)
    latency = Histogram("mlops_serving_request_seconds", "latency", ["model", "version", "variant"],
                        buckets=BUCKETS, registry=r)
    requests.labels("fraud", version, "stable", "v1").inc(ok)
    if errors_5xx:
        errors.labels("fraud", version, "internal", "500").inc(errors_5xx)
    if errors_4xx:
        errors.labels("fraud", version, "bad_request", "400").inc(errors_4xx)
    for value in latency_s if latency_s is not None else [0.004] * ok:
        latency.labels("fraud", version, "stable").observe(value)
    return generate_latest(r).decode()


def log_frame(tmp_path: Path, stable: np.ndarray, canary: np.ndarray) -> pd.DataFrame:
    """A prediction log written to and read back from the store (contract columns that the analysis reads)."""
    rows = [("1", "stable", s) for s in stable] + [("2", "canary", s) for s in canary]
    frame = pd.DataFrame(rows, columns=["model_version", "variant", "score"])
    frame["ts"] = pd.Timestamp("2026-11-30T08:00:00Z")
    write_prediction_log(tmp_path, "fraud", frame)
    return read_prediction_log(tmp_path, "fraud")


def test_p99_interpolates_inside_the_bucket_like_promql() -> None:
    # 98 requests at 4 ms (bucket le=0.005) and 2 at 200 ms (bucket le=0.25); rank 0.99*100 = 99 lies in
    # (0.1, 0.25] whose cumulative counts go 98 -> 100: 0.1 + 0.15 * (99 - 98) / (100 - 98) = 0.175.
    samples = parse_samples(exposition(ok=100, latency_s=[0.004] * 98 + [0.2] * 2))
    buckets = histogram_buckets(samples, "mlops_serving_request_seconds")
    assert buckets[-1] == (math.inf, 100.0)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.175)
    # rank 50 lies in (0.001, 0.005] going 0 -> 98: 0.001 + 0.004 * 50 / 98.
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.001 + 0.004 * 50 / 98)
    # everything above the last finite bound: PromQL answers that bound.
    assert histogram_quantile(0.99, histogram_buckets(parse_samples(exposition(ok=10, latency_s=[5.0] * 10)),
                                                      "mlops_serving_request_seconds")) == 1.0


def test_error_counter_counts_5xx_only() -> None:
    samples = parse_samples(exposition(ok=90, errors_5xx=7, errors_4xx=3))
    assert counter_total(samples, "mlops_serving_requests_total") == 90
    assert counter_total(samples, "mlops_serving_errors") == 10
    assert counter_total(samples, "mlops_serving_errors_total", label_prefix={"status": "5"}) == 7


def test_psi_matches_the_hand_computed_sum() -> None:
    expected = np.arange(1000) / 1000  # four quantile bins of 250 values each: shares 0.25
    # canary: 400 values in bin 1, 300 in bin 2, 200 in bin 3, 100 in bin 4
    actual = np.concatenate([np.full(400, 0.1), np.full(300, 0.3), np.full(200, 0.6), np.full(100, 0.9)])
    shares = [0.4, 0.3, 0.2, 0.1]
    hand = sum((a - 0.25) * math.log(a / 0.25) for a in shares)
    assert population_stability_index(expected, actual, bins=4) == pytest.approx(hand)
    assert population_stability_index(expected, expected, bins=4) == pytest.approx(0.0)
    # an empty canary bin is floored at 1e-4, not infinite
    only_low = np.full(100, 0.1)
    floored = (1 - 0.25) * math.log(1 / 0.25) + 3 * (1e-4 - 0.25) * math.log(1e-4 / 0.25)
    assert population_stability_index(expected, only_low, bins=4) == pytest.approx(floored, rel=1e-3)


@pytest.fixture
def scores() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.beta(1, 12, 2000), rng.beta(1, 12, 2000)


def test_healthy_canary_is_promoted(tmp_path: Path, scores: tuple[np.ndarray, np.ndarray]) -> None:
    log = log_frame(tmp_path, *scores)
    result = analyze_canary(CFG, exposition(ok=1000, errors_5xx=2), exposition(ok=200, errors_5xx=0, version="2"),
                            log, stable_version=1, canary_version=2)
    assert result.decision == "promote", result.reasons
    assert result.canary.requests == 200 and result.stable.error_rate == pytest.approx(2 / 1002)
    assert result.prediction_psi is not None and result.prediction_psi < 0.05
    assert all(r.startswith("ok: ") for r in result.reasons) and len(result.reasons) == 3


def test_canary_with_server_errors_is_rolled_back(tmp_path: Path, scores: tuple[np.ndarray, np.ndarray]) -> None:
    log = log_frame(tmp_path, *scores)
    result = analyze_canary(CFG, exposition(ok=1000), exposition(ok=160, errors_5xx=40, version="2"), log,
                            stable_version=1, canary_version=2)
    assert result.decision == "rollback"
    assert result.canary.error_rate == pytest.approx(0.2)
    assert result.reasons[0].startswith("FAILED: error rate canary 0.2000 vs stable 0.0000")


def test_client_errors_do_not_count_against_the_canary(tmp_path: Path, scores: tuple[np.ndarray, np.ndarray]) -> None:
    result = analyze_canary(CFG, exposition(ok=1000), exposition(ok=200, errors_4xx=50, version="2"),
                            log_frame(tmp_path, *scores), stable_version=1, canary_version=2)
    assert result.decision == "promote", result.reasons


def test_slow_canary_is_rolled_back(tmp_path: Path, scores: tuple[np.ndarray, np.ndarray]) -> None:
    slow = exposition(ok=200, latency_s=[0.004] * 190 + [0.2] * 10, version="2")
    result = analyze_canary(CFG, exposition(ok=1000), slow, log_frame(tmp_path, *scores),
                            stable_version=1, canary_version=2)
    assert result.decision == "rollback"
    assert any(r.startswith("FAILED: p99 latency") for r in result.reasons)
    # stable p99: all 1000 in (0.001, 0.005]: 0.001 + 0.004 * 990 / 1000
    assert result.stable.p99_s == pytest.approx(0.001 + 0.004 * 0.99)


def test_shifted_predictions_are_rolled_back(tmp_path: Path, scores: tuple[np.ndarray, np.ndarray]) -> None:
    stable_scores, _ = scores
    shifted = np.clip(stable_scores + 0.3, 0, 1)
    result = analyze_canary(CFG, exposition(ok=1000), exposition(ok=200, version="2"),
                            log_frame(tmp_path, stable_scores, shifted), stable_version=1, canary_version=2)
    assert result.decision == "rollback"
    assert result.prediction_psi is not None and result.prediction_psi > CFG.tabular.max_prediction_psi
    assert result.reasons[0].startswith("FAILED: prediction PSI")


def test_too_few_canary_requests_hold(tmp_path: Path, scores: tuple[np.ndarray, np.ndarray]) -> None:
    result = analyze_canary(CFG, exposition(ok=1000), exposition(ok=20, errors_5xx=20, version="2"),
                            log_frame(tmp_path, *scores), stable_version=1, canary_version=2)
    assert result.decision == "hold"
    assert result.reasons[0] == "insufficient: only 40 canary requests, need 100"
    assert any(r.startswith("FAILED: error rate") for r in result.reasons)


def test_missing_log_rows_hold_and_bad_inputs_are_named(tmp_path: Path) -> None:
    result = analyze_canary(CFG, exposition(ok=1000), exposition(ok=200, version="2"), pd.DataFrame(),
                            stable_version=1, canary_version=2)
    assert result.decision == "hold" and result.prediction_psi is None
    with pytest.raises(MetricsError, match="'canary' has no 'mlops_serving_requests' series"):
        analyze_canary(CFG, exposition(ok=10), "# nothing here\n", pd.DataFrame(), stable_version=1, canary_version=2)
    with pytest.raises(MetricsError, match="stable and canary are both version 3"):
        analyze_canary(CFG, "", "", pd.DataFrame(), stable_version=3, canary_version=3)
    with pytest.raises(MetricsError, match="prediction log lacks column 'score'"):
        analyze_canary(CFG, exposition(ok=1), exposition(ok=1), pd.DataFrame({"model_version": ["1"]}),
                       stable_version=1, canary_version=2)


def test_cli_answers_with_exit_codes_and_reads_versions_from_git(tmp_path: Path, repo_root: Path,
                                                                 scores: tuple[np.ndarray, np.ndarray]) -> None:
    root = tmp_path / "repo"
    shutil.copytree(repo_root / "configs", root / "configs")
    shutil.copytree(repo_root / "infra", root / "infra")
    prod = root / "infra/overlays/production/model-fraud.yaml"  # production: v1 stable, v2 canary at 10%
    prod.write_text(prod.read_text().replace(
        'stable-version: "1"  # serves all traffic not sent to the canary\n',
        'stable-version: "1"  # serves all traffic not sent to the canary\n    mlops.platform/canary-version: "2"\n',
    ).replace("  predictor:\n", "  predictor:\n    canaryTrafficPercent: 10\n"))
    stable_scores, canary_scores = scores
    log_frame(root / ".mlops" / "prediction_log", stable_scores, np.clip(canary_scores + 0.3, 0, 1))
    (root / "stable.prom").write_text(exposition(ok=1000))
    (root / "canary.prom").write_text(exposition(ok=200, version="2"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
    proc = subprocess.run([sys.executable, "-m", "mlops_cli", "canary", "analyze", "--stable-metrics", "stable.prom",
                           "--canary-metrics", "canary.prom", "--exit-code", "--json"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 4, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["decision"] == "rollback" and (doc["stable"]["version"], doc["canary"]["version"]) == (1, 2)
    assert doc["canary"]["logged_predictions"] == 2000


def _cbpe_f1(scores: np.ndarray, t: float) -> float:
    """CBPE F1 by its definition, row by row (a flagged row is a fraud with probability ``s``)."""
    tp = fp = fn = 0.0
    for s in scores.tolist():
        if s >= t:
            tp, fp = tp + s, fp + 1 - s
        else:
            fn += s
    return 2 * tp / (2 * tp + fp + fn)


def test_the_estimate_check_decides_each_version_at_its_recorded_threshold(tmp_path: Path) -> None:
    from mlops_model import resolve_threshold

    rng = np.random.default_rng(5)
    stable, canary = rng.beta(0.5, 10, 3000), rng.beta(0.5, 8, 3000)  # calibrated-like: a few percent
    log = log_frame(tmp_path, stable, canary)
    cfg = CFG.model_copy(update={"tabular": CFG.tabular.model_copy(update={"canary_max_estimated_f1_drop": 0.5})})
    s_metrics, c_metrics = exposition(ok=1000), exposition(ok=1000, version="2")
    recorded = {"1": {"decision_threshold": {"value": 0.12}}, "2": {"decision_threshold": {"value": 0.18}}}
    key = "delivery.tabular.canary_estimate_threshold"

    def look(override: float | None) -> str:
        result = analyze_canary(cfg, s_metrics, c_metrics, log, stable_version=1, canary_version=2,
                                threshold_of=lambda v: resolve_threshold(recorded[v], override, override_key=key,
                                                                         model=f"v{v}"))
        return next(r for r in result.reasons if "estimated F1" in r)

    own = look(None)
    assert f"canary {_cbpe_f1(canary, 0.18):.4f} (at 0.18) vs stable {_cbpe_f1(stable, 0.12):.4f} (at 0.12)" in own
    assert "overrides" not in own
    over = look(0.3)
    assert f"canary {_cbpe_f1(canary, 0.3):.4f} (at 0.3) vs stable {_cbpe_f1(stable, 0.3):.4f} (at 0.3)" in over
    assert f"{key}=0.3 overrides v1's recorded threshold 0.12 (they disagree)" in over
    assert f"{key}=0.3 overrides v2's recorded threshold 0.18 (they disagree)" in over
    # versions that record none (exports made before per-version thresholds): the legacy 0.5, named
    legacy = analyze_canary(cfg, s_metrics, c_metrics, log, stable_version=1, canary_version=2)
    line = next(r for r in legacy.reasons if "estimated F1" in r)
    assert f"canary {_cbpe_f1(canary, 0.5):.4f} (at 0.5)" in line and "v2 records no decision_threshold" in line
