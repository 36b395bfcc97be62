"""The CI job summary: Markdown reports (the gate report) appended to ``$GITHUB_STEP_SUMMARY``."""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

from mlops_delivery.errors import DeliveryError

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def write_job_summary(root: Path, patterns: list[str], *, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Append every Markdown file matching ``patterns`` to the job summary (stdout outside CI).

    Raises:
        DeliveryError: a pattern matches no file (a missing gate report must not pass silently).
    """
    env = os.environ if environ is None else environ
    files: list[Path] = []
    for pattern in patterns:
        matches = sorted(Path(p) for p in glob.glob(str(root / pattern), recursive=True))
        if not matches:
            raise DeliveryError(f"no report matches {pattern!r} under {str(root)!r}; did the step that writes it run?")
        files += matches
    text = "".join(f.read_text(encoding="utf-8").rstrip("\n") + "\n\n" for f in files)
    target = env.get(SUMMARY_ENV)
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return {"files": str(len(files)), "to": target or "stdout"}


OUTPUT_ENV = "GITHUB_OUTPUT"


def write_step_output(name: str, value: str, *, environ: dict[str, str] | None = None) -> str:
    """Set a step output (``name=value`` appended to ``$GITHUB_OUTPUT``); returns where it went."""
    if not name.replace("_", "").replace("-", "").isalnum():
        raise DeliveryError(f"step output name {name!r} must be letters, digits, '-' or '_'")
    env = os.environ if environ is None else environ
    target = env.get(OUTPUT_ENV)
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(f"{name}={value}\n")
    return target or "stdout"
