"""``benchmarks/serving_load.py --quick``: the four arms come up as real processes, every one answers, and the JSON
line has the shape the issue asks for (correctness only: the timings are the benchmark's, not asserted here).

Independent checks: the ratios are recomputed from the arms' own per-round figures; the CPU per request is bounded
by what two cores can give over the window (a server cannot spend more CPU than the machine has).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARMS = {"floor", "ours", "ours_split", "glue"}
FIGURES = {"rps", "p50_ms", "p95_ms", "p99_ms", "cpu_ms_per_request", "errors", "requests"}


def test_four_arms_answer_without_errors_and_report_in_shape(repo_root: Path) -> None:
    proc = subprocess.run([sys.executable, str(repo_root / "benchmarks/serving_load.py"), "--quick"], cwd=repo_root,
                          capture_output=True, text=True, timeout=600, check=False, env=os.environ)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])

    assert set(report) >= {"arms", "open_loop", "ratios", "targets", "met"}
    assert set(report["arms"]) == ARMS
    for arm, figures in report["arms"].items():
        assert set(figures) >= FIGURES, arm
        assert figures["errors"] == 0 and figures["requests"] > 0, (arm, figures)
        assert figures["p50_ms"] <= figures["p99_ms"], (arm, figures)
        # CPU seconds over the window / answers: positive, and no more than the machine's cores could give
        cpu_bound_ms = (os.cpu_count() or 1) * 1000.0 * report["duration_s"] / figures["requests"]
        assert 0 < figures["cpu_ms_per_request"] <= cpu_bound_ms * 1.05, (arm, figures)
    ratios = report["ratios"]
    arms = report["arms"]
    assert ratios["ours_p50_vs_floor"] == pytest.approx(arms["ours"]["p50_ms"] / arms["floor"]["p50_ms"], rel=1e-2)
    assert ratios["ours_split_rps_vs_glue"] == pytest.approx(arms["ours_split"]["rps"] / arms["glue"]["rps"],
                                                             rel=1e-2)
    assert report["open_loop"]["rate"] == pytest.approx(0.8 * arms["floor"]["rps"], rel=1e-2)
    for arm in ARMS:
        assert report["open_loop"][arm]["rps"] > 0, (arm, report["open_loop"][arm])
    assert report["met"]["closed_loop_errors"] is True
    assert set(report["met"]) == {"ours_p50_vs_floor", "ours_cpu_per_request_vs_floor", "ours_split_rps_vs_glue",
                                  "ours_split_p99_vs_glue", "closed_loop_errors", "open_loop_ours_p99_vs_floor"}
    assert all(isinstance(v, bool) for v in report["met"].values())
    assert not any(isinstance(v, float) and math.isnan(v) for v in arms["glue"].values() if not isinstance(v, dict))
    # ours' own stage histograms over the closed-loop rounds: every measured answer went through the model (the
    # server also counted the warm-ups), in batches of at least one request, each stage taking some time
    profile = report["ours_profile"]
    assert profile["requests"] >= arms["ours"]["requests"], profile
    assert 1 <= profile["batches"] <= profile["requests"], profile
    assert profile["requests_per_batch"] == pytest.approx(profile["requests"] / profile["batches"], abs=0.01)
    assert profile["feature_lookup_ms_per_batch"] > 0 and profile["predict_ms_per_batch"] > 0, profile
    assert profile["in_model_ms_per_request"] > 0, profile
