"""The triggers' Prometheus counters, counted from a hand-written ledger and read back with prometheus_client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mlops_delivery import DeliveryError, retrain_metrics_text


def _samples(text: str) -> dict[tuple[str, str, str], float]:
    return {(s.labels["model"], s.labels["reason"], s.labels["outcome"]): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_each_outcome_is_counted_per_model_and_reason_and_the_unseen_ones_are_zero(tmp_path: Path) -> None:
    ledger = tmp_path / "triggers.jsonl"
    rows = [("fraud", "drift", "opened"), ("fraud", "drift", "updated"), ("fraud", "drift", "rate-limited"),
            ("fraud", "drift", "rate-limited"), ("fraud", "data", "failed"), ("llm", "performance", "opened")]
    ledger.write_text("".join(json.dumps({"model": m, "reason": r, "status": s, "detail": "x"}) + "\n"
                              for m, r, s in rows) + "\n")
    got = _samples(retrain_metrics_text(ledger))
    assert got[("fraud", "drift", "rate-limited")] == 2
    assert got[("fraud", "drift", "opened")] == got[("fraud", "drift", "updated")] == 1
    assert got[("fraud", "drift", "failed")] == 0 and got[("fraud", "data", "failed")] == 1
    assert got[("llm", "performance", "opened")] == 1
    assert sum(got.values()) == len(rows)
    assert len(got) == 3 * 6  # three (model, reason) pairs, six outcomes each


def test_no_ledger_is_no_samples_and_a_bad_line_is_named(tmp_path: Path) -> None:
    assert _samples(retrain_metrics_text(tmp_path / "absent.jsonl")) == {}
    bad = tmp_path / "triggers.jsonl"
    bad.write_text(json.dumps({"model": "fraud", "reason": "drift", "status": "opened"}) + "\n{not json\n")
    with pytest.raises(DeliveryError, match=r"line 2 is not an outcome record .*'\{not json'"):
        retrain_metrics_text(bad)
