"""``mlops data labels ingest`` and ``mlops monitor performance``: delayed labels in, realized and estimated out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

app = typer.Typer(help="Delayed labels: the labels gate and the label store beside the prediction log.",
                  no_args_is_help=True)


@app.command("ingest")
def ingest(
    batches: Annotated[list[Path], typer.Argument(help="Label batches: parquet with transaction_id, label, "
                                                       "label_time.")],
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Validate label batches against the served ids; accepted rows by label date, the rest to quarantine."""
    from mlops_monitoring import ingest_label_batches
    from mlops_serving import resolve_prediction_log_uri

    loaded = load(profile, model, sets, check_secrets=False)
    uri = resolve_prediction_log_uri(loaded.config.serving.prediction_log_uri, loaded.root)
    summary = ingest_label_batches(list(batches), uri, loaded.config.project.model)
    if as_json:
        print_json(summary.to_dict())
        return
    table = Table(title=f"labels: {summary.accepted_rows} accepted, {summary.quarantined_rows} quarantined "
                        f"of {summary.input_rows}")
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
        "--reference-f1", help="F1 the realized drop is measured against (e.g. the champion's validation F1).")] = None,
) -> None:
    """Realized (from labels) and CBPE-estimated precision, recall, F1, AUC per window and served version."""
    from mlops_core import atomic_write_text
    from mlops_monitoring import performance_metrics_text, performance_report
    from mlops_serving import resolve_prediction_log_uri

    loaded = load(profile, model, sets, check_secrets=False)
    cfg, m = loaded.config, loaded.config.monitoring
    uri = resolve_prediction_log_uri(cfg.serving.prediction_log_uri, loaded.root)
    report = performance_report(uri, cfg.project.model, m.decision_threshold, window=window or m.performance_window,
                                reference_f1=reference_f1, max_drop=m.max_f1_drop,
                                min_labelled=m.performance_min_labelled, bins=m.calibration_bins,
                                interval=m.estimate_interval)
    metrics = loaded.resolve_path(cfg.project.reports_dir) / m.performance_metrics_file
    atomic_write_text(metrics, performance_metrics_text(report))
    if as_json:
        print_json(report.to_dict())
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
    console.print(f"metrics: {metrics}")
