"""``mlops serve``: the KServe transformer + predictor for one model, in one local process."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlops_cli.common import ModelOpt, ProfileOpt, SetOpt, load

app = typer.Typer(help="Serve a registered model over KServe V1 and V2 (Open Inference Protocol).")


@app.callback(invoke_without_command=True)
def serve(
    profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None,
    alias: Annotated[str | None, typer.Option("--alias", "-a", help="Registry alias to serve (serving.alias).")
                     ] = None,
    canary_alias: Annotated[str | None, typer.Option(
        "--canary-alias", help="Also serve this alias as the canary (serving.canary_alias).")] = None,
    canary_percent: Annotated[int | None, typer.Option(
        "--canary-percent", help="Share of requests for the canary, 0..100 (serving.canary_percent).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Bind address (serving.host; 127.0.0.1 locally).")
                    ] = None,
    port: Annotated[int | None, typer.Option("--port", help="HTTP port (serving.port).")] = None,
    model_dir: Annotated[Path | None, typer.Option(
        "--model-dir", help="Serve this exported model folder instead of resolving the alias in the registry.")
    ] = None,
    model_uri: Annotated[str | None, typer.Option(
        "--model-uri", help="Serve the registry version models:/<name>@<alias> names (resolved once, downloaded).")
    ] = None,
    model_version: Annotated[str | None, typer.Option(
        "--model-version", envvar="MLOPS_MODEL_VERSION",
        help="Version label of --model-dir in metrics and the prediction log (default: the folder's name).")
    ] = None,
    role: Annotated[str | None, typer.Option(
        "--role", help="all (local), transformer or predictor (the two halves of an InferenceService; "
        "serving.tabular.role).")] = None,
    predictor_host: Annotated[str | None, typer.Option(
        "--predictor-host", "--predictor_host",
        help="host:port of the predictor (role transformer; serving.tabular.predictor_host).")] = None,
    kserve_model_name: Annotated[str | None, typer.Option(
        "--model_name", hidden=True, help="Set by KServe; must name the served model.")] = None,
    kserve_http_port: Annotated[int | None, typer.Option("--http_port", hidden=True, help="Set by KServe.")] = None,
    kserve_protocol: Annotated[str | None, typer.Option(
        "--predictor_protocol", "--protocol", hidden=True, help="Set by KServe; only v2 is spoken to the predictor.")
    ] = None,
) -> None:
    """Resolve the alias to an immutable version, load it, and answer /v1 and /v2 until stopped."""
    from mlops_model import kind_of
    from mlops_serving import ServingError
    from mlops_serving import serve as run

    if kserve_protocol not in (None, "v2"):
        raise ServingError(f"--predictor_protocol {kserve_protocol!r} is not supported; the transformer speaks v2")
    flags = {"alias": alias, "canary_alias": canary_alias, "canary_percent": canary_percent, "host": host,
             "port": port if port is not None else kserve_http_port, "tabular.role": role,
             "tabular.predictor_host": predictor_host}
    overrides = [*(sets or []), *(f"serving.{k}={v}" for k, v in flags.items() if v is not None)]
    loaded = load(profile, model, overrides, check_secrets=False)  # the sections used check their own secrets
    cfg = loaded.config
    if kserve_model_name is not None and kserve_model_name != cfg.project.model:
        raise ServingError(f"--model_name {kserve_model_name!r} differs from the model config {cfg.project.model!r}; "
                           "name the InferenceService after the model")
    run(cfg.serving, cfg.features, cfg.tracking, loaded.root, cfg.project.model, state_dir=cfg.project.state_dir,
        model_dir=model_dir, model_uri=model_uri, model_version=model_version,
        report=lambda line: typer.echo(line, err=True), provenance=cfg.provenance, kind=kind_of(cfg.training),
        contract=cfg.contract)
