"""The step console: one line per step (live on a terminal, plain elsewhere), each step's output in its log file,
a failing step's tail and log path, and --verbose streaming as before."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from mlops_pipeline.capture import tail
from mlops_pipeline.console import StepConsole, new_run_dir
from mlops_pipeline.runner import Step, run_steps

CHILD = "import sys; print('child says hello'); print('child complains', file=sys.stderr)"
ANSI = re.compile(r"\x1b\[")


def _child_step(_: object) -> dict[str, int]:
    """A step as the pipeline's are: a child process writing to the descriptors it inherits."""
    subprocess.run([sys.executable, "-c", CHILD], check=True)
    return {"rows": 3}


def _noisy_step(_: object) -> dict[str, int]:
    """A library's warning and log records, and one warning of ours."""
    warnings.warn_explicit("somelib notice 7f3a: an experimental API", RuntimeWarning,
                           "/venv/lib/python3.11/site-packages/somelib/views.py", 12, module="somelib.views")
    warnings.warn_explicit("our own warning 7f3a", UserWarning,
                           "/repo/packages/pipeline/src/mlops_pipeline/steps.py", 40, module="mlops_pipeline.steps")
    logging.getLogger("somelib").warning("somelib log warning 7f3a")
    logging.getLogger("somelib").info("somelib log info 7f3a")
    logging.getLogger("mlops_pipeline.steps").warning("our log warning 7f3a")
    return {}


def _run(tmp_path: Path, steps: list[Step], *, live: bool, verbose: bool = False) -> tuple[str, Path | None]:
    stream = io.StringIO()
    reporter = StepConsole(tmp_path / "run", stream=stream, live=live, verbose=verbose)
    with reporter:
        run_steps(steps, None, reporter=reporter, summarize=lambda r: f"{r.status} with {r.outputs}")
    return stream.getvalue(), reporter.run_dir


def test_plain_output_is_one_line_per_start_and_end(tmp_path: Path) -> None:
    out, run_dir = _run(tmp_path, [Step("data", "Make data", _child_step), Step("train", "Train", lambda c: {})],
                        live=False)
    lines = out.splitlines()
    assert lines[0] == f"2 steps; each step's output: {run_dir}/<step>.log"
    assert lines[1] == "[1/2] data: Make data ..."
    assert re.fullmatch(r"\[1/2\] data: Make data ok in \d+\.\ds: ok with \{'rows': 3\}", lines[2]), lines[2]
    assert lines[3] == "[2/2] train: Train ..."
    assert re.fullmatch(r"\[2/2\] train: Train ok in \d+\.\ds: ok with \{\}", lines[4]), lines[4]
    assert len(lines) == 5
    assert not ANSI.search(out), "no terminal codes in a pipe or CI log"
    assert "child" not in out


def test_terminal_output_has_the_live_line_then_the_result(tmp_path: Path) -> None:
    out, _ = _run(tmp_path, [Step("data", "Make data", _child_step)], live=True)
    assert ANSI.search(out), "a terminal gets the live line (cursor control)"
    assert "running" in out, "the live line shows the elapsed time while the step runs"
    plain = ANSI.sub("", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out))
    assert re.search(r"✓ \[1/1\] data: Make data ok \d+\.\ds", plain), plain
    assert "ok with {'rows': 3}" in plain
    assert "Make data ..." not in plain, "no plain start line on a terminal"


def test_step_log_gets_child_output_and_library_warnings(tmp_path: Path) -> None:
    out, run_dir = _run(tmp_path, [Step("data", "Make data", _child_step), Step("noisy", "Noisy", _noisy_step)],
                        live=False)
    assert run_dir is not None
    data_log = (run_dir / "data.log").read_text()
    assert "child says hello" in data_log and "child complains" in data_log
    noisy_log = (run_dir / "noisy.log").read_text()
    for text in ("somelib notice 7f3a", "somelib log warning 7f3a", "somelib log info 7f3a", "our own warning 7f3a",
                 "our log warning 7f3a"):
        assert text in noisy_log, text
    assert "somelib" not in out, "a library's warnings and records stay in the log"
    assert "our own warning 7f3a" in out and "our log warning 7f3a" in out, "ours reach the console"


def test_library_error_record_reaches_the_console(tmp_path: Path) -> None:
    def fails_quietly(_: object) -> dict[str, int]:
        logging.getLogger("somelib").error("somelib lost its connection 91c2")
        return {}

    out, _ = _run(tmp_path, [Step("s", "S", fails_quietly)], live=False)
    assert "somelib lost its connection 91c2" in out


def test_failing_step_prints_its_log_tail_and_path(tmp_path: Path) -> None:
    def fails(_: object) -> dict[str, int]:
        subprocess.run([sys.executable, "-c", "for i in range(40): print(f'progress line {i}')"], check=True)
        raise RuntimeError("the disk is full")

    out, run_dir = _run(tmp_path, [Step("train", "Train", fails), Step("gates", "Gates", lambda c: {})], live=False)
    assert run_dir is not None
    log_path = run_dir / "train.log"
    expected_tail = [line.rstrip() for line in log_path.read_text().splitlines() if line.strip()][-20:]
    assert "RuntimeError: the disk is full" in expected_tail[-1]
    printed = [line[4:] for line in out.splitlines() if line.startswith("    ")]
    assert [p.rstrip() for p in printed if p.strip()] == expected_tail
    assert f"step 'train' failed; its whole log: {log_path}" in out
    assert re.search(r"\[1/2\] train: Train failed in \d+\.\ds: failed with \{\}", out)
    assert "[2/2] gates: Gates skipped" in out
    assert "progress line 0\n" not in out, "only the tail, not the whole log"


def test_verbose_streams_everything_and_writes_no_logs(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out, run_dir = _run(tmp_path, [Step("data", "Make data", _child_step)], live=True, verbose=True)
    streamed = capfd.readouterr()
    assert "child says hello" in streamed.out and "child complains" in streamed.err
    assert run_dir is None and not (tmp_path / "run").exists()
    assert not ANSI.search(out), "no live line over a stream of output"
    assert "[1/1] data: Make data ..." in out


def test_tail_keeps_a_progress_bars_last_state(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("first\n 10%|#\r 50%|#####\r100%|##########\nlast\n\n")
    assert tail(log, 2) == ["100%|##########", "last"]
    assert tail(tmp_path / "missing.log") == []


def test_run_dirs_do_not_collide(tmp_path: Path) -> None:
    first, second = new_run_dir(tmp_path), new_run_dir(tmp_path)
    assert first != second and first.is_dir() and second.is_dir()
    assert first.parent == tmp_path / ".mlops" / "runs"
