"""Progress of a long command, one definition for every command that has it (training, materialization,
ingestion): a live Rich bar on a terminal; anywhere else (a CI log, a pipeline's step log, a pipe) a plain line
every 5 % of the work, at least every ``every_s`` seconds, and at the end, each with done/total, the caller's
figures and an ETA from the rate so far."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

Emit = Callable[[str], None]


def _stderr_line(stream: TextIO) -> Emit:
    def emit(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()

    return emit


class Progress:
    """Counts ``done`` of ``total`` units of ``what`` and shows it.

    Args:
        total: Units of the whole job (steps, feature views, batches).
        what: The unit's name, first word of every line (``step 5/100 ...``).
        start: Units already done when this starts (a resumed run); the ETA counts from here.
        enabled: ``False`` shows nothing (the ranks other than 0).
        emit: Where a plain line goes; default: ``stream``. Training passes its logger, so the line lands in the
            worker's log with its rank.
        stream: What decides terminal or not, and where the bar is drawn; default: ``sys.stderr`` now.
        every_s: The longest gap between two plain lines while work is done.
        live: Force the bar on or off; default: on when ``stream`` is a terminal.
    """

    def __init__(
        self,
        total: int,
        what: str,
        *,
        start: int = 0,
        enabled: bool = True,
        emit: Emit | None = None,
        stream: TextIO | None = None,
        every_s: float = 30.0,
        live: bool | None = None,
    ) -> None:
        if total < 0 or start < 0 or start > total:
            raise ValueError(f"progress of {start}/{total} {what}: expected 0 <= start <= total")
        stream = stream if stream is not None else sys.stderr
        self.total, self.start, self.what = total, start, what
        self.enabled = enabled
        self.every = max(1, total // 20)
        self.every_s = every_s
        self.emit = emit or _stderr_line(stream)
        self.started = self.last = time.monotonic()
        self.bar = None
        self._task = None
        if enabled and (live if live is not None else stream.isatty()):
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[figures]}"),
                TimeRemainingColumn(),
                console=Console(file=stream),
                transient=False,
            )
            self._task = self.bar.add_task(what, total=total, completed=start, figures="")
            self.bar.start()

    def eta_s(self, done: int, now: float | None = None) -> float:
        """Seconds left at the rate since the start (0 when nothing is done yet or nothing is left)."""
        now = time.monotonic() if now is None else now
        ran = done - self.start
        return (now - self.started) / ran * (self.total - done) if ran > 0 else 0.0

    def update(self, done: int, figures: str = "") -> None:
        """``done`` units are finished; ``figures`` (``loss 0.2000 samples/s 1000``) go on the line."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(self._task, completed=done, figures=figures)  # type: ignore[arg-type]
            return
        now = time.monotonic()
        if done % self.every and done < self.total and now - self.last < self.every_s:
            return
        self.last = now
        head = f"{self.what} {done}/{self.total}"
        self.emit(
            f"{head} {figures} eta {self.eta_s(done, now):.0f}s"
            if figures
            else f"{head} eta {self.eta_s(done, now):.0f}s"
        )

    def close(self) -> None:
        """Stop the bar (a terminal's); plain lines need nothing."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
