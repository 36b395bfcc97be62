"""A real ``mlflow server`` process on a free loopback port, stopped when the ``with`` block ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .ports import free_port

# artifact progress bars clutter the log; job execution would start a huey consumer the tests do not use
SERVER_ENV = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:  # not listening yet
        return False


@contextmanager
def start_mlflow_server(backend_store_uri: str, folder: Path, *, ready_timeout_s: float = 120.0) -> Iterator[str]:
    """Yield the URL of ``mlflow server --backend-store-uri <uri>`` with artifacts under ``folder``, once it
    answers ``/health``; its log is ``folder/mlflow-server.log`` (quoted when it exits or never gets ready)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = folder / "mlflow-server.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("mlflow")), "server", "--backend-store-uri", backend_store_uri,
         "--default-artifact-root", (folder / "server-artifacts").as_uri(), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **SERVER_ENV})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_timeout_s
        while not _healthy(url):
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited {proc.returncode}: {log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not answer /health within {ready_timeout_s:.0f} s: "
                                   f"{log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
