"""The root ``mlops`` app: global options, one place that turns platform errors into exit codes."""

from __future__ import annotations

import sys
import traceback
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from mlops_cli.commands import canary as canary_cmd
from mlops_cli.commands import config as config_cmd
from mlops_cli.commands import data as data_cmd
from mlops_cli.commands import doctor as doctor_cmd
from mlops_cli.commands import evaluate as evaluate_cmd
from mlops_cli.commands import features as features_cmd
from mlops_cli.commands import gitops as gitops_cmd
from mlops_cli.commands import labels as labels_cmd
from mlops_cli.commands import monitor as monitor_cmd
from mlops_cli.commands import pipeline as pipeline_cmd
from mlops_cli.commands import registry as registry_cmd
from mlops_cli.commands import retrain as retrain_cmd
from mlops_cli.commands import serve as serve_cmd
from mlops_cli.commands import shadow as shadow_cmd
from mlops_cli.commands import train as train_cmd
from mlops_core import PlatformError, setup_logging


class _PlatformGroup(TyperGroup):
    """Maps :class:`PlatformError` to its exit code and a one-line reason; ``--debug`` adds the traceback."""

    def invoke(self, ctx: Any) -> Any:  # typer vendors click; its Context type is private
        try:
            return super().invoke(ctx)
        except PlatformError as exc:
            if ctx.params.get("debug"):
                traceback.print_exc(file=sys.stderr)
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    cls=_PlatformGroup,
    name="mlops",
    help="MLOps platform: features as code, FSDP training, gates, KServe serving, drift monitoring, GitOps.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback on errors.")] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="DEBUG, INFO, WARNING or ERROR.")] = "WARNING",
) -> None:
    setup_logging("DEBUG" if debug else log_level)


app.add_typer(config_cmd.app, name="config")
data_cmd.app.add_typer(labels_cmd.app, name="labels")
monitor_cmd.app.command("performance")(labels_cmd.performance)
app.add_typer(data_cmd.app, name="data")
app.add_typer(features_cmd.app, name="features")
app.add_typer(gitops_cmd.app, name="gitops")
app.add_typer(canary_cmd.app, name="canary")
app.add_typer(shadow_cmd.app, name="shadow")
app.add_typer(monitor_cmd.app, name="monitor")
app.add_typer(serve_cmd.app, name="serve")
app.add_typer(train_cmd.app, name="train")
app.add_typer(evaluate_cmd.app, name="evaluate")
app.add_typer(registry_cmd.app, name="registry")
app.add_typer(retrain_cmd.app, name="retrain")
app.add_typer(pipeline_cmd.app, name="pipeline")
app.command("doctor")(doctor_cmd.doctor)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="mlops")
