"""Write constraints.txt from a venv's `pip freeze` (our editable packages left out)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEADER = (
    "# The one lock: exact versions of every third-party package (pip constraints). torch 2.13.0 is the CPU build\n"
    "# that 'pip install torch==2.13.0' takes from this machine's local wheel. Regenerate with 'make lock'.\n"
)


def main(pip: str, out: str) -> None:
    frozen = subprocess.run([pip, "freeze", "--all", "--exclude-editable"], capture_output=True, text=True, check=True)
    lines = [
        ln.replace("+cpu", "")
        for ln in frozen.stdout.splitlines()
        if ln and not ln.startswith(("-e", "pip==")) and "@" not in ln
    ]
    Path(out).write_text(HEADER + "\n".join(sorted(lines, key=str.lower)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
