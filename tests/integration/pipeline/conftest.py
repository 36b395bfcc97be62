"""The rehearsal's tracking server, shared by the tests of its MLflow users (one per test module)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from mlops_pipeline.rehearsal import topology
from mlops_pipeline.servers import ProcessHarness
from tests.conftest import POSTGRES_URL


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, tuple[str, str]]]:
    """``(url, admin)`` of the rehearsal's tracking server (``--app-name basic-auth`` on PostgreSQL,
    default_permission NO_PERMISSIONS, one admin), its two databases dropped afterwards."""
    run = tmp_path_factory.mktemp("mlflow-roles")
    platform = topology.Platform(run, postgres_url=POSTGRES_URL)
    names = [f"roles_{secrets.token_hex(4)}_{p}" for p in ("mlflow", "auth")]
    urls = [topology.create_database(POSTGRES_URL, n) for n in names]
    try:
        with ProcessHarness(run / "logs") as harness:
            topology.launch_mlflow(harness, platform, *urls)
            harness.wait_ready("mlflow")
            assert "MLFLOW_TRACKING_PASSWORD" not in platform.secrets  # the admin is no workload's secret
            yield platform.mlflow_url, platform.mlflow_admin
    finally:
        for name in names:
            topology.drop_database(POSTGRES_URL, name)
