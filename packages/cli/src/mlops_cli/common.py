"""What every command shares: the config options, loading, and printing for people or machines."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from mlops_config import LoadedConfig, load_config

ProfileOpt = Annotated[
    str | None,
    typer.Option("--profile", "-p", help="Profile: configs/profiles/<P>.yaml; default $MLOPS_PROFILE or local."),
]
ModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="Model config (configs/models/<M>.yaml); default project.model.")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a value: section.key=value (repeatable; wins over files and env)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document for machines instead of tables.")]

console = Console(stderr=False)
err_console = Console(stderr=True)


def load(
    profile: str | None, model: str | None, sets: list[str] | None, *, check_secrets: bool = True
) -> LoadedConfig:
    """Load the layered config the way every command does."""
    return load_config(profile=profile, model=model, overrides=sets or (), check_secrets=check_secrets)


def print_json(payload: Any) -> None:
    """Write one JSON document to stdout (paths and other objects become strings)."""
    sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
