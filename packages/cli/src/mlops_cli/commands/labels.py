"""``mlops data labels ingest`` and ``mlops monitor performance``: delayed labels in, realized and estimated out."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

if TYPE_CHECKING:
    from mlops_delivery import RetrainOutcome

app = typer.Typer(help="Delayed labels: the labels gate and the label store beside the prediction log.",
                  no_args_is_help=True)


@app.command("ingest")
def ingest(
    batches: Annotated[list[Path] | None, typer.Argument(
        help="Label batches: parquet with the contract's record_id column, label, label_time; "
             "default: the batches under "
             "data.labels_landing_uri not gated yet (the labels CronJob).")] = None,
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Validate label batches against the served ids; accepted rows by label date, the rest to quarantine."""
    from mlops_features import DataError
    from mlops_monitoring import ingest_label_batches, ingest_landed_labels
    from mlops_serving import resolve_prediction_log_uri

    loaded = load(profile, model, sets, check_secrets=False)
    cfg = loaded.config
    uri = resolve_prediction_log_uri(cfg.serving.prediction_log_uri, loaded.root)
    record_id = cfg.declared_contract("mlops data labels ingest (label batches are keyed by its record_id)").record_id
    skipped: list[str] = []
    if batches:
        summary = ingest_label_batches(list(batches), uri, cfg.project.model, record_id=record_id)
    elif cfg.data.labels_landing_uri:
        summary, skipped = ingest_landed_labels(cfg.data.labels_landing_uri, uri, cfg.project.model,
                                                record_id=record_id)
    else:
        raise DataError("no label batches given and data.labels_landing_uri is not set: pass batch files, or set "
                        "data.labels_landing_uri to the folder (fsspec URL) where label batches land")
    if as_json:
        print_json({**summary.to_dict(), "skipped": skipped})
        return
    table = Table(title=f"labels: {summary.accepted_rows} accepted, {summary.quarantined_rows} quarantined "
                        f"of {summary.input_rows}" + (f" ({len(skipped)} landed batch(es) gated before)"
                                                      if skipped else ""))
    for name in ("batch", "input", "accepted", "quarantined", "reasons"):
        table.add_column(name)
    for b in summary.batches:
        table.add_row(b.batch, str(b.input_rows), str(b.accepted_rows), str(b.quarantined_rows), "; ".join(b.reasons))
    console.print(table)


def performance(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Window: a pandas frequency (1h, 1D); "
                                                                      "default monitoring.performance_window.")] = None,
    reference_f1: Annotated[float | None, typer.Option(
        "--reference-f1", help="F1 the realized drop of a version is measured against when its model.json records "
                               "no validation F1 at its threshold (exported before per-version thresholds); "
                               "otherwise that recorded F1 is the reference.")] = None,
) -> None:
    """Realized (from labels) and CBPE-estimated precision, recall, F1, AUC per window and served version; a
    served version's drop beyond the policy opens or updates the retraining pull request (``delivery.retrain``).

    Exits non-zero when that request failed (after printing the report)."""
    from mlops_pipeline import run_performance

    loaded = load(profile, model, sets, check_secrets=False)
    run = run_performance(loaded, window=window, reference_f1=reference_f1)
    report = run.report
    if as_json:
        print_json(run.to_dict())
        run.check()
        return
    table = Table(title=f"{report.model}: performance at threshold {report.threshold}")
    for name in ("window", "version", "labelled", "F1 real", "F1 est", "AUC real", "AUC est", "ECE", "delay p50 h"):
        table.add_column(name)

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for w in report.windows:
        table.add_row(w.window_start[:16], w.version, f"{w.n_labelled}/{w.n_predictions}", fmt(w.realized["f1"]),
                      fmt(w.estimated["f1"]), fmt(w.realized["auc"]), fmt(w.estimated["auc"]), fmt(w.realized["ece"]),
                      fmt(w.label_delay_hours["p50"]))
    console.print(table)
    for version, v in report.verdicts.items():
        console.print(f"version {version}: {v['verdict']} ({v['reason']})")
    console.print(f"metrics: {run.metrics}")
    print_retrain(run.retrain)
    run.check()


def print_retrain(outcome: RetrainOutcome | None) -> None:
    """One line for a trigger's retraining request (nothing when no trigger fired)."""
    if outcome is None:
        return
    where = f" {outcome.url}" if outcome.url else ""
    detail = f" — {outcome.detail}" if outcome.detail else ""
    console.print(f"retrain {outcome.model} ({outcome.reason}): {outcome.status} "
                  f"({outcome.branch} → data {outcome.data_version or '-'}){where}{detail}")
