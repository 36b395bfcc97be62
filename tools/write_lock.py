"""Write constraints.txt from a venv's `pip freeze` (our editable packages and :data:`LEFT_OUT` left out)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HEADER = (
    "# The one lock: exact versions of every third-party package (pip constraints). torch 2.13.0 is the CPU build\n"
    "# that 'pip install torch==2.13.0' takes from this machine's local wheel. Regenerate with 'make lock'.\n"
)

LEFT_OUT = {
    "rfc3987-syntax": (
        "an optional format checker of jsonschema (cyclonedx-bom's validation extra asks for "
        "jsonschema[format-nongpl]): installed, jsonschema imports it and it builds an Earley grammar at import, "
        "1.5-2.5 s of CPU in every process "
        "importing jsonschema: each model server (kserve), each data gate (Great Expectations through altair). "
        "Without it jsonschema does not check the 'iri' and 'iri-reference' formats; nothing here asks for them but "
        "the SBOM's schema, whose other checks stay"
    ),
}
"""Packages the lock leaves out on purpose, with why; ``make setup`` uninstalls them from a venv that has them."""


def kept(line: str) -> bool:
    """Whether a ``pip freeze`` line belongs in constraints.txt."""
    if not line or line.startswith(("-e", "pip==")) or "@" in line:
        return False
    return re.sub(r"[-_.]+", "-", line.partition("==")[0]).lower() not in LEFT_OUT


def main(pip: str, out: str) -> None:
    frozen = subprocess.run([pip, "freeze", "--all", "--exclude-editable"], capture_output=True, text=True, check=True)
    lines = [ln.replace("+cpu", "") for ln in frozen.stdout.splitlines() if kept(ln)]
    Path(out).write_text(HEADER + "\n".join(sorted(lines, key=str.lower)) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--left-out"]:
        sys.stdout.write(" ".join(sorted(LEFT_OUT)) + "\n")
    else:
        main(sys.argv[1], sys.argv[2])
