"""A world built once per test run and shared read-only by every test that needs it, on every xdist worker.

``make test`` runs two xdist workers, each a process with its own session: a ``scope="session"`` fixture alone
would still build its world once per worker. :func:`build_once` builds it in the run's own temporary folder
(the parent of the workers' ``popen-gwN`` folders) under an exclusive lock: the first worker to ask builds it, a
worker asking meanwhile waits for that build, later ones find it done. A build that raised leaves no ``done``
mark, so the next asker builds again and fails with its own error. Nothing in a world is changed after it is
built: a test that writes copies what it needs (the world's helpers copy, they never hand out the folder to write).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's temporary folder, the same on every xdist worker."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder of world ``name``, built by ``build(folder)`` if no worker of this run has built it yet."""
    worlds = run_folder(tmp_path_factory) / "shared-worlds"
    worlds.mkdir(parents=True, exist_ok=True)
    folder, done = worlds / name, worlds / f"{name}.done"
    with open(worlds / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when this process dies
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a build that raised left behind
            folder.mkdir()
            started = time.monotonic()
            build(folder)
            done.write_text(
                f"built by {os.environ.get('PYTEST_XDIST_WORKER', 'main')} in {time.monotonic() - started:.1f} s\n"
            )
    return folder
