"""The HTML report renders every plot in headless Chromium with no console error, and works offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlops_pipeline import plots
from mlops_pipeline.report import Section, render_report
from mlops_pipeline.runner import Step, StepResult, run_steps


def _sample_sections() -> list[Section]:
    return [
        Section("training", "Training", plots=[
            plots.line_chart("loss", {"train": ([1, 2, 3], [0.9, 0.5, 0.3])}, title="loss", xlabel="step",
                             ylabel="loss"),
        ]),
        Section("gates", "Gates", table={"header": ["gate", "passed"], "rows": [["quality", "yes"]]}, plots=[
            plots.interval_chart("f1-delta", [("F1", 0.05, 0.02, 0.08)], title="ΔF1", xlabel="Δ", threshold=0.02),
            plots.distribution_chart("latency", {"A": [1, 2, 2, 3], "B": [2, 3, 3, 4]}, title="lat", xlabel="ms"),
        ]),
        Section("canary", "Canary", plots=[
            plots.grouped_bar_chart("canary", {"p99 ms": {"stable": 3.0, "canary": 4.0}}, title="canary"),
        ]),
        Section("drift", "Drift", plots=[
            plots.bar_chart("psi", {"amount": 0.4, "channel": 0.01}, title="PSI", ylabel="PSI",
                            thresholds={"warning": 0.1, "critical": 0.2}),
        ]),
        Section("ledger", "Ledger", text="<b>not bold</b>", plots=[
            plots.timeline_chart("ledger", [(0.0, "champion", "v1"), (5.0, "fallback", "v1")], title="ledger"),
        ]),
    ]


def test_runner_stops_at_first_failure_and_keeps_results() -> None:
    def boom(_: object) -> dict[str, int]:
        raise RuntimeError("disk full")

    results = run_steps([Step("a", "A", lambda c: {"n": 1}), Step("b", "B", boom), Step("c", "C", lambda c: {})],
                        ctx=None)
    assert [r.status for r in results] == ["ok", "failed", "skipped"]
    assert results[0].outputs == {"n": 1}
    assert results[1].error == "RuntimeError: disk full"


def test_report_is_self_contained_and_escaped(tmp_path: Path) -> None:
    steps = [StepResult("a", "Generate", "ok", 1.5), StepResult("b", "Train", "failed", 2.0, error="boom <x>")]
    path = render_report(tmp_path, steps=steps, sections=_sample_sections(), profile="local", model="fraud")
    html = path.read_text()
    assert len(re.findall(r"<svg data-plot=", html)) == 6
    assert "<script" not in html
    assert not re.search(r"""(src|href)=["']https?://""", html)
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html
    assert "boom &lt;x&gt;" in html


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path: Path, render_in_chromium) -> None:
    path = render_report(tmp_path, steps=[StepResult("a", "A", "ok", 1.0)], sections=_sample_sections(),
                         profile="local", model="fraud")
    boxes, problems = render_in_chromium(path)
    assert sorted(boxes) == sorted(["loss", "f1-delta", "latency", "canary", "psi", "ledger"])
    assert all(b is not None and b["width"] > 100 and b["height"] > 50 for b in boxes.values())
    assert problems == []
