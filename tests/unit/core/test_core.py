"""mlops_core: seeding, lineage hashes, git facts and a tracked run on a real MLflow (SQLite) store."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from mlops_config import TrackingConfig
from mlops_core import git_info, hash_files, registered_model_name, resolve_uri, seed_everything, start_run


def test_seed_everything_makes_torch_and_numpy_repeat() -> None:
    import numpy as np
    import torch

    seed_everything(7)
    a = (torch.randn(5), np.random.rand(3))
    seed_everything(7)
    b = (torch.randn(5), np.random.rand(3))
    assert torch.equal(a[0], b[0])
    assert np.array_equal(a[1], b[1])
    assert torch.are_deterministic_algorithms_enabled()
    seed_everything(8)
    assert not torch.equal(a[0], torch.randn(5))
    with pytest.raises(ValueError, match="-1"):
        seed_everything(-1)


def test_seed_everything_leaves_torch_as_use_deterministic_algorithms_does() -> None:
    """In a fresh interpreter (this one may have Inductor loaded already): the same kernel switch, warn-only
    setting and Inductor flag as torch's own ``use_deterministic_algorithms(True)``, read after Inductor is
    imported."""
    import sys

    probe = ("import sys, torch\n{setup}\nloaded = 'torch._inductor.config' in sys.modules\n"
             "import torch._inductor.config as inductor\n"
             "print(torch.are_deterministic_algorithms_enabled(),"
             " torch.is_deterministic_algorithms_warn_only_enabled(), inductor.deterministic, loaded)")

    def state(setup: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", probe.format(setup=setup)], capture_output=True, text=True,
                              check=True, timeout=300)
        return done.stdout.split()

    theirs = state("torch.use_deterministic_algorithms(True, warn_only=False)")
    ours = state("from mlops_core import seed_everything; seed_everything(7)")
    assert theirs[:3] == ["True", "False", "True"]
    assert ours[:3] == theirs[:3]
    assert ours[3] == "False"  # and Inductor was not imported to get there


def test_hash_files_matches_hand_built_sha256(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_bytes(b"bee")
    (tmp_path / "a.txt").write_bytes(b"ay")
    expected = hashlib.sha256(b"a.txt\0ay\0b.txt\0bee\0").hexdigest()
    assert hash_files([tmp_path]) == expected
    (tmp_path / "a.txt").write_bytes(b"ay!")
    assert hash_files([tmp_path]) != expected
    with pytest.raises(FileNotFoundError, match="nope"):
        hash_files([tmp_path / "nope"])


def test_git_info_reports_commit_and_dirty(tmp_path: Path) -> None:
    assert git_info(tmp_path).commit == "unknown"

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "f").write_text("1")
    git("add", "f")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    head = git("rev-parse", "HEAD").strip()
    assert git_info(tmp_path).commit == head and not git_info(tmp_path).dirty
    (tmp_path / "f").write_text("2")
    assert git_info(tmp_path).dirty


def test_resolve_uri(tmp_path: Path) -> None:
    assert resolve_uri("sqlite:///.mlops/m.db", tmp_path) == f"sqlite:///{tmp_path}/.mlops/m.db"
    assert resolve_uri("sqlite:////abs/m.db", tmp_path) == "sqlite:////abs/m.db"
    assert resolve_uri("http://h:5000", tmp_path) == "http://h:5000"
    assert registered_model_name(TrackingConfig(registered_model_prefix="team-"), "fraud") == "team-fraud"


def test_start_run_records_lineage_in_real_mlflow(tmp_path: Path) -> None:
    from mlops_core import mlflow_client

    section = TrackingConfig(uri="sqlite:///state/mlflow.db", artifact_location="state/artifacts", experiment="t")
    config = {"training": {"lr": 0.1, "hidden": [3, 4]}, "project": {"seed": 5}}
    with start_run(section, tmp_path, run_name="r1", seed=5, config=config, data_hash="abc") as run:
        run_id = run.info.run_id
    client = mlflow_client(section, tmp_path)
    got = client.get_run(run_id)
    assert got.data.tags["mlops.seed"] == "5"
    assert got.data.tags["mlops.data_hash"] == "abc"
    assert got.data.tags["mlops.git_commit"]
    assert got.data.tags["mlops.git_dirty"] in {"true", "false"}
    assert got.data.params["training.lr"] == "0.1"
    assert json.loads(got.data.params["training.hidden"]) == [3, 4]
    assert "run_wall_seconds" in got.data.metrics
    local = Path(client.download_artifacts(run_id, "config.json", str(tmp_path)))
    assert json.loads(local.read_text()) == config
    assert (tmp_path / "state" / "mlflow.db").is_file()
