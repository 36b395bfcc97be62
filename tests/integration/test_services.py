"""The test services themselves: real Redis and PostgreSQL, each test isolated by prefix / schema."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_redis_prefix_isolates_and_cleans(redis_url: str, redis_prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    client.set(f"{redis_prefix}k", "v")
    assert client.get(f"{redis_prefix}k") == b"v"
    assert list(client.scan_iter(match=f"{redis_prefix}*")) == [f"{redis_prefix}k".encode()]


def test_postgres_schema_isolates(postgres_url: str, postgres_schema: str) -> None:
    import psycopg2

    with psycopg2.connect(postgres_url) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE TABLE "{postgres_schema}".t (x int)')
        cur.execute(f'INSERT INTO "{postgres_schema}".t VALUES (41), (1)')
        cur.execute(f'SELECT sum(x) FROM "{postgres_schema}".t')
        assert cur.fetchone() == (42,)
