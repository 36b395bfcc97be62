"""The report's performance section: realized (labels) and estimated (CBPE) F1 per window and served version.

Reads ``ctx.facts["performance"]``, a :class:`mlops_monitoring.PerformanceReport` as a dict, put there by the
step that ran ``mlops_monitoring.performance_report``; without it the section is left out.
"""

from __future__ import annotations

from typing import Any

from mlops_pipeline.context import PipelineContext
from mlops_pipeline.report import Section


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _version(window: dict[str, Any]) -> str:
    return f"v{window['version']}" + (f" ({window['traffic']})" if window.get("traffic") else "")


def performance_section(ctx: PipelineContext) -> Section | None:
    """A table of every (window, version): labelled share, realized vs estimated F1 and AUC, ECE, label delay."""
    report = ctx.facts.get("performance")
    if not report or not report.get("windows"):
        return None
    rows = [[w["window_start"][:16], _version(w), f"{w['n_labelled']}/{w['n_predictions']}",
             _fmt(w["realized"]["f1"]), _fmt(w["estimated"]["f1"]), _fmt(w["estimation_error"]["f1"]),
             _fmt(w["realized"]["auc"]), _fmt(w["estimated"]["auc"]), _fmt(w["realized"]["ece"]),
             _fmt(w["label_delay_hours"]["p50"])] for w in report["windows"]]
    verdicts = "; ".join(f"v{v}: {d['verdict']} ({d['reason']})" for v, d in sorted(report["verdicts"].items()))
    gates = ctx.facts.get("gates")  # the candidate's calibration gate: whether its estimate can be read at all
    calibration = next((g for g in getattr(gates, "gates", []) if g.name == "calibration"), None)
    if calibration is not None and gates is not None:
        verdicts += f". Calibration gate (v{gates.candidate['version']}): {calibration.label}, {calibration.reason}"
    return Section("performance", f"Performance at threshold {report['threshold']}",
                   text="Realized from delayed labels, estimated from calibrated scores (CBPE) before they arrive. "
                        + verdicts,
                   table={"header": ["window", "version", "labelled", "F1 realized", "F1 estimated", "F1 error",
                                     "AUC realized", "AUC estimated", "ECE", "label delay p50 (h)"], "rows": rows})
