"""Shadow analysis on a hand-built shadow log: every figure against scipy / numpy or arithmetic done here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from mlops_delivery import ShadowError, ShadowLimits, analyze_shadow, summarize_shadow
from mlops_serving import read_prediction_log, shadow_log_uri, write_prediction_log

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
# request id, live scores, candidate scores (None: the candidate failed), status, candidate ms, live model ms
REQUESTS = [
    ("r1", [0.10, 0.62], [0.12, 0.48], "ok", 4.0, 1.0),  # the second instance flips: flagged live, not candidate
    ("r2", [0.30], [0.55], "ok", 6.0, 2.0),  # flips the other way
    ("r3", [0.80], [0.90], "ok", 3.0, 1.5),
    ("r4", [0.05], [0.07], "ok", 10.0, 3.0),
    ("r5", [0.40], None, "timeout", 1000.0, 2.5),
    ("r6", [0.70, 0.20], None, "http_500", 2.0, 1.0),
    ("r7", [0.45], [0.30], "ok", 5.0, 1.2),
]


def shadow_frame() -> pd.DataFrame:
    rows = []
    for i, (rid, live, cand, status, ms, live_ms) in enumerate(REQUESTS):
        for k, score in enumerate(live):
            rows.append({"request_id": rid, "instance": k, "ts": T0 + timedelta(seconds=i), "model_name": "fraud",
                         "model_version": "4", "live_version": "3", "live_variant": "stable",
                         "transaction_id": f"{rid}-{k}", "live_score": score,
                         "score": None if cand is None else cand[k], "status": status,
                         "error": None if status == "ok" else status, "latency_ms": ms, "live_predict_ms": live_ms})
    return pd.DataFrame(rows)


def test_figures_match_scipy_and_hand_counts() -> None:
    got = summarize_shadow(shadow_frame(), model="fraud", threshold=0.5)
    live = [0.10, 0.62, 0.30, 0.80, 0.05, 0.45]
    cand = [0.12, 0.48, 0.55, 0.90, 0.07, 0.30]
    assert got.pearson == pytest.approx(stats.pearsonr(live, cand).statistic, abs=1e-12)
    assert got.spearman == pytest.approx(stats.spearmanr(live, cand).statistic, abs=1e-12)
    assert got.mean_abs_diff == pytest.approx((0.02 + 0.14 + 0.25 + 0.10 + 0.02 + 0.15) / 6)
    assert (got.flipped, got.flipped_to_flag, got.flipped_to_pass) == (2, 1, 1)
    assert got.flip_rate == pytest.approx(2 / 6)
    assert (got.requests, got.rows, got.answered_rows) == (7, 9, 6)
    assert got.errors == 2 and got.error_rate == pytest.approx(2 / 7)
    assert got.errors_by_status == {"timeout": 1, "http_500": 1}
    # latency over the answered requests only (r1 r2 r3 r4 r7), one value per request
    shadow_ms, live_ms = [4.0, 6.0, 3.0, 10.0, 5.0], [1.0, 2.0, 1.5, 3.0, 1.2]
    assert got.latency["shadow_p50_ms"] == 5.0 and got.latency["live_p50_ms"] == 1.5
    assert got.latency["shadow_p99_ms"] == pytest.approx(stats.scoreatpercentile(shadow_ms, 99))
    assert got.latency["live_p99_ms"] == pytest.approx(stats.scoreatpercentile(live_ms, 99))
    assert got.latency["p50_diff_ms"] == pytest.approx(3.5)
    assert got.candidate_versions == ("4",) and got.live_versions == ("3",) and got.passed is None


def test_limits_fail_with_reasons_and_pass_within() -> None:
    failing = summarize_shadow(shadow_frame(), model="fraud", threshold=0.5,
                               limits=ShadowLimits(max_flip_rate=0.2, max_error_rate=0.25, max_p99_diff_ms=1.0))
    assert failing.passed is False and len(failing.reasons) == 3
    assert "2 of 6 decisions flipped at 0.5" in failing.reasons[1]
    passing = summarize_shadow(shadow_frame(), model="fraud", threshold=0.5,
                               limits=ShadowLimits(max_flip_rate=0.34, max_error_rate=0.3, min_requests=7))
    assert passing.passed is True and passing.reasons == ()
    # at threshold 0.35 a different pair flips: r2 (0.30 -> 0.55) stays a flip, r7 (0.45 -> 0.30) becomes one
    assert summarize_shadow(shadow_frame(), model="fraud", threshold=0.35).flipped == 2


def test_reads_the_shadow_log_beside_the_prediction_log(tmp_path: Path) -> None:
    store = tmp_path / "predlog"
    assert write_prediction_log(shadow_log_uri(store), "fraud", shadow_frame()) == 9
    got = analyze_shadow(store, "fraud", threshold=0.5)
    assert got.requests == 7 and got.flipped == 2
    assert analyze_shadow(store, "fraud", threshold=0.5, since=T0 + timedelta(seconds=4)).requests == 3
    assert read_prediction_log(store, "fraud").empty  # shadow rows never read as live predictions
    assert (store / "role=shadow" / "model=fraud" / "version=4").is_dir()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"threshold": 1.5}, "threshold 1.5 must be a score strictly between 0 and 1"),
    ({"threshold": 0.5, "since": T0 + timedelta(hours=1), "until": T0}, "is after until"),
    ({"threshold": 0.5, "versions": ["9"]}, "no shadow answers of 'fraud' of version(s) ['9']"),
])
def test_bad_input_is_named(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    write_prediction_log(shadow_log_uri(tmp_path), "fraud", shadow_frame())
    with pytest.raises(ShadowError) as err:
        analyze_shadow(tmp_path, "fraud", **kwargs)  # type: ignore[arg-type]
    assert message in str(err.value)


def test_a_log_without_the_shadow_columns_is_refused() -> None:
    with pytest.raises(ShadowError, match=r"no column\(s\) \['instance'"):
        summarize_shadow(shadow_frame().drop(columns=["instance"]), model="fraud", threshold=0.5)


def test_cli_prints_json_and_exits_5_on_a_failed_limit(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    write_prediction_log(shadow_log_uri(tmp_path), "fraud", shadow_frame())
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
    base = [sys.executable, "-m", "mlops_cli", "shadow", "analyze", "--set", f"serving.prediction_log_uri={tmp_path}"]
    ok = subprocess.run([*base, "--json"], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["flipped"] == 2 and doc["requests"] == 7 and doc["threshold"] == 0.5
    failed = subprocess.run([*base, "--max-flip-rate", "0.1", "--exit-code"], cwd=repo, env=env,
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 5 and "decisions flipped" in failed.stdout
    bad = subprocess.run([*base, "--max-error-rate", "7"], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--max-error-rate 7.0 must be a rate between 0 and 1" in bad.stderr
