"""Seconds per test file, written as tests/durations.json: the record tests/support/file_order.py hands files out
by (longest first). From any of:

- the JSON ``pytest --file-durations PATH`` wrote (``make test`` writes reports/test-durations.json);
- a log of such a run (a CI record): the list under "seconds per test file" that run prints at its end;
- a log of a run with ``--durations=0``: its setup, call and teardown lines summed per file.

    python tools/file_durations.py CI.log|reports/test-durations.json [--out tests/durations.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S+?\.py)(?:::\S.*)?$")
FILE_LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s (\S+?\.py)$")  # tests/support/file_seconds.py's list


def file_seconds(lines: list[str]) -> dict[str, float]:
    """``{file: seconds}`` from a log: the per-file list where the log has one, else its ``--durations`` lines
    summed per file (other lines ignored)."""
    listed = {m.group(2): float(m.group(1)) for m in map(FILE_LINE.match, lines) if m}
    if listed:
        return listed
    total: dict[str, float] = defaultdict(float)
    for line in lines:
        m = LINE.match(line)
        if m:
            total[m.group(3)] += float(m.group(1))
    return dict(total)


def read_seconds(path: Path) -> dict[str, float]:
    """``{file: seconds}`` from a record (JSON, ``{"files": {...}}``) or a log."""
    text = path.read_text(errors="replace")
    if text.lstrip().startswith("{"):
        doc = json.loads(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
            raise ValueError(
                f"{str(path)!r} is JSON without a 'files' object ({{file: seconds}}), the format "
                "pytest --file-durations writes"
            )
        return {str(k): float(v) for k, v in doc["files"].items()}
    return file_seconds(text.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="a record pytest --file-durations wrote, or a pytest log")
    parser.add_argument("--out", type=Path, default=Path("tests/durations.json"))
    parser.add_argument("--note", default="", help="where and how it was measured (kept in the record)")
    args = parser.parse_args(argv)
    try:
        seconds = read_seconds(args.log)
    except ValueError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    if not seconds:
        sys.stderr.write(
            f"no seconds per file in {str(args.log)!r}: run pytest with --file-durations PATH (or --durations=0)\n"
        )
        return 1
    doc = {
        "source": args.log.name,
        "note": "seconds per test file (setup + call + teardown)" + (f"; {args.note}" if args.note else ""),
        "files": {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])},
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    sys.stdout.write(f"{len(seconds)} files, {sum(seconds.values()):.0f} s in all -> {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
