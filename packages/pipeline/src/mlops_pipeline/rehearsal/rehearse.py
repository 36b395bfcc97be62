"""`mlops pipeline rehearse`: the staging topology on one machine, the whole loop through it, then everything stopped.

Writes ``.mlops/rehearsal/<UTC time>/`` (server logs under ``logs/``, the GitOps remote, the DVC remote, the
bucket, the report) and returns a :class:`RehearsalResult` whose :meth:`~RehearsalResult.to_line` is the one
JSON line a machine reads.
"""

from __future__ import annotations

import contextlib
import json
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mlops_config import load_config
from mlops_pipeline.console import StepConsole
from mlops_pipeline.labels_step import summarize_labels
from mlops_pipeline.pipeline import brief
from mlops_pipeline.rehearsal import loop, retrain
from mlops_pipeline.rehearsal.context import RehearsalContext
from mlops_pipeline.rehearsal.gitops import served_at_head
from mlops_pipeline.report import Section, render_report
from mlops_pipeline.runner import Step, StepResult, run_steps
from mlops_pipeline.sections import build_sections
from mlops_pipeline.servers import ProcessHarness, group_members, terminate_on_sigterm

STEPS = [
    Step("platform", "Platform: MLflow (auth, PostgreSQL), Redis, Prometheus, Alertmanager", loop.step_platform),
    Step("ingest", "Ingest a new batch", loop.step_ingest),
    Step("validate", "Validate, version with DVC, push to the remote", loop.step_validate),
    Step("pin", "Data trigger: retraining PR pins the version; merged", retrain.step_pin),
    Step("features", "dvc pull of the pin in the runner; Feast: SQL registry + Redis", loop.step_features),
    Step("tracking", "MLflow ready, refuses anonymous requests; a user per role, probed", loop.step_tracking),
    Step("bootstrap", "First champion: train, gates, publish, pin, serve", loop.step_bootstrap),
    Step("train", "Train with FSDP (2 CPU processes) on the pulled data", loop.as_role("trainer", loop.step_train)),
    Step("register", "Registered in the authenticated MLflow", loop.as_role("trainer", loop.step_register)),
    Step("gates", "Evaluation gates → staging alias", loop.as_role("trainer", loop.step_gates_rehearsed)),
    Step("staging", "Publish to storageUri, staging overlay commit", loop.as_role("delivery", loop.step_staging)),
    Step("canary-10", "Canary 10 %: commit, new revision, split traffic",
         loop.as_role("delivery", loop.canary_step(10, analysed=False))),
    Step("canary-50", "Canary 50 %: commit, traffic, analysis",
         loop.as_role("delivery", loop.canary_step(50, analysed=True))),
    Step("production", "Production commit, champion alias", loop.as_role("delivery", loop.step_production)),
    Step("drift", "Drifted traffic through the transformer", loop.step_drift_traffic),
    Step("ingest-drifted", "The drifted day ingested: a newer data version", retrain.step_ingest_drifted),
    Step("monitor", "Drift job: CRITICAL", loop.as_role("monitor", loop.step_monitor)),
    Step("alert", "Alert in Alertmanager (GET /api/v2/alerts)", loop.step_alert),
    Step("rollback", "Rollback: revert commit + alias + ledger; fallback serves", loop.step_check_fallback),
    Step("labels", "Labels a week later → realized vs estimated F1", retrain.step_labels),
    Step("retrain", "Merge the retraining PR → train → gates → staging on the pin", retrain.step_retrain),
]


@dataclass
class RehearsalResult:
    steps: list[StepResult]
    run_dir: Path
    report: Path | None
    seconds: float
    alerts_received: int = 0
    rollback_commit: str | None = None
    served_at_head: str | None = None
    servers_left: list[int] = field(default_factory=list)
    """Pids still alive in any process group the harness started (must be empty)."""
    retrain_pr: dict[str, Any] | None = None
    """The retraining pull request the monitor opened (status, branch, data_version, head_sha)."""
    retrained_version: str | None = None
    """The version the merge step trained on the pinned data and put in staging."""

    @property
    def ok(self) -> bool:
        return all(s.status == "ok" for s in self.steps) and not self.servers_left

    def to_dict(self) -> dict[str, Any]:
        steps = [{"name": s.name, "ok": s.status == "ok", "seconds": round(s.seconds, 2),
                  "detail": s.outputs if s.status == "ok" else {"status": s.status, "error": s.error}}
                 for s in self.steps]
        return {"steps": steps, "alerts_received": self.alerts_received, "rollback_commit": self.rollback_commit,
                "served_at_head": self.served_at_head, "seconds": round(self.seconds, 1),
                "ok": self.ok, "run_dir": str(self.run_dir), "report": str(self.report) if self.report else None,
                "servers_left": self.servers_left, "retrain_pr": self.retrain_pr,
                "retrained_version": self.retrained_version}

    def to_line(self) -> str:
        """The one JSON line (paths and timestamps as strings)."""
        return json.dumps(self.to_dict(), default=str, separators=(",", ":"))


def run_rehearsal(repo_root: Path, *, fast: bool = False, show: bool = True, console: Console | None = None,
                  reporter: StepConsole | None = None) -> RehearsalResult:
    """Start the topology, run every step, write the report, stop every server; never leaves a process behind.

    ``reporter`` shows the steps and keeps their output in per-step logs (default: nothing shown or kept).
    """
    console = console or Console(stderr=True)
    reporter = reporter or StepConsole.quiet()
    started = time.perf_counter()
    run_dir = repo_root / ".mlops" / "rehearsal" / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir.mkdir(parents=True, exist_ok=False)
    loaded = load_config(profile="staging", config_dir=repo_root / "configs", check_secrets=False)
    report: Path | None = None
    served: str | None = None
    with terminate_on_sigterm(), ExitStack() as cleanup:
        with ProcessHarness(run_dir / "logs") as harness:
            ctx = RehearsalContext(loaded=loaded, fast=fast, actor="mlops-rehearsal", repo_root=repo_root,
                                   run_dir=run_dir, harness=harness, cleanup=cleanup)
            results = run_steps(STEPS, ctx, reporter=reporter, summarize=_summary)
            if ctx.gitops is not None and results[-1].status == "ok":
                # what Argo CD would sync now: the overlay rendered at the remote's HEAD
                served = str(served_at_head(ctx.gitops, ctx.prod_env, ctx.model,
                                            ctx.cfg.delivery.storage_uri_template).stable_version)
            with contextlib.suppress(Exception), reporter.captured("report"):  # must not hide the outcome
                report = _write_report(ctx, results, run_dir)
        left = sorted({pid for pgid in harness.stopped for pid in group_members(pgid)}
                      | {s.pid for s in harness.servers.values()})
    result = RehearsalResult(results, run_dir, report, time.perf_counter() - started,
                             alerts_received=int(ctx.result.get("alerts_received", 0)),
                             rollback_commit=ctx.result.get("rollback_commit"), served_at_head=served,
                             servers_left=left, retrain_pr=ctx.result.get("retrain_pr"),
                             retrained_version=ctx.result.get("retrained_version"))
    if show:
        _print_summary(console, result)
    return result


def _write_report(ctx: RehearsalContext, results: list[StepResult], run_dir: Path) -> Path:
    sections = [*_rehearsal_sections(ctx), *build_sections(ctx)]
    summaries = {s.name: _summary(s) for s in results}
    return render_report(run_dir / "report", steps=results, sections=sections, profile="staging (rehearsal)",
                         model=ctx.model, summaries=summaries)


def _rehearsal_sections(ctx: RehearsalContext) -> list[Section]:
    out = []
    if ctx.harness is not None:
        rows = [[s.spec.name, str(s.pid), f"{s.ready_s:.1f}", str(s.log_path.relative_to(ctx.run_dir))]
                for s in ctx.harness.servers.values()]
        out.append(Section("topology", "Topology: real servers on this machine",
                           text=f"run folder {ctx.run_dir}",
                           table={"header": ["server", "pid", "ready after s", "log"], "rows": rows}))
    if ctx.gitops is not None:
        out.append(Section("gitops", "GitOps remote: every promotion and the rollback are commits",
                           table={"header": ["commit"], "rows": [[line] for line in ctx.gitops.log()]}))
    return out


def _summary(step: StepResult) -> str:
    if step.status != "ok":
        return step.error or step.status
    o = step.outputs
    if step.name == "labels":
        return summarize_labels(step.outputs)
    keys = ("version", "commit", "decision", "level", "data_version", "alerts", "champion", "served")
    parts = [f"{k}={_short(o[k])}" for k in keys if k in o]
    return ", ".join(parts) or brief(o)


def _short(value: Any) -> str:
    if isinstance(value, str) and len(value) > 16:
        return value[:12]
    if isinstance(value, dict) and "stable_version" in value:
        canary = f" + canary v{value['canary_version']} {value['canary_percent']}%" if value["canary_version"] else ""
        return f"v{value['stable_version']}{canary}"
    if isinstance(value, list):
        return str(len(value))
    return str(value)


def _print_summary(console: Console, result: RehearsalResult) -> None:
    table = Table(title="mlops pipeline rehearse")
    for col in ("#", "step", "status", "s", "what happened"):
        table.add_column(col, overflow="fold")
    for i, s in enumerate(result.steps, 1):
        style = {"ok": "green", "failed": "red"}.get(s.status, "yellow")
        table.add_row(str(i), s.title, f"[{style}]{s.status}", f"{s.seconds:.1f}", _summary(s))
    console.print(table)
    console.print(f"served at HEAD: v{result.served_at_head}; alerts received: {result.alerts_received}; "
                  f"rollback commit: {result.rollback_commit}; retraining PR: "
                  f"{(result.retrain_pr or {}).get('branch')} → v{result.retrained_version} in staging; "
                  f"{result.seconds:.0f} s; report: {result.report}")
    if result.servers_left:
        console.print(f"[red]processes left running: {result.servers_left}")


