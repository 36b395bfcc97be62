"""``mlops canary``: compare a canary with the stable version and answer promote / hold / rollback."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

app = typer.Typer(help="Canary analysis: sequential tests (error rate, slow share, score bands) + threshold guard.",
                  no_args_is_help=True)

EXIT_CODES = {"promote": 0, "hold": 3, "rollback": 4}


def read_skew_rate(path: Path) -> float:
    """The mismatch rate of a skew replay: a monitor report's ``skew`` entry or a bare replay report."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"--skew-report {str(path)!r} is not a readable JSON file: {exc}") from None
    skew = doc.get("skew", doc) if isinstance(doc, dict) else None
    if not isinstance(skew, dict) or not isinstance(skew.get("mismatch_rate"), int | float):
        raise typer.BadParameter(f"--skew-report {str(path)!r} holds no 'mismatch_rate' (nor 'skew.mismatch_rate'): "
                                 f"run `mlops monitor run --json` with monitoring.skew_sample_rows > 0")
    return float(skew["mismatch_rate"])


@app.command("analyze")
def analyze(
    stable_metrics: Annotated[str | None, typer.Option(
        help="Stable predictor's (or LM server's) /metrics URL or a saved exposition file; default: ask "
             "delivery.prometheus_url.")
    ] = None,
    canary_metrics: Annotated[str | None, typer.Option(
        help="Canary predictor's (or LM server's) /metrics URL or a saved exposition file; default: ask "
             "delivery.prometheus_url.")
    ] = None,
    stable_before: Annotated[str | None, typer.Option(
        help="Language model: the stable server's exposition when the canary's traffic started (URL or file); "
             "its counts start there.")] = None,
    canary_before: Annotated[str | None, typer.Option(
        help="Language model: the canary server's exposition when its traffic started (URL or file).")] = None,
    stable_version: Annotated[int | None, typer.Option(help="Default: production overlay's stable version.")] = None,
    canary_version: Annotated[int | None, typer.Option(help="Default: production overlay's canary version.")] = None,
    since: Annotated[datetime | None, typer.Option(help="Only prediction-log rows at or after this UTC time.")] = None,
    wait_s: Annotated[float, typer.Option("--wait-s", min=0, help="While the answer is hold, retry up to this long.")
                      ] = 0.0,
    interval_s: Annotated[float, typer.Option("--interval-s", min=1, help="Seconds between retries.")] = 30.0,
    exit_code: Annotated[bool, typer.Option("--exit-code", help="Exit 0 promote, 3 hold, 4 rollback.")] = False,
    skew_report: Annotated[Path | None, typer.Option(
        help="JSON of a skew replay (`mlops monitor run --json` with monitoring.skew_sample_rows > 0, or its "
             "drift.json); required when delivery.tabular.max_skew_mismatch_rate is set.")] = None,
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Decide whether the canary may take more traffic; print the decision and its evidence.

    Latency and errors come from Prometheus (``delivery.prometheus_url``) unless both ``--*-metrics`` are given;
    scores from the shared prediction log (``serving.prediction_log_uri``). A fine-tuned language model
    (``--model llm-sft``) is read the same way, from Prometheus or both LM servers' ``--*-metrics`` (time to first
    token, decode rate, errors), and from its log rows (response lengths, answers cut at max_tokens): the evidence
    is its family's.
    """
    from mlops_delivery import CanaryLook, analyze_until_decided
    from mlops_model import kind_of
    from mlops_serving import resolve_prediction_log_uri, version_thresholds

    loaded = load(profile, model, sets, check_secrets=False)
    cfg = loaded.config
    skew_rate = read_skew_rate(skew_report) if skew_report is not None else None
    log_uri = resolve_prediction_log_uri(cfg.serving.prediction_log_uri, loaded.root)
    look = CanaryLook(cfg.delivery, loaded.root, log_uri, cfg.project.model, stable_metrics, canary_metrics,
                      stable_version=stable_version, canary_version=canary_version, since=since,
                      skew_mismatch_rate=skew_rate, stable_before=stable_before, canary_before=canary_before,
                      threshold_of=version_thresholds(cfg.tracking, loaded.root, cfg.project.model,
                                                      cfg.delivery.tabular.canary_estimate_threshold,
                                                      override_key="delivery.tabular.canary_estimate_threshold"))
    result = analyze_until_decided(look, kind=kind_of(cfg.training), wait_s=wait_s, interval_s=interval_s)
    if as_json:
        print_json(result.to_dict())
    else:
        console.print(f"[bold]{result.decision}[/bold]: {cfg.project.model} canary v{result.canary.version} "
                      f"vs stable v{result.stable.version}")
        if result.sequential is not None:
            console.print(f"  sequential verdict (always-valid, alpha {result.sequential.alpha}, "
                          f"{result.sequential.canary_requests} canary requests); thresholds alone: "
                          f"{result.threshold_decision}")
        for reason in result.reasons:
            console.print(f"  - {reason}")
    if exit_code and EXIT_CODES[result.decision]:
        raise typer.Exit(EXIT_CODES[result.decision])
