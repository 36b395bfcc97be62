"""The report's "LM canary" section, from a real LM canary analysis of expositions the LM server's metrics class
wrote; shown only when the LM loop ran a canary."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
from prometheus_client import generate_latest

from mlops_config import DeliveryConfig, LMDeliveryConfig, LMSequentialConfig
from mlops_delivery import analyze_lm_canary
from mlops_pipeline.report import render_report
from mlops_pipeline.runner import StepResult
from mlops_pipeline.sections import build_sections, lm_canary_section
from mlops_serving.lm_api import LMMetrics


def exposition(version: str, n: int, errors: int) -> str:
    m = LMMetrics()
    for _ in range(n):
        m.requests.labels("llm", version, "stable", "completions").inc()
        m.ttft.labels("llm", version).observe(0.03)
        m.tokens_per_s.labels("llm", version).observe(60)
        m.decode_tokens.labels("llm", version).inc(10)
        m.decode_seconds.labels("llm", version).inc(10 / 60)
    for _ in range(errors):
        m.errors.labels("llm", version, "RuntimeError", "500").inc()
    return generate_latest(m.registry).decode()


def test_lm_canary_section_shows_the_verdict_every_check_and_the_intervals(tmp_path: Path) -> None:
    delivery = DeliveryConfig(min_canary_requests=40, lm=LMDeliveryConfig(
        sequential=LMSequentialConfig(error_margin=0.1, ttft_margin=0.1, decode_margin=0.1)))
    log = pd.DataFrame({"model_version": ["1"] * 30 + ["2"] * 19, "completion_tokens": [8] * 49})
    analysis = analyze_lm_canary(delivery, stable_metrics=exposition("1", 30, 0),
                                 canary_metrics=exposition("2", 19, 11), log=log, stable_version=1, canary_version=2,
                                 model="llm")
    ctx = SimpleNamespace(facts={"lm_canary": {"analysis": analysis.to_dict(), "stable": "1", "canary": "2",
                                               "traffic": {}}})
    section = lm_canary_section(ctx)  # type: ignore[arg-type]
    assert section is not None and section.title == "LM canary: rollback"
    assert "sequential verdict (always-valid, alpha 0.05) said rollback after 30 canary requests" in section.text
    assert "the thresholds alone said hold" in section.text
    assert section.table is not None and [r[0] for r in section.table["rows"]] == list(analysis.reasons)
    html = render_report(tmp_path, steps=[StepResult("lm-canary", "LM canary", "failed", 1.0)], sections=[section],
                         profile="local", model="llm").read_text()
    assert sorted(re.findall(r'<svg data-plot="([^"]+)"', html)) == ["lm-canary-compare", "lm-canary-sequential"]
    assert "LM canary: rollback" in html and "WORSE: error_rate" in html
    assert lm_canary_section(SimpleNamespace(facts={})) is None  # type: ignore[arg-type]
    assert [s.id for s in build_sections(ctx)] == ["lm-canary"]  # type: ignore[arg-type]
