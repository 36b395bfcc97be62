"""The evaluation report: one JSON document for machines, a Markdown summary for people (PR comment, job
summary), both written to the report folder and logged on the candidate's MLflow run."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlops_core import GATE_REPORT_ARTIFACT, atomic_write_text
from mlops_evaluation.gates import GateResult

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)
ARTIFACT_DIR = GATE_REPORT_ARTIFACT.rsplit("/", 1)[0]
JSON_NAME = GATE_REPORT_ARTIFACT.rsplit("/", 1)[1]
MD_NAME = "evaluation.md"


@dataclass
class EvaluationReport:
    """Everything an evaluation found; ``passed`` is true only when every gate passed."""

    model: str
    registered_model: str
    candidate: dict[str, Any]
    champion: dict[str, Any] | None
    holdout: dict[str, Any]
    gates: list[GateResult]
    created: str
    settings: dict[str, Any] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.gates) and all(g.passed for g in self.gates)

    @property
    def exit_code(self) -> int:
        """0 when every gate passed, 1 when one failed (errors never get here: they raise, exit 2)."""
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (NaN and ±inf, e.g. ROC-AUC of a one-class slice, become ``null``)."""
        return _finite({"model": self.model, "registered_model": self.registered_model, "passed": self.passed,
                "candidate": self.candidate, "champion": self.champion, "holdout": self.holdout,
                "gates": [g.as_dict() for g in self.gates], "created": self.created, "settings": self.settings})


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _row(metrics: dict[str, Any] | None) -> str:
    if not metrics:
        return "| — | — | — | — | — |"
    return "| " + " | ".join(f"{metrics[k]:.4f}" for k in ("f1", "precision", "recall", "pr_auc", "roc_auc")) + " |"


def to_markdown(report: EvaluationReport) -> str:
    """A short, reviewable summary: verdict, one line per gate, metrics and slice table."""
    verdict = "✅ PASSED" if report.passed else "❌ BLOCKED"
    champ = f"v{report.champion['version']}" if report.champion else "none (trivial baseline)"
    lines = [f"## Evaluation of {report.registered_model} v{report.candidate['version']}: {verdict}", "",
             f"Champion: {champ} · holdout {report.holdout.get('rows')} rows, {report.holdout.get('positives')} "
             f"positives, fingerprint `{str(report.holdout.get('fingerprint'))[:16]}`", "",
             "| gate | verdict | reason |", "| --- | --- | --- |"]
    lines += [f"| {g.name} | {g.label if g.passed else f'**{g.label}**'} | {g.reason.replace('|', '/')} |"
              for g in report.gates]
    quality = next((g for g in report.gates if g.name == "quality"), None)
    if quality is not None and quality.evidence.get("metric") == "perplexity":
        ev = quality.evidence
        lines += ["", f"| model | perplexity | NLL (nats/{ev.get('unit', 'byte')}) |", "| --- | --- | --- |",
                  f"| candidate | {ev['candidate']['perplexity']:.3f} | {ev['candidate']['nll']:.4f} |",
                  f"| {ev['reference']} | {ev['reference_metrics']['perplexity']:.3f} | "
                  f"{ev['reference_metrics']['nll']:.4f} |"]
        task = ev.get("task")
        if task:  # the LM's task check (mlops_evaluation.lm_task): exact match and token accuracy, held-out prompts
            ref = task.get("reference_metrics") or {}
            cand = task["candidate"]
            lines += ["", f"| model | exact match (floor {task['floor']:.0%}) | token accuracy |",
                      "| --- | --- | --- |",
                      f"| candidate | {cand['exact_match']:.1%} | {cand['token_accuracy']:.1%} |"]
            if ref:
                lines.append(f"| {task['reference']} | {ref['exact_match']:.1%} | {ref['token_accuracy']:.1%} |")
    elif quality is not None:
        ev = quality.evidence
        rule = "| --- | --- | --- | --- | --- | --- |"
        lines += ["", "| model | F1 | precision | recall | PR-AUC | ROC-AUC |", rule,
                  f"| candidate {_row(ev.get('candidate'))}",
                  f"| {ev.get('reference')} {_row(ev.get('reference_metrics'))}"]
        lines += ["", "| slice | rows | candidate F1 | reference F1 | Δ | gated |", rule]
        for column, values in ev.get("slices", {}).items():
            for value, s in values.items():
                lines.append(f"| {column}={value} | {s['rows']} | {s['candidate_f1']:.4f} | {s['reference_f1']:.4f} "
                             f"| {s['delta']:+.4f} | {'yes' if s['gated'] else 'no'} |")
    return "\n".join(lines) + "\n"


def write_report(report: EvaluationReport, folder: Path) -> dict[str, str]:
    """Write ``evaluation.json`` and ``evaluation.md`` into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    js, md = folder / JSON_NAME, folder / MD_NAME
    # Atomic: the pipeline and the promotion gate read evaluation.json back; a crash must not leave half of it.
    atomic_write_text(js, json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")
    atomic_write_text(md, to_markdown(report))
    report.paths = {"json": str(js), "markdown": str(md)}
    return report.paths


def log_report(client: MlflowClient, report: EvaluationReport, files: Sequence[Path]) -> None:
    """Attach the report files (under ``evaluation/``) and headline metrics to the candidate's run."""
    run_id = report.candidate.get("run_id")
    if not run_id:
        return
    for f in files:
        client.log_artifact(run_id, str(f), ARTIFACT_DIR)
    quality = next((g for g in report.gates if g.name == "quality"), None)
    if quality is not None:
        for key, value in quality.evidence["candidate"].items():
            if key in ("f1", "precision", "recall", "pr_auc", "roc_auc", "perplexity") and value == value:  # no NaN
                client.log_metric(run_id, f"holdout_{key}", float(value))
    client.set_tag(run_id, "mlops.evaluation.passed", str(report.passed).lower())
    client.set_tag(run_id, "mlops.evaluation.gates", ",".join(f"{g.name}={g.verdict}" for g in report.gates))
