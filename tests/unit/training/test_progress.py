"""Training progress where no terminal is (a CI log, a pipeline's step log): a line every 5 % of the steps and at
the last, each with step/total, loss, throughput and an ETA; nothing from the other ranks."""

from __future__ import annotations

import logging
import re

import pytest

from mlops_training.trainer import _figures, _progress


def _lines(caplog: pytest.LogCaptureFixture, *, enabled: bool, total: int, start: int = 0) -> list[str]:
    progress = _progress(enabled, total, start, "samples", every_s=1e9)  # the seconds clause never fires here
    assert progress.bar is None, "pytest's stderr is not a terminal"
    with caplog.at_level(logging.INFO, logger="mlops_training.trainer"):
        for step in range(start + 1, total + 1):
            progress.update(step, _figures(1.0 / step, "samples", 1000.0))
    progress.close()
    return [r.getMessage() for r in caplog.records if r.name == "mlops_training.trainer"]


def test_a_line_every_twentieth_of_the_run(caplog: pytest.LogCaptureFixture) -> None:
    lines = _lines(caplog, enabled=True, total=100)
    assert [int(s.split()[1].split("/")[0]) for s in lines] == list(range(5, 101, 5))
    assert re.fullmatch(r"step 5/100 loss 0\.2000 samples/s 1000 eta \d+s", lines[0]), lines[0]
    assert lines[-1].endswith("eta 0s"), "nothing left at the last step"


def test_a_short_resumed_run_still_ends_with_its_last_step(caplog: pytest.LogCaptureFixture) -> None:
    lines = _lines(caplog, enabled=True, total=7, start=3)
    assert [s.split()[1] for s in lines] == ["4/7", "5/7", "6/7", "7/7"]  # fewer than 20 steps: every one


def test_other_ranks_say_nothing(caplog: pytest.LogCaptureFixture) -> None:
    assert _lines(caplog, enabled=False, total=100) == []
