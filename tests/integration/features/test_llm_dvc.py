"""`dvc repro datasets/dvc.yaml` on a clean copy: makes the base checkpoint, gates the instruction data, then is
up to date, and a changed dataset line re-runs only the gate (with the bad line quarantined)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _dvc(repo: Path, *args: str) -> str:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}, "DVC_NO_ANALYTICS": "1"}
    res = subprocess.run([str(repo / ".venv/bin/dvc"), *args], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, f"dvc {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout + res.stderr


def test_the_llm_data_stages_run_once_then_only_on_change(tmp_path: Path, repo_root: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("configs", "datasets", "docs", ".dvc"):
        shutil.copytree(repo_root / name, repo / name, ignore=shutil.ignore_patterns("tmp", "cache", "config.local"))
    for package in ("features", "training"):
        shutil.copytree(repo_root / f"packages/{package}/src", repo / f"packages/{package}/src",
                        ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "tests").mkdir()
    for name in ("README.md", ".dvcignore", "tests/hf_checkpoint.py"):
        shutil.copy(repo_root / name, repo / name)
    shutil.copytree(repo_root / "tests/tokenizer_corpus", repo / "tests/tokenizer_corpus")  # the tokenizer's text
    (repo / ".venv").symlink_to(repo_root / ".venv")
    subprocess.run([str(repo / ".venv/bin/dvc"), "config", "core.no_scm", "true"], cwd=repo, check=True,
                   env={**os.environ, "DVC_NO_ANALYTICS": "1"}, capture_output=True)

    out = _dvc(repo, "repro", "datasets/dvc.yaml")
    for stage in ("llm-base", "instructions"):
        assert f"Running stage 'datasets/dvc.yaml:{stage}'" in out
    report = json.loads((repo / "data/llm/gate/report.json").read_text())
    lines = (repo / "datasets/instructions.jsonl").read_text().splitlines()
    assert report["input_rows"] == report["accepted_rows"] == len(lines)
    assert (repo / "data/llm/base/config.json").is_file()
    assert json.loads(_dvc(repo, "status", "--json", "datasets/dvc.yaml")) == {}

    with (repo / "datasets/instructions.jsonl").open("a") as fh:
        fh.write(lines[0] + "\n")  # a duplicate
    status = json.loads(_dvc(repo, "status", "--json", "datasets/dvc.yaml"))
    assert list(status) == ["datasets/dvc.yaml:instructions"], status
    out = _dvc(repo, "repro", "datasets/dvc.yaml")
    assert "llm-base' didn't change, skipping" in out
    report = json.loads((repo / "data/llm/gate/report.json").read_text())
    assert (report["accepted_rows"], report["quarantined_rows"], report["reasons"]) == (len(lines), 1, {"duplicate": 1})
