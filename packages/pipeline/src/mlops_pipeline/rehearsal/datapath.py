"""The data path of staging, on one machine: ingest → validate → version with DVC → push; train on ``dvc pull``.

The ingestion job works in a git + DVC workspace (``ingest/``): it validates the landed batches and pushes the
accepted area to the DVC remote (a folder standing in for the bucket). The training job starts from a clean
clone of that workspace (``runner/``, the CI runner's checkout) and gets its data by ``dvc pull`` only, so
training never sees a file the remote does not hold.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from mlops_pipeline.errors import PipelineError
from mlops_pipeline.rehearsal.gitops import git

# What a checkout of the platform repo gives a job: the config layer and the Feast repository.
CHECKOUT = ("configs", "feature_repo")


def dvc(cwd: Path, *args: str) -> str:
    """Run the venv's ``dvc``; a failure quotes its output."""
    exe = Path(sys.executable).with_name("dvc")
    proc = subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=300,
                          env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    if proc.returncode != 0:
        raise PipelineError(f"`dvc {' '.join(args)}` in {str(cwd)!r} failed (exit {proc.returncode}):\n"
                            + (proc.stdout + proc.stderr).strip()[-1500:])
    return proc.stdout


def init_workspace(repo_root: Path, workspace: Path, remote: Path) -> None:
    """A git repo holding the checkout's configs and Feast repo, with DVC pointed at ``remote`` by default."""
    workspace.mkdir(parents=True)
    remote.mkdir(parents=True, exist_ok=True)
    for name in CHECKOUT:
        shutil.copytree(repo_root / name, workspace / name)
    (workspace / ".gitignore").write_text(".mlops/\nreports/\n/data/raw/\n/data/quarantine/\n/data/features/\n")
    git(workspace, "init", "-q", "-b", "main")
    dvc(workspace, "init", "-q")
    dvc(workspace, "remote", "add", "-d", "storage", str(remote))
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "workspace: configs, feature_repo, DVC remote")


def version_and_push(workspace: Path, folder: str, message: str) -> dict[str, Any]:
    """``dvc add`` the folder, ``dvc push`` it to the default remote, commit the ``.dvc`` pointer."""
    dvc(workspace, "add", "-q", folder)
    dvc(workspace, "push", "-q")
    pointer = workspace / f"{folder}.dvc"
    git(workspace, "add", str(pointer.relative_to(workspace)), str(Path(folder).parent / ".gitignore"))
    git(workspace, "commit", "-qm", message)
    out = yaml.safe_load(pointer.read_text())["outs"][0]
    return {"md5": out["md5"], "files": out.get("nfiles"), "bytes": out.get("size"),
            "commit": git(workspace, "rev-parse", "HEAD")}


def pull_into_runner(workspace: Path, runner: Path) -> dict[str, Any]:
    """A fresh clone of the workspace (the runner's checkout), its data fetched with ``dvc pull`` only."""
    if runner.exists():
        shutil.rmtree(runner)
    git(workspace.parent, "clone", "-q", str(workspace), str(runner))
    out = dvc(runner, "pull")
    return {"commit": git(runner, "rev-parse", "HEAD"), "pulled": out.strip().splitlines()[-1:] or []}
