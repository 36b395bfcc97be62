"""`mlops data validate-instructions` refuses, with a one-line reason, what it cannot gate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
    return subprocess.run([sys.executable, "-m", "mlops_cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_a_model_without_checkpoint_or_a_missing_checkpoint_is_named(config_dir: Path) -> None:
    repo = config_dir.parent
    res = _run(["data", "validate-instructions", "--model", "llm-tiny"], repo)
    assert res.returncode != 0
    assert "'llm-tiny' names no training.causal_lm.checkpoint" in res.stderr + res.stdout
    res = _run(["data", "validate-instructions", "--model", "llm-sft", "--set",
                "training.causal_lm.checkpoint=nowhere/base"], repo)
    assert res.returncode != 0
    assert "'nowhere/base'" in res.stderr + res.stdout and "no config.json" in res.stderr + res.stdout
