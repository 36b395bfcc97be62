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
