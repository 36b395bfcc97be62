"""Logging set-up. Called by the CLI and service entrypoints only, never on import."""

from __future__ import annotations

import logging
import warnings

from mlops_core.redact import redact_credentials

_NOISY = ("mlflow", "alembic", "urllib3", "feast", "git", "filelock", "httpx", "asyncio", "numexpr")

KNOWN_WARNINGS: tuple[tuple[type[Warning], str, str], ...] = (
    # (category, module that warns, message start): third-party notices about their own APIs that a user of
    # ours cannot act on. Each names its module, so the same words from anywhere else (our code included) still
    # show; an error is never a warning and is never filtered.
    (RuntimeWarning, r"feast\.batch_feature_view", "Batch feature views are experimental"),
    (RuntimeWarning, r"feast\.feature_store", "On demand feature view is an experimental feature"),
    (RuntimeWarning, r"feast\.on_demand_feature_view", "On demand feature view is an experimental feature"),
    (DeprecationWarning, r"ibis\.backends\.duckdb", r"fetch_arrow_table\(\) is deprecated"),
    # SQLAlchemy's SADeprecationWarning (a DeprecationWarning) about a loader strategy MLflow's store uses
    (DeprecationWarning, r"mlflow\.store\.tracking\.sqlalchemy_store", "The ``noload`` loader strategy"),
    # DVC's own use of its dependency's API (dvc.repo.reproduce through the pipeline's steps)
    (DeprecationWarning, r"dvc\.repo\.(trie|graph)", r"_NoneStep\.value will soon raise"),
    # Evidently importing numpy.core, Litestar's own deprecations (LitestarDeprecationWarning, a DeprecationWarning)
    (DeprecationWarning, r"evidently\.legacy\.tests\.utils", r"numpy\.core is deprecated"),
    (DeprecationWarning, r"litestar\.utils\.deprecation", "Call to deprecated function 'Dependency'"),
    (DeprecationWarning, r"litestar\.params", "Use of deprecated class 'DependencyKwarg'"),
)


def filter_known_warnings() -> None:
    """Ignore :data:`KNOWN_WARNINGS`, each only from the module that raises it.

    Entrypoints call this; so does code right after importing a library that puts filters of its own in front
    (Feast's modules call ``warnings.simplefilter("once", ...)`` on import, which would win over ours).
    Calling it again moves the filters back to the front; it adds no duplicates.
    """
    for category, module, message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


class RedactingFormatter(logging.Formatter):
    """A formatter whose every line (message, arguments and traceback alike) has its URLs' passwords replaced
    (:func:`mlops_core.redact_credentials`): a library logging the URL it connects to
    (``postgresql://feast:pw@db``), or an exception quoting it, must not put the password in a pod's log."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_credentials(super().format(record))


def setup_logging(level: str | int = "INFO", *, rich: bool = True) -> None:
    """Configure the root logger once; quiet chatty third-party loggers and known warnings unless at DEBUG."""
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
    if lvl > logging.DEBUG:
        filter_known_warnings()
