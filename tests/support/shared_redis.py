"""The shared test Redis (``MLOPS_TEST_REDIS_URL``, default 127.0.0.1:6379/0) that ``.ci/run`` starts."""

from __future__ import annotations

import os

import pytest

REDIS_URL = os.environ.get("MLOPS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def shared_redis_url() -> str:
    """Its URL once it answers PING; fails the test (never skips) when it is down: CI must start it."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis at {REDIS_URL} is not reachable ({exc}); start it (see .ci/run)")
    finally:
        client.close()
    return REDIS_URL
