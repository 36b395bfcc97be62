"""The report's canary section for both shapes the loops record: the local loop's (with the served scores) and the
rehearsal's (Prometheus and the shared log: no scores), which crashed the report of a failed rehearsal with
KeyError 'scores'."""

from __future__ import annotations

from types import SimpleNamespace

from mlops_pipeline.sections import canary_section


def _facts(with_scores: bool) -> dict:
    side = {"p99_s": 0.05, "error_rate": 0.0, "requests": 4000}
    analysis = {"decision": "hold", "prediction_psi": 1.0019, "reasons": ["threshold: FAILED: prediction PSI 1.0019"],
                "stable": side, "canary": {**side, "p99_s": 0.06}, "sequential": None}
    canary = {"analysis": analysis, "percent": 50, "stable": "1", "canary": "2"}
    if with_scores:
        canary["scores"] = {"1": [0.1, 0.2, 0.3], "2": [0.2, 0.3, 0.4]}
    return {"canary": canary}


def test_the_canary_section_draws_scores_when_recorded_and_is_built_without_them() -> None:
    local = canary_section(SimpleNamespace(facts=_facts(True)))  # type: ignore[arg-type]
    rehearsal = canary_section(SimpleNamespace(facts=_facts(False)))  # type: ignore[arg-type]
    assert local is not None and rehearsal is not None
    assert local.title == rehearsal.title == "Canary analysis: hold"
    assert "stable v1 vs canary v2 at 50%; prediction PSI 1.002" in rehearsal.text
    assert len(local.plots) == 2 and len(rehearsal.plots) == 1
    assert rehearsal.table == {"header": ["check"], "rows": [["threshold: FAILED: prediction PSI 1.0019"]]}
