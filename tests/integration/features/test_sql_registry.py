"""The staging/production shape: Feast's SQL registry on a real PostgreSQL (own schema) with Redis online."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg2
import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import OnlineFeatures, open_store, prepare_local_data, training_set
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from tests.support import sample_as_of

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_apply_materialize_and_read_through_a_sql_registry(
    postgres_url: str, postgres_schema: str, redis_url: str, tmp_path: Path
) -> None:
    registry = postgres_url.replace("postgresql://", "postgresql+psycopg2://", 1)
    registry += f"?options=-csearch_path%3D{postgres_schema}"
    shutil.copytree(REPO_ROOT / "feature_repo", tmp_path / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))
    features = FeaturesConfig(feature_service="fraud_v1",
                              registry_type="sql", registry=registry, online_ttl_as_of=sample_as_of(),
                              online_store="redis", redis_url=redis_url, feast_project=f"t_{uuid.uuid4().hex[:10]}")
    data = DataConfig(rows=600, days=2, users=40, merchants=10)
    try:
        prepare_local_data(data, features, tmp_path, contract=FRAUD_CONTRACT, seed=8)
        with psycopg2.connect(postgres_url) as conn, conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (postgres_schema,))
            tables = {r[0] for r in cur.fetchall()}
        assert {"feature_views", "entities", "feature_services"} <= tables
        df = training_set(features, data, tmp_path, contract=FRAUD_CONTRACT)
        assert len(df) == 600
        got = OnlineFeatures(features, tmp_path, contract=FRAUD_CONTRACT).get(
            [{"user_id": df["user_id"].iloc[-1], "merchant_id": "M00001"}])
        assert got[0]["unknown_user"] is False
    finally:
        open_store(features, tmp_path).teardown()


@pytest.mark.parametrize("kind", ["sql", "file"])
def test_a_process_that_opened_the_registry_off_the_request_path_exits_cleanly(
    kind: str, postgres_url: str, postgres_schema: str, tmp_path: Path
) -> None:
    """Feast's SQL registry registers an exit handler that cancels the registry's refresh thread, which
    ``cache_ttl_seconds: 0`` never starts: without the platform's fix, every serving process printed "Exception
    ignored in atexit callback … 'SqlRegistry' object has no attribute 'registry_refresh_thread'" as it exited. The
    file registry (the local profile) has no such handler, and opens as before."""
    registry = postgres_url.replace("postgresql://", "postgresql+psycopg2://", 1)
    registry += f"?options=-csearch_path%3D{postgres_schema}"
    where = f"registry_type='sql', registry={registry!r}" if kind == "sql" else "registry_type='file'"
    shutil.copytree(REPO_ROOT / "feature_repo", tmp_path / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "from pathlib import Path\n"
        "from mlops_config import FeaturesConfig\n"
        "from mlops_features import open_store\n"
        f"features = FeaturesConfig(feature_service='fraud_v1', {where},"
        f" feast_project='t_{uuid.uuid4().hex[:10]}')\n"
        f"store = open_store(features, Path({str(tmp_path)!r}), registry_refresh='background')\n"
        "print(type(store.registry).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == {"sql": "SqlRegistry", "file": "Registry"}[kind]
    assert "Exception ignored" not in done.stderr and "registry_refresh_thread" not in done.stderr, done.stderr[-3000:]
