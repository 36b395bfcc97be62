"""The test files' hand-out order (tests/support/file_order) and its record (tools/file_durations.py): seconds per
file summed from --durations lines or from what pytest --file-durations (tests/support/file_seconds) wrote and
listed, longest first, a file outside the record placed by its heaviest marker."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.file_order import estimated_seconds, longest_files_first, recorded_seconds
from tests.support.file_seconds import listing, record

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("file_durations", REPO / "tools" / "file_durations.py")
assert _spec is not None and _spec.loader is not None
file_durations = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(file_durations)

LOG = """
============================= slowest durations ==============================
422.10s setup    tests/e2e/test_rehearsal.py::test_every_step_ran_and_passed
3.00s call     tests/e2e/test_rehearsal.py::test_no_server_process_is_left
0.50s teardown tests/e2e/test_rehearsal.py::test_no_server_process_is_left
20.25s call     tests/unit/cli/test_x.py::test_a[param-1 2]
(1 durations < 0.005s hidden.  Use -vv to show these durations.)
= 3 passed in 446.00s =
"""


def test_seconds_per_file_are_the_sum_of_its_lines() -> None:
    got = file_durations.file_seconds(LOG.splitlines())
    assert got == {"tests/e2e/test_rehearsal.py": 422.10 + 3.00 + 0.50, "tests/unit/cli/test_x.py": 20.25}


def test_the_tool_writes_the_record_the_order_reads(tmp_path: Path) -> None:
    log, out = tmp_path / "ci.log", tmp_path / "durations.json"
    log.write_text(LOG)
    assert file_durations.main([str(log), "--out", str(out)]) == 0
    assert recorded_seconds(out) == {"tests/e2e/test_rehearsal.py": 425.6, "tests/unit/cli/test_x.py": 20.2}
    assert list(json.loads(out.read_text())["files"]) == ["tests/e2e/test_rehearsal.py", "tests/unit/cli/test_x.py"]
    (tmp_path / "empty.log").write_text("nothing here\n")
    assert file_durations.main([str(tmp_path / "empty.log"), "--out", str(out)]) == 1


def test_the_list_a_run_prints_makes_the_record_and_wins_over_durations_lines(tmp_path: Path) -> None:
    seconds = {"tests/e2e/test_rehearsal.py": 612.34, "tests/unit/a.py": 2.0, "tests/unit/b.py": 0.4}
    log = tmp_path / "ci.log"
    # a CI record: the --durations lines (partial, 30 of them) and then the run's list of seconds per file
    log.write_text(
        LOG
        + "=== seconds per test file (setup + call + teardown), 3 files ===\n"
        + "\n".join(listing(seconds, tmp_path / "run.json"))
        + "\n= 3 passed =\n"
    )
    out = tmp_path / "durations.json"
    assert file_durations.main([str(log), "--out", str(out)]) == 0
    assert recorded_seconds(out) == {"tests/e2e/test_rehearsal.py": 612.3, "tests/unit/a.py": 2.0}  # b: < 2 s


def test_the_json_a_run_wrote_is_a_record_as_it_is(tmp_path: Path) -> None:
    written, out = tmp_path / "test-durations.json", tmp_path / "durations.json"
    written.write_text(json.dumps(record({"tests/unit/b.py": 0.44, "tests/e2e/x.py": 300.0}, "pytest")))
    assert file_durations.main([str(written), "--out", str(out)]) == 0
    assert recorded_seconds(out) == {"tests/e2e/x.py": 300.0, "tests/unit/b.py": 0.4}
    (tmp_path / "other.json").write_text('{"tests": 1}')
    assert file_durations.main([str(tmp_path / "other.json"), "--out", str(out)]) == 1


def test_a_run_with_file_durations_sums_setup_call_and_teardown_per_file(tmp_path: Path) -> None:
    """A real pytest run (two files, a fixture that sleeps in setup and teardown): each file's seconds are at
    least what it slept, and the listed lines are the record's."""
    (tmp_path / "test_slow.py").write_text(
        "import time, pytest\n"
        "@pytest.fixture\n"
        "def nap():\n    time.sleep(0.3)\n    yield\n    time.sleep(0.3)\n"
        "def test_a(nap):\n    time.sleep(0.3)\n"
        "def test_b():\n    pass\n"
    )
    (tmp_path / "test_quick.py").write_text("def test_c():\n    pass\n")
    out = tmp_path / "reports" / "file-seconds.json"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.support.file_seconds",
            "-p",
            "no:cacheprovider",
            "--file-durations",
            str(out),
            "-q",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    files = json.loads(out.read_text())["files"]
    slow = next(k for k in files if k.endswith("test_slow.py"))
    quick = next(k for k in files if k.endswith("test_quick.py"))
    assert files[slow] >= 0.9 and files[quick] < files[slow]
    assert "seconds per test file (setup + call + teardown), 2 files" in res.stdout
    assert str(out) in res.stdout


@dataclass
class _Item:
    nodeid: str
    keywords: set[str] = field(default_factory=set)


def test_longest_first_by_record_then_by_marker_keeping_each_files_tests_in_order() -> None:
    items = [
        _Item("tests/unit/a.py::t1"),
        _Item("tests/unit/a.py::t2"),
        _Item("tests/integration/b.py::t1", {"slow"}),
        _Item("tests/e2e/new.py::t1", {"e2e"}),
        _Item("tests/integration/c.py::t1"),
        _Item("tests/integration/c.py::t2"),
    ]
    record = {"tests/integration/b.py": 30.0, "tests/integration/c.py": 300.0}
    assert estimated_seconds(items, record)["tests/e2e/new.py"] == 150.0  # not recorded: the e2e marker's guess
    longest_files_first(items, record)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/integration/c.py::t1",
        "tests/integration/c.py::t2",
        "tests/e2e/new.py::t1",
        "tests/integration/b.py::t1",
        "tests/unit/a.py::t1",
        "tests/unit/a.py::t2",
    ]
