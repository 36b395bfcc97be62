"""How a multi-step command shows its steps: one line each with its status, time and what happened; the rest
(child processes, libraries' logs and warnings) in one log file per step under the run's folder.

On a terminal the running step's line is live (a spinner, the elapsed time ticking, the log's newest line);
anywhere else (CI logs, pipes, a test's capture) output is plain lines: one when a step starts, one when it
ends. ``verbose`` keeps today's stream of everything and writes no step logs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from mlops_pipeline.capture import capture_output, tail


class StepResult(Protocol):
    """What the console reads of an ended step (the runner's ``StepResult``)."""

    name: str
    title: str
    status: str
    seconds: float

TAIL_LINES = 20
_MARK = {"ok": ("✓", "green"), "failed": ("✗", "red"), "skipped": ("-", "yellow")}


def new_run_dir(root: Path) -> Path:
    """``<root>/.mlops/runs/<UTC time>/`` (made here; a second run in the same second gets a suffix)."""
    base = root / ".mlops" / "runs" / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


class _Running:
    """The live line: spinner, step, seconds so far, and the newest line of the step's log."""

    def __init__(self, label: str, log_path: Path | None) -> None:
        self.label = label
        self.log_path = log_path
        self.started = time.monotonic()
        self.spinner = Spinner("dots", style="cyan")

    def __rich__(self) -> Group:
        line = Table.grid(padding=(0, 1))
        line.add_row(self.spinner, Text(self.label, style="bold"),
                     Text(f"running {time.monotonic() - self.started:.0f}s", style="dim"))
        latest = tail(self.log_path, 1) if self.log_path is not None else []
        if not latest:
            return Group(line)
        return Group(line, Text(f"    {latest[0]}", style="dim", no_wrap=True, overflow="ellipsis"))


class StepConsole:
    """Shows steps to a person and keeps each step's output in ``<run_dir>/<step>.log``.

    Args:
        run_dir: where the step logs go; ``None`` captures nothing (with ``verbose``, or a caller that wants
            the old stream).
        show: print the step lines (``False`` under ``--json``: only a failure's tail is printed).
        verbose: stream everything as it comes; no live line, no step logs.
        stream: where the lines go; by default the process's stderr as it is now (a copy of descriptor 2,
            which keeps pointing at the terminal while a step's output goes to its log).
        live: force the live line on or off; by default on when ``stream`` is a terminal.
    """

    def __init__(self, run_dir: Path | None, *, show: bool = True, verbose: bool = False,
                 stream: TextIO | None = None, live: bool | None = None, tail_lines: int = TAIL_LINES) -> None:
        self.run_dir = None if verbose else run_dir
        self.show = show
        self.tail_lines = tail_lines
        if stream is None:
            stream = os.fdopen(os.dup(2), "w", encoding="utf-8", buffering=1, closefd=True)
        terminal = live if live is not None else stream.isatty()
        self.live_enabled = bool(terminal and show and not verbose)
        self.console = Console(file=stream, force_terminal=self.live_enabled or None, soft_wrap=True,
                               highlight=False, no_color=not terminal)
        self._live: Live | None = None
        self._running: _Running | None = None

    @classmethod
    def quiet(cls) -> StepConsole:
        """Prints nothing and captures nothing (a caller that shows results its own way)."""
        return cls(None, show=False, stream=open(os.devnull, "w", encoding="utf-8"), live=False)

    def log_path(self, name: str) -> Path | None:
        """The log file of step ``name`` (``None`` when nothing is captured)."""
        return self.run_dir / f"{name}.log" if self.run_dir is not None else None

    def begin(self, total: int) -> None:
        """Say where the logs go, before the first step."""
        if self.show and self.run_dir is not None:
            self._print(f"{total} steps; each step's output: {self.run_dir}/<step>.log")

    def started(self, index: int, total: int, name: str, title: str) -> None:
        """A step begins: the live line on a terminal, one plain line elsewhere."""
        if not self.show:
            return
        label = f"[{index}/{total}] {name}: {title}"
        if self.live_enabled:
            self._running = _Running(label, self.log_path(name))
            self._live = Live(self._running, console=self.console, refresh_per_second=4, transient=True,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start(refresh=True)
        else:
            self._print(f"{label} ...")

    @contextmanager
    def captured(self, name: str) -> Iterator[None]:
        """Inside, everything the process and its children write goes to ``name``'s log (unless verbose)."""
        path = self.log_path(name)
        with capture_output(path, self.echo) if path is not None else nullcontext():
            yield

    def finished(self, index: int, total: int, result: StepResult, summary: str) -> None:
        """A step ended: its line (status, seconds), what happened, and on failure its log's tail and path."""
        if self._live is not None:
            self._live.stop()
            self._live = self._running = None
        mark, colour = _MARK.get(result.status, ("?", "yellow"))
        if self.show:
            head = f"[{index}/{total}] {result.name}: {result.title}"
            if self.live_enabled:
                self.console.print(f"[{colour}]{mark}[/] [bold]{escape(head)}[/] [{colour}]{result.status}[/] "
                                   f"[dim]{result.seconds:.1f}s[/]")
                self.console.print(f"    {escape(summary)}", style="dim" if result.status == "ok" else colour)
            else:
                self._print(f"{head} {result.status} in {result.seconds:.1f}s: {summary}")
        if result.status == "failed":
            self._print_tail(result.name)

    def skipped(self, index: int, total: int, result: StepResult) -> None:
        """A step that did not run because an earlier one failed."""
        if self.show:
            self._print(f"[{index}/{total}] {result.name}: {result.title} skipped")

    def echo(self, line: str) -> None:
        """One line to the person (our warnings, errors), above the live line."""
        self._print(line)

    def _print_tail(self, name: str) -> None:
        path = self.log_path(name)
        if path is None:
            return
        lines = tail(path, self.tail_lines)
        if lines:
            self._print(f"--- last {len(lines)} lines of {path} ---")
            for line in lines:
                self._print(f"    {line}")
        self._print(f"step {name!r} failed; its whole log: {path}")

    def _print(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False)

    def close(self) -> None:
        """Stop a live line left running (a step interrupted by Ctrl-C)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __enter__(self) -> StepConsole:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
