"""``mlops config``: show the merged config and where each value came from; write the JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mlops_cli.common import JsonOpt, ModelOpt, ProfileOpt, SetOpt, console, load, print_json
from mlops_config import config_schema, find_config_dir
from mlops_core import flatten

app = typer.Typer(help="Inspect the layered config.", no_args_is_help=True)


@app.command("show")
def show(profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None, as_json: JsonOpt = False,
         section: Annotated[str | None, typer.Option(help="Show only this section, e.g. training.")] = None,
         out: Annotated[Path | None, typer.Option(
             "--out", "-o", help="Write the --json document to this file instead of stdout (DVC's config stage).")]
         = None) -> None:
    """Print the merged config and, for each value, the layer that set it."""
    loaded = load(profile, model, sets)
    data = loaded.config.model_dump(mode="json")
    if section is not None:
        if section not in data:
            raise typer.BadParameter(
                f"unknown section {section!r}; expected one of {sorted(data)}", param_hint="--section"
            )
        data = {section: data[section]}
    if out is not None and not as_json:
        raise typer.BadParameter("--out writes the JSON document; add --json", param_hint="--out")
    if as_json:
        flat = flatten(data)
        doc = {"profile": loaded.config.project.profile, "model": loaded.config.project.model,
               "layers": list(loaded.layers), "config": data,
               "sources": {k: v for k, v in loaded.sources.items() if k in flat}}
        if out is None:
            print_json(doc)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
        return
    table = Table(title=f"profile={loaded.config.project.profile} model={loaded.config.project.model}")
    table.add_column("key")
    table.add_column("value", overflow="fold")
    table.add_column("set by", style="dim")
    for key, value in flatten(data).items():
        table.add_row(key, json.dumps(value), loaded.sources.get(key, "default"))
    console.print(table)


@app.command("schema")
def schema(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="File to write; default configs/schema.json.")] = None,
) -> None:
    """Write the JSON Schema of the config files (editors validate YAML with it)."""
    target = out or find_config_dir() / "schema.json"
    target.write_text(json.dumps(config_schema(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    console.print(f"wrote {target}")


@app.command("require-shared")
def require_shared(profile: ProfileOpt = None, model: ModelOpt = None, sets: SetOpt = None) -> None:
    """Fail unless the registry and the data outlive this machine (the guard of the cluster workflows)."""
    from mlops_core import require_shared_state

    loaded = load(profile, model, sets, check_secrets=False)
    cfg = loaded.config
    require_shared_state(cfg.tracking, cfg.data, profile=cfg.project.profile)
    console.print(f"profile {cfg.project.profile!r}: registry at {cfg.tracking.uri}, data from {cfg.data.dvc_remote}")


@app.command("family")
def family(
    output: Annotated[str | None, typer.Option(
        "--output", help="Also set this CI step output ($GITHUB_OUTPUT) to the family.")] = None,
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    sets: SetOpt = None,
) -> None:
    """Print the model's family (``tabular_mlp``, ``causal_lm``, ``hf_causal_lm``): what a workflow's steps that
    differ by family are conditioned on. An unknown --model fails, naming the models configs/models/ defines."""
    from mlops_delivery import write_step_output
    from mlops_model import kind_of

    loaded = load(profile, model, sets, check_secrets=False)
    kind = kind_of(loaded.config.training).value
    if output is not None:
        write_step_output(output, kind)
    typer.echo(kind)
