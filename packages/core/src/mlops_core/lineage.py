"""Lineage facts recorded on every run: git commit and dirty flag, data hashes."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GitInfo:
    commit: str
    dirty: bool


def git_info(path: str | Path = ".") -> GitInfo:
    """HEAD commit and whether tracked files differ from it; ``unknown`` outside a git checkout."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=False)

    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        return GitInfo(commit="unknown", dirty=False)
    status = git("status", "--porcelain", "--untracked-files=no")
    return GitInfo(commit=head.stdout.strip(), dirty=bool(status.stdout.strip()))


CODE_PATHS = ("packages", "services", "feature_repo", "tools", "pyproject.toml", "constraints.txt")
"""What counts as the platform's code in a checkout: an uncommitted change here makes a run unreproducible."""


def dirty_code_files(path: str | Path = ".", paths: Iterable[str] = CODE_PATHS) -> list[str]:
    """Tracked code files (under ``paths``) that differ from HEAD; empty outside a git checkout."""
    done = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no", "--", *paths],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return []
    return sorted(line[3:].strip() for line in done.stdout.splitlines() if line.strip())


def hash_files(paths: Iterable[str | Path], *, chunk: int = 1 << 20) -> str:
    """SHA-256 over the files' relative names and bytes, in sorted order (folders are walked)."""
    files: list[tuple[str, Path]] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += [(str(f.relative_to(p)), f) for f in p.rglob("*") if f.is_file()]
        elif p.is_file():
            files.append((p.name, p))
        else:
            raise FileNotFoundError(f"cannot hash {str(p)!r}: no such file or folder")
    digest = hashlib.sha256()
    for name, f in sorted(files):
        digest.update(name.encode() + b"\0")
        with f.open("rb") as fh:
            while block := fh.read(chunk):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()
