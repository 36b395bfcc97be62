"""The fixtures over tests/support, registered for the whole suite by tests/conftest.py (``pytest_plugins``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .mlflow_server import start_mlflow_server
from .postgres import database_url, own_database
from .redis_server import RedisServer


@pytest.fixture
def own_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A started redis-server of this test's own (no persistence), stopped afterwards."""
    with RedisServer(tmp_path) as server:
        yield server


@pytest.fixture
def mlflow_server_pg(postgres_url: str, tmp_path: Path) -> Iterator[str]:
    """URL of an ``mlflow server`` backed by a fresh PostgreSQL database (dropped afterwards)."""
    with own_database(postgres_url, "mlflow") as db:
        try:
            with start_mlflow_server(database_url(postgres_url, db), tmp_path, ready_timeout_s=90) as url:
                yield url
        except RuntimeError as exc:
            pytest.fail(str(exc))
