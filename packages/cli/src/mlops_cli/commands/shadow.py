"""``mlops shadow``: how a candidate answered the live requests mirrored to it (``serving.tabular.shadow``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import typer

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

app = typer.Typer(help="Shadow analysis: score agreement, flipped decisions, latency and errors of a candidate.",
                  no_args_is_help=True)


def _rate(name: str, value: float | None) -> float | None:
    if value is not None and not 0 <= value <= 1:
        raise typer.BadParameter(f"{name} {value!r} must be a rate between 0 and 1")
    return value


def _version_threshold(loaded: Any) -> Callable[[str], float]:
    from mlops_serving import version_thresholds

    cfg = loaded.config
    of = version_thresholds(cfg.tracking, loaded.root, cfg.project.model, cfg.evaluation.tabular.decision_threshold,
                            override_key="evaluation.tabular.decision_threshold")
    return lambda version: of(version).value


@app.command("analyze")
def analyze(
    since: Annotated[datetime | None, typer.Option(help="Only mirrored requests at or after this UTC time.")] = None,
    until: Annotated[datetime | None, typer.Option(help="Only mirrored requests at or before this UTC time.")] = None,
    version: Annotated[list[str] | None, typer.Option(
        "--version", help="Candidate version(s) to analyse (repeatable); default: every version in the window.")
    ] = None,
    threshold: Annotated[float | None, typer.Option(
        help="Decision threshold of both models; default: each version's own, recorded in its model.json "
             "(evaluation.tabular.decision_threshold, when set, overrides it).")] = None,
    max_flip_rate: Annotated[float | None, typer.Option(help="Fail when more decisions than this flip.")] = None,
    max_error_rate: Annotated[float | None, typer.Option(help="Fail when the candidate fails more than this.")
                              ] = None,
    max_p99_diff_ms: Annotated[float | None, typer.Option(
        help="Fail when the candidate's p99 exceeds the live one by more than this (ms).")] = None,
    min_requests: Annotated[int, typer.Option(min=1, help="Fail with fewer mirrored requests.")] = 1,
    wait_s: Annotated[float, typer.Option(
        "--wait-s", min=0, help="While fewer than --min-requests were mirrored, retry up to this long.")] = 0.0,
    interval_s: Annotated[float, typer.Option("--interval-s", min=1, help="Seconds between retries.")] = 30.0,
    exit_code: Annotated[bool, typer.Option("--exit-code", help="Exit 5 when a --max-*/--min-* limit fails.")
                         ] = False,
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare the candidate's shadow answers with the live ones, from the shadow log beside the prediction log."""
    from mlops_delivery import ShadowLimits, analyze_shadow_until_enough
    from mlops_model import LEGACY_THRESHOLD
    from mlops_serving import resolve_prediction_log_uri

    loaded = load(profile, model, sets, check_secrets=False)
    cfg = loaded.config
    limits = ShadowLimits(max_flip_rate=_rate("--max-flip-rate", max_flip_rate),
                          max_error_rate=_rate("--max-error-rate", max_error_rate),
                          max_p99_diff_ms=max_p99_diff_ms, min_requests=min_requests)
    result = analyze_shadow_until_enough(
        resolve_prediction_log_uri(cfg.serving.prediction_log_uri, loaded.root), cfg.project.model,
        threshold=threshold or cfg.evaluation.tabular.decision_threshold or LEGACY_THRESHOLD, wait_s=wait_s,
        interval_s=interval_s, limits=limits, since=since, until=until, versions=version or None,
        threshold_of=None if threshold is not None else _version_threshold(loaded))
    if as_json:
        print_json(result.to_dict())
    else:
        lat = result.latency
        console.print(f"[bold]shadow[/bold] {result.model}: candidate v{', v'.join(result.candidate_versions)} vs "
                      f"live v{', v'.join(result.live_versions)}: {result.requests} mirrored requests, "
                      f"{result.answered_rows} answered instances")
        at = ", ".join(f"v{v} {t:.4g}" for v, t in sorted(result.version_thresholds.items())) or result.threshold
        console.print(f"  agreement: pearson {result.pearson}, spearman {result.spearman}, {result.flipped} "
                      f"decision(s) flipped at {at} (rate {result.flip_rate})")
        console.print(f"  latency: candidate p50 {lat['shadow_p50_ms']} / p99 {lat['shadow_p99_ms']} ms, live "
                      f"p50 {lat['live_p50_ms']} / p99 {lat['live_p99_ms']} ms")
        console.print(f"  errors: {result.errors} ({result.errors_by_status})")
        for line in (*result.notes, *result.reasons):
            console.print(f"  - {line}")
    if exit_code and result.passed is False:
        raise typer.Exit(5)
