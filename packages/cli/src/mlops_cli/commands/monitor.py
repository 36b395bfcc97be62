"""``mlops monitor``: drift of the prediction log against the training reference, alerts and fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

app = typer.Typer(help="Drift monitoring: PSI / KS / chi² against the training reference.", no_args_is_help=True)

_STYLE = {"OK": "green", "INFO": "cyan", "WARNING": "yellow", "CRITICAL": "bold red"}


@app.command("run")
def run(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Prediction-log window: 30m, 1h, 7d.")] = None,
    current: Annotated[Path | None, typer.Option(
        "--current", help="Compare this parquet file/folder or CSV instead of the prediction log.")] = None,
    reference: Annotated[Path | None, typer.Option(
        "--reference", help="Reference profile (.json) or reference rows; default: the served version's profile "
                            "(a fine-tuned LM: its fine-tuning prompts, or an LM reference .json).")
    ] = None,
    labels: Annotated[Path | None, typer.Option(
        "--labels", help="Delayed labels (the contract's record id and label): realized F1/precision/recall.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report the actions, do not roll back.")] = False,
    html: Annotated[bool | None, typer.Option("--html/--no-html", help="Write Evidently's HTML report.")] = None,
) -> None:
    """Compare a window with the reference, alert at WARNING, roll back to the fallback at CRITICAL.

    What is compared is the model family's drift source (``kind_of`` of the training section): a tabular model's
    features and scores, a fine-tuned LM's logged prompts against its fine-tuning prompts (``--model llm-sft``).

    Exits non-zero when an alert could not be delivered (it is kept and re-sent next run) or the rollback failed.
    """
    from mlops_pipeline import run_monitoring

    loaded = load(profile, model, sets)
    result = run_monitoring(loaded, window=window, current=current, reference=reference, labels=labels,
                            dry_run=dry_run, html=html)
    if as_json:
        print_json(result.to_dict())
        result.check()
        return
    table = Table(title=f"{result.model}: [{_STYLE[result.level]}]{result.level}[/]  "
                        f"({result.report.n_current} rows vs {result.report.n_reference})")
    for name in ("column", "method", "statistic", "p-value", "PSI", "severity"):
        table.add_column(name)
    for name, col in result.report.columns.items():
        p_value = "-" if col.p_value is None else f"{col.p_value:.3g}"
        table.add_row(name, col.method, f"{col.statistic:.4f}", p_value, f"{col.psi:.4f}",
                      f"[{_STYLE[col.severity]}]{col.severity}[/]")
    console.print(table)
    if result.quality is not None:
        q = result.quality
        console.print(f"realized: F1 {q.f1:.4f}  precision {q.precision:.4f}  recall {q.recall:.4f}  "
                      f"({q.n_labelled} of {q.n_predictions} labelled)")
    for reason in result.reasons:
        console.print(f"  {reason}")
    for action in result.actions:
        console.print(f"  {action.action}: {'ok' if action.ok else 'NOT DONE'} — {action.detail}")
    for kind, path in result.outputs.items():
        console.print(f"  {kind}: {path}")
    result.check()
