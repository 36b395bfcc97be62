"""Staging's credentials are refused by production's state, on real servers configured from the rendered platform
manifests: a redis-server loading the ``redis-acl`` ConfigMap's users (the Secret's hashes put in as the start script
does), and the machine's PostgreSQL running the ``postgres-initdb`` script (identifiers suffixed per test run).

The clients are the platform's own: Feast's online store (``SecretRedisOnlineStore``, the user and password from
the env vars the profile names) for the transformer's reads and the writers' writes, the stream updater's client for
the stream, psycopg2 for the Feast SQL registry. Keys are Feast's (serialized entity key + project)."""

from __future__ import annotations

import hashlib
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlops_config import load_config
from tests.support import RedisServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
KUBECTL = REPO / ".venv" / "bin" / "kubectl"
ENVS = {"staging": "mlops-staging", "production": "mlops-production"}


@pytest.fixture(scope="module")
def platform() -> dict[str, dict[str, Any]]:
    out = subprocess.run(
        [str(KUBECTL), "kustomize", str(REPO / "infra" / "platform")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(out) if d}


@pytest.fixture(scope="module")
def redis_acl(
    platform: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RedisServer, dict[str, str]]]:
    """The platform's Redis as its StatefulSet starts it: each placeholder the start script replaces, replaced by
    the SHA-256 of a password generated here (the Secret's value)."""
    template = platform["ConfigMap/redis-acl"]["data"]["users.acl"]
    script = platform["StatefulSet/redis"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    placeholders = re.findall(r"s/@(\w+)@/\$(\w+)/", script)
    assert len(placeholders) == 4 and all(a == b for a, b in placeholders), placeholders
    passwords: dict[str, str] = {}
    acl = template
    for name, _ in placeholders:
        env, role, _ = name.lower().split("_")  # STAGING_READER_SHA256
        user = f"{ENVS[env]}.fraud-{role}"
        passwords[user] = secrets.token_urlsafe(16)
        acl = acl.replace(f"@{name}@", hashlib.sha256(passwords[user].encode()).hexdigest())
    work = tmp_path_factory.mktemp("redis-acl")
    (work / "users.acl").write_text(acl)
    server = RedisServer(work, aclfile=work / "users.acl").start()
    try:
        yield server, passwords
    finally:
        server.stop()


def _features(env: str, server: RedisServer) -> Any:
    features = load_config(profile=env, environ={}, check_secrets=False).config.features
    return features.model_copy(update={"redis_url": f"redis://127.0.0.1:{server.port}{features.redis_url[-2:]}"})


def _feast_client(features: Any, monkeypatch: pytest.MonkeyPatch, user: str, password: str) -> Any:
    """Feast's online store client as a pod of ``user`` gets it (env vars named by the profile)."""
    from mlops_features.online_redis import SecretRedisOnlineStore, SecretRedisOnlineStoreConfig
    from mlops_features.store import redis_connection_string

    monkeypatch.setenv(features.redis_username_env, user)
    monkeypatch.setenv(features.redis_password_env, password)
    config = SecretRedisOnlineStoreConfig(
        connection_string=redis_connection_string(features),
        password_env=features.redis_password_env,
        username_env=features.redis_username_env,
    )
    return SecretRedisOnlineStore()._get_client(config)


def _key(project: str) -> bytes:
    from feast.infra.online_stores.helpers import _redis_key
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value

    return _redis_key(project, EntityKey(join_keys=["card_id"], entity_values=[Value(string_val="c-1")]))


def test_each_role_reaches_only_its_environments_keys_as_it_should(
    redis_acl: tuple[RedisServer, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    server, passwords = redis_acl
    staging, production = _features("staging", server), _features("production", server)
    s_key, p_key = _key(staging.feast_project), _key(production.feast_project)
    writer = _feast_client(staging, monkeypatch, "mlops-staging.fraud-writer", passwords["mlops-staging.fraud-writer"])
    with writer.pipeline() as pipe:  # what Feast's online write does: a MULTI of HSETs
        pipe.hset(s_key, mapping={b"\x01\x02\x03\x04": b"v", b"_ts:view": b"t"})
        pipe.execute()
    with pytest.raises(redis.exceptions.NoPermissionError):
        writer.hset(p_key, b"f", b"v")  # production's features
    for dangerous in (("FLUSHDB",), ("FLUSHALL",), ("CONFIG", "SET", "appendonly", "yes"), ("KEYS", "*")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            writer.execute_command(*dangerous)

    reader = _feast_client(staging, monkeypatch, "mlops-staging.fraud-reader", passwords["mlops-staging.fraud-reader"])
    assert reader.hgetall(s_key)[b"_ts:view"] == b"t"
    assert reader.hmget(s_key, [b"_ts:view"]) == [b"t"]
    with pytest.raises(redis.exceptions.NoPermissionError):  # the transformer cannot write features
        reader.hset(s_key, b"\x01\x02\x03\x04", b"forged")
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.delete(s_key)
    with pytest.raises(redis.exceptions.NoPermissionError):  # nor read production's
        reader.hgetall(p_key)
    with pytest.raises(redis.exceptions.NoPermissionError):
        reader.xadd(staging.stream_key, {"tx": "{}"})

    # a staging password is refused as any production user; the default user is off
    for user in ("mlops-production.fraud-reader", "mlops-production.fraud-writer"):
        with pytest.raises(redis.AuthenticationError):
            _feast_client(production, monkeypatch, user, passwords["mlops-staging.fraud-writer"]).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=server.port).ping()
    p_reader = _feast_client(
        production, monkeypatch, "mlops-production.fraud-reader", passwords["mlops-production.fraud-reader"]
    )
    with pytest.raises(redis.exceptions.NoPermissionError):
        p_reader.hgetall(s_key)


def test_the_stream_updaters_client_uses_its_environments_stream_only(
    redis_acl: tuple[RedisServer, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    from mlops_features.stream import _redis

    server, passwords = redis_acl
    staging, production = _features("staging", server), _features("production", server)
    monkeypatch.setenv("REDIS_USERNAME", "mlops-staging.fraud-writer")
    monkeypatch.setenv("REDIS_PASSWORD", passwords["mlops-staging.fraud-writer"])
    client = _redis(staging)
    assert client.xadd(staging.stream_key, {"tx": "{}"})
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.xadd(production.stream_key, {"tx": "{}"})


@pytest.fixture(scope="module")
def registries(platform: dict[str, dict[str, Any]]) -> Iterator[tuple[dict[str, str], str]]:
    """The init script run on the machine's PostgreSQL as the container runs it on an empty volume (psql, as
    superuser), every database and role suffixed for this run; the ``\\set ... `cat secret``` lines get values."""
    import psycopg2

    psql = shutil.which("psql")
    if psql is None:
        pytest.fail("psql (Debian's postgresql-client) is needed to run the platform's init script")
    sfx = secrets.token_hex(3)
    sql = platform["ConfigMap/postgres-initdb"]["data"]["10-databases.sql"]
    names = sorted(
        set(re.findall(r"\b(mlflow(?:_auth)?|feast_registry_\w+|feast_(?:staging|production))\b", sql)),
        key=len,
        reverse=True,
    )
    renamed = {n: f"{n}_{sfx}" for n in names}
    for name, new in renamed.items():
        sql = re.sub(rf"\b{name}\b", new, sql)
    sql = re.sub(
        r"^\\set (\w+) `cat [^`]+`$", lambda m: f"\\set {m.group(1)} '{secrets.token_hex(8)}'", sql, flags=re.M
    )
    admin = "postgresql://postgres@127.0.0.1:5432/test"
    conn = psycopg2.connect(admin, connect_timeout=5)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{renamed["mlflow"]}"')  # POSTGRES_DB: the image creates it before the script
    try:
        subprocess.run(
            [psql, "-v", "ON_ERROR_STOP=1", "-q", admin],
            input=sql,
            text=True,
            check=True,
            capture_output=True,
            timeout=60,
        )
        yield renamed, admin
    finally:
        with conn.cursor() as cur:
            for name, new in renamed.items():
                if not name.startswith("feast_") or name.startswith("feast_registry"):
                    cur.execute(f'DROP DATABASE IF EXISTS "{new}" WITH (FORCE)')
            for name in ("feast_staging", "feast_production"):
                cur.execute(f'DROP ROLE IF EXISTS "{renamed[name]}"')
        conn.close()


def test_a_staging_role_cannot_open_productions_registry_or_mlflows(registries: tuple[dict[str, str], str]) -> None:
    import psycopg2

    renamed, _ = registries
    for env, other in (("staging", "production"), ("production", "staging")):
        features = load_config(profile=env, environ={}, check_secrets=False).config.features
        role = re.search(r"//(\w+)@", features.registry)
        database = features.registry.rsplit("/", 1)[-1]
        assert role and role.group(1) == f"feast_{env}" and database == f"feast_registry_{env}"
        url = "postgresql://{}@127.0.0.1:5432/{}"
        own = psycopg2.connect(url.format(renamed[role.group(1)], renamed[database]), connect_timeout=5)
        with own, own.cursor() as cur:  # Feast's SQL registry creates its tables: the owner may
            cur.execute("CREATE TABLE projects (id text)")
        own.close()
        for forbidden in (f"feast_registry_{other}", "mlflow", "mlflow_auth"):
            with pytest.raises(psycopg2.OperationalError, match="permission denied for database"):
                psycopg2.connect(url.format(renamed[role.group(1)], renamed[forbidden]), connect_timeout=5)
