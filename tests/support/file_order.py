"""The order test files go out to the xdist workers: longest first, by a recorded CI run where the file is in
the record (tests/durations.json), by its heaviest marker otherwise.

``make test`` runs ``-n 2 --dist loadfile --no-loadscope-reorder``: files are handed out in collection order to
whichever worker asks next. Longest first (the classic LPT rule) keeps the short ones for the end, where they fill
in around the last long file, instead of one worker running a long file alone while the other has finished.
The record is refreshed from a CI log (``make test`` lists the seconds per test file at its end, see
tests/support/file_seconds.py): ``python tools/file_durations.py LOG``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RECORD = Path(__file__).resolve().parents[1] / "durations.json"
# A file missing from the record (new since) is placed by its heaviest marker, at about what such files took.
MARKER_SECONDS = {"rehearsal": 400.0, "e2e": 150.0, "chaos": 60.0, "slow": 20.0}
UNMARKED_SECONDS = 2.0


def recorded_seconds(path: Path = RECORD) -> dict[str, float]:
    """File → seconds (setup + call + teardown of its tests) of the recorded run; empty without a record."""
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text())
    return {str(k): float(v) for k, v in doc["files"].items()}


def estimated_seconds(items: list[pytest.Item], record: dict[str, float]) -> dict[str, float]:
    """File → its recorded seconds, or its heaviest marker's estimate."""
    est: dict[str, float] = {}
    for item in items:
        file = item.nodeid.split("::")[0]
        guess = max((s for m, s in MARKER_SECONDS.items() if m in item.keywords), default=UNMARKED_SECONDS)
        est[file] = max(est.get(file, 0.0), guess)
    return {file: record.get(file, guess) for file, guess in est.items()}


def longest_files_first(items: list[pytest.Item], record: dict[str, float] | None = None) -> None:
    """Sort ``items`` in place, longest file first; a file's tests stay together and in their order."""
    seconds = estimated_seconds(items, recorded_seconds() if record is None else record)
    items.sort(key=lambda item: -seconds[item.nodeid.split("::")[0]])
