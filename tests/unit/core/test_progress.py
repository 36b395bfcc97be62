"""mlops_core.Progress, the one progress display of long commands: plain lines every 5 % off a terminal (with
the caller's figures and an ETA), a Rich bar on one, nothing when disabled, bad counts refused."""

from __future__ import annotations

import io
import re

import pytest

from mlops_core import Progress


def _plain(total: int, start: int = 0, figures: str = "") -> list[str]:
    lines: list[str] = []
    progress = Progress(total, "view", start=start, emit=lines.append, stream=io.StringIO(), every_s=1e9)
    assert progress.bar is None, "a StringIO is no terminal"
    for done in range(start + 1, total + 1):
        progress.update(done, figures)
    progress.close()
    return lines


def test_a_line_every_twentieth_and_the_last() -> None:
    lines = _plain(40, figures="rows 10")
    assert [line.split()[1] for line in lines] == [f"{n}/40" for n in range(2, 41, 2)]
    assert re.fullmatch(r"view 2/40 rows 10 eta \d+s", lines[0]), lines[0]
    assert lines[-1] == "view 40/40 rows 10 eta 0s"


def test_fewer_units_than_twenty_each_one_and_no_figures() -> None:
    lines = _plain(3)
    assert [line.split()[1] for line in lines] == ["1/3", "2/3", "3/3"]
    assert all(re.fullmatch(r"view [123]/3 eta \d+s", line) for line in lines), lines
    assert lines[-1] == "view 3/3 eta 0s"


def test_eta_from_the_rate_since_the_start() -> None:
    progress = Progress(100, "step", start=20, emit=lambda _: None, stream=io.StringIO())
    t0 = progress.started
    # 10 steps in 5 s after a resume at 20: 0.5 s a step, 70 left -> 35 s (hand arithmetic)
    assert progress.eta_s(30, now=t0 + 5.0) == pytest.approx(35.0)
    assert progress.eta_s(20, now=t0 + 5.0) == 0.0  # nothing done yet: no rate to tell


def test_the_seconds_clause_writes_between_the_twentieths() -> None:
    lines: list[str] = []
    progress = Progress(1000, "batch", emit=lines.append, stream=io.StringIO(), every_s=0.0)
    progress.update(1)
    progress.update(2)
    assert [line.split()[1] for line in lines] == ["1/1000", "2/1000"]


def test_disabled_says_nothing() -> None:
    lines: list[str] = []
    progress = Progress(10, "step", enabled=False, emit=lines.append, stream=io.StringIO(), live=True)
    assert progress.bar is None
    for done in range(1, 11):
        progress.update(done)
    assert lines == []


def test_a_terminal_gets_the_bar_and_no_plain_lines() -> None:
    lines: list[str] = []
    screen = io.StringIO()
    with Progress(4, "view", emit=lines.append, stream=screen, live=True) as progress:
        assert progress.bar is not None
        for done in range(1, 5):
            progress.update(done, "user_transactions")
    assert lines == []
    assert "4/4" in screen.getvalue() and "view" in screen.getvalue()


@pytest.mark.parametrize(("total", "start"), [(-1, 0), (5, 6), (5, -1)])
def test_bad_counts_are_refused(total: int, start: int) -> None:
    with pytest.raises(ValueError, match=rf"progress of {start}/{total} step"):
        Progress(total, "step", start=start, stream=io.StringIO())
