"""Fail when the venv holds a third-party package that constraints.txt does not pin exactly, or when the hashed
lock does not match constraints.txt.

pip's constraints only constrain what is asked for; this check makes sure nothing unlocked slipped in.
Usage: ``check_lock.py constraints.txt [requirements.lock] [--hashes-only]``. With the hashed lock, every pin of
constraints.txt must be in it with the same version and at least one ``--hash=sha256:`` (and nothing else may
be): a pin added to constraints.txt without ``make lock-hashes`` is caught before ``--require-hashes`` fails on
it. ``--hashes-only`` checks the two files and not the venv (``make setup`` runs it before installing).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})\b")


def canonicalize_name(name: str) -> str:
    """PEP 503's normal form (standard library only: this runs in a bare venv before anything is installed)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(lock_path: str) -> dict[str, str]:
    pinned: dict[str, str] = {}
    for line in Path(lock_path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pinned[canonicalize_name(name.split("[")[0])] = version
    return pinned


def read_hashed(path: str) -> tuple[dict[str, tuple[str, list[str]]], list[str]]:
    """canonical name → (version, sha256 list) of a ``--require-hashes`` requirements file; plus its problems."""
    text = Path(path).read_text()
    entries: dict[str, tuple[str, list[str]]] = {}
    problems = []
    logical = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    for line in logical.splitlines():
        line = line.strip()
        if not line:
            continue
        requirement = line.split()[0]
        if "==" not in requirement:
            problems.append(f"{path}: {requirement!r} is not pinned with ==")
            continue
        name, _, version = requirement.partition("==")
        hashes = HASH.findall(line)
        if not hashes:
            problems.append(f"{path}: {requirement} has no --hash=sha256:")
        entries[canonicalize_name(name.split("[")[0])] = (version, hashes)
    return entries, problems


def check_hashed(pinned: dict[str, str], lock_path: str, hashed_path: str) -> list[str]:
    entries, problems = read_hashed(hashed_path)
    for name, version in sorted(pinned.items()):
        if name not in entries:
            problems.append(f"{name}=={version} is in {lock_path} but not in {hashed_path}; run `make lock-hashes`")
        elif entries[name][0] != version:
            problems.append(f"{name}: {hashed_path} has {entries[name][0]}, {lock_path} has {version}; "
                            "run `make lock-hashes`")
    for name in sorted(set(entries) - set(pinned)):
        problems.append(f"{name} is in {hashed_path} but not in {lock_path}; run `make lock-hashes`")
    return problems


def check_venv(pinned: dict[str, str], lock_path: str) -> list[str]:
    ours = {"mlops-platform"} | {f"mlops-{p.parent.name}" for p in Path("packages").glob("*/pyproject.toml")}
    missing, drift = [], []
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name in ours or name in {"pip"}:
            continue
        version = dist.version.split("+")[0]
        if name not in pinned:
            missing.append(f"{name}=={dist.version} is installed but not in {lock_path}; run `make lock`")
        elif pinned[name] != version:
            drift.append(f"{name}: installed {dist.version}, locked {pinned[name]}")
    return missing + drift


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    lock_path = args[0]
    pinned = read_pins(lock_path)
    problems = check_hashed(pinned, lock_path, args[1]) if len(args) > 1 else []
    if "--hashes-only" not in argv:
        problems += check_venv(pinned, lock_path)
    for msg in problems:
        sys.stderr.write(f"check_lock: {msg}\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
