"""MLflow basic-auth end to end with the password ``p@ss:w/rd#,%{}`` everywhere it can be: the PostgreSQL role of
the tracking store and of the users' database (a private cluster that checks it with SCRAM, so a changed
password is refused), the first admin's password in the auth config file, and the client's
``MLFLOW_TRACKING_PASSWORD``. The server starts from the platform's own command line and config writer, and the
lifecycle (promotion, ledger, registry lock) works through it."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlops_config import TrackingConfig
from mlops_core import lifecycle

from .servers import OwnMlflow, OwnPostgres

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PASSWORD = "p@ss:w/rd#,%{}"
ADMIN = "platform-admin"
SEARCH = "/api/2.0/mlflow/registered-models/search"


def _get(url: str, password: str | None = None) -> int:
    req = urllib.request.Request(url)
    if password is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{ADMIN}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture
def secret_server(tmp_path: Path) -> Iterator[str]:
    pg = OwnPostgres(role="mlflow", password=PASSWORD)
    server = None
    try:
        server = OwnMlflow(pg, tmp_path / "mlflow", "mlflow_secret", admin=(ADMIN, PASSWORD))
        server.start()
        yield server.url
    finally:
        if server is not None:
            server.close()
        pg.close()


def test_the_cluster_checks_the_role_password() -> None:
    import psycopg2

    pg = OwnPostgres(role="mlflow", password=PASSWORD)
    try:
        pg.create_database("probe")
        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            psycopg2.connect(host="127.0.0.1", port=pg.port, user="mlflow", password=PASSWORD[:-1], dbname="probe")
        psycopg2.connect(pg.url("probe", driver="postgresql")).close()  # the encoded URL decodes to the password
    finally:
        pg.close()


def test_mlflow_basic_auth_with_a_special_character_password_end_to_end(
        secret_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = secret_server
    assert _get(f"{url}{SEARCH}") == 401
    assert _get(f"{url}{SEARCH}", PASSWORD[:-1]) == 401  # the admin's password is checked, not just present
    assert _get(f"{url}{SEARCH}", PASSWORD) == 200
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", ADMIN)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
    tracking = TrackingConfig(uri=url, artifact_location=(tmp_path / "a").as_uri(),
                              username_env="MLFLOW_TRACKING_USERNAME", password_env="MLFLOW_TRACKING_PASSWORD")
    from mlops_core import mlflow_client

    client = mlflow_client(tracking, tmp_path)
    client.create_registered_model("fraud")
    run = client.create_run(client.create_experiment("secret-auth"))
    client.create_model_version("fraud", source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    lifecycle.promote(tracking, tmp_path, "fraud", "1", "candidate", reason="trained", actor="test")
    assert lifecycle.aliases(tracking, tmp_path, "fraud") == {"candidate": "1"}
    assert [e.to_alias for e in lifecycle.history(tracking, tmp_path, "fraud")] == ["candidate"]
