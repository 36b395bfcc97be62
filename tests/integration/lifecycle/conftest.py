"""A real ``mlflow server`` process on a PostgreSQL database of its own, for lifecycle tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mlflow_server_pg(postgres_url: str, tmp_path: Path) -> Iterator[str]:
    """URL of an ``mlflow server`` backed by a fresh PostgreSQL database (dropped afterwards)."""
    import psycopg2

    db = f"mlflow_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{db}"')
    base = postgres_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://", 1)
    port = _free_port()
    log = (tmp_path / "mlflow-server.log").open("w")
    mlflow_bin = str(Path(sys.executable).with_name("mlflow"))
    proc = subprocess.Popen(
        [mlflow_bin, "server", "--backend-store-uri", f"{base}/{db}", "--default-artifact-root",
         (tmp_path / "server-artifacts").as_uri(), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
                                            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                tail = (tmp_path / "mlflow-server.log").read_text()[-2000:]
                pytest.fail(f"mlflow server exited {proc.returncode}: {tail}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("mlflow server did not answer /health within 90 s")
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
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.close()
