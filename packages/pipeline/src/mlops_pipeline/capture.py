"""One step's output into its log file: file descriptors 1 and 2 (so every child process's output too), log
records and warnings. Only our own warnings and anyone's errors are also passed on to the console.

File descriptors, not only ``sys.stdout``: DVC runs its stages, torchrun its workers and the pipeline its servers
as child processes that write straight to the descriptors they inherit.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

OWN_PREFIX = "mlops"
"""Loggers and modules of ours (``mlops_pipeline.steps``, ``mlops_training`` ...): their warnings reach the console."""

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def is_own(name: str) -> bool:
    """Whether a logger or module name is ours."""
    return name.split(".", 1)[0].startswith(OWN_PREFIX)


class _ConsoleRecords(logging.Handler):
    """Passes our own WARNING+ records and anyone's ERROR+ records on to the console, one line each."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self._echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or is_own(record.name):
            try:
                self._echo(f"{record.levelname.lower()}: {record.getMessage()}")
            except Exception:  # a console that cannot print must not fail the step
                self.handleError(record)


def _formatter() -> logging.Formatter:
    from mlops_core import RedactingFormatter  # a library logging a URL must not put its password in the log

    return RedactingFormatter(_FORMAT)


@contextmanager
def capture_output(log_path: Path, echo: Callable[[str], None]) -> Iterator[None]:
    """Send everything written inside to ``log_path`` (appended); ``echo`` gets our warnings and any error.

    Log records down to INFO are kept in the file (DEBUG when the root logger is already there); the root
    logger's own handlers are set aside meanwhile, as they would write into the same file again.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    log_file = log_path.open("a", encoding="utf-8", buffering=1)
    saved_fds = (os.dup(1), os.dup(2))
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_showwarning = warnings.showwarning
    file_handler = logging.StreamHandler(log_file)
    file_handler.setFormatter(_formatter())

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
             line: str | None = None) -> None:
        log_file.write(warnings.formatwarning(message, category, filename, lineno, line))
        module = _module_of(filename)
        if is_own(module):
            echo(f"warning: {category.__name__}: {message} ({module}:{lineno})")

    try:
        os.dup2(log_file.fileno(), 1)
        os.dup2(log_file.fileno(), 2)
        # sys.stdout and sys.stderr stay the objects they are: libraries keep references to them (DVC's log
        # handler does), and through descriptors 1 and 2 they now write here.
        root.handlers[:] = [file_handler, _ConsoleRecords(echo)]
        root.setLevel(min(saved_level or logging.WARNING, logging.INFO))
        warnings.showwarning = show
        yield
    finally:
        warnings.showwarning = saved_showwarning
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        for stream in (sys.stdout, sys.stderr, log_file):
            stream.flush()
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        log_file.close()


def _module_of(filename: str) -> str:
    """``.../site-packages/feast/batch_feature_view.py`` → ``feast.batch_feature_view`` (best effort)."""
    parts = Path(filename).with_suffix("").parts
    for anchor in ("site-packages", "src"):
        if anchor in parts:
            return ".".join(parts[len(parts) - parts[::-1].index(anchor):])
    return ".".join(parts[-2:])


def tail(path: Path, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a log; a progress bar's carriage-return updates count as its last state."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    out = [line.rstrip("\r").rsplit("\r", 1)[-1].rstrip() for line in text.splitlines()]
    while out and not out[-1]:
        out.pop()
    return out[-lines:]
