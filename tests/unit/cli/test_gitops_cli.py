"""``mlops gitops``: every manifest-editing command refuses ``--push`` without ``--commit`` before it reads anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlops_cli.app import app


@pytest.mark.parametrize("args", [
    ["promote", "--to", "staging"],
    ["rollback"],
    ["shadow", "--stop"],
    ["set-images", "--image", "fraud@sha256:" + "0" * 64],
])
def test_push_without_commit_is_refused_before_the_config_is_read(args: list[str], tmp_path: Path) -> None:
    # a config folder that does not exist: reading it would fail differently, so the refusal came first
    result = CliRunner().invoke(app, ["gitops", *args, "--push"], env={"MLOPS_CONFIG_DIR": str(tmp_path / "none")})
    assert result.exit_code == 2, result.output
    assert "--push needs --commit" in result.output
