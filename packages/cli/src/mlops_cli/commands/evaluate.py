"""``mlops evaluate run``: score a candidate on the fixed holdout and run the gates. Exit 0 pass, 1 blocked."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json

app = typer.Typer(help="Evaluation gates: quality vs champion, reproducibility, latency, contract.",
                  no_args_is_help=True)


@app.command("run")
def run(
    candidate: Annotated[str, typer.Option("--candidate", "-c", help="Registry version to evaluate, or latest.")],
    report_dir: Annotated[Path | None, typer.Option(
        "--report-dir", help="Where evaluation.json + evaluation.md go; default <reports_dir>/evaluation/<model>-v<N>.")
    ] = None,
    gate: Annotated[list[str] | None, typer.Option(
        "--gate", "-g", help="Run only this gate (repeatable): quality, reproducibility, latency, contract.")] = None,
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
) -> None:
    """Evaluate CANDIDATE against the champion (or a trivial baseline); exit 0 when every gate passes, else 1."""
    from mlops_core import PlatformError
    from mlops_evaluation import GATES, EvaluationError, evaluate
    from mlops_model import model_verifier

    loaded = load(profile, model, sets)
    cfg = loaded.config
    default_dir = loaded.resolve_path(cfg.project.reports_dir) / "evaluation" / f"{cfg.project.model}-v{candidate}"
    out = report_dir or default_dir
    try:
        report = evaluate(cfg, loaded.root, candidate, report_dir=out, gates=tuple(gate) if gate else GATES,
                          check=model_verifier(cfg.provenance, loaded.root))
    except PlatformError:
        raise
    except Exception as exc:  # exit 1 means "blocked by a gate"; anything unforeseen must exit 2, not 1
        raise EvaluationError(f"evaluation of v{candidate} stopped: {type(exc).__name__}: {exc}") from exc
    if as_json:
        print_json({**report.to_dict(), "paths": report.paths})
    else:
        for g in report.gates:
            console.print(f"{g.label.upper()} {g.name}: {g.reason}", markup=False)
        console.print(f"{'passed' if report.passed else 'BLOCKED'}; report: {report.paths.get('markdown')}")
    raise typer.Exit(report.exit_code)
