"""Seconds per test file (setup + call + teardown of its tests), summed where every report arrives: the xdist
controller (or the one process without xdist).

``--file-durations PATH`` writes them to PATH in tests/durations.json's format (the record
tests/support/file_order.py hands files out by) and, at the end of the run, lists each file of
``LISTED_FROM_S`` or more, longest first, and the path. A CI log keeps that list:
``python tools/file_durations.py LOG`` (or ``PATH`` itself) refreshes tests/durations.json.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

HEADER = "seconds per test file (setup + call + teardown)"
# a shorter file left out of the list is placed by its marker (unmarked: 2 s) when the record is made from a log
LISTED_FROM_S = 2.0


def record(seconds: dict[str, float], source: str) -> dict[str, object]:
    """The record's document: ``seconds`` per file rounded to 0.1 s, longest first."""
    files = {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0]))}
    return {"source": source, "note": HEADER, "files": files}


def listing(files: dict[str, float], path: Path) -> list[str]:
    """The lines printed at the end of the run: one per file of ``LISTED_FROM_S`` or more, then the path."""
    shown = {k: v for k, v in files.items() if v >= LISTED_FROM_S}
    lines = [f"{seconds:8.1f}s {file}" for file, seconds in sorted(shown.items(), key=lambda kv: -kv[1])]
    lines.append(
        f"({len(files) - len(shown)} files under {LISTED_FROM_S:.0f} s not listed; all {len(files)} files, "
        f"{sum(files.values()):.0f} s in all, are in {path})"
    )
    return lines


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--file-durations",
        metavar="PATH",
        type=Path,
        default=None,
        help=f"write the {HEADER} to PATH (tests/durations.json's format) and list them at the end",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("file_durations")
    if path is not None and not hasattr(config, "workerinput"):  # an xdist worker's reports reach the controller
        config.pluginmanager.register(FileSeconds(path), "file-seconds")


class FileSeconds:
    """Sums each report's duration into its file; writes and lists the sums at the end of the run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::")[0]] += report.duration

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(record(self.seconds, "pytest --file-durations"), indent=1) + "\n")
        terminalreporter.write_sep("=", f"{HEADER}, {len(self.seconds)} files")
        for line in listing(dict(self.seconds), self.path):
            terminalreporter.write_line(line)
