"""What the end-to-end tests share: a copy of the working tree to run the platform in, and the CLI run there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

CopyRepo = Callable[..., Path]
RunMlops = Callable[..., "subprocess.CompletedProcess[str]"]


def _copy_repo(src: Path, dst: Path, *, commit: bool = True) -> Path:
    """The working tree's tracked and untracked-not-ignored files at ``dst``; with ``commit``, also the venv
    (a link) and a fresh git repository holding them in one commit, as a clone of main would."""
    files = subprocess.run(
        ["git", "-C", str(src), "ls-files", "-co", "--exclude-standard"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for rel in files:
        if (src / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dst / rel)
    if commit:
        (dst / ".venv").symlink_to(
            Path(sys.executable).resolve().parents[1] if not (src / ".venv").exists() else (src / ".venv").resolve()
        )
        for cmd in (
            ["init", "-q"],
            ["add", "-A"],
            ["-c", "user.name=e2e", "-c", "user.email=e2e@example.invalid", "commit", "-qm", "snapshot"],
        ):
            subprocess.run(["git", "-C", str(dst), *cmd], check=True, capture_output=True)
    return dst


@pytest.fixture(scope="session")
def copy_repo(repo_root: Path) -> CopyRepo:
    """``copy_repo(dst, commit=True)``: this checkout copied to ``dst`` (see ``_copy_repo``)."""
    return lambda dst, commit=True: _copy_repo(repo_root, dst, commit=commit)


@pytest.fixture(scope="session")
def run_mlops() -> RunMlops:
    """``run_mlops(repo, *args, timeout=900)``: the real CLI in ``repo``, with no ``MLOPS_*`` variable inherited."""

    def run(repo: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS")}
        return subprocess.run(
            [sys.executable, "-m", "mlops_cli", *args],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run
