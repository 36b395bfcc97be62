"""A real ``mlflow server --app-name basic-auth`` on PostgreSQL (tracking store and users each in a fresh
database of their own), started exactly as the platform starts it (``mlops_core.tracking_server``): a
request without credentials, or with wrong ones, is refused with 401; with the credentials the profile's
env vars name, the lifecycle (promotion, ledger, registry lock) works."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlops_config import TrackingConfig
from mlops_core import lifecycle
from mlops_core.errors import TrackingError
from mlops_core.tracking_server import server_command, server_env, write_auth_config
from tests.support import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ADMIN, PASSWORD = "platform-admin", "correct-horse-" + secrets.token_hex(6)
SEARCH = "/api/2.0/mlflow/registered-models/search"


def _get(url: str, user: str | None = None, password: str | None = None) -> int:
    req = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _answers(url: str) -> bool:
    try:
        return _get(url) == 200
    except OSError:  # not listening yet
        return False


@pytest.fixture
def auth_server(postgres_url: str, tmp_path: Path) -> Iterator[str]:
    import psycopg2

    stem = f"mlflow_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(postgres_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        for db in (stem, f"{stem}_auth"):
            cur.execute(f'CREATE DATABASE "{db}"')
    base = postgres_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://", 1)
    # As in the cluster: the file names the users' database, the admin comes from env (a Secret there).
    config = write_auth_config(tmp_path / "basic_auth.ini", database_uri=f"{base}/{stem}_auth")
    port = free_port()
    cmd = server_command(artifacts_destination=(tmp_path / "bucket").as_uri(), host="127.0.0.1", port=port)
    assert not [a for a in cmd if "postgresql" in a]  # the store's URI (and its password) never in argv
    log = (tmp_path / "mlflow-server.log").open("w")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env={**env, **server_env(config, secrets.token_hex(16), backend_store_uri=f"{base}/{stem}",
                                                     admin_username=ADMIN, admin_password=PASSWORD)})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 420  # ~15 s idle; minutes when the 2 cores are shared by many jobs
        while not _answers(f"{url}/health"):  # the one route the auth app leaves open (for probes)
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited {proc.returncode}: "
                            f"{(tmp_path / 'mlflow-server.log').read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("mlflow server (basic-auth) did not answer within 420 s")
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
            for db in (stem, f"{stem}_auth"):
                cur.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.close()


def test_no_credentials_no_access_and_the_lifecycle_works_with_them(
        auth_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = auth_server
    assert _get(f"{url}{SEARCH}") == 401
    assert _get(f"{url}{SEARCH}", ADMIN, "wrong-password-123") == 401
    assert _get(f"{url}/api/2.0/mlflow/experiments/search?max_results=1") == 401

    # The profile names the env vars MLflow's client reads; unset, our factory refuses before any request.
    for var in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.setenv(var, "placeholder")  # records the original state, restored after the test
        monkeypatch.delenv(var)
    tracking = TrackingConfig(uri=url, artifact_location=(tmp_path / "a").as_uri(),
                              username_env="MLFLOW_TRACKING_USERNAME", password_env="MLFLOW_TRACKING_PASSWORD")
    with pytest.raises(TrackingError, match="'MLFLOW_TRACKING_USERNAME' is not set"):
        lifecycle.aliases(tracking, tmp_path, "fraud")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", ADMIN)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)

    from mlops_core import mlflow_client

    client = mlflow_client(tracking, tmp_path)
    client.create_registered_model("fraud")
    run = client.create_run(client.create_experiment("auth-test"))
    client.create_model_version("fraud", source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    report = {"model": "fraud", "candidate": {"version": "1"},
              "gates": [{"name": n, "passed": True, "reason": "hand-made"}
                        for n in ("quality", "reproducibility", "latency", "contract")]}
    lifecycle.promote(tracking, tmp_path, "fraud", "1", "candidate", reason="trained", actor="test")
    entry = lifecycle.promote(tracking, tmp_path, "fraud", "1", "staging", reason="gates", actor="test",
                              gate_report=report)
    assert entry.to_alias == "staging" and entry.gate_report_sha256
    assert lifecycle.aliases(tracking, tmp_path, "fraud") == {"staging": "1"}
    assert [e.to_alias for e in lifecycle.history(tracking, tmp_path, "fraud")] == ["candidate", "staging"]
    # What was written is there for an authenticated reader, and still refused to an anonymous one.
    assert _get(f"{url}{SEARCH}", ADMIN, PASSWORD) == 200
    assert _get(f"{url}{SEARCH}") == 401
    body = urllib.request.Request(f"{url}/api/2.0/mlflow/registered-models/get?name=fraud")
    body.add_header("Authorization", "Basic " + base64.b64encode(f"{ADMIN}:{PASSWORD}".encode()).decode())
    with urllib.request.urlopen(body, timeout=10) as resp:
        tags = {t["key"] for t in json.loads(resp.read())["registered_model"].get("tags", [])}
    assert any(t.startswith("mlops.ledger.") for t in tags)
