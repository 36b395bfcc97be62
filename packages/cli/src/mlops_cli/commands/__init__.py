"""One module per command group; each exposes a Typer ``app`` that :mod:`mlops_cli.app` mounts."""
