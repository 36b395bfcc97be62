"""A copy of the working tree to run the platform in (as a clone of main would be), for tests that run the CLI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def copy_repo(src: Path, dst: Path, *, commit: bool = True) -> Path:
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
