"""`mlops pipeline run`: the whole loop on one machine, a summary table and an HTML report."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mlops_config import LoadedConfig
from mlops_model import ModelKind, kind_of
from mlops_pipeline.console import StepConsole
from mlops_pipeline.context import PipelineContext
from mlops_pipeline.errors import PipelineError
from mlops_pipeline.labels_step import summarize_labels
from mlops_pipeline.lm_loop import LM_STEPS, summarize_lm
from mlops_pipeline.report import render_report
from mlops_pipeline.runner import Step, StepResult, run_steps
from mlops_pipeline.sections import build_sections
from mlops_pipeline.shadow import step_shadow, summarize_shadow_step
from mlops_pipeline.steps import (
    step_canary,
    step_data,
    step_drift,
    step_features,
    step_gates,
    step_labels,
    step_train,
)

STEPS = [
    Step("data", "Generate + validate data (one corrupted batch)", step_data),
    Step("features", "Feast apply + materialize", step_features),
    Step("train", "Train with FSDP (2 CPU processes), register", step_train),
    Step("gates", "Evaluation gates, promote to staging", step_gates),
    Step("shadow", "Mirror live traffic to the candidate, analyse", step_shadow),
    Step("canary", "Serve stable + canary, analyse, promote to champion", step_canary),
    Step("drift", "Drifted day → monitor → rollback", step_drift),
    Step("labels", "Labels a week later → realized vs estimated F1", step_labels),
]

LOOPS: dict[ModelKind, list[Step]] = {
    ModelKind.TABULAR: STEPS,
    ModelKind.HF_CAUSAL_LM: LM_STEPS,
    # A byte-level LM has no server of its own: it runs the fraud loop's steps as before, up to its gates.
    ModelKind.BYTE_LM: STEPS,
}
"""The loop each model family runs: the one place the pipeline chooses by family."""


@dataclass
class PipelineResult:
    steps: list[StepResult]
    report: Path
    seconds: float

    @property
    def ok(self) -> bool:
        return all(s.status == "ok" for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "seconds": round(self.seconds, 2), "report": str(self.report),
                "steps": [{"name": s.name, "title": s.title, "status": s.status, "seconds": round(s.seconds, 2),
                           "outputs": s.outputs, "error": s.error} for s in self.steps]}


def summarize(step: StepResult) -> str:
    """One line a person reads: what the step did, with its figures."""
    o = step.outputs
    if step.status != "ok":
        return step.error or step.status
    if step.name.startswith("lm-"):
        return summarize_lm(step)
    if step.name == "data":
        return (f"{o['input_rows']} rows in {o['batches']} batches: {o['accepted_rows']} accepted, "
                f"{o['quarantined_rows']} quarantined; rejected whole: {', '.join(o['rejected_batches']) or 'none'}")
    if step.name == "features":
        cached = "cached" if not o["dvc"]["ran"] else "built"
        return f"{o['feature_service']}: {o['features']} features, online store {cached}"
    if step.name == "train":
        f1 = o["metrics"].get("val_f1")
        first = f"first champion v{o['first_champion']['version']}; " if "first_champion" in o else ""
        cached = " (DVC cache: not retrained)" if not o["dvc"]["ran"] else ""
        return f"{first}candidate v{o['version']}, val F1 {f1:.3f}{cached}" if f1 is not None else f"v{o['version']}"
    if step.name == "gates":
        passed = ", ".join(f"{k} {'✓' if v else '✗'}" for k, v in o["gates"].items())
        ref = f"champion v{o['champion']}" if o["champion"] else "trivial baseline"
        return f"v{o['candidate']} vs {ref}: {passed} → staging"
    if step.name == "shadow":
        return summarize_shadow_step(o)
    if step.name == "canary":
        return (f"v{o['canary']} at {o['percent']}% vs v{o['stable']}: {o['requests']} requests → {o['decision']}; "
                f"champion v{o['champion_now']}, fallback v{o['fallback_now']}")
    if step.name == "drift":
        return (f"{o['level']} on {', '.join(o['drifted_features'][:4]) or 'nothing'}; champion v{o['champion_before']}"
                f" → v{o['champion_after']} (rollback {'recorded' if o['rolled_back'] else 'NOT done'})")
    if step.name == "labels":
        return summarize_labels(o)
    return brief(o)


def brief(outputs: dict[str, Any]) -> str:
    """A step's scalar figures as ``key=value`` (a step with no sentence of its own; never its raw JSON)."""
    parts = [f"{k}={v}" for k, v in outputs.items() if isinstance(v, str | int | float | bool) and len(str(v)) <= 40]
    return ", ".join(parts[:6]) or "done"


def run_pipeline(loaded: LoadedConfig, *, fast: bool = False, show: bool = True, console: Console | None = None,
                 reporter: StepConsole | None = None, until: str | None = None) -> PipelineResult:
    """Run every step (up to and including ``until``), print the summary table, write
    ``reports/latest/index.html``.

    ``reporter`` shows the steps and keeps their output in per-step logs (default: nothing shown or kept).
    """
    console = console or Console(stderr=True)
    reporter = reporter or StepConsole.quiet()
    ctx = PipelineContext(loaded=loaded, fast=fast)
    started = time.perf_counter()
    steps = LOOPS[kind_of(loaded.config.training)]
    if until is not None:
        names = [s.name for s in steps]
        if until not in names:
            raise PipelineError(f"--until {until!r} is not a step of this pipeline; expected one of {names}")
        steps = steps[: names.index(until) + 1]
    results = run_steps(steps, ctx, reporter=reporter, summarize=summarize)
    out_dir = loaded.root / loaded.config.project.reports_dir / "latest"
    summaries = {s.name: summarize(s) for s in results}
    with reporter.captured("report"):  # the report's queries (MLflow, plots) log and warn like a step
        report = render_report(out_dir, steps=results, sections=build_sections(ctx),
                               profile=loaded.config.project.profile, model=loaded.config.project.model,
                               summaries=summaries)
    result = PipelineResult(results, report, time.perf_counter() - started)
    if show:
        table = Table(title="mlops pipeline run")
        for col in ("#", "step", "status", "s", "what happened"):
            table.add_column(col, overflow="fold")
        for i, s in enumerate(results, 1):
            style = {"ok": "green", "failed": "red"}.get(s.status, "yellow")
            table.add_row(str(i), s.title, f"[{style}]{s.status}", f"{s.seconds:.1f}", summaries[s.name])
        console.print(table)
        console.print(f"report: {report}")
    return result
