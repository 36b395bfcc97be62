"""Logging set-up. Called by the CLI and service entrypoints only, never on import."""

from __future__ import annotations

import logging

_NOISY = ("mlflow", "alembic", "urllib3", "feast", "git", "filelock", "httpx", "asyncio", "numexpr")


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
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
    for name in _NOISY:
        logging.getLogger(name).setLevel(lvl if lvl <= logging.DEBUG else max(lvl, logging.WARNING))
