"""A password made of URL, YAML and Feast-connection-string syntax (``p@ss:w/rd#,%{}``) reaches a real Redis
(``requirepass``) and a real PostgreSQL that checks it (SCRAM), through the platform's store config and
through the rendered ``feature_store.yaml`` that Feast reads itself.

The PostgreSQL here is a private cluster on a free port with ``scram-sha-256`` for TCP (the shared server
trusts every local connection and would accept any password): a changed or truncated password fails.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlops_config import FeaturesConfig
from mlops_features.store import open_store, render_feature_store_yaml
from tests.support import RedisServer, free_port, wait_port

pytestmark = pytest.mark.integration

PASSWORD = "p@ss:w/rd#,%{}"
REDIS_VAR, PG_VAR = "MLOPS_TEST_REDIS_SECRET", "MLOPS_TEST_REGISTRY_SECRET"


@pytest.fixture(scope="module")
def secret_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with RedisServer(tmp_path_factory.mktemp("redis"), password=PASSWORD) as server:
        yield server.port


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        pytest.fail("PostgreSQL's server binaries are missing (apt package postgresql; see .ci/run)")
    return found[-1].parent


@pytest.fixture(scope="module")
def scram_postgres() -> Iterator[int]:
    """A private PostgreSQL cluster whose TCP logins need the right password; role ``feast`` has PASSWORD."""
    import os
    import tempfile

    # Not under pytest's tmp folder: that is private to root, and the server runs as the postgres user.
    base = Path(tempfile.mkdtemp(prefix="mlops-scram-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_pg:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
    pg = _pg_bin()
    subprocess.run([*as_pg, str(pg / "initdb"), "-D", str(data), "-U", "postgres", "--auth-local=trust",
                    "--auth-host=scram-sha-256", "--no-sync"], check=True, capture_output=True, timeout=300)
    port = free_port()
    proc = subprocess.Popen([*as_pg, str(pg / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sock),
                             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, "postgres")
        import psycopg2

        deadline = time.monotonic() + 120
        while True:  # the port opens before the server accepts logins ("the database system is starting up")
            try:
                admin = psycopg2.connect(host=str(sock), port=port, user="postgres", dbname="postgres")  # trust
                break
            except psycopg2.OperationalError:
                assert time.monotonic() < deadline, "postgres did not accept connections"
                time.sleep(0.2)
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute("CREATE ROLE feast LOGIN PASSWORD %s", (PASSWORD,))
            cur.execute("CREATE DATABASE feast_registry OWNER feast")
        admin.close()
        yield port
    finally:
        subprocess.run([*as_pg, str(pg / "pg_ctl"), "-D", str(data), "stop", "-m", "immediate"], capture_output=True,
                       timeout=60)
        proc.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def _features(redis_port: int, pg_port: int) -> FeaturesConfig:
    return FeaturesConfig(online_store="redis", redis_url=f"redis://127.0.0.1:{redis_port}/0",
                          redis_password_env=REDIS_VAR, registry_type="sql",
                          registry=f"postgresql+psycopg2://feast@127.0.0.1:{pg_port}/feast_registry",
                          registry_password_env=PG_VAR, feast_project=f"p{uuid.uuid4().hex[:8]}")


def _check_store(store: object) -> None:
    # The registry connected (SCRAM checked the password) when Feast created its tables; list through it.
    assert store.list_entities() == []  # type: ignore[attr-defined]
    online = store._get_provider().online_store  # type: ignore[attr-defined]
    client = online._get_client(store.config.online_store)  # type: ignore[attr-defined]
    assert client.ping() is True and client.connection_pool.connection_kwargs["password"] == PASSWORD


def test_the_servers_really_check_the_password(secret_redis: int, scram_postgres: int) -> None:
    import psycopg2
    import redis

    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=secret_redis, password=PASSWORD[:-1]).ping()
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(host="127.0.0.1", port=scram_postgres, user="feast", password=PASSWORD[:-1],
                         dbname="feast_registry")
    psycopg2.connect(host="127.0.0.1", port=scram_postgres, user="feast", password=PASSWORD,
                     dbname="feast_registry").close()


def test_platform_store_config_passes_the_exact_password(secret_redis: int, scram_postgres: int, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         repo_root: Path) -> None:
    shutil.copytree(repo_root / "feature_repo", tmp_path / "feature_repo")
    monkeypatch.setenv(REDIS_VAR, PASSWORD)
    monkeypatch.setenv(PG_VAR, PASSWORD)
    _check_store(open_store(_features(secret_redis, scram_postgres), tmp_path))


def test_rendered_feature_store_yaml_read_by_feast_passes_the_exact_password(
    secret_redis: int, scram_postgres: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repo_root: Path
) -> None:
    from feast import FeatureStore

    features = _features(secret_redis, scram_postgres)
    repo = tmp_path / "feature_repo"
    shutil.copytree(repo_root / "feature_repo", repo)
    text = render_feature_store_yaml(features, tmp_path, "secret-test")
    assert PASSWORD not in text and f"${{{PG_VAR}}}" in text  # a reference, never the value
    (repo / "feature_store.yaml").write_text(text)
    monkeypatch.setenv(REDIS_VAR, PASSWORD)
    monkeypatch.setenv(PG_VAR, PASSWORD)
    _check_store(FeatureStore(repo_path=str(repo)))  # Feast expands ${VAR} in the text, then parses
