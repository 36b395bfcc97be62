"""What the end-to-end tests share: a copy of the working tree to run the platform in, and the CLI run there."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.repo_copy import copy_repo as copy_tree

CopyRepo = Callable[..., Path]
RunMlops = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def copy_repo(repo_root: Path) -> CopyRepo:
    """``copy_repo(dst, commit=True)``: this checkout copied to ``dst`` (see ``tests.support.repo_copy``)."""
    return lambda dst, commit=True: copy_tree(repo_root, dst, commit=commit)


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
