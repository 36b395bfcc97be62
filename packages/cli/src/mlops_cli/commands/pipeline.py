"""``mlops pipeline run``: data → FSDP training → gates → staging → canary → production → drift → rollback."""

from __future__ import annotations

from typing import Annotated

import typer

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, load, print_json

app = typer.Typer(help="The whole loop on one machine (what `make demo` runs).", no_args_is_help=True)


@app.command("run")
def run(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
    fast: Annotated[bool, typer.Option("--fast", help="Less traffic and fewer resamples; the same steps.")] = False,
) -> None:
    """Run every step with a progress display, print a summary table and write reports/latest/index.html."""
    from mlops_pipeline import run_pipeline

    result = run_pipeline(load(profile, model, sets), fast=fast, show=not as_json)
    if as_json:
        print_json(result.to_dict())
    if not result.ok:
        failed = next(s for s in result.steps if s.status == "failed")
        typer.echo(f"error: step {failed.name!r} failed: {failed.error}", err=True)
        raise typer.Exit(1)


@app.command("rehearse")
def rehearse(
    as_json: Annotated[bool, typer.Option("--json", help="Print only the one JSON line on stdout.")] = False,
    fast: Annotated[bool, typer.Option("--fast", help="A smaller sample, shorter training, less traffic.")] = False,
) -> None:
    """The staging topology on this machine (real servers, started and stopped here) and the whole loop through it.

    Prints a summary table, writes .mlops/rehearsal/<time>/report/index.html, and ends with one JSON line:
    {"steps": [...], "alerts_received": n, "rollback_commit": sha, "served_at_head": version, "seconds": s}.
    """
    from mlops_config import find_config_dir
    from mlops_pipeline import run_rehearsal, stdout_to_stderr

    with stdout_to_stderr():  # training and servers write to stdout; it carries the JSON line alone
        result = run_rehearsal(find_config_dir().parent, fast=fast, show=not as_json)
    typer.echo(result.to_line())
    if not result.ok:
        failed = next((s for s in result.steps if s.status == "failed"), None)
        reason = f"step {failed.name!r} failed: {failed.error}" if failed else f"processes left: {result.servers_left}"
        typer.echo(f"error: {reason}", err=True)
        raise typer.Exit(1)
