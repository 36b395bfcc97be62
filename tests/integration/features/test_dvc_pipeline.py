"""`dvc repro features` on a clean copy: runs its stages, then does nothing, then re-runs on a changed param.

The ``train`` stage is not run here (training has its own tests); its params are checked through DVC's status.

The copy holds what the stages read (configs/, feature_repo/, the packages' sources, dvc.yaml) with a small
``data.rows``; the venv is linked in. The local remote under .mlops/ takes a push and a pull.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _dvc(repo: Path, *args: str, env_extra: dict[str, str] | None = None) -> str:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}, "DVC_NO_ANALYTICS": "1",
           **(env_extra or {})}
    res = subprocess.run([str(repo / ".venv/bin/dvc"), *args], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, f"dvc {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout + res.stderr


def _clean_copy(repo: Path, repo_root: Path) -> Path:
    repo.mkdir(parents=True)
    for name in ("configs", "feature_repo", ".dvc"):
        shutil.copytree(repo_root / name, repo / name, ignore=shutil.ignore_patterns("tmp", "cache", "config.local"))
    for package in ("features", "training", "core", "model"):
        shutil.copytree(repo_root / f"packages/{package}/src", repo / f"packages/{package}/src",
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".dvcignore"):
        shutil.copy(repo_root / name, repo / name)
    (repo / ".venv").symlink_to(repo_root / ".venv")
    base = repo / "configs/base.yaml"
    base.write_text(re.sub(r"(?m)^  rows: \d+$", "  rows: 3000", base.read_text()))
    # No git in the copy: tell DVC so, as `dvc init --no-scm` would.
    subprocess.run([str(repo / ".venv/bin/dvc"), "config", "core.no_scm", "true"], cwd=repo, check=True,
                   env={**os.environ, "DVC_NO_ANALYTICS": "1"}, capture_output=True)
    return repo


@pytest.fixture(scope="module")
def first_repro(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> tuple[Path, str]:
    """A clean copy after its first ``dvc repro features``, and what that repro printed: run once for the module
    (each test had run the same repro on a copy of its own: ~30 s of generate, validate and features each)."""
    repo = _clean_copy(tmp_path_factory.mktemp("dvc-first-repro") / "repo", repo_root)
    return repo, _dvc(repo, "repro", "features")


@pytest.fixture
def reproduced(first_repro: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    """This test's own copy of the repro'd clean copy (its edits stay its own), and the first repro's output.

    DVC's state database (.dvc/tmp) stays behind: it keys file hashes by inode and mtime, which a copy does not
    keep, so the copy's files are hashed afresh."""
    source, out = first_repro
    repo = tmp_path / "repo"
    state = source / ".dvc"
    shutil.copytree(source, repo, symlinks=True, ignore=lambda folder, _: ["tmp"] if Path(folder) == state else [])
    return repo, out


def test_repro_runs_once_then_only_on_change_and_the_remote_round_trips(reproduced: tuple[Path, str]) -> None:
    repo, out = reproduced
    for stage in ("generate", "validate", "features"):
        assert f"Running stage '{stage}'" in out
    assert len(list((repo / "data/validated").glob("*.parquet"))) == 3
    assert (repo / "data/features/user_transactions.parquet").is_file()
    assert (repo / ".mlops/feast/online.db").is_file()

    out = _dvc(repo, "repro", "features")
    # Only the config stage runs (it always does); its output, the resolved config, did not change.
    assert re.findall(r"Running stage '(\w+)'", out) == ["config"]

    _dvc(repo, "push")
    assert (repo / ".mlops/dvc-remote/files/md5").is_dir()
    shutil.rmtree(repo / "data/validated")
    shutil.rmtree(repo / ".dvc/cache")
    _dvc(repo, "pull", "validate")
    assert len(list((repo / "data/validated").glob("*.parquet"))) == 3

    base = repo / "configs/base.yaml"
    base.write_text(base.read_text().replace("  days: 3", "  days: 2"))
    out = _dvc(repo, "repro", "features")
    for stage in ("generate", "validate", "features"):
        assert f"Running stage '{stage}'" in out
    assert len(list((repo / "data/raw").glob("*.parquet"))) == 2


def _status(repo: Path, env_extra: dict[str, str] | None = None) -> dict[str, list]:
    """``{stage: changes}`` for every stage but the always-run ``config`` stage, after it wrote the config."""
    _dvc(repo, "repro", "config", env_extra=env_extra)
    doc = json.loads(_dvc(repo, "status", "--json", env_extra=env_extra))
    return {stage: changes for stage, changes in doc.items() if stage != "config"}


def test_an_env_override_of_a_training_key_marks_only_train_changed(reproduced: tuple[Path, str]) -> None:
    repo, _ = reproduced
    (repo / "reports").mkdir()
    (repo / "reports/train.json").write_text("{}")
    _dvc(repo, "commit", "--force", "train")  # record train as if it had run with the current params
    assert _status(repo) == {}

    changed = _status(repo, {"MLOPS__TRAINING__LR": "0.002"})
    assert list(changed) == ["train"], changed
    assert {"changed deps": {"data/resolved/fraud.json": {"config.training": "modified"}}} in changed["train"]
    resolved = json.loads((repo / "data/resolved/fraud.json").read_text())
    assert resolved["config"]["training"]["lr"] == 0.002
    assert resolved["sources"]["training.lr"].startswith("env")

    # The contract's range (what replaced data.max_amount): the two stages that read the contract, validate and
    # train (the stages after validate re-run once its output changes).
    changed = _status(repo, {"MLOPS__CONTRACT__EXPECTATIONS__RANGES__AMOUNT__MAX": "1000"})
    assert sorted(changed) == ["train", "validate"], changed
    assert {"changed deps": {"data/resolved/fraud.json": {"config.contract": "modified"}}} in changed["validate"]
