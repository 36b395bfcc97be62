"""Print the entries of the hashed lock that an image needs, for ``pip install --require-hashes --no-deps``.

Usage: ``lock_subset.py requirements.lock NAME...``, ``lock_subset.py requirements.lock --report REPORT.json``
(pip's ``install --dry-run --report``: every third-party package it resolved; our local folders are skipped), or
``lock_subset.py requirements.lock --except NAME...`` (every entry but those: ``make setup`` installs torch and uv
with pip and the rest with uv).
A resolved package the lock does not hold fails the build: nothing unlocked gets into an image.
Standard library only: it runs in the image's bare build venv.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(lock: str) -> dict[str, str]:
    """canonical name → the entry's text (requirement and its hash lines)."""
    out: dict[str, str] = {}
    current = None
    for line in Path(lock).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if not line.startswith(" "):
            current = canonical(line.split("==", 1)[0].split("[")[0])
            out[current] = line
        elif current is not None:
            out[current] += "\n" + line
    return out


def resolved(report: str) -> list[str]:
    """Third-party names pip resolved (``download_info`` of a local folder has ``dir_info``)."""
    doc = json.loads(Path(report).read_text())
    return [i["metadata"]["name"] for i in doc["install"] if "dir_info" not in i.get("download_info", {})]


def main(argv: list[str]) -> int:
    lock, rest = argv[0], argv[1:]
    locked = entries(lock)
    if rest[:1] == ["--except"]:
        left_out = {canonical(n) for n in rest[1:]}
        unknown = sorted(left_out - set(locked))
        if unknown:
            sys.stderr.write(f"lock_subset: --except names {unknown}, which {lock} does not hold\n")
            return 1
        names = [n for n in locked if n not in left_out]
    else:
        names = resolved(rest[1]) if rest[:1] == ["--report"] else rest
    missing = sorted({n for n in names if canonical(n) not in locked})
    if missing:
        sys.stderr.write(f"lock_subset: {missing} resolved but not in {lock}: add them to constraints.txt and run "
                         "`make lock-hashes`\n")
        return 1
    sys.stdout.write("\n".join(locked[canonical(n)] for n in sorted({canonical(n) for n in names})) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
