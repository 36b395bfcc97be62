"""Logging set-up. Called by the CLI and service entrypoints only, never on import."""

from __future__ import annotations

import logging

from mlops_core.redact import redact_credentials

_NOISY = ("mlflow", "alembic", "urllib3", "feast", "git", "filelock", "httpx", "asyncio", "numexpr")


class RedactingFormatter(logging.Formatter):
    """A formatter whose every line (message, arguments and traceback alike) has its URLs' passwords replaced
    (:func:`mlops_core.redact_credentials`): a library logging the URL it connects to
    (``postgresql://feast:pw@db``), or an exception quoting it, must not put the password in a pod's log."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_credentials(super().format(record))


def setup_logging(level: str | int = "INFO", *, rich: bool = True) -> None:
    """Configure the root logger once; quiet chatty third-party loggers unless at DEBUG."""
    lvl = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(lvl, int):
        raise ValueError(f"log level {level!r} is not one of DEBUG, INFO, WARNING, ERROR")
    handler: logging.Handler
    if rich:
        from rich.console import Console
        from rich.logging import RichHandler

        # stderr: stdout carries the commands' output (--json must stay parseable).
        handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False, markup=False)
        fmt = "%(message)s"
    else:
        handler = logging.StreamHandler()
        fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(RedactingFormatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
    for name in _NOISY:
        logging.getLogger(name).setLevel(lvl if lvl <= logging.DEBUG else max(lvl, logging.WARNING))
