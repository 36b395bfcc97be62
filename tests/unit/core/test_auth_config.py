"""``write_auth_config`` writes a file that MLflow's own reader (``mlflow.server.auth.config.read_auth_config``,
a ``%``-interpolating configparser) reads back exactly, whatever characters the passwords hold."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from mlops_core.tracking_server import write_auth_config

pytestmark = pytest.mark.unit

PASSWORD = "p@ss:w/rd#,%{}"


def test_mlflow_reads_back_the_exact_uri_and_admin_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.server.auth.config import read_auth_config

    uri = f"postgresql+psycopg2://mlflow:{quote(PASSWORD, safe='')}@db:5432/mlflow_auth"
    path = write_auth_config(tmp_path / "basic_auth.ini", database_uri=uri, admin_username="platform-admin",
                             admin_password=PASSWORD + "%(x)s")
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(path))
    for var in ("MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
    config = read_auth_config()
    assert config.database_uri == "postgresql+psycopg2://mlflow:p%40ss%3Aw%2Frd%23%2C%25%7B%7D@db:5432/mlflow_auth"
    assert config.admin_password == "p@ss:w/rd#,%{}%(x)s"
    assert config.admin_username == "platform-admin"
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_the_database_url_survives_any_password_and_the_command_line_holds_none() -> None:
    from sqlalchemy.engine import make_url

    from mlops_core.tracking_server import BACKEND_STORE_ENV, database_url, server_command, server_env

    password = "p@ss:w/rd%?#"  # each of these, unencoded, moves the host, the port or the database
    url = database_url("postgresql+psycopg2", user="mlflow", password=password, host="postgres", port=5432,
                       database="mlflow")
    parsed = make_url(url)
    assert (parsed.password, parsed.host, parsed.port, parsed.database) == (password, "postgres", 5432, "mlflow")
    cmd = server_command(artifacts_destination="s3://b", host="127.0.0.1", port=5000)
    assert not [a for a in cmd if "backend-store" in a or "postgres" in a]
    assert server_env("/x.ini", "k" * 16, backend_store_uri=url)[BACKEND_STORE_ENV] == url


def test_the_credential_cache_reaches_mlflow_off_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's own basic-auth credential cache (``auth_cache_ttl_seconds``): off by default, as MLflow's is; the
    value given is the one MLflow's reader gets; a negative one is refused naming it."""
    from mlflow.server.auth.config import read_auth_config

    for var in ("MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
    for ttl in (0, 300):
        path = write_auth_config(tmp_path / f"{ttl}.ini", database_uri="sqlite:///auth.db",
                                 auth_cache_ttl_seconds=ttl)
        monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(path))
        assert read_auth_config().auth_cache_ttl_seconds == ttl
    with pytest.raises(ValueError, match="auth_cache_ttl_seconds -1"):
        write_auth_config(tmp_path / "bad.ini", database_uri="sqlite:///auth.db", auth_cache_ttl_seconds=-1)
