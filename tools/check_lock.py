"""Fail when the venv holds a third-party package that constraints.txt does not pin exactly.

pip's constraints only constrain what is asked for; this check makes sure nothing unlocked slipped in.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name


def main(lock_path: str) -> int:
    pinned: dict[str, str] = {}
    for line in Path(lock_path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pinned[canonicalize_name(name.split("[")[0])] = version
    ours = {"mlops-platform"} | {f"mlops-{p.parent.name}" for p in Path("packages").glob("*/pyproject.toml")}
    missing, drift = [], []
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name in ours or name in {"pip"}:
            continue
        version = dist.version.split("+")[0]
        if name not in pinned:
            missing.append(f"{name}=={dist.version}")
        elif pinned[name] != version:
            drift.append(f"{name}: installed {dist.version}, locked {pinned[name]}")
    for msg in missing:
        sys.stderr.write(f"check_lock: {msg} is installed but not in {lock_path}; run `make lock`\n")
    for msg in drift:
        sys.stderr.write(f"check_lock: {msg}\n")
    return 1 if missing or drift else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
