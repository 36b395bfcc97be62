"""``mlops pipeline run``: data → FSDP training → gates → staging → canary → production → drift → rollback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, load, print_json

if TYPE_CHECKING:
    from mlops_pipeline import StepConsole

app = typer.Typer(help="The whole loop on one machine (what `make demo` runs).", no_args_is_help=True)

RESULT_FILE = "result.json"  # in the run's folder, beside the step logs
VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", "-v", help="Stream every process's output and every log record as it comes (no step logs).")]


def step_console(root: Path, *, show: bool, verbose: bool) -> StepConsole:
    """One line per step on stderr; each step's output in ``.mlops/runs/<UTC time>/<step>.log``."""
    from mlops_pipeline import StepConsole, new_run_dir

    return StepConsole(None if verbose else new_run_dir(root), show=show, verbose=verbose)


@app.command("run")
def run(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
    fast: Annotated[bool, typer.Option("--fast", help="Less traffic and fewer resamples; the same steps.")] = False,
    until: Annotated[str | None, typer.Option("--until", help="Stop after this step (e.g. features).")] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Run every step (one line each; their output in per-step logs), print a summary table and write
    reports/latest/index.html. The run's figures, as --json prints them, are also kept in the run's folder
    (.mlops/runs/<time>/result.json)."""
    from mlops_pipeline import run_pipeline

    loaded = load(profile, model, sets)
    with step_console(loaded.root, show=not as_json, verbose=verbose) as reporter:
        result = run_pipeline(loaded, fast=fast, show=not as_json, reporter=reporter, until=until)
    doc = result.to_dict()
    if reporter.run_dir is not None:
        figures = reporter.run_dir / RESULT_FILE
        figures.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
        if not as_json:
            typer.echo(f"the run's figures (what --json prints): {figures}", err=True)
    if as_json:
        print_json(doc)
    if not result.ok:
        failed = next(s for s in result.steps if s.status == "failed")
        typer.echo(f"error: step {failed.name!r} failed: {failed.error}", err=True)
        raise typer.Exit(1)


@app.command("rehearse")
def rehearse(
    as_json: Annotated[bool, typer.Option("--json", help="Print only the one JSON line on stdout.")] = False,
    fast: Annotated[bool, typer.Option("--fast", help=(
        "Less traffic, fewer gate resamples, a shorter alert wait, no HTML drift report; the same sample and "
        "training as the demo (a shorter one does not beat the baseline's CI)."))] = False,
    verbose: VerboseOpt = False,
) -> None:
    """The staging topology on this machine (real servers, started and stopped here) and the whole loop through it.

    Prints one line per step (their output in .mlops/runs/<time>/<step>.log) and a summary table, and writes
    .mlops/rehearsal/<time>/report/index.html; with --json, only one JSON line on stdout:
    {"steps": [...], "alerts_received": n, "rollback_commit": sha, "served_at_head": version, "seconds": s}.
    """
    from mlops_config import find_config_dir
    from mlops_pipeline import run_rehearsal, stdout_to_stderr

    root = find_config_dir().parent
    with stdout_to_stderr(), step_console(root, show=not as_json, verbose=verbose) as reporter:
        # training and servers write to stdout; it carries the JSON line alone
        result = run_rehearsal(root, fast=fast, show=not as_json, reporter=reporter)
    if as_json:
        typer.echo(result.to_line())
    if not result.ok:
        failed = next((s for s in result.steps if s.status == "failed"), None)
        reason = f"step {failed.name!r} failed: {failed.error}" if failed else f"processes left: {result.servers_left}"
        typer.echo(f"error: {reason}", err=True)
        raise typer.Exit(1)
