"""The fixtures over tests/support, registered for the whole suite by tests/conftest.py (``pytest_plugins``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .github import pulls_endpoint
from .mlflow_server import start_mlflow_server
from .postgres import database_url, own_database
from .prepared_data import build_prepared_fraud_data, copy_prepared_fraud_data
from .redis_server import RedisServer
from .session_world import build_once


@pytest.fixture
def github_pulls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """GitHub's pulls API as a local endpoint (repository ``o/r``, token ``t0ken``); the calls it received."""
    with pulls_endpoint() as (url, calls):
        monkeypatch.setenv("GITHUB_API_URL", url)
        monkeypatch.setenv("GITHUB_REPOSITORY", "o/r")
        monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
        yield calls


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


@pytest.fixture(scope="session")
def prepared_fraud_data(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Callable[[Any, Path], None]:
    """``put(cfg, root)``: the fraud sample data at 20,000 rows, prepared once per test run (every xdist worker
    shares it, see ``session_world``), copied under ``root``; ``cfg`` must be what would have prepared it."""
    world = build_once(tmp_path_factory, "prepared-fraud-data", lambda folder: build_prepared_fraud_data(folder,
                                                                                                     repo_root))
    return lambda cfg, root: copy_prepared_fraud_data(world, cfg, root)
