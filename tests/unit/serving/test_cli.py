"""``mlops serve`` refuses bad settings with exit code 2 and one line, before binding anything."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mlops_cli.app import app


@pytest.mark.parametrize(("args", "fragment"), [
    (["--canary-percent", "101"], "canary_percent"),
    (["--port", "0"], "port"),
    (["--set", "serving.tabular.workers=2"], "serving.tabular.workers=2"),
    (["--set", "serving.tabular.redis_outage=maybe"], "redis_outage"),
    (["--canary-percent", "10"], "needs serving.canary_alias"),
    (["--canary-alias", "canary", "--model-dir", "/tmp"], "cannot be used with --model-dir"),
])
def test_serve_refuses_bad_settings(args: list[str], fragment: str) -> None:
    result = CliRunner().invoke(app, ["serve", *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.output


def test_serve_help_names_the_options() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"])
    assert result.exit_code == 0
    for option in ("--alias", "--canary-alias", "--canary-percent", "--port", "--host", "--model-dir"):
        assert option in result.output
