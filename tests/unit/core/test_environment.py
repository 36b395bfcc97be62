"""The guard of the cluster workflows: a config whose registry or data lives on this machine is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlops_config import DataConfig, TrackingConfig, load_config
from mlops_core.environment import LocalStateError, require_shared_state, shared_state_problems


def _config(repo_root: Path, profile: str):
    return load_config(profile=profile, config_dir=repo_root / "configs", environ={}, check_secrets=False).config


def test_the_local_profile_is_refused_with_every_reason(repo_root: Path) -> None:
    cfg = _config(repo_root, "local")
    with pytest.raises(LocalStateError) as err:
        require_shared_state(cfg.tracking, cfg.data, profile=cfg.project.profile)
    msg = str(err.value)
    assert msg.startswith("profile 'local' keeps state on this machine")
    assert "tracking.uri = 'sqlite:///.mlops/mlflow.db'" in msg and "data.dvc_remote is not set" in msg
    assert "set MLOPS_PROFILE" in msg


@pytest.mark.parametrize("profile", ["staging", "production"])
def test_cluster_profiles_pass(repo_root: Path, profile: str) -> None:
    cfg = _config(repo_root, profile)
    require_shared_state(cfg.tracking, cfg.data, profile=profile)


@pytest.mark.parametrize(("tracking", "data", "n"), [
    (TrackingConfig(uri="http://mlflow:5000"), DataConfig(dvc_remote="s3://b/p"), 0),
    (TrackingConfig(uri="/tmp/mlruns"), DataConfig(dvc_remote="s3://b/p"), 1),
    (TrackingConfig(uri="file:///tmp/mlruns"), DataConfig(dvc_remote="s3://b/p"), 1),
    (TrackingConfig(uri="http://mlflow:5000", registry_uri="sqlite:///r.db"), DataConfig(dvc_remote="s3://b"), 1),
    (TrackingConfig(uri="http://mlflow:5000"), DataConfig(), 1),
])
def test_each_local_part_is_named(tracking: TrackingConfig, data: DataConfig, n: int) -> None:
    assert len(shared_state_problems(tracking, data)) == n


def test_cli_guard_fails_without_a_profile_and_passes_with_staging(repo_root: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
    cmd = [sys.executable, "-m", "mlops_cli", "config", "require-shared"]
    unset = subprocess.run(cmd, cwd=repo_root, env={**env, "MLOPS_PROFILE": ""}, capture_output=True, text=True,
                           timeout=120, check=False)
    assert unset.returncode == 2, unset.stdout + unset.stderr
    assert unset.stderr.startswith("error: profile 'local' keeps state on this machine")
    staging = subprocess.run(cmd, cwd=repo_root, env={**env, "MLOPS_PROFILE": "staging"}, capture_output=True,
                             text=True, timeout=120, check=False)
    assert staging.returncode == 0, staging.stderr
