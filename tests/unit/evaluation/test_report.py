"""The report: strict JSON (no NaN), a Markdown summary a reviewer can read, exit code from the verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlops_config import EvaluationConfig, TabularEvaluationConfig
from mlops_evaluation import EvaluationReport, GateResult, quality_gate, to_markdown
from mlops_evaluation.report import write_report


def _report(passed: bool) -> EvaluationReport:
    y = np.array([1, 0, 0, 1] * 50)
    cand = np.array([0.9, 0.1, 0.2, 0.8] * 50)
    # slice "b" holds negatives only: ROC-AUC is undefined there (NaN) and must not break the JSON
    slices = {"channel": np.array(["a", "b", "b", "a"] * 50)}
    cfg = EvaluationConfig(bootstrap_samples=100, tabular=TabularEvaluationConfig(min_slice_rows=10))
    quality = quality_gate(y, cand, None, slices, cfg)
    other = GateResult("latency", passed, "p99 fine" if passed else "p99 +40% > allowed +12%", {"x": 1})
    return EvaluationReport(model="fraud", registered_model="fraud", candidate={"version": "3", "run_id": None},
                            champion=None, holdout={"rows": 200, "positives": 100, "fingerprint": "ab" * 32},
                            gates=[quality, other], created="2026-11-30T00:00:00+00:00")


def test_json_is_strict_and_verdict_drives_exit_code(tmp_path: Path) -> None:
    ok, blocked = _report(True), _report(False)
    assert ok.passed and ok.exit_code == 0
    assert not blocked.passed and blocked.exit_code == 1
    paths = write_report(blocked, tmp_path)
    doc = json.loads(Path(paths["json"]).read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert doc["passed"] is False and [g["name"] for g in doc["gates"]] == ["quality", "latency"]
    assert doc["gates"][0]["evidence"]["slices"]["channel"]["b"]["candidate_metrics"]["roc_auc"] is None
    md = Path(paths["markdown"]).read_text()
    assert "❌ BLOCKED" in md and "| latency | **FAIL** | p99 +40% > allowed +12% |" in md
    assert "trivial baseline" in md and "| channel=a | 100 |" in md
    assert "✅ PASSED" in to_markdown(ok)
