"""Data lineage recorded at training, checked later against a real DVC repository's cache and data.

A tiny DVC pipeline (one stage writing two files into ``data/features``) is reproduced by the real ``dvc``; the
expected digests come from ``dvc.lock`` as DVC wrote it and from :mod:`hashlib`, not from the code under test.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from mlops_features import check_data_lineage, data_lineage

pytestmark = [pytest.mark.integration]

_STAGE = """stages:
  make:
    cmd: python3 make.py
    deps:
      - make.py
      - seed.txt
    outs:
      - data/features
"""
_MAKE = """import pathlib
d = pathlib.Path("data/features")
d.mkdir(parents=True, exist_ok=True)
(d / "a.parquet").write_text(pathlib.Path("seed.txt").read_text())
(d / "b.csv").write_text("x,y\\n1,2\\n")
"""


def _dvc(repo: Path, repo_root: Path, *args: str) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}, "DVC_NO_ANALYTICS": "1"}
    res = subprocess.run([str(repo_root / ".venv/bin/dvc"), *args], cwd=repo, env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, f"dvc {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"


@pytest.fixture
def dvc_repo(tmp_path: Path, repo_root: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "seed.txt").write_text("first version of the data\n")
    (repo / "dvc.yaml").write_text(_STAGE)
    (repo / "make.py").write_text(_MAKE)
    _dvc(repo, repo_root, "init", "--no-scm")
    _dvc(repo, repo_root, "repro")
    return repo


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


def _lock_md5(repo: Path) -> str:
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return str(lock["stages"]["make"]["outs"][0]["md5"])


def test_lineage_records_the_lock_entry_and_the_bytes_read(dvc_repo: Path) -> None:
    recorded = data_lineage(dvc_repo, ["data/features"])
    out = recorded["outs"][0]
    folder = dvc_repo / "data/features"
    assert out["dvc_md5"] == _lock_md5(dvc_repo)
    assert out["files"] == {"a.parquet": _md5(folder / "a.parquet"), "b.csv": _md5(folder / "b.csv")}
    verdict = check_data_lineage(dvc_repo, recorded)
    assert verdict.status == "verified", verdict.detail
    assert "1/1 pinned" in verdict.detail


def test_a_later_dvc_repro_rewriting_the_lock_still_verifies_from_the_cache(dvc_repo: Path, repo_root: Path) -> None:
    recorded = data_lineage(dvc_repo, ["data/features"])
    before = _lock_md5(dvc_repo)
    (dvc_repo / "seed.txt").write_text("the next batch of data\n")
    _dvc(dvc_repo, repo_root, "repro")
    assert _lock_md5(dvc_repo) != before  # the lock moved on, as after the demo's next retrain
    verdict = check_data_lineage(dvc_repo, recorded)
    assert verdict.status == "verified", verdict.detail
    assert "dvc.lock has moved on" in verdict.detail


def test_tampered_recorded_data_is_broken_naming_the_file(dvc_repo: Path) -> None:
    recorded = data_lineage(dvc_repo, ["data/features"])
    # The bytes the run read are altered in the workspace and in the DVC cache (behind DVC's back).
    md5 = recorded["outs"][0]["files"]["a.parquet"]
    obj = dvc_repo / ".dvc/cache/files/md5" / md5[:2] / md5[2:]
    for path in (obj, dvc_repo / "data/features/a.parquet"):
        if path.is_symlink():
            path.unlink()
        else:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
        if path.exists():
            path.unlink()
        path.write_text("first version of the data, edited\n")
    verdict = check_data_lineage(dvc_repo, recorded)
    assert verdict.status == "broken"
    assert "data/features/a.parquet" in verdict.detail


def test_a_tampered_lineage_record_is_broken_naming_the_file(dvc_repo: Path) -> None:
    recorded = data_lineage(dvc_repo, ["data/features"])
    recorded["outs"][0]["files"]["b.csv"] = "0" * 32  # the record no longer matches the lock entry it names
    verdict = check_data_lineage(dvc_repo, recorded)
    assert verdict.status == "broken"
    assert "data/features/b.csv" in verdict.detail and "dvc.lock" in verdict.detail
    recorded["outs"][0]["dvc_md5"] = None  # without the lock entry, the bytes themselves do not match
    verdict = check_data_lineage(dvc_repo, recorded)
    assert verdict.status == "broken" and "data/features/b.csv" in verdict.detail


def test_nothing_recorded_is_not_verifiable(tmp_path: Path) -> None:
    assert check_data_lineage(tmp_path, None).status == "not verifiable"
    assert check_data_lineage(tmp_path, {"outs": []}).status == "not verifiable"
